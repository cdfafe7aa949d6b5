//! The share kept for root (`Engine::check_keeping`, issue 22 item 7): admission with
//! a fraction of the real-time share and of the data area kept back, checked against
//! what the same stream gets from a plain admission.

mod common;

use common::drive::{setup, stream_spec as spec};
use dvrfs_core::disk::Admission;
use dvrfs_core::engine::{KeptShare, Op, Output, StreamDir};

#[test]
fn a_stream_past_the_kept_real_time_share_is_busy_and_fits_without_it() {
    // 10 MB/s with a 10% best-effort share: 9 MB/s (72 Mbit/s) for streams.
    let (mut e, mut d) = setup(Some(Admission::bandwidth(10e6, 0.1)), 5);
    let a = d.create(&mut e, "a");
    // 70 of 72 Mbit/s: 97% of the share, past 95%, within 100%.
    let big = spec(StreamDir::Read, 70.0, 0);
    match e.check_keeping(a, &big, 0.05).unwrap() {
        KeptShare::Busy(why) => assert!(why.contains("5% is kept for root"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.check_keeping(a, &big, 0.0).unwrap(), KeptShare::Fits);
    // 60 of 72: 83%, fits beside a 5% share.
    let fits = spec(StreamDir::Read, 60.0, 0);
    assert_eq!(e.check_keeping(a, &fits, 0.05).unwrap(), KeptShare::Fits);
    // The check holds nothing: the stream is admitted afterwards.
    let o = d.run(&mut e, Op::StreamOpen { ino: a, spec: big });
    assert!(matches!(o, Ok(Output::Stream(_))), "{o:?}");
}

#[test]
fn a_recording_that_would_leave_less_than_the_kept_space_free_has_no_space() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(10e6, 0.1)), 5);
    let a = d.create(&mut e, "a");
    let avail = e.volume().available_bytes();
    let total = e.volume().superblock().data_blocks * e.volume().superblock().data_block_bytes;
    // Leaves 1% of the data area: less than 5% kept, more than none.
    let most = (avail - total / 100) >> 20 << 20;
    let rec = spec(StreamDir::Write, 1.0, most);
    match e.check_keeping(a, &rec, 0.05).unwrap() {
        KeptShare::NoSpace(why) => assert!(why.contains("is kept for root"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.check_keeping(a, &rec, 0.0).unwrap(), KeptShare::Fits);
    // Leaving 10% free fits beside 5% kept.
    let some = spec(StreamDir::Write, 1.0, (avail - total / 10) >> 20 << 20);
    assert_eq!(e.check_keeping(a, &some, 0.05).unwrap(), KeptShare::Fits);
}
