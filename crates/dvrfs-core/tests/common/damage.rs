//! Damage no checksum can see: metadata blocks edited and resealed.

use dvrfs_core::device::MemDevice;
use dvrfs_core::format::superblock::Superblock;
use dvrfs_core::format::{parse_header, seal_block, META_BLOCK_BYTES};

/// The primary superblock of `dev`.
pub fn superblock(dev: &MemDevice) -> Superblock {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    Superblock::decode(&b).unwrap()
}

/// Edits metadata block `n` in both copies (primary and backup region) and reseals
/// them: damage no checksum can see.
pub fn edit_block(dev: &mut MemDevice, sb: &Superblock, n: u64, edit: impl Fn(&mut [u8])) {
    for off in [n * META_BLOCK_BYTES as u64, sb.backup_offset(n)] {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        dev.peek(off, &mut b);
        let h = parse_header(&b).unwrap();
        edit(&mut b);
        seal_block(&mut b, &h);
        dev.poke(off, &b);
    }
}
