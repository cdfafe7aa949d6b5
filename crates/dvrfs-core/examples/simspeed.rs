use dvrfs_core::disk::{Access, AccessTiming, DiskModel, Hdd};
use dvrfs_core::qos::Report;
use dvrfs_core::sched::fifo::Fifo;
use dvrfs_core::sim::{run, DiskTimer, SimConfig, Workload};

struct T(Hdd, DiskModel);
impl DiskTimer for T {
    fn service(&mut self, i: u64, a: &Access) -> AccessTiming {
        self.0.service(i, a)
    }
    fn capacity_bytes(&self) -> u64 {
        self.1.capacity_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        self.1.sector_bytes
    }
    fn name(&self) -> String {
        self.1.name.clone()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let m = DiskModel::builtin(&args[1]).unwrap();
    let mut c = SimConfig::new(Workload::parse(&args[2]).unwrap());
    c.duration_ns = args[3].parse::<u64>().unwrap() * 1_000_000_000;
    let t0 = std::time::Instant::now();
    let o = run(&c, &mut T(Hdd::new(&m, 1), m.clone()), &mut Fifo::new()).unwrap();
    let r = Report::new(&o, &args[2], "zrr", c.duration_ns, 1);
    println!("{}", serde_json::to_string(&r).unwrap());
    eprintln!("wall {:?}", t0.elapsed());
}
