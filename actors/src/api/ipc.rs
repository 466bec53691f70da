//! The owner's local API: framed JSON over a Unix domain socket.
//!
//! A frame is a 4-byte big-endian length and that many bytes of JSON. A connection starts with
//! `hello` (the client's protocol and scoring versions; a mismatch is an error naming both), then
//! carries requests one at a time, each answered by one [`Reply`]; `subscribe` turns the
//! connection into a stream of events. Frames are bounded ([`MAX_REQUEST`] from clients,
//! [`MAX_REPLY`] from the owner); a frame over its bound is refused before it is read.

use crate::core::status::SourceStatus;
use cairn_query::Role;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bumped when a request or reply changes shape (2: `status` answers the owner's whole status,
/// `reconcile`; 3: the `not_writer` error code).
pub const PROTOCOL_VERSION: u32 = 3;
/// Largest request frame the owner reads (a query is at most 4 KB).
pub const MAX_REQUEST: usize = 1 << 20;
/// Largest reply frame a client reads (a page's body can be 10 MB).
pub const MAX_REPLY: usize = 64 << 20;

/// What the client is (reported in the owner's status).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hello {
    pub protocol: u32,
    pub scoring_version: String,
    pub pid: u32,
    /// `search`, `mcp`, `watch`, `index`, `embedded`, …
    pub purpose: String,
}

impl Hello {
    pub fn new(purpose: &str) -> Self {
        Self {
            protocol: PROTOCOL_VERSION,
            scoring_version: cairn_query::layers::SCORING_VERSION.to_string(),
            pid: std::process::id(),
            purpose: purpose.into(),
        }
    }
}

pub use crate::api::Request;

pub use crate::core::error::{ErrorCode, RemoteError};

/// The answer to one request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Ok(serde_json::Value),
    Error(RemoteError),
}

/// A framing failure.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the connection closed")]
    Closed,
    #[error("a frame of {0} bytes is over the {1}-byte limit")]
    TooLarge(usize, usize),
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Read one frame of at most `max` bytes.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > max {
        return Err(FrameError::TooLarge(n, max));
    }
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FrameError::Closed,
        _ => e.into(),
    })?;
    Ok(buf)
}

/// Write one value as a frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    value: &T,
) -> Result<(), FrameError> {
    let body = serde_json::to_vec(value)?;
    let len = u32::try_from(body.len()).map_err(|_| FrameError::TooLarge(body.len(), u32::MAX as usize))?;
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame).await?;
    w.flush().await?;
    Ok(())
}

/// Who owns a database, as its lock file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerInfo {
    pub pid: u32,
    pub purpose: String,
    pub started_unix_ms: u64,
    pub socket: String,
    pub version: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversize_ones_are_refused_unread() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, &Request::Status(crate::api::Status {})).await.unwrap();
        let got: Request = serde_json::from_slice(&read_frame(&mut b, MAX_REQUEST).await.unwrap()).unwrap();
        assert_eq!(got.verb(), "status");
        a.write_all(&(200u32 << 20).to_be_bytes()).await.unwrap();
        assert!(matches!(read_frame(&mut b, MAX_REQUEST).await, Err(FrameError::TooLarge(_, MAX_REQUEST))));
        drop(a);
        assert!(matches!(read_frame(&mut b, MAX_REQUEST).await, Err(FrameError::Closed)));
        let unknown: Result<Request, _> = serde_json::from_str(r#"{"verb":"format_disk"}"#);
        assert!(unknown.is_err());
    }
}

/// What a process is and what its database holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// This process.
    pub pid: u32,
    pub role: Role,
    /// The process that holds the database's lock on this machine (absent when this process
    /// reads the tables itself).
    pub owner: Option<OwnerInfo>,
    /// Who writes the database: that process here, or on an object store the holder of its
    /// writer lease, on whichever machine (absent: nobody writes it now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<cairn_query::Writer>,
    /// The memory of the process that holds the indexes (the owner, or this reader).
    #[serde(default)]
    pub memory: crate::core::status::Memory,
    /// The owner's clients.
    pub clients: Vec<Hello>,
    pub sources: Vec<SourceStatus>,
    /// On an object store: the readers on any machine heard from lately, and how far each has
    /// come ([`crate::replication::readers`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readers: Vec<crate::replication::readers::ReaderSeen>,
}

/// Who writes and owns the database, its clients, then each source.
impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(w) = &self.writer {
            writeln!(f, "writer: {w} since {}", crate::core::event::utc(w.since_unix_ms))?;
        }
        match (&self.role, &self.owner) {
            (Role::Reader, _) => writeln!(
                f,
                "no cairn process owns this database (this one, pid {}, read its tables)",
                self.pid
            )?,
            (_, Some(o)) => writeln!(
                f,
                "owner: pid {} (cairn {}){}; {} client(s)",
                o.pid,
                o.purpose,
                if self.role == Role::Owner { ", this process" } else { "" },
                self.clients.len()
            )?,
            (_, None) => {}
        }
        for c in &self.clients {
            writeln!(f, "  client: pid {} (cairn {})", c.pid, c.purpose)?;
        }
        for r in &self.readers {
            writeln!(f, "reader: {r}")?;
        }
        self.sources.iter().try_for_each(|s| write!(f, "{s}"))
    }
}
