//! Trick-play readers (`t` terms of a workload): a player showing a recording at
//! `--speed` N (2 to 32 forward, -2 to -32 backward) reads only its keyframes, one
//! short read per keyframe shown, never the bytes between them (a fast-forward that
//! read every byte at 8x would cost eight playbacks).
//!
//! The model: the recording has a keyframe every `gop_ns` at its bitrate; a keyframe
//! is [`KEYFRAME_SHARE`] of its GOP's bytes. At speed N the player would show N/GOP
//! keyframes per second of output; it shows at most [`MAX_KEYFRAMES_PER_S`] and skips
//! the rest (as players do at high speeds), so each read advances `step` GOPs and
//! one read is due every `step * gop / |N|`. So its disk cost is a seek and a short
//! transfer per read at a fixed period, not a rate: at 8 Mbit/s, 2 s GOPs and 8x,
//! a 300 KiB read every 250 ms, about 1.2 MB/s of transfer but 4 positionings a second.
//! A read's deadline follows the playback rule (its buffer of `depth` reads).

/// An I-frame's share of its GOP's bytes: about 15% for H.264 at a 2 s GOP (an
/// I-frame is several times a P-frame; surveillance encoders' I-frames are 10-20% of
/// the GOP).
pub(super) const KEYFRAME_SHARE: f64 = 0.15;

/// The most keyframes a trick-play reader shows per second of output: more would not
/// look smoother and would only cost disk time.
pub(super) const MAX_KEYFRAMES_PER_S: f64 = 8.0;

/// Reads are whole 4 KiB sectors.
const ALIGN: u64 = 4096;

/// A trick-play reader's reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::sim) struct Trick {
    /// Bytes per read: one keyframe.
    pub key_bytes: u64,
    /// How far each read moves in the file: `step` GOPs.
    pub stride_bytes: u64,
    pub backward: bool,
}

impl Trick {
    /// The reads of a recording at `rate_bps` with a keyframe every `gop_ns`, shown at
    /// `speed`, and the period between them (ns).
    pub(super) fn plan(rate_bps: f64, gop_ns: u64, speed: i32) -> (Trick, u64) {
        assert!(
            (2..=32).contains(&speed.unsigned_abs()),
            "the CLI checks --speed: {speed}"
        );
        assert!(gop_ns > 0 && rate_bps > 0.0, "a positive GOP and rate");
        let gop_bytes = rate_bps * gop_ns as f64 / 8e9;
        let key_bytes = ((gop_bytes * KEYFRAME_SHARE / ALIGN as f64).ceil() as u64).max(1) * ALIGN;
        let speed_abs = f64::from(speed.unsigned_abs());
        let keyframes_per_s = speed_abs * 1e9 / gop_ns as f64;
        let step = (keyframes_per_s / MAX_KEYFRAMES_PER_S).ceil().max(1.0);
        let stride_bytes = ((step * gop_bytes / ALIGN as f64).round() as u64).max(1) * ALIGN;
        let period_ns = ((step * gop_ns as f64 / speed_abs) as u64).max(1);
        (
            Trick {
                key_bytes,
                stride_bytes,
                backward: speed < 0,
            },
            period_ns,
        )
    }

    /// Where read `k` starts in a file of `file_bytes`, from `start`: `k` strides on
    /// (back, when rewinding), wrapping around the file (a player looping), at a
    /// sector boundary, always leaving room for the read.
    pub(super) fn offset(&self, start: u64, k: u64, file_bytes: u64) -> u64 {
        let room = file_bytes.saturating_sub(self.key_bytes) / ALIGN * ALIGN + ALIGN;
        let moved = k.wrapping_mul(self.stride_bytes) % room;
        let start = start % room;
        let pos = if self.backward {
            (start + room - moved) % room
        } else {
            (start + moved) % room
        };
        pos / ALIGN * ALIGN
    }

    /// Bytes of read `k` (a file shorter than one keyframe is read whole).
    pub(super) fn len(&self, file_bytes: u64) -> u64 {
        self.key_bytes
            .min(file_bytes.div_ceil(ALIGN).max(1) * ALIGN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_times_at_two_second_gops_reads_a_keyframe_every_quarter_second() {
        let (t, period_ns) = Trick::plan(8e6, 2_000_000_000, 8);
        // 2 MB per GOP, 15%: 300,000 bytes, rounded up to sectors.
        assert_eq!(t.key_bytes, 303_104);
        // 4 keyframes a second at 8x: none skipped; a GOP's 2 MB in whole sectors.
        assert_eq!(t.stride_bytes, 488 * 4096);
        assert_eq!(period_ns, 250_000_000);
        assert!(!t.backward);
    }

    #[test]
    fn at_high_speed_keyframes_are_skipped_down_to_the_bound() {
        // 32x at 1 s GOPs: 32 keyframes a second would be shown; 8 are, every 4th.
        let (t, period_ns) = Trick::plan(4e6, 1_000_000_000, -32);
        assert_eq!(t.stride_bytes, 488 * 4096, "4 GOPs of 500 kB");
        assert_eq!(period_ns, 125_000_000);
        assert!(t.backward);
        let shown_per_s = 1e9 / period_ns as f64;
        assert!(shown_per_s <= MAX_KEYFRAMES_PER_S);
    }

    #[test]
    fn reads_stay_in_the_file_aligned_and_move_the_right_way() {
        let file = 10_000_000;
        for speed in [8, -8] {
            let (t, _) = Trick::plan(8e6, 2_000_000_000, speed);
            let mut last = t.offset(4_000_000, 0, file);
            for k in 1..20 {
                let o = t.offset(4_000_000, k, file);
                assert_eq!(o % ALIGN, 0);
                assert!(o + t.len(file) <= file.div_ceil(ALIGN) * ALIGN, "{o}");
                // Forward moves up and backward down, but where the file wraps.
                let wrapped = if speed > 0 { o < last } else { o > last };
                if !wrapped {
                    assert_eq!(o.abs_diff(last), t.stride_bytes, "k {k}");
                }
                last = o;
            }
        }
        let (t, _) = Trick::plan(8e6, 2_000_000_000, 8);
        assert_eq!(t.len(10_000), 12_288, "a short file is read whole");
        assert_eq!(t.offset(0, 5, 10_000), 0);
    }
}
