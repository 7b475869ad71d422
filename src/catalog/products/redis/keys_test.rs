//! Every catalogue key builder against the literal key it gave when keys were made with
//! `format!`: a builder that names a key wrongly reads or writes another key.

use super::CatalogKeys;
use crate::jobs::TenantId;

#[test]
fn each_builder_names_the_key_it_always_named() {
    let keys = CatalogKeys::new("catalog");
    // A plain tenant, and one of each character a tenant may hold besides letters and digits.
    for (tenant, start) in [
        ("acme", "catalog:{alo}:acme"),
        ("a.b_c-D9", "catalog:{8vh}:a.b_c-D9"),
    ] {
        let t = TenantId::parse(tenant).unwrap();
        let built = [
            (keys.of(&t), ""),
            (keys.products(&t), ":products"),
            (keys.listing(&t), ":products:order"),
            (keys.enriched(&t), ":enriched"),
            (keys.neighbours(&t), ":neighbours"),
            (keys.pairing(&t), ":pairing"),
            (keys.staged(&t), ":neighbours:staged"),
            (keys.batch(&t), ":batch"),
            (keys.changes(&t), ":changes"),
            (keys.changes_at(&t), ":changes:at"),
        ];
        for (key, suffix) in built {
            assert_eq!(key, format!("{start}{suffix}"));
        }
        let staging = keys.neighbours_staging(&t);
        assert!(staging.starts_with(&format!("{start}:neighbours:staging:")));
    }
    let other = CatalogKeys::new("p:q");
    let t = TenantId::parse("acme").unwrap();
    assert_eq!(other.products(&t), "p:q:{alo}:acme:products");
}
