//! Generates `dvrfs.h` (cbindgen, from the declarations in `src/`) and a
//! pkg-config file `dvrfs.pc`, next to the libraries: `target/<profile>/include/dvrfs.h`
//! and `target/<profile>/dvrfs.pc`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    // OUT_DIR is target/<profile>/build/dvrfs-capi-<hash>/out.
    let profile_dir = out
        .ancestors()
        .nth(3)
        .expect("OUT_DIR lies three levels below the profile directory")
        .to_path_buf();
    let include = profile_dir.join("include");
    std::fs::create_dir_all(&include).expect("create the include directory");
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("the C API's declarations generate a header")
        .write_to_file(include.join("dvrfs.h"));
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets it");
    let pc = format!(
        "prefix={}\nlibdir=${{prefix}}\nincludedir=${{prefix}}/include\n\n\
         Name: dvrfs\n\
         Description: dvrfs, a real-time file system for recording and playback: deadline-aware asynchronous I/O and stream reservations\n\
         Version: {version}\n\
         Libs: -L${{libdir}} -ldvrfs\n\
         Libs.private: -lpthread -ldl -lm\n\
         Cflags: -I${{includedir}}\n",
        profile_dir.display()
    );
    std::fs::write(profile_dir.join("dvrfs.pc"), pc).expect("write dvrfs.pc");
}
