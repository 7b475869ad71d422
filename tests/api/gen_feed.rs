//! `catalog-jobs gen-feed` through the built binary: every line is a product, the same size
//! and seed give the same bytes, and without arguments it writes the committed demo feed.

use std::collections::HashSet;
use std::process::Command;

use catalog_jobs::catalog::products::Product;

use crate::helpers::{run_to_success, BIN};

fn gen_feed(args: &[&str]) -> Vec<u8> {
    let mut command = Command::new(BIN);
    command.arg("gen-feed").args(args).env_clear();
    run_to_success(&mut command, &format!("gen-feed {args:?}")).stdout
}

#[test]
fn gen_feed_writes_one_product_a_line_and_the_same_seed_gives_the_same_feed() {
    let cases: [(&[&str], &[&str]); 2] = [
        (&["60", "3"], &["60", "4"]),
        (&["--hard", "60", "3"], &["--hard", "60", "4"]),
    ];
    for (args, other_seed) in cases {
        let feed = gen_feed(args);
        assert_eq!(feed, gen_feed(args), "gen-feed {args:?} twice");
        assert_ne!(feed, gen_feed(other_seed), "another seed, another feed");
        let text = String::from_utf8(feed).expect("the feed is UTF-8");
        let products: Vec<Product> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("each line is a product"))
            .collect();
        assert_eq!(products.len(), 60, "gen-feed {args:?}");
        let keys: HashSet<_> = products.iter().map(|p| &p.product_key).collect();
        assert_eq!(keys.len(), 60, "every key is its own");
    }
}

#[test]
fn gen_feed_without_arguments_writes_the_committed_demo_feed() {
    let committed = std::fs::read("examples/feeds/demo.jsonl").expect("the demo feed is committed");
    assert!(
        gen_feed(&[]) == committed,
        "gen-feed's default is not examples/feeds/demo.jsonl"
    );
}
