//! Retention (issue 26; docs/retention.md): what a volume deletes to keep
//! recording, decided from the policies the volume stores (`volume/retention.rs`).
//!
//! The layer between the volume and the engine. [`Snapshot::of`] reads the volume
//! into streams and their chunks (a stream is a directory with a policy of its own or
//! above it, or with an integrity chain; its chunks are its regular files but the
//! chain); [`plan`] decides, purely and deterministically, which chunks go and why,
//! by the precedence. Running the deletions (paced, metadata only) is the
//! engine's.

mod name;
mod plan;
mod protect;
mod snapshot;
mod text;

pub use crate::format::events::DeleteCause;
pub use name::{chunk_name, chunk_name_utc, civil_from_days, utc_rfc3339};
pub use plan::{plan, Deletion, Plan, PlanInput};
pub use protect::{protect, protect_blocks, unprotect, Covered};
pub use snapshot::{ChunkInfo, Snapshot, StreamInfo};
pub use text::{
    attribute_text, duration_text, parse_policy, share_text, size_text, stream_parts, volume_parts,
    PolicyText,
};
