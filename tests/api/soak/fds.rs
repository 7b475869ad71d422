//! A process's open files, its sockets told apart by what they connect to (from
//! `/proc/<pid>/net/tcp{,6}`): listening, to Redis, from clients, out to anything else (feeds).

use std::collections::HashMap;
use std::fmt;

/// A process's open files at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFiles {
    pub total: usize,
    pub listening: usize,
    pub redis: usize,
    /// Connections a client opened to the process.
    pub inbound: usize,
    /// Connections the process opened to anything but Redis (feeds).
    pub outbound: usize,
    /// Sockets not in the TCP tables (unix, netlink, …).
    pub other_sockets: usize,
}

impl fmt::Display for OpenFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} open files (sockets: {} listening, {} to Redis, {} from clients, {} out, {} other)",
            self.total, self.listening, self.redis, self.inbound, self.outbound, self.other_sockets
        )
    }
}

/// The TCP state `LISTEN` in `/proc/net/tcp`.
const LISTEN: &str = "0A";

/// One TCP socket: its local and remote ports and its state.
struct Tcp {
    local: u16,
    remote: u16,
    state: String,
}

/// The open files of `pid`, which listens on `port` and reaches Redis on `redis_port`.
pub fn open_files(pid: u32, port: u16, redis_port: u16) -> OpenFiles {
    let table = tcp_table(pid);
    let mut files = OpenFiles::default();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return files;
    };
    for link in dir
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
    {
        files.total += 1;
        let link = link.display().to_string();
        let Some(inode) = link
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
        else {
            continue;
        };
        match table.get(inode) {
            None => files.other_sockets += 1,
            Some(t) if t.state == LISTEN => files.listening += 1,
            Some(t) if t.remote == redis_port => files.redis += 1,
            Some(t) if t.local == port => files.inbound += 1,
            Some(_) => files.outbound += 1,
        }
    }
    files
}

/// The TCP sockets of `pid`'s network namespace by inode.
fn tcp_table(pid: u32) -> HashMap<String, Tcp> {
    let port = |address: &str| {
        address
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            .unwrap_or(0)
    };
    let mut table = HashMap::new();
    for file in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 9 {
                let tcp = Tcp {
                    local: port(cols[1]),
                    remote: port(cols[2]),
                    state: cols[3].to_owned(),
                };
                table.insert(cols[9].to_owned(), tcp);
            }
        }
    }
    table
}
