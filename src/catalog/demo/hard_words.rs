//! The hard catalogue's vocabulary: brands, product lines, modifiers and per category its
//! items with every way the catalogue's writers spell them. The words are data, in
//! `hard_words.tsv` (its header says the format), read once into [`HARD`]; their order is
//! part of the data, as a generated catalogue picks words by index.

use std::sync::LazyLock;

/// One item as the catalogue's writers spell it: every spelling is the same item.
pub(super) struct Item {
    pub(super) spellings: Vec<&'static str>,
    /// The plural, written instead of the singular in some names.
    pub(super) plural: &'static str,
}

pub(super) struct HardCategory {
    pub(super) path: Vec<&'static str>,
    pub(super) items: Vec<Item>,
    pub(super) price: i64,
    /// How a variant differs: 0 colour and size, 1 colour, 2 volume, 3 weight / pack, 4 length.
    pub(super) axis: u8,
}

/// Every word of the hard catalogue, in the file's order.
pub(super) struct Vocabulary {
    /// Each is carried by thousands of products across every category.
    pub(super) brands: Vec<&'static str>,
    /// A line word is shared by every brand and category.
    pub(super) lines: Vec<&'static str>,
    /// One slot of the family identity; the first, empty, means "none".
    pub(super) modifiers: Vec<&'static str>,
    pub(super) categories: Vec<HardCategory>,
}

/// The vocabulary, parsed on first use.
pub(super) static HARD: LazyLock<Vocabulary> = LazyLock::new(|| {
    parse(include_str!("hard_words.tsv")).expect("hard_words.tsv parses (its unit test reads it)")
});

/// Reads the vocabulary: one entry a line, its kind and its fields separated by tabs;
/// blank lines and `#` comments are skipped. The first malformed line is the error.
fn parse(text: &'static str) -> Result<Vocabulary, String> {
    let mut words = Vocabulary {
        brands: Vec::new(),
        lines: Vec::new(),
        modifiers: vec![""],
        categories: Vec::new(),
    };
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&'static str> = line.split('\t').collect();
        let bad = |why: &str| format!("hard_words.tsv line {}: {why}: {line:?}", n + 1);
        match fields[..] {
            ["brand", word] => words.brands.push(word),
            ["line", word] => words.lines.push(word),
            ["modifier", word] => words.modifiers.push(word),
            ["category", path, price, axis] => words.categories.push(HardCategory {
                path: path.split(" > ").collect(),
                items: Vec::new(),
                price: price.parse().map_err(|_| bad("the price is not cents"))?,
                axis: axis
                    .parse()
                    .ok()
                    .filter(|a| *a <= 4)
                    .ok_or_else(|| bad("the axis is not 0–4"))?,
            }),
            ["item", spellings, plural] => words
                .categories
                .last_mut()
                .ok_or_else(|| bad("an item before any category"))?
                .items
                .push(Item {
                    spellings: spellings.split('|').collect(),
                    plural,
                }),
            _ => return Err(bad("not a known kind with its fields")),
        }
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::demo::hard::ITEMS_PER_CATEGORY;

    #[test]
    fn the_file_gives_every_entry_in_its_order() {
        let words = &*HARD;
        let text = include_str!("hard_words.tsv");
        let count = |kind: &str| {
            text.lines()
                .filter(|l| l.split('\t').next() == Some(kind))
                .count()
        };
        assert_eq!(words.brands.len(), count("brand"));
        assert_eq!(words.lines.len(), count("line"));
        assert_eq!(words.modifiers.len(), count("modifier") + 1);
        assert_eq!(words.categories.len(), count("category"));
        let items: usize = words.categories.iter().map(|c| c.items.len()).sum();
        assert_eq!(items, count("item"));
        assert_eq!(
            (words.brands.len(), words.lines.len(), words.modifiers.len()),
            (40, 80, 25)
        );
        assert_eq!((words.brands[0], words.brands[39]), ("Acme", "Willow"));
        assert_eq!((words.lines[0], words.lines[79]), ("Classic", "Keystone"));
        assert_eq!(words.modifiers[..3], ["", "Slim", "Relaxed"]);
        let first = &words.categories[0];
        assert_eq!(
            (&first.path[..], first.price, first.axis),
            (&["Apparel", "Tops"][..], 3500, 0)
        );
        assert_eq!(
            first.items[0].spellings,
            ["T-Shirt", "Tshirt", "T Shirt", "T-SHIRT", "t-shirt"]
        );
        assert_eq!(first.items[0].plural, "T-Shirts");
        for c in &words.categories {
            assert_eq!(c.items.len(), ITEMS_PER_CATEGORY, "{:?}", c.path);
        }
    }

    #[test]
    fn a_malformed_line_is_refused_with_its_number() {
        let cases = [
            ("brand\tAcme\textra", "line 1"),
            ("item\tMug\tMugs", "an item before any category"),
            ("category\tHome\tcheap\t0", "the price is not cents"),
            (
                "# words\ncategory\tHome\t900\t7",
                "line 2: the axis is not 0–4",
            ),
            ("colour\tRed", "not a known kind"),
        ];
        for (text, why) in cases {
            let err = parse(text).err().expect(text);
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }
}
