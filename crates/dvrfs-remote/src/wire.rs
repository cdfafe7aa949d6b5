//! The byte level of the daemon's socket: frames and the primitive values in them.
//! Only this module knows offsets and endianness (little-endian always); `proto`
//! builds the requests and replies out of these primitives.
//!
//! A frame is a `u32` length followed by that many bytes. A frame longer than
//! [`MAX_FRAME_BYTES`] is refused before anything is allocated for it, so a peer that
//! sends garbage costs a clear error, not memory. Decoding never panics: every read
//! checks what is left and says what was cut short.

use std::io::{self, Read, Write};

/// The largest frame either side accepts: one asynchronous request of the C API's
/// largest size (1 GiB) and its header.
pub const MAX_FRAME_BYTES: usize = (1 << 30) + 4096;

/// Writes `body` as one frame (the caller holds whatever lock keeps frames whole).
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    write_frame_parts(w, body, &[])
}

/// Writes `head` and then `tail` as one frame: a read's bytes go out from the
/// engine's buffer as they are, behind the reply's header, without a copy.
pub fn write_frame_parts(w: &mut impl Write, head: &[u8], tail: &[u8]) -> io::Result<()> {
    let total = head.len() + tail.len();
    assert!(total <= MAX_FRAME_BYTES, "frame of {total} bytes");
    let len = u32::try_from(total).expect("MAX_FRAME_BYTES fits a u32");
    w.write_all(&len.to_le_bytes())?;
    w.write_all(head)?;
    w.write_all(tail)?;
    w.flush()
}

/// Reads one frame; `Ok(None)` when the peer closed the connection between frames.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes, more than the {MAX_FRAME_BYTES} allowed"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

/// Builds a frame's body.
#[derive(Default)]
pub struct Enc {
    pub buf: Vec<u8>,
}

impl Enc {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(v as u8)
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.u64(v.to_bits())
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.buf.extend_from_slice(v);
        self
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    pub fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(x) => self.u8(1).u64(x),
            None => self.u8(0),
        }
    }
}

/// Reads a frame's body, front to back.
pub struct Dec<'a> {
    whole: &'a [u8],
    rest: &'a [u8],
}

/// A body that does not decode: what was expected and is missing or wrong.
#[derive(Debug)]
pub struct Malformed(pub String);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed message: {}", self.0)
    }
}

pub type DecResult<T> = Result<T, Malformed>;

impl<'a> Dec<'a> {
    pub fn new(body: &'a [u8]) -> Dec<'a> {
        Dec {
            whole: body,
            rest: body,
        }
    }

    /// How many bytes of the body were read so far.
    pub fn pos(&self) -> usize {
        self.whole.len() - self.rest.len()
    }

    fn take(&mut self, n: usize, what: &str) -> DecResult<&'a [u8]> {
        if self.rest.len() < n {
            return Err(Malformed(format!(
                "{what}: {n} bytes wanted, {} left",
                self.rest.len()
            )));
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> DecResult<u8> {
        Ok(self.take(1, what)?[0])
    }
    pub fn bool(&mut self, what: &str) -> DecResult<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(Malformed(format!("{what}: {v} is not a boolean"))),
        }
    }
    pub fn u32(&mut self, what: &str) -> DecResult<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    pub fn u64(&mut self, what: &str) -> DecResult<u64> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    pub fn i64(&mut self, what: &str) -> DecResult<i64> {
        let b = self.take(8, what)?;
        Ok(i64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    pub fn f64(&mut self, what: &str) -> DecResult<f64> {
        Ok(f64::from_bits(self.u64(what)?))
    }
    pub fn bytes(&mut self, what: &str) -> DecResult<&'a [u8]> {
        let n = self.u64(what)?;
        let n = usize::try_from(n).map_err(|_| Malformed(format!("{what}: length {n}")))?;
        self.take(n, what)
    }
    pub fn string(&mut self, what: &str) -> DecResult<String> {
        let b = self.bytes(what)?;
        String::from_utf8(b.to_vec()).map_err(|_| Malformed(format!("{what}: not UTF-8")))
    }
    pub fn opt_u64(&mut self, what: &str) -> DecResult<Option<u64>> {
        Ok(match self.bool(what)? {
            true => Some(self.u64(what)?),
            false => None,
        })
    }
    /// A count of items that follow, each at least `min_item_bytes` long: a count the
    /// rest of the body cannot hold is refused before anything is allocated for it.
    pub fn count(&mut self, what: &str, min_item_bytes: usize) -> DecResult<usize> {
        let n = self.u64(what)?;
        let fits = (self.rest.len() / min_item_bytes.max(1)) as u64;
        if n > fits {
            return Err(Malformed(format!(
                "{what}: {n} items cannot fit in {} bytes",
                self.rest.len()
            )));
        }
        Ok(n as usize)
    }
    /// The body must be used up: trailing bytes mean the two sides disagree.
    pub fn end(&self, what: &str) -> DecResult<()> {
        match self.rest.len() {
            0 => Ok(()),
            n => Err(Malformed(format!("{what}: {n} bytes too many"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_round_trip_and_short_bodies_are_refused() {
        let mut e = Enc::default();
        e.u8(7)
            .bool(true)
            .u32(0xdead_beef)
            .u64(u64::MAX)
            .i64(-5)
            .f64(19.39e6)
            .str("/cam/a.ts")
            .opt_u64(None)
            .opt_u64(Some(3));
        let mut d = Dec::new(&e.buf);
        assert_eq!(d.u8("a").unwrap(), 7);
        assert!(d.bool("b").unwrap());
        assert_eq!(d.u32("c").unwrap(), 0xdead_beef);
        assert_eq!(d.u64("d").unwrap(), u64::MAX);
        assert_eq!(d.i64("e").unwrap(), -5);
        assert_eq!(d.f64("f").unwrap(), 19.39e6);
        assert_eq!(d.string("g").unwrap(), "/cam/a.ts");
        assert_eq!(d.opt_u64("h").unwrap(), None);
        assert_eq!(d.opt_u64("i").unwrap(), Some(3));
        d.end("all").unwrap();
        // Every prefix of the body fails to decode in full, with no panic.
        for cut in 0..e.buf.len() {
            let mut d = Dec::new(&e.buf[..cut]);
            let whole = (|| -> DecResult<()> {
                d.u8("a")?;
                d.bool("b")?;
                d.u32("c")?;
                d.u64("d")?;
                d.i64("e")?;
                d.f64("f")?;
                d.string("g")?;
                d.opt_u64("h")?;
                d.opt_u64("i")?;
                Ok(())
            })();
            assert!(whole.is_err(), "a body cut at {cut} decoded");
        }
    }

    #[test]
    fn a_count_the_body_cannot_hold_is_refused() {
        let mut e = Enc::default();
        e.u64(1 << 40);
        assert!(Dec::new(&e.buf).count("entries", 8).is_err());
    }

    #[test]
    fn frames_round_trip_and_an_oversized_length_is_refused() {
        let mut out = vec![];
        write_frame(&mut out, b"hello").unwrap();
        write_frame(&mut out, b"").unwrap();
        let mut r = &out[..];
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"hello");
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"");
        assert!(read_frame(&mut r).unwrap().is_none());
        let big = (MAX_FRAME_BYTES as u32 + 1).to_le_bytes();
        assert!(read_frame(&mut &big[..]).is_err());
    }
}
