//! The little-endian encoding the resident engine saves itself in (its snapshot, and the keyword
//! index within it): fixed-size numbers, lengths as `u64`, and strings as a length and UTF-8.
//! A reader knows how many bytes are left, so no length read from a damaged file can ask for
//! more than the file holds.

use std::io::{self, BufRead, BufReader, Read, Write};

/// Bytes being written, and how many so far.
pub(super) struct Out<W: Write>(pub(super) W, pub(super) u64);

/// Bytes being read, and how many are left.
pub(super) struct In<R>(pub(super) BufReader<R>, pub(super) u64);

pub(super) fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

impl<W: Write> Out<W> {
    pub(super) fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.1 += b.len() as u64;
        self.0.write_all(b)
    }
    pub(super) fn u64(&mut self, v: u64) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    pub(super) fn u32(&mut self, v: u32) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    pub(super) fn len(&mut self, n: usize) -> io::Result<()> {
        self.u64(n as u64)
    }
    pub(super) fn str(&mut self, s: &str) -> io::Result<()> {
        self.len(s.len())?;
        self.bytes(s.as_bytes())
    }
    pub(super) fn u32s(&mut self, v: &[u32]) -> io::Result<()> {
        self.len(v.len())?;
        v.iter().try_for_each(|x| self.u32(*x))
    }
}

impl<R: Read> In<R> {
    pub(super) fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.0.read_exact(&mut b)?;
        self.1 = self.1.saturating_sub(N as u64);
        Ok(b)
    }
    pub(super) fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub(super) fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    /// A length, refused past `max` (a damaged file must not ask for terabytes).
    pub(super) fn len(&mut self, max: usize) -> io::Result<usize> {
        let n = self.u64()? as usize;
        if n > max { Err(bad("a length past what the file can hold")) } else { Ok(n) }
    }
    /// A count of things that follow, each at least one byte: refused past the bytes left (room
    /// is reserved for them before they are read).
    pub(super) fn count(&mut self) -> io::Result<usize> {
        let n = self.u64()?;
        if n > self.1 { Err(bad("a count past what the file can hold")) } else { Ok(n as usize) }
    }
    /// The next `n` bytes, in a buffer of exactly that size.
    pub(super) fn raw(&mut self, n: usize) -> io::Result<Vec<u8>> {
        self.raw_with_room(n, n)
    }
    /// `n` bytes, in a buffer with room for `room`.
    pub(super) fn raw_with_room(&mut self, n: usize, room: usize) -> io::Result<Vec<u8>> {
        if n as u64 > self.1 {
            return Err(bad("the file ends early"));
        }
        // Zeroed by allocation (fresh pages, not written), then cut to `n`, the room kept.
        let mut b = vec![0u8; room.max(n)];
        b.truncate(n);
        self.0.read_exact(&mut b)?;
        self.1 -= n as u64;
        Ok(b)
    }
    pub(super) fn string(&mut self) -> io::Result<String> {
        let n = self.len(1 << 32)?;
        String::from_utf8(self.raw(n)?).map_err(|_| bad("text that is not UTF-8"))
    }
    /// `n` values of `N` bytes each, converted straight from the reader's buffer into the list
    /// they make: reading them whole first would touch twice the memory (at a million chunks
    /// most of an open's time was the kernel handing out fresh pages).
    pub(super) fn values<const N: usize, T>(
        &mut self,
        n: usize,
        of: impl Fn([u8; N]) -> T,
    ) -> io::Result<Vec<T>> {
        if (n as u64).saturating_mul(N as u64) > self.1 {
            return Err(bad("the file ends early"));
        }
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let buf = self.0.fill_buf()?;
            if buf.len() < N {
                // A value across the buffer's end (or the file's): read on its own.
                out.push(of(self.array()?));
                continue;
            }
            let take = (buf.len() / N).min(n - out.len()) * N;
            out.extend(buf[..take].chunks_exact(N).map(|b| of(b.try_into().expect("N bytes"))));
            self.0.consume(take);
            self.1 -= take as u64;
        }
        Ok(out)
    }
    pub(super) fn u32s(&mut self) -> io::Result<Vec<u32>> {
        let n = self.len(1 << 34)?;
        self.values(n, u32::from_le_bytes)
    }
}
