//! Unreadable sectors: `get` fails naming the error, `get --salvage` copies every
//! readable byte around them and lists the holes, `scrub` reports them. The image
//! sits on a small FUSE file system of this test that answers EIO for reads of a
//! chosen byte range, so the errors come back through the kernel's `O_DIRECT` read
//! path (and io_uring) exactly as a medium error from a disk would; no device-mapper
//! here to make a real bad sector. Needs root and /dev/fuse (SKIP with the reason).

mod common;

use common::*;
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyEntry, ReplyOpen, Request,
};
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

const ROOT: u64 = 1;
const DISK: u64 = 2;
const TTL: Duration = Duration::from_secs(60);

/// One file, `disk.img`, read from `image`; a read touching `bad` fails with EIO.
struct Faulty {
    image: File,
    size: u64,
    bad: (u64, u64),
    failed: Arc<AtomicU64>,
}

impl Faulty {
    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, perm, size, nlink) = match ino {
            ROOT => (FileType::Directory, 0o755, 0, 2),
            _ => (FileType::RegularFile, 0o644, self.size, 1),
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl Filesystem for Faulty {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == ROOT && name == "disk.img" {
            reply.entry(&TTL, &self.attr(DISK), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino.0 {
            ROOT | DISK => reply.attr(&TTL, &self.attr(ino.0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // No page cache in between: every read the program makes reaches us.
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let end = (offset + size as u64).min(self.size);
        if offset < self.bad.1 && self.bad.0 < end {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return reply.error(Errno::EIO);
        }
        let mut buf = vec![0u8; end.saturating_sub(offset) as usize];
        match self.image.read_exact_at(&mut buf, offset) {
            Ok(()) => reply.data(&buf),
            Err(_) => reply.error(Errno::EIO),
        }
    }
}

/// Where in `img` the 4 KiB of `src` at `offset` are stored (data blocks are aligned,
/// so the search steps 4 KiB at a time).
fn image_offset_of(img: &Path, src: &Path, offset: u64) -> u64 {
    let (img, src) = (std::fs::read(img).unwrap(), std::fs::read(src).unwrap());
    let needle = &src[offset as usize..offset as usize + 4096];
    let at = (0..img.len() - 4096)
        .step_by(4096)
        .filter(|&i| &img[i..i + 4096] == needle)
        .collect::<Vec<_>>();
    assert_eq!(at.len(), 1, "the random bytes are stored once");
    at[0] as u64
}

/// For a volume without and with data checksums: the file's byte range that one
/// unreadable 4 KiB sector costs is one salvage step (64 KiB), or the whole checksum
/// granule (512 KiB) when it is checked.
#[test]
fn an_unreadable_sector_fails_get_and_salvage_copies_everything_around_it() {
    need_fuse!();
    for (extra, lost) in [
        (&["--checksum-granule", "off"][..], 64u64 << 10),
        (&[][..], 512 << 10),
    ] {
        let dir = tempdir();
        let img = dir.path().join("fs.img");
        mkfs(&img, "64M", &[&["--block-size", "1M"], extra].concat());
        let src = random_file(&dir.path().join("v"), (5 << 20) + 1000, 11);
        ok(dvrfs(["put", s(&img), s(&src), "/v"]));
        // A sector inside the file's third block, 100 KiB into it.
        let bad_file_offset = (2 << 20) + (100 << 10);
        let at = image_offset_of(&img, &src, bad_file_offset);

        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let failed = Arc::new(AtomicU64::new(0));
        let fs = Faulty {
            size: std::fs::metadata(&img).unwrap().len(),
            image: File::open(&img).unwrap(),
            bad: (at, at + 4096),
            failed: failed.clone(),
        };
        let mut cfg = Config::default();
        cfg.mount_options = vec![MountOption::FSName("faulty".into()), MountOption::RO];
        let session = fuser::Session::new(fs, &mnt, &cfg)
            .expect("mount the faulty file system")
            .spawn()
            .expect("serve it");
        let disk = mnt.join("disk.img");

        // Metadata reads are fine; the file's data is not.
        let st = json(&ok(dvrfs(["stat", s(&disk), "/v", "--json"])));
        assert_eq!(st["size_bytes"], (5 << 20) + 1000);
        let back = dir.path().join("back");
        let o = dvrfs(["get", s(&disk), "/v", s(&back)]);
        assert_ne!(code(&o), 0, "get of an unreadable range succeeded");
        let err = fails(o, "/v: bytes 0 to 5243880 could not be read");
        assert!(err.contains("--salvage"), "{err}");
        assert!(!back.exists(), "a failed get leaves no partial file");
        assert!(
            failed.load(Ordering::Relaxed) > 0,
            "the bad sector was read"
        );

        let o = dvrfs(["get", s(&disk), "/v", s(&back), "--salvage"]);
        assert_eq!(code(&o), 3, "{}", stderr(&o));
        let hole = bad_file_offset / lost * lost..bad_file_offset / lost * lost + lost;
        let err = stderr(&o);
        assert!(
            err.contains(&format!("bytes {} to {}: ", hole.start, hole.end)),
            "salvage should list bytes {hole:?}: {err}"
        );
        let (want, got) = (std::fs::read(&src).unwrap(), std::fs::read(&back).unwrap());
        assert_eq!(got.len(), want.len());
        let (a, b) = (hole.start as usize, hole.end as usize);
        assert_eq!(got[..a], want[..a], "bytes before the hole");
        assert!(got[a..b].iter().all(|&x| x == 0), "the hole is zeros");
        assert_eq!(got[b..], want[b..], "bytes after the hole");

        let o = dvrfs(["scrub", s(&disk), "--json"]);
        assert_eq!(code(&o), 3, "{}", stderr(&o));
        let v = json(&stdout(&o));
        assert_eq!(v["damaged"][0]["path"], "/v", "{v}");
        assert_eq!(v["damaged"][0]["offset"], hole.start, "{v}");
        assert_eq!(v["damaged"][0]["end"], hole.end, "{v}");
        assert!(
            v["damaged"][0]["error"]
                .as_str()
                .is_some_and(|e| e.contains("Input/output error")),
            "{v}"
        );
        assert_eq!(v["damaged"].as_array().map(Vec::len), Some(1), "{v}");
        session.umount_and_join().expect("unmount");
    }
}
