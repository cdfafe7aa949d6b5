//! dvrfs engine core.
#![forbid(unsafe_code)]

pub mod device;
