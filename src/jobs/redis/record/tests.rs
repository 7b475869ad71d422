//! The record schema's tests: the Lua side names the same fields and codes, pieces join again, a
//! timeline and a claim decode from what Redis holds.

use super::*;

const LUA: &str = include_str!("../../lua/record.lua");

/// The `name = 'value'` pairs of the Lua table `local <table> = {…}` in `lua/record.lua`,
/// in order.
fn lua_pairs(table: &str) -> Vec<(String, String)> {
    let start = LUA
        .find(&format!("local {table} = {{"))
        .unwrap_or_else(|| panic!("record.lua defines {table}"));
    let body = &LUA[start..];
    let body = &body[body.find('{').expect("a table") + 1..body.find('}').expect("closed")];
    body.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| {
            (
                name.trim().to_owned(),
                value.trim().trim_matches('\'').to_owned(),
            )
        })
        .collect()
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn the_lua_side_names_the_same_fields_in_the_same_order() {
    let rust: Vec<(&str, &str)> = Field::ALL.iter().map(|f| (f.label(), f.name())).collect();
    assert_eq!(lua_pairs("FIELDS"), owned(&rust));
    let mut stored: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
    stored.sort_unstable();
    stored.dedup();
    assert_eq!(stored.len(), Field::ALL.len(), "stored names are distinct");
    assert!(stored
        .iter()
        .all(|n| n.len() <= 2 && !n.starts_with(EVENT_MARK)));
}

#[test]
fn the_lua_side_codes_event_types_and_statuses_the_same_way() {
    assert_eq!(lua_pairs("EVENT_CODES"), owned(EVENT_CODES));
    assert_eq!(lua_pairs("STATUS_CODES"), owned(STATUS_CODES));
    assert_eq!(lua_pairs("DEFAULT_STEPS"), owned(DEFAULT_STEPS));
}

#[test]
fn a_long_value_is_cut_on_character_boundaries_and_joined_again() {
    let long = format!("{{\"name\":\"{}\"}}", "é".repeat(100));
    let pairs = Pairs::default().with_long(Field::Result, &long);
    assert!(pairs.0.len() > 3, "{} pieces", pairs.0.len());
    assert!(pairs.0.iter().all(|(_, piece)| piece.len() <= PIECE));
    assert_eq!(pairs.0[1].0, "result.2");
    let stored = pairs
        .0
        .into_iter()
        .map(|(name, v)| (name.replace("result", "r"), v));
    assert_eq!(Hash::new(stored.collect()).long(Field::Result), Some(long));
    let short = Pairs::default().with_long(Field::Params, "{}");
    assert_eq!(short.0, vec![("params".to_owned(), "{}".to_owned())]);
}

#[test]
fn a_timeline_reads_from_the_record_by_seq_with_the_record_s_fields() {
    let fields = [
        (Field::CreatedMs.name(), "1000"),
        (Field::RequestId.name(), "r-1"),
        (Field::Error.name(), "Boom"),
        ("@0", "0|c|0|q|0||queued"),
        ("@1", "1|s|2|r|0|1;host/7|starting"),
        ("@p0", "2|p|5|running|40||a|b"),
        ("@tick", "3|progress|9|r|60||c"),
        ("@4", "4|f|12|f|60||failed: Boom"),
    ];
    let hash = Hash::new(
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    let events = hash.timeline(&JobId::new(), None).unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["created", "started", "progress", "progress", "finished"]
    );
    assert_eq!(events[0].extra["request_id"], "r-1");
    assert_eq!(
        (events[2].status.as_str(), events[4].status.as_str()),
        ("running", "failed"),
        "a status is stored as its code or whole"
    );
    assert_eq!(
        (events[1].extra["attempt"].as_u64(), events[1].at),
        (Some(1), 1002)
    );
    assert_eq!(events[1].extra["worker"], "host/7");
    assert_eq!(events[2].step, "a|b", "a step may hold the separator");
    assert_eq!(events[4].extra["error"], "Boom");
    assert_eq!(events[4].id, "1012-4");
    let after = hash.timeline(&JobId::new(), events[2].event_id()).unwrap();
    assert_eq!(after[0].id, events[3].id);
    assert_eq!(after.len(), 2);
}

#[test]
fn an_event_stored_with_an_empty_step_reads_its_type_s_usual_step() {
    let hash = hash_of(&[
        (Field::CreatedMs.name(), "1000"),
        ("@0", "0|c|0|q|0||"),
        ("@1", "1|s|2|r|0|1;host/7|"),
        ("@2", "2|f|9|d|100||"),
        ("@3", "3|o|9|l|40||"),
        ("@4", "4|f|9|c|40||cancelled on request"),
    ]);
    let events = hash.timeline(&JobId::new(), None).unwrap();
    let steps: Vec<&str> = events.iter().map(|e| e.step.as_str()).collect();
    assert_eq!(
        steps,
        ["queued", "starting", "finished", "", "cancelled on request"],
        "a type without a usual step keeps its empty one"
    );
    assert_eq!(events[1].extra["worker"], "host/7");
}

#[test]
fn a_claim_answer_decodes_by_name_whatever_the_order() {
    let id = JobId::new();
    let flat: Vec<String> = [
        (Field::Params, "{\"a\":1}"),
        (Field::Attempt, "2"),
        (Field::Kind, "sync"),
        (Field::Claim, "7"),
        (Field::Tenant, "acme"),
        (Field::CreatedMs, "1000"),
        (Field::RequestId, "r-1"),
    ]
    .iter()
    .flat_map(|(k, v)| [k.name().to_string(), v.to_string()])
    .collect();
    let claim = Hash::from_flat(&flat).claim(id).unwrap();
    assert_eq!(
        (claim.run.claim, claim.attempt, claim.created_at),
        (7, 2, 1000)
    );
    assert_eq!(claim.job.origin.request_id, "r-1");
    assert_eq!(claim.job.origin.retry_of, None);
    assert_eq!(claim.job.params, serde_json::json!({"a": 1}));
}

#[test]
fn an_ended_job_reads_as_updated_when_it_finished() {
    let record = |updated: Option<&str>| {
        let mut fields = vec![
            (Field::Tenant.name(), "t1"),
            (Field::Kind.name(), "sync"),
            (Field::Status.name(), "done"),
            (Field::CreatedMs.name(), "1000"),
            (Field::FinishedMs.name(), "5000"),
        ];
        fields.extend(updated.map(|u| (Field::UpdatedMs.name(), u)));
        let hash = hash_of(&fields);
        let settings = StoreSettings::default();
        let snapshot = hash.snapshot(&JobId::new(), 6000, &settings).unwrap();
        snapshot.expect("a record").updated_at
    };
    assert_eq!(record(None), 5000, "an end leaves updated_ms out");
    assert_eq!(record(Some("3000")), 5000, "a claim's updated_ms is older");
}

/// A record holding `fields` (stored name, value) as Redis would answer them.
fn hash_of(fields: &[(&str, &str)]) -> Hash {
    Hash::new(
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

#[test]
fn the_lua_side_leaves_out_the_same_creator() {
    assert!(LUA.contains(&format!("local ANONYMOUS = '{ANONYMOUS}'")));
}

#[test]
fn the_lua_side_implies_the_same_usual_steps() {
    assert_eq!(lua_pairs("USUAL_STEPS"), owned(USUAL_STEPS));
}
