//! Directory blocks and symlink blocks.
//!
//! A directory is a list of metadata blocks, each holding packed entries
//! `(ino u32, kind u8, name_len u8, name)`. An entry never moves once written, so adding
//! or removing a name rewrites only the one block that holds it.

use super::*;

/// Longest name, in bytes (POSIX NAME_MAX).
pub const MAX_NAME_BYTES: usize = 255;
const D_COUNT: usize = 0; // u16 entry count
const D_USED: usize = 2; // u16 bytes of entries
const D_ENTRIES: usize = 4;
/// Space for entries in one directory block.
pub const DIR_SPACE_BYTES: usize = PAYLOAD_BYTES - D_ENTRIES;
const ENTRY_FIXED_BYTES: usize = 6;

/// The longest symlink target.
pub const MAX_SYMLINK_BYTES: usize = PAYLOAD_BYTES - 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    File = 1,
    Dir = 2,
    Symlink = 3,
}

impl Kind {
    /// The kind named by the file-type bits of a POSIX mode.
    pub fn from_mode(mode: u32) -> Option<Kind> {
        match mode & S_IFMT {
            S_IFREG => Some(Kind::File),
            S_IFDIR => Some(Kind::Dir),
            S_IFLNK => Some(Kind::Symlink),
            _ => None,
        }
    }

    pub fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::File),
            2 => Some(Kind::Dir),
            3 => Some(Kind::Symlink),
            _ => None,
        }
    }
}

/// Bytes an entry with this name takes in a block.
pub fn entry_bytes(name: &[u8]) -> usize {
    ENTRY_FIXED_BYTES + name.len()
}

pub fn encode_dir(entries: &[(&[u8], u32, Kind)], payload: &mut [u8]) {
    payload.fill(0);
    let mut at = D_ENTRIES;
    for (name, ino, kind) in entries {
        put_u32(payload, at, *ino);
        payload[at + 4] = *kind as u8;
        payload[at + 5] = name.len() as u8;
        payload[at + 6..at + 6 + name.len()].copy_from_slice(name);
        at += entry_bytes(name);
    }
    debug_assert!(at <= PAYLOAD_BYTES);
    put_u16(payload, D_COUNT, entries.len() as u16);
    put_u16(payload, D_USED, (at - D_ENTRIES) as u16);
}

/// Decodes a directory block; rejects entries that run past the block or are invalid.
pub fn decode_dir(payload: &[u8]) -> Result<Vec<(Vec<u8>, u32, Kind)>, BlockError> {
    let count = get_u16(payload, D_COUNT) as usize;
    let used = get_u16(payload, D_USED) as usize;
    if used > DIR_SPACE_BYTES {
        return Err(BlockError::Malformed("directory block length"));
    }
    let mut out = Vec::with_capacity(count);
    let mut at = D_ENTRIES;
    for _ in 0..count {
        if at + ENTRY_FIXED_BYTES > D_ENTRIES + used {
            return Err(BlockError::Malformed("directory entry"));
        }
        let ino = get_u32(payload, at);
        let kind =
            Kind::from_u8(payload[at + 4]).ok_or(BlockError::Malformed("directory entry kind"))?;
        let len = payload[at + 5] as usize;
        let end = at + ENTRY_FIXED_BYTES + len;
        if len == 0 || end > D_ENTRIES + used {
            return Err(BlockError::Malformed("directory entry name"));
        }
        out.push((payload[at + 6..end].to_vec(), ino, kind));
        at = end;
    }
    if at != D_ENTRIES + used {
        return Err(BlockError::Malformed("directory block length"));
    }
    Ok(out)
}

pub fn encode_symlink(target: &[u8], payload: &mut [u8]) {
    payload.fill(0);
    put_u16(payload, 0, target.len() as u16);
    payload[2..2 + target.len()].copy_from_slice(target);
}

pub fn decode_symlink(payload: &[u8]) -> Result<Vec<u8>, BlockError> {
    let len = get_u16(payload, 0) as usize;
    if len == 0 || len > MAX_SYMLINK_BYTES {
        return Err(BlockError::Malformed("symlink length"));
    }
    Ok(payload[2..2 + len].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_block_round_trips_and_fills() {
        let long = vec![b'x'; MAX_NAME_BYTES];
        let names: Vec<Vec<u8>> = (0..15)
            .map(|i| {
                let mut n = long.clone();
                n[0] = b'a' + i as u8;
                n
            })
            .collect();
        let total: usize = names.iter().map(|n| entry_bytes(n)).sum();
        assert!(total <= DIR_SPACE_BYTES, "15 maximal names fit one block");
        let entries: Vec<(&[u8], u32, Kind)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (&n[..], i as u32 + 2, Kind::File))
            .collect();
        let mut p = vec![0u8; PAYLOAD_BYTES];
        encode_dir(&entries, &mut p);
        let back = decode_dir(&p).unwrap();
        assert_eq!(back.len(), 15);
        assert_eq!(back[3].0, names[3]);
        assert_eq!(back[3].1, 5);
    }

    #[test]
    fn malformed_directory_blocks_are_rejected() {
        let mut p = vec![0u8; PAYLOAD_BYTES];
        encode_dir(&[(b"abc", 2, Kind::File)], &mut p);
        p[D_ENTRIES + 5] = 200; // name length past the used bytes
        assert!(decode_dir(&p).is_err());
    }
}
