//! What a check of fsck found: each error, and whether a repair fixes it. The checks
//! of `volume/check.rs` and `volume/copies.rs` fill one, `tools/fsck.rs` reports it.
//!
//! The invariant it keeps: `errors` and `fixable` have one entry each per finding.

/// What a check found: each error, and whether a repair fixes it.
#[derive(Default)]
pub(crate) struct Found {
    pub(crate) errors: Vec<String>,
    pub(crate) fixable: Vec<bool>,
}

impl Found {
    pub(super) fn err(&mut self, fixable: bool, msg: String) {
        self.errors.push(msg);
        self.fixable.push(fixable);
    }
}
