//! The server and the client over a real socket, on a runtime of the test's own (no
//! mount, no root needed): what one client may not do to another's operations and
//! streams, a client of another protocol version, and what the server closes when a
//! client goes away.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dvrfs_core::disk::Admission;
use dvrfs_core::engine::{StreamDir, StreamSpec};
use dvrfs_core::layout::MkfsParams;
use dvrfs_core::tools::mkfs;
use dvrfs_core::{Error as CoreError, IoBuf, Op, Output};
use dvrfs_io::{FileDevice, LockMode};
use dvrfs_remote::{proto, wire, Client, Reach, Server, ServerConfig};
use dvrfs_runtime::{Options, Runtime, RuntimeError};

fn image(dir: &Path) -> PathBuf {
    let path = dir.join("v.img");
    let size = 256 << 20;
    FileDevice::create_image(&path, size).unwrap();
    let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).unwrap();
    mkfs(&mut dev, &MkfsParams::new(size, [7; 16], 3), &mut |_, _| {}).unwrap();
    path
}

/// A runtime on a new image, served on its socket.
fn served(dir: &Path) -> (PathBuf, Arc<Runtime>, Server) {
    let img = image(dir);
    let opts = Options {
        admission: Some(Admission::bandwidth(100e6, 0.1)),
        ..Options::default()
    };
    let rt = Arc::new(Runtime::open(&img, opts).unwrap());
    let cfg = ServerConfig {
        allow_other: false,
        volume: img.display().to_string(),
        gate: None,
    };
    let server = Server::start(rt.clone(), &img, cfg, |m| eprintln!("server: {m}")).unwrap();
    (img, rt, server)
}

fn client(img: &Path) -> Client {
    match dvrfs_remote::reach(img) {
        Reach::Daemon(c) => c,
        _ => panic!("no daemon found for {}", img.display()),
    }
}

/// A file with `len` bytes of a pattern, written through `c`.
fn file(c: &Client, path: &str, len: usize) -> u32 {
    let (parent, name) = c.resolve_parent(path).unwrap();
    let op = Op::Create {
        parent,
        name,
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let Output::Ino(ino) = c.run(op, None).unwrap() else {
        panic!("a create gives an inode")
    };
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let op = Op::Write {
        ino,
        offset: 0,
        data: IoBuf::from_slice(&data),
    };
    c.run(op, None).unwrap();
    ino
}

#[test]
fn a_client_touches_only_its_own_operations_and_streams() {
    let dir = tempfile::tempdir().unwrap();
    let (img, rt, server) = served(dir.path());
    let (a, b) = (client(&img), client(&img));
    let ino = file(&a, "/f", 1 << 20);
    // A's read, unknown to B.
    let t = a
        .start(
            Op::Read {
                ino,
                offset: 0,
                buf: IoBuf::zeroed(65536),
            },
            None,
        )
        .unwrap();
    assert!(matches!(
        b.check(t, true),
        Err(RuntimeError::UnknownTicket(_))
    ));
    assert!(matches!(b.cancel(t), Err(RuntimeError::UnknownTicket(_))));
    let done = a.check(t, true).unwrap().expect("done");
    let Output::Read { buf, bytes } = done.output else {
        panic!("a read gives bytes")
    };
    assert_eq!(bytes, 65536);
    assert_eq!(buf.bytes().unwrap()[7], 49, "the file's byte 7");
    // A result is given once, as the runtime gives it.
    assert!(matches!(
        a.check(t, false),
        Err(RuntimeError::UnknownTicket(_))
    ));
    // An empty poll could never end: refused.
    assert!(matches!(
        a.poll(&[], None),
        Err(RuntimeError::Engine(CoreError::InvalidArgument(_)))
    ));
    // A's playback; B can neither read it nor close it.
    let spec = StreamSpec {
        idle: false,
        dir: StreamDir::Read,
        rate_bps: 8e6,
        request_bytes: 512 << 10,
        buffer_bytes: None,
        reserve_bytes: 0,
        start_bytes: 0,
        durable_ns: None,
    };
    let info = a.open_stream(ino, spec).unwrap();
    let read = |c: &Client| {
        c.run(
            Op::StreamRead {
                stream: info.id,
                buf: IoBuf::zeroed(4096),
            },
            None,
        )
    };
    assert!(matches!(
        read(&b),
        Err(RuntimeError::Engine(CoreError::InvalidArgument(_)))
    ));
    assert!(b.stream(info.id).is_err());
    assert!(matches!(read(&a), Ok(Output::Read { bytes: 4096, .. })));
    assert!(a.stream(info.id).unwrap().is_some());
    // A goes away without closing it: the server closes it.
    drop(a);
    drop(b);
    let socket = server.path().to_path_buf();
    assert!(socket.exists());
    server.stop();
    assert!(!socket.exists(), "the socket outlived the server");
    assert!(
        rt.stream(info.id).unwrap().is_none(),
        "the vanished client's stream is still open"
    );
    Arc::try_unwrap(rt)
        .ok()
        .expect("the stopped server keeps no reference to the runtime")
        .close()
        .unwrap();
}

#[test]
fn a_client_of_another_protocol_version_is_told_so() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _rt, server) = served(dir.path());
    let path = server.path().to_path_buf();
    let mut s = UnixStream::connect(&path).unwrap();
    let mut hello = proto::hello();
    hello[8..12].copy_from_slice(&(proto::VERSION + 1).to_le_bytes());
    wire::write_frame(&mut s, &hello).unwrap();
    s.flush().unwrap();
    let reply = wire::read_frame(&mut s).unwrap().expect("an answer");
    let why = proto::read_hello_reply(&reply).unwrap_err();
    assert!(
        why.contains(&format!("protocol version {}", proto::VERSION))
            && why.contains(&img.display().to_string()),
        "{why}"
    );
    // Garbage instead of a hello: refused too, and the server goes on.
    let mut s = UnixStream::connect(&path).unwrap();
    wire::write_frame(&mut s, b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let reply = wire::read_frame(&mut s).unwrap().expect("an answer");
    assert!(proto::read_hello_reply(&reply).is_err());
    let c = client(&img);
    assert_eq!(c.resolve("/").unwrap(), c.resolve("/.").unwrap());
    // A request the daemon does not know (a newer client) is an error naming it.
    let mut s = UnixStream::connect(&path).unwrap();
    wire::write_frame(&mut s, &proto::hello()).unwrap();
    proto::read_hello_reply(&wire::read_frame(&mut s).unwrap().unwrap()).unwrap();
    let mut req = 5u64.to_le_bytes().to_vec();
    req.push(200);
    wire::write_frame(&mut s, &req).unwrap();
    let (id, r) = proto::decode_reply(wire::read_frame(&mut s).unwrap().unwrap()).unwrap();
    assert_eq!(id, 5);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("request kind 200 is unknown"), "{e}");
}
