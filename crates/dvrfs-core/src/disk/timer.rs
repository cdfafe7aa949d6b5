//! A disk that times commands: the interface both the simulator and the runtime's
//! emulated device (`--device-model`) serve commands through, and the HDD model
//! behind it (with its power model, which a run's energy meter is built from).

use super::{Access, AccessTiming, PowerModel};

/// Times one command on a disk (the HDD model, or a simple one in tests).
pub trait DiskTimer {
    fn service(&mut self, issue_ns: u64, a: &Access) -> AccessTiming;
    /// A cache flush. With the write cache off (every built-in model) there is nothing
    /// to write back: the command overhead only.
    fn flush(&mut self, issue_ns: u64) -> AccessTiming {
        AccessTiming {
            start_ns: issue_ns,
            end_ns: issue_ns,
            ..Default::default()
        }
    }
    fn capacity_bytes(&self) -> u64;
    fn sector_bytes(&self) -> u32;
    fn name(&self) -> String;
    /// What the disk draws (`None`: unknown, the run reports no energy).
    fn power(&self) -> Option<PowerModel> {
        None
    }
}

/// The HDD model as a disk the simulator and the runtime's emulation time commands on.
pub struct HddDisk {
    hdd: super::Hdd,
    model: super::DiskModel,
}

impl HddDisk {
    pub fn new(model: &super::DiskModel, seed: u64) -> Self {
        HddDisk {
            hdd: super::Hdd::new(model, seed),
            model: model.clone(),
        }
    }
}

impl DiskTimer for HddDisk {
    fn service(&mut self, issue_ns: u64, a: &Access) -> AccessTiming {
        self.hdd.service(issue_ns, a)
    }
    fn flush(&mut self, issue_ns: u64) -> AccessTiming {
        // Write-back caching is modelled as interface time only (disk/hdd.rs), so a
        // flush has nothing to destage either: the controller's overhead.
        let overhead_ns = (self.model.command_overhead_ms * 1e6).round() as u64;
        AccessTiming {
            start_ns: issue_ns,
            end_ns: issue_ns + overhead_ns,
            overhead_ns,
            ..Default::default()
        }
    }
    fn capacity_bytes(&self) -> u64 {
        self.model.capacity_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        self.model.sector_bytes
    }
    fn name(&self) -> String {
        self.model.name.clone()
    }
    fn power(&self) -> Option<PowerModel> {
        self.model.power
    }
}
