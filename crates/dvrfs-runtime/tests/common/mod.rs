//! Helpers shared by the runtime's integration tests.
#![allow(dead_code)]

use dvrfs_core::meta::Ino;
use dvrfs_core::{Op, Output};
use dvrfs_runtime::Runtime;

/// Creates `/name` and returns its inode.
pub fn create(rt: &Runtime, name: &str) -> Ino {
    let root = rt.query(|v| v.resolve("/")).unwrap().unwrap();
    let op = Op::Create {
        parent: root,
        name: name.as_bytes().to_vec(),
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    match rt.run(op, None, 0).unwrap() {
        Output::Ino(i) => i,
        o => panic!("{o:?}"),
    }
}
