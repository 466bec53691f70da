//! One term's postings, packed: per posting, the change in document from the posting before it
//! (zigzag, as a varint) and the term's count in the document (a varint). Documents are slots,
//! appended mostly in rising order (a load fills them in order; a freed slot reused later is a
//! step back, which the zigzag keeps small too), so a posting takes ~2–3 bytes where a `u32`
//! document and a `u16` count took 6: the keyword index was ~450 MiB at a million chunks, the
//! largest part of a source's memory after its vectors. Scoring reads each list once, in order.

/// A term's postings (see the module's comment).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Postings {
    bytes: Vec<u8>,
    /// The last posting's document (the next step is from it).
    last: u32,
    len: u32,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at `bytes[*at..]`, moving `at` past it; `None` if the bytes end first or it is
/// longer than a `u64` can be.
fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

impl Postings {
    /// Add document `doc` holding the term `tf` times.
    pub fn push(&mut self, doc: u32, tf: u32) {
        let step = i64::from(doc) - i64::from(self.last);
        put_varint(&mut self.bytes, ((step << 1) ^ (step >> 63)) as u64);
        put_varint(&mut self.bytes, u64::from(tf));
        self.last = doc;
        self.len += 1;
    }

    /// (document, count) of every posting, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let (mut at, mut doc) = (0usize, 0i64);
        std::iter::from_fn(move || {
            let step = varint(&self.bytes, &mut at)?;
            let tf = varint(&self.bytes, &mut at)?;
            doc += ((step >> 1) as i64) ^ -((step & 1) as i64);
            Some((doc as u32, tf as u32))
        })
    }

    /// How many documents the list holds.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether no document holds the term.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keep only the postings `keep` says yes to (by document), in their order.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let mut kept = Postings { bytes: Vec::with_capacity(self.bytes.len()), ..Postings::default() };
        for (doc, tf) in self.iter().filter(|(d, _)| keep(*d)) {
            kept.push(doc, tf);
        }
        kept.bytes.shrink_to_fit();
        *self = kept;
    }

    pub fn shrink(&mut self) {
        self.bytes.shrink_to_fit();
    }

    /// Bytes held by the list (not counting this struct).
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// The packed form, for a snapshot: (bytes, last document, count).
    pub fn raw(&self) -> (&[u8], u32, u32) {
        (&self.bytes, self.last, self.len)
    }

    /// Back from [`Postings::raw`]'s parts, if they agree (every posting whole, `len` of them,
    /// the last one `last`, every document below `docs`).
    pub fn from_raw(bytes: Vec<u8>, last: u32, len: u32, docs: usize) -> Option<Self> {
        let p = Postings { bytes, last, len };
        let mut at = 0;
        let (mut n, mut doc) = (0u32, 0i64);
        while at < p.bytes.len() {
            let step = varint(&p.bytes, &mut at)?;
            varint(&p.bytes, &mut at)?;
            doc += ((step >> 1) as i64) ^ -((step & 1) as i64);
            if doc < 0 || doc as usize >= docs {
                return None;
            }
            n += 1;
        }
        (n == len && (len == 0 || doc == i64::from(last))).then_some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postings_read_back_in_order_through_steps_back_and_large_counts() {
        let added = [(0, 1), (5, 2), (6, 300), (2, 1), (4_000_000_000, 70_000), (7, 1)];
        let mut p = Postings::default();
        added.iter().for_each(|(d, tf)| p.push(*d, *tf));
        assert_eq!(p.iter().collect::<Vec<_>>(), added);
        assert_eq!(p.len(), 6);
        let mut rising = Postings::default();
        (0..1000).for_each(|d| rising.push(d, 1));
        assert_eq!(rising.raw().0.len(), 2000, "two bytes a posting in slot order");
        p.retain(|d| d % 2 == 0);
        assert_eq!(p.iter().collect::<Vec<_>>(), [(0, 1), (6, 300), (2, 1), (4_000_000_000, 70_000)]);
        p.push(9, 4);
        assert_eq!(p.iter().last(), Some((9, 4)), "appending goes on from the last kept");
    }

    #[test]
    fn packed_postings_are_checked_on_the_way_back() {
        let mut p = Postings::default();
        [(3, 1), (1, 2), (8, 1)].iter().for_each(|(d, tf)| p.push(*d, *tf));
        let (bytes, last, len) = p.raw();
        assert_eq!(Postings::from_raw(bytes.to_vec(), last, len, 9), Some(p.clone()));
        assert_eq!(Postings::from_raw(bytes.to_vec(), last, len, 8), None, "a document past the end");
        assert_eq!(Postings::from_raw(bytes.to_vec(), last, len + 1, 9), None, "a count that disagrees");
        assert_eq!(Postings::from_raw(bytes[..bytes.len() - 1].to_vec(), last, len, 9), None, "cut short");
        assert_eq!(Postings::from_raw(vec![0xff; 11], 0, 1, 9), None, "a varint too long");
    }
}
