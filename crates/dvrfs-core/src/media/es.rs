//! Keyframes in a video elementary stream, found by scanning its start codes as the
//! bytes go by (a start code may be split across packets and feeds: a three-byte
//! window and the two bytes after a code are carried over).
//!
//! - H.264 (ISO/IEC 14496-10): NAL unit type 5 (an IDR slice) makes the access
//!   unit a keyframe.
//! - H.265 (ISO/IEC 23008-2): NAL unit types 16 to 23 (IRAP: BLA, IDR, CRA).
//! - MPEG-2 video (ISO/IEC 13818-2): a picture start code whose
//!   `picture_coding_type` is 1 (I) after a sequence header start code (0xB3) in the
//!   same access unit.
//!
//! The transport's `random_access_indicator` is never used: encoders set it
//! inconsistently, and a stream with it cleared must index the same.

/// The video codecs the index knows (from the program map's stream type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    H264,
    H265,
    Mpeg2,
}

impl Codec {
    /// From a PMT stream type: 0x1B H.264, 0x24 H.265, 0x01/0x02 MPEG-1/2 video.
    pub fn from_stream_type(t: u8) -> Option<Codec> {
        match t {
            0x1B => Some(Codec::H264),
            0x24 => Some(Codec::H265),
            0x01 | 0x02 => Some(Codec::Mpeg2),
            _ => None,
        }
    }
}

/// The scanner of one access unit's bytes.
#[derive(Clone, Debug)]
pub struct KeyScan {
    codec: Codec,
    /// The last bytes seen (for a start code split across pieces), newest last.
    window: [u8; 3],
    /// Bytes of the window that are real.
    window_len: u8,
    /// After a start code: the bytes of it still wanted (the NAL header, or the
    /// MPEG-2 code and picture header bytes), as (code, bytes so far).
    pending: Option<(u8, u8, [u8; 3])>,
    seq_header: bool,
    keyframe: bool,
}

impl KeyScan {
    pub fn new(codec: Codec) -> KeyScan {
        KeyScan {
            codec,
            window: [0xFF; 3],
            window_len: 0,
            pending: None,
            seq_header: false,
            keyframe: false,
        }
    }

    pub fn keyframe(&self) -> bool {
        self.keyframe
    }

    /// The access unit's next bytes.
    pub fn scan(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if let Some((wanted, have, mut got)) = self.pending.take() {
                got[have as usize] = b;
                let have = have + 1;
                if have < wanted {
                    self.pending = Some((wanted, have, got));
                } else {
                    self.header(&got[..have as usize]);
                }
            } else if self.window_len == 3 && self.window == [0, 0, 1] {
                // `b` is the first byte after a start code.
                let wanted = match self.codec {
                    Codec::H264 => 1,
                    Codec::H265 => 1,
                    // The code, then two picture-header bytes for a picture.
                    Codec::Mpeg2 => {
                        if b == 0x00 {
                            3
                        } else {
                            1
                        }
                    }
                };
                let mut got = [0u8; 3];
                got[0] = b;
                if wanted == 1 {
                    self.header(&got[..1]);
                } else {
                    self.pending = Some((wanted, 1, got));
                }
            }
            self.window = [self.window[1], self.window[2], b];
            self.window_len = (self.window_len + 1).min(3);
        }
    }

    /// The bytes after a start code.
    fn header(&mut self, h: &[u8]) {
        match self.codec {
            Codec::H264 => {
                if h[0] & 0x1F == 5 {
                    self.keyframe = true;
                }
            }
            Codec::H265 => {
                let t = (h[0] >> 1) & 0x3F;
                if (16..=23).contains(&t) {
                    self.keyframe = true;
                }
            }
            Codec::Mpeg2 => match h[0] {
                0xB3 => self.seq_header = true,
                // picture_start_code; temporal_reference (10 bits), then
                // picture_coding_type (3 bits): the second header byte's bits 5..3.
                0x00 if h.len() == 3 => {
                    let coding_type = (h[2] >> 3) & 0x07;
                    if coding_type == 1 && self.seq_header {
                        self.keyframe = true;
                    }
                }
                _ => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_split(codec: Codec, bytes: &[u8]) -> Vec<bool> {
        // Every split point gives the same answer.
        (0..=bytes.len())
            .map(|i| {
                let mut k = KeyScan::new(codec);
                k.scan(&bytes[..i]);
                k.scan(&bytes[i..]);
                k.keyframe()
            })
            .collect()
    }

    #[test]
    fn an_h264_idr_is_a_keyframe_wherever_the_bytes_split() {
        let idr = [
            0, 0, 0, 1, 0x09, 0xF0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x65, 0x88,
        ];
        assert!(scan_split(Codec::H264, &idr).iter().all(|&k| k));
        let p = [0, 0, 0, 1, 0x09, 0xF0, 0, 0, 1, 0x41, 0x9A];
        assert!(scan_split(Codec::H264, &p).iter().all(|&k| !k));
    }

    #[test]
    fn an_h265_irap_is_a_keyframe_and_a_trailing_picture_is_not() {
        // NAL type 19 (IDR_W_RADL): header byte 19 << 1 = 0x26.
        let idr = [0, 0, 1, 0x46, 0x01, 0, 0, 1, 0x26, 0x01, 0xAF];
        assert!(scan_split(Codec::H265, &idr).iter().all(|&k| k));
        // Type 1 (TRAIL_R): 0x02.
        let trail = [0, 0, 1, 0x02, 0x01, 0xD0];
        assert!(scan_split(Codec::H265, &trail).iter().all(|&k| !k));
    }

    #[test]
    fn an_mpeg2_i_picture_counts_only_after_a_sequence_header() {
        // Sequence header, GOP, picture with coding type 1 (I): byte 2 = 1 << 3.
        let i_with_seq = [
            0, 0, 1, 0xB3, 0x14, 0, 0, 1, 0xB8, 0, 0, 0, 1, 0x00, 0x00, 0x0F, 0xFF,
        ];
        assert!(scan_split(Codec::Mpeg2, &i_with_seq).iter().all(|&k| k));
        let i_alone = [0, 0, 1, 0x00, 0x00, 0x0F, 0xFF];
        assert!(scan_split(Codec::Mpeg2, &i_alone).iter().all(|&k| !k));
        // A B picture (coding type 3) after a sequence header.
        let b = [0, 0, 1, 0xB3, 0, 0, 1, 0x00, 0x00, 0x1F, 0xFF];
        assert!(scan_split(Codec::Mpeg2, &b).iter().all(|&k| !k));
    }
}
