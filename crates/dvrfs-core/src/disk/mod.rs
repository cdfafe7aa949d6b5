//! Hard-disk models: the JSON model files, the mechanical simulation the simulator runs
//! requests on, the service-time estimator of the traffic mixer (AVFS eq. 1) and the
//! admission (capacity) bounds.

/// One disk command: `sectors` logical sectors from `lba`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub lba: u64,
    pub sectors: u32,
    pub write: bool,
}

/// How the disk spent the time of one command (virtual nanoseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessTiming {
    /// When the command started (not before it was issued) and ended.
    pub start_ns: u64,
    pub end_ns: u64,
    pub overhead_ns: u64,
    pub seek_ns: u64,
    pub rotation_ns: u64,
    pub transfer_ns: u64,
    /// Cylinders the head moved.
    pub seek_cylinders: u64,
    /// Served from the read-ahead cache.
    pub cache_hit: bool,
}
