//! `dvrfs record --chunk`: a recording as a stream directory of chunks named by
//! their UTC start, each cut at the first keyframe after the chunk's length and
//! starting with the PAT and PMT (or the fMP4 init segment), so that ffmpeg decodes
//! every chunk on its own without an error; the chunks hold every byte of the input,
//! once, in order (apart from the heads), each with its frame index from its own
//! first byte; a stream that is not media is one chunk. Prints SKIP where ffmpeg is
//! missing (the test command installs it).

mod common;

use common::{
    assert_clean, av_recording as recording, decode_errors, dvrfs, ffmpeg_here, json,
    key_positions, mkfs, ok, probe, tempdir,
};
use std::path::{Path, PathBuf};

/// Records `input` into `/cam` with `--chunk chunk`; every chunk of `/cam` (this
/// recording made `made`, the report says) fetched into `out`: (name, local copy)
/// in name order.
fn record_chunks(
    img: &Path,
    input: &Path,
    chunk: &str,
    out: &Path,
    made: u64,
) -> Vec<(String, PathBuf)> {
    let r = json(&ok(dvrfs([
        "record",
        img.to_str().unwrap(),
        "/cam",
        "--chunk",
        chunk,
        "--input",
        input.to_str().unwrap(),
        "--rate",
        "40M",
        "--json",
    ])));
    assert_eq!(r["chunks"].as_u64(), Some(made), "{r}");
    let ls = ok(dvrfs(["ls", img.to_str().unwrap(), "/cam"]));
    let mut names: Vec<String> = ls
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|n| n.ends_with('Z') || n.contains("Z."))
        .map(str::to_string)
        .collect();
    names.sort();
    std::fs::create_dir_all(out).unwrap();
    names
        .into_iter()
        .map(|n| {
            let local = out.join(&n);
            ok(dvrfs([
                "get",
                img.to_str().unwrap(),
                &format!("/cam/{n}"),
                local.to_str().unwrap(),
            ]));
            (n, local)
        })
        .collect()
}

/// Each chunk after the first starts with `head_len(chunk)` bytes of head; the
/// rest of all chunks, in order, is the input.
fn assert_bodies_are_the_input(
    chunks: &[(String, PathBuf)],
    input: &Path,
    head_len: impl Fn(&[u8]) -> usize,
) {
    let mut bodies = vec![];
    for (k, (_, p)) in chunks.iter().enumerate() {
        let b = std::fs::read(p).unwrap();
        let skip = if k == 0 { 0 } else { head_len(&b) };
        bodies.extend_from_slice(&b[skip..]);
    }
    assert!(
        bodies == std::fs::read(input).unwrap(),
        "the chunks' bytes are not the input's"
    );
}

#[test]
fn a_transport_stream_is_cut_into_chunks_that_each_decode_on_their_own() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    let ts = recording(d.path(), "cam.ts", 30, &[]);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    // Cut at the keyframes at 10 s and 20 s.
    let chunks = record_chunks(&img, &ts, "10s", &d.path().join("got"), 3);
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    let mut total = 0.0;
    for (i, (name, p)) in chunks.iter().enumerate() {
        assert!(
            name.ends_with("Z.ts") && name.len() == "20261128T140312.250Z.ts".len(),
            "{name}"
        );
        let (dur, first_key) = probe(p);
        assert!(first_key, "{name} does not start at a keyframe");
        let errors = decode_errors(p);
        assert!(errors.is_empty(), "{name}: {errors}");
        total += dur;
        // Indexed from its own first byte: the first keyframe is after the head.
        let k = json(&ok(dvrfs([
            "keyframes",
            img.to_str().unwrap(),
            &format!("/cam/{name}"),
            "--json",
        ])));
        assert_eq!(k["complete"], true, "{name}: {k}");
        let kf = k["keyframes"].as_array().unwrap();
        assert_eq!(kf.len(), 5, "{name}: a keyframe every 2 s of 10 s");
        // As ffprobe finds it: after the input's own tables in the first chunk,
        // after the PAT and PMT put before it in the others.
        let first = kf[0]["offset"].as_u64().unwrap();
        assert_eq!(first, key_positions(p)[0], "{name}");
        if i > 0 {
            assert_eq!(first, 2 * 188, "{name}");
        }
    }
    // ffprobe's durations overlap by the audio muxed ahead of each cut's video (a
    // few hundred ms per chunk).
    assert!((total - 30.0).abs() < 1.0, "the chunks last {total} s");
    // Heads: a PAT and a PMT packet.
    assert_bodies_are_the_input(&chunks, &ts, |_| 2 * 188);
    assert_clean(&img);
}

#[test]
fn fragmented_mp4_chunks_start_with_the_init_segment() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    let mp4 = recording(d.path(), "cam.mp4", 20, &[]);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    // Cut at the keyframes at 8 s and 16 s.
    let chunks = record_chunks(&img, &mp4, "8s", &d.path().join("got"), 3);
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    let input = std::fs::read(&mp4).unwrap();
    // The init segment: ftyp and moov, as the input starts.
    let box_len = |b: &[u8], at: usize| {
        b[at..at + 4]
            .iter()
            .fold(0usize, |n, &x| n << 8 | usize::from(x))
    };
    let init = box_len(&input, 0) + box_len(&input, box_len(&input, 0));
    for (name, p) in &chunks {
        assert!(name.ends_with("Z.mp4"), "{name}");
        let b = std::fs::read(p).unwrap();
        assert!(
            b[..init] == input[..init],
            "{name} does not start with the init segment"
        );
        assert_eq!(
            &b[init + 4..init + 8],
            b"moof",
            "{name}: a fragment follows the init segment"
        );
        let (_, first_key) = probe(p);
        assert!(first_key, "{name} does not start at a keyframe");
        let errors = decode_errors(p);
        assert!(errors.is_empty(), "{name}: {errors}");
    }
    assert_bodies_are_the_input(&chunks, &mp4, |_| init);
    assert_clean(&img);
}

#[test]
fn a_stream_that_is_not_media_is_one_chunk_and_a_file_path_is_refused() {
    let d = tempdir();
    let input = d.path().join("notes.txt");
    std::fs::write(&input, b"not a video at all\n".repeat(50_000)).unwrap();
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let chunks = record_chunks(&img, &input, "64K", &d.path().join("got"), 1);
    assert_eq!(chunks.len(), 1);
    assert!(chunks[0].0.ends_with("Z.txt"), "{chunks:?}");
    assert!(std::fs::read(&chunks[0].1).unwrap() == std::fs::read(&input).unwrap());
    // A second recording into the same directory adds its own chunk.
    let again = record_chunks(&img, &input, "64K", &d.path().join("again"), 1);
    assert_eq!(again.len(), 2);
    // A file where the directory should be.
    let o = dvrfs([
        "record",
        img.to_str().unwrap(),
        &format!("/cam/{}", chunks[0].0),
        "--chunk",
        "10s",
        "--input",
        input.to_str().unwrap(),
        "--rate",
        "40M",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is not a directory"), "{err}");
    let o = dvrfs([
        "record",
        img.to_str().unwrap(),
        "/x",
        "--chunk",
        "ten",
        "--input",
        input.to_str().unwrap(),
        "--rate",
        "40M",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("invalid --chunk"),
        "{err}"
    );
    assert_clean(&img);
}
