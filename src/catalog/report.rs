//! What each catalogue job kind reports as its job's `result`: one type per kind, written when
//! the run ends, and kept as far as it got by a run that fails or is cancelled (classes and
//! counts, never messages). The API publishes these types as the job's report, so the JSON a
//! kind writes and its documented schema are one definition. Knows nothing of how a job is
//! stored or served.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::feed::RowReport;

/// A report as a job's `result`.
pub fn to_result(report: &impl Serialize) -> Value {
    serde_json::to_value(report).expect("a report is counts and names: it always serialises")
}

/// A sync's report: each source's part, the totals and how many sources failed.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SyncReport {
    pub sources: Vec<SourceReport>,
    pub totals: RowCounts,
    pub sources_failed: usize,
}

/// One source of a sync: how it ended and the rows it read and saved.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct SourceReport {
    pub source: String,
    /// `ok`, `failed` (with its error class) or `cancelled`.
    pub status: &'static str,
    /// The error class of a failed source (`SourceNotFound`, `FeedTooLarge`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
    /// The status an http(s) source answered with, when it was not a success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(flatten)]
    pub rows: RowReport,
}

/// Rows read, and what saving them did, summed over a sync's sources.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct RowCounts {
    pub read: u64,
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub invalid: u64,
}

impl RowCounts {
    /// The sum of the sources' rows.
    pub fn of(sources: &[SourceReport]) -> Self {
        sources.iter().fold(Self::default(), |t, s| Self {
            read: t.read + s.rows.read,
            created: t.created + s.rows.created,
            updated: t.updated + s.rows.updated,
            unchanged: t.unchanged + s.rows.unchanged,
            invalid: t.invalid + s.rows.invalid,
        })
    }
}

/// An enrich's report; a stopped or failed one counts the batches it saved.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EnrichReport {
    pub products: usize,
    pub extracted: u64,
    pub unextractable: u64,
    /// Products unchanged since their last enrichment (without `force`).
    pub skipped: usize,
    pub batches: usize,
}

/// A pair's report: the table it left, whether it paired everything or only what changed
/// (and why), and how many products it re-scored.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct PairReport {
    pub mode: PairMode,
    /// Why a full pair was one (absent for an incremental pair).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_because: Option<FullBecause>,
    pub products: usize,
    /// Products that have at least one neighbour.
    pub paired: usize,
    pub pairs: usize,
    /// Products whose neighbours were computed: all of them in a full pair; in an
    /// incremental one, those `rescored_because` counts.
    pub rescored: usize,
    /// What changed since the last pair (an incremental pair).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<PairChanges>,
    /// Why each product was re-scored (an incremental pair).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rescored_because: Option<RescoredBecause>,
}

/// Whether a pair paired every product or only what changed since the last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PairMode {
    Full,
    Incremental,
}

/// Why a pair was a full one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FullBecause {
    /// `full=true`.
    Asked,
    /// No earlier pair left its state (a first pair, a cleared catalogue, a state of
    /// another format).
    First,
    /// `PAIR_TOP_K` or `PAIR_MIN_SCORE` changed since the last pair.
    Settings,
    /// More than the allowed share of the catalogue changed since the last full pair.
    Share,
}

/// Products whose identity, category, price or material changed, that were added, and that
/// were removed since the last pair.
#[derive(Clone, Copy, Debug, Default, Serialize, ToSchema)]
pub struct PairChanges {
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
    pub found_by: FoundBy,
}

/// How an incremental pair found what changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FoundBy {
    /// The change feed named the products written or removed since the last pair.
    #[default]
    Feed,
    /// Every product's version was listed: the feed had overflowed, or began after the
    /// last pair's state.
    Listing,
}

/// Why an incremental pair re-scored each product.
#[derive(Clone, Copy, Debug, Default, Serialize, ToSchema)]
pub struct RescoredBecause {
    /// Added or changed: queried anew.
    pub changed: usize,
    /// Their top k held a changed or removed product and the rest of their kept list could
    /// not stand in for it: queried anew (with the other products of their identity).
    pub lost_a_neighbour: usize,
    /// Their top k held a changed or removed product; the next best, kept from the last
    /// pair, took its place: not queried.
    pub refilled: usize,
    /// A changed or added product entered their top k.
    pub gained_a_neighbour: usize,
}

/// What a pair that was cancelled or failed keeps as its `result`: the phase it had reached
/// (the old neighbour table is left whole).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct PairStopped {
    pub phase: PairPhase,
}

/// A pair's phases, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PairPhase {
    Loading,
    Embedding,
    Indexing,
    Scoring,
    Writing,
}

/// Any catalogue job's report, by kind: what a snapshot's `result` refers to by the name
/// `jobs::KIND_REPORT_SCHEMA` (the job core knows no kind), and what a start with
/// `wait=true` answers.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum JobReport {
    Sync(SyncReport),
    Enrich(EnrichReport),
    Pair(PairReport),
    PairStopped(PairStopped),
    Pipeline(PipelineReport),
}

/// A refresh pipeline's report: the report of each of its steps that ended, by kind (a
/// failed or cancelled step's is what it kept; a skipped step's is null).
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PipelineReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = step_report)]
    pub sync: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = step_report)]
    pub enrich: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = step_report)]
    pub pair: Option<Value>,
}

/// A step's report inside a pipeline's: its kind's report, or null (skipped).
fn step_report() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
    use utoipa::openapi::Ref;
    OneOfBuilder::new()
        .item(Ref::from_schema_name("JobReport"))
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .into()
}
