//! The binary's allocator: mimalloc, which gives a page back to the OS as soon as it falls
//! free (unless the operator chose a delay), so a replica's idle RSS follows what it holds.

use std::ffi::{c_char, c_int, c_long, c_void, CStr};

/// mimalloc, not the platform's malloc: glibc's malloc and free were a quarter of the
/// service's instructions a job (callgrind; docs/performance.md, "The service's own CPU").
/// Built with `no_thp`: it never asks the kernel for transparent huge pages.
#[global_allocator]
static ALLOCATOR: Mi = Mi;

/// mimalloc through its plain entry points for what needs no more than a word's alignment
/// (every mimalloc block has it), its aligned ones for the rest. `mimalloc::MiMalloc` calls
/// `mi_malloc_aligned` for everything, whose fast path holds only for blocks up to 1 KiB
/// found free in a page at the right alignment; any other (every larger buffer, every
/// allocation that finds its page full) takes the over-allocating path: ~5.7k of the service's
/// instructions a create-burst job.
struct Mi;

/// The alignment every mimalloc block has.
const WORD: usize = std::mem::size_of::<usize>();

extern "C" {
    fn mi_malloc(size: usize) -> *mut c_void;
    fn mi_zalloc(size: usize) -> *mut c_void;
    fn mi_realloc(p: *mut c_void, size: usize) -> *mut c_void;
}

// SAFETY: each call goes to mimalloc, whose blocks are all word-aligned; a layout that asks
// for more goes to its aligned calls, and every block is freed with mi_free, as both allow.
unsafe impl std::alloc::GlobalAlloc for Mi {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if layout.align() <= WORD {
            return unsafe { mi_malloc(layout.size()) }.cast();
        }
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        if layout.align() <= WORD {
            return unsafe { mi_zalloc(layout.size()) }.cast();
        }
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        if layout.align() <= WORD {
            return unsafe { mi_realloc(ptr.cast(), size) }.cast();
        }
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, size) }
    }
}

/// `mi_option_purge_delay`, its place in mimalloc's `mi_option_t` (mimalloc.h): how long a
/// free page waits before it is given back. The start-up log reads it back by name.
const PURGE_DELAY: c_int = 15;
/// Where an operator sets it instead (mimalloc reads its `MIMALLOC_*` options itself).
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";
/// mimalloc's default is 1,000 ms, and it purges only when a thread next calls it: with it an
/// idle replica kept what its last burst left free (the 30-minute soak's idle RSS 87–145 MB,
/// not flat), and a 1M incremental pair's bench peaked at 2,061 MiB (1,166 at once).
const PURGE_AT_ONCE: c_long = 0;

extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
    fn mi_options_print_out(out: extern "C" fn(*const c_char, *mut c_void), arg: *mut c_void);
}

/// Sets the purge delay unless the environment names one, and keeps the kernel from backing
/// the heap with transparent huge pages; answers mimalloc's own account of its version and
/// purge options and whether huge pages are off, for the start-up log. Call it before any
/// other thread.
pub fn configure() -> String {
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        // SAFETY: sets one of mimalloc's option values; no other thread exists yet.
        unsafe { mi_option_set(PURGE_DELAY, PURGE_AT_ONCE) };
    }
    let mut printed = String::new();
    // SAFETY: `append` is called synchronously, only with `printed`, which outlives the call.
    unsafe { mi_options_print_out(append, (&raw mut printed).cast()) };
    // `v3.3.2 (built on …)`, then a line an option: `option 'purge_delay': 0 `.
    let mut lines = printed.lines();
    let version = lines.next().and_then(|l| l.split(' ').next()).unwrap_or("");
    let purge = lines.filter_map(|line| {
        let (name, value) = line.strip_prefix("option '")?.split_once("': ")?;
        name.starts_with("purge_")
            .then(|| format!(" {name}={}", value.trim()))
    });
    std::iter::once(version.to_owned())
        .chain(purge)
        .chain(std::iter::once(format!(
            " huge_pages={}",
            disable_huge_pages()
        )))
        .collect()
}

/// Turns transparent huge pages off for the process (`PR_SET_THP_DISABLE`, as mimalloc's own
/// `allow_thp=0` does, which it reads only before `main`): a 2 MiB page stays resident while
/// one 64 KiB mimalloc page in it is used, so a deleted tenant's 50,000 products left 24.9 of
/// 41.3 MB resident (AnonHugePages 10 MB) where they leave 6.5 of 22 without. Answers `off`,
/// or why not.
#[cfg(target_os = "linux")]
fn disable_huge_pages() -> &'static str {
    // SAFETY: sets one flag of the calling process; no memory is touched.
    match unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } {
        0 => "off",
        _ => "the kernel's setting (it refused PR_SET_THP_DISABLE)",
    }
}

/// Other systems have no transparent huge pages to turn off.
#[cfg(not(target_os = "linux"))]
fn disable_huge_pages() -> &'static str {
    "the platform's"
}

/// mimalloc's output function: appends a message to the `String` behind `to`.
extern "C" fn append(message: *const c_char, to: *mut c_void) {
    // SAFETY: mimalloc passes a NUL-terminated message and the argument `configure` gave it.
    let (message, to) = unsafe { (CStr::from_ptr(message), &mut *to.cast::<String>()) };
    to.push_str(&message.to_string_lossy());
}
