//! Rows of variable length in two flat arrays (offsets and items): how pairing keeps
//! identities, vectors, groups and neighbour lists for a million products without a
//! million small allocations, and how the pairing state is stored.

/// Rows of variable length in two flat arrays: row `i` is `items[offsets[i]..offsets[i + 1]]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows<T> {
    offsets: Vec<u32>,
    items: Vec<T>,
}

impl<T: Copy> Rows<T> {
    pub fn new() -> Self {
        Self {
            offsets: vec![0],
            items: Vec::new(),
        }
    }

    pub fn with_capacity(rows: usize, items: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Self {
            offsets,
            items: Vec::with_capacity(items),
        }
    }

    pub fn push(&mut self, row: &[T]) {
        self.items.extend_from_slice(row);
        self.offsets.push(
            u32::try_from(self.items.len())
                .expect("fewer than 2^32 items: pairing refuses larger catalogues first"),
        );
    }

    /// Pushes a row made of `items`, copied straight into place.
    pub fn push_from(&mut self, items: impl Iterator<Item = T>) {
        self.items.extend(items);
        self.offsets.push(
            u32::try_from(self.items.len())
                .expect("fewer than 2^32 items: pairing refuses larger catalogues first"),
        );
    }

    /// Appends `other`'s rows after these.
    pub fn append(&mut self, other: &Self) {
        let base = u32::try_from(self.items.len()).expect("fewer than 2^32 items");
        self.items.extend_from_slice(&other.items);
        self.offsets.extend(other.offsets[1..].iter().map(|&o| {
            o.checked_add(base)
                .expect("fewer than 2^32 items: pairing refuses larger catalogues first")
        }));
    }

    pub fn row(&self, i: usize) -> &[T] {
        &self.items[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Where row `i` starts and ends in `items`.
    pub fn span(&self, i: usize) -> (u32, u32) {
        (self.offsets[i], self.offsets[i + 1])
    }

    pub fn items(&self) -> &[T] {
        &self.items
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held, for the memory estimate.
    pub fn bytes(&self) -> usize {
        self.offsets.capacity() * 4 + self.items.capacity() * std::mem::size_of::<T>()
    }

    /// The rows as vectors (for the state's codec and tests).
    pub fn parts(&self) -> (&[u32], &[T]) {
        (&self.offsets, &self.items)
    }

    /// Rows from their parts; `None` when the offsets do not describe `items`.
    pub fn from_parts(offsets: Vec<u32>, items: Vec<T>) -> Option<Self> {
        let fits = offsets.first() == Some(&0)
            && offsets.last().map(|&l| l as usize) == Some(items.len())
            && offsets.windows(2).all(|w| w[0] <= w[1]);
        fits.then_some(Self { offsets, items })
    }
}
