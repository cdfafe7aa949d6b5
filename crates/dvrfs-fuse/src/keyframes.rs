//! The `user.dvrfs.keyframes` extended attribute: a file's frame index (FORMAT.md
//! section 10c) as any program on the mount can read it (`getfattr`), issue 25.
//!
//! Read-only. The value is text: a first line `keyframes=N complete=yes|no`, then
//! one line a keyframe, `FRAME OFFSET LENGTH PTS_90K UTC_NS FLAGS` (the frame number,
//! the byte offset a reader starts at, the bytes to the next frame, the media time in
//! 90 kHz ticks, the UTC in nanoseconds since the epoch, and `-` or the flags joined
//! by commas: `discontinuity`, `clock-step`, `import`). A file without an index has
//! none (`ENODATA`), nor has a directory. An index longer than an extended attribute
//! may be (64 KiB, about 1,100 keyframes: a 20-minute file at a keyframe a second)
//! gives `E2BIG`: `dvrfs keyframes` lists it through the daemon's volume image.

use super::*;
use dvrfs_core::format::frame_index::{FLAG_CLOCK_STEP, FLAG_DISCONTINUITY, FLAG_IMPORT};

/// The attribute's name.
pub const KEYFRAMES_XATTR: &str = "user.dvrfs.keyframes";
/// The largest value Linux passes for an extended attribute (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 65536;

fn flags_text(f: u32) -> String {
    let names: Vec<&str> = [
        (FLAG_DISCONTINUITY, "discontinuity"),
        (FLAG_CLOCK_STEP, "clock-step"),
        (FLAG_IMPORT, "import"),
    ]
    .iter()
    .filter(|(bit, _)| f & bit != 0)
    .map(|(_, n)| *n)
    .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(",")
    }
}

impl DvrfsFs {
    /// `getfattr -n user.dvrfs.keyframes`: the module docs' text.
    pub(crate) fn get_keyframes(&self, ino: Ino) -> Result<String, Errno> {
        let (complete, entries) = self
            .rt
            .query(move |v| -> dvrfs_core::Result<_> {
                let info = v.frame_info(ino)?;
                let entries = v
                    .frame_index(ino)?
                    .map(|ix| ix.entries().to_vec())
                    .unwrap_or_default();
                Ok((info.complete, entries))
            })
            .map_err(|e| errno_of(&e))?
            .map_err(|e| e.errno())?;
        if entries.is_empty() && complete {
            return Err(libc::ENODATA);
        }
        let mut text = format!(
            "keyframes={} complete={}\n",
            entries.len(),
            if complete { "yes" } else { "no" }
        );
        for e in &entries {
            text.push_str(&format!(
                "{} {} {} {} {} {}\n",
                e.number,
                e.offset,
                e.len,
                e.pts_90k,
                e.utc_ns,
                flags_text(e.flags)
            ));
            if text.len() > XATTR_SIZE_MAX {
                return Err(libc::E2BIG);
            }
        }
        Ok(text)
    }

    /// Whether file `ino` has an index to show.
    pub(crate) fn has_keyframes(&self, ino: Ino) -> bool {
        self.get_keyframes(ino).is_ok()
    }
}
