//! The owner's socket: serves [`crate::api::ipc`] requests from the other cairn processes on the same
//! database, with the owner's pipeline.
//!
//! Bounds, so that one slow or broken client never stalls the others: at most
//! [`MAX_CONNECTIONS`] at once (the next is told `busy` and closed); `hello` within
//! [`HELLO_WITHIN`] and each later request within [`IDLE`] of the last, else the connection is
//! closed; request frames of at most [`crate::api::ipc::MAX_REQUEST`] (a larger one is refused unread
//! and the connection closed); every request within its time limit; every reply written within
//! [`WRITE_WITHIN`] (a client that stops reading is dropped). Each connection is a task of its
//! own. A client that goes while its request runs takes the request with it: the work is
//! dropped (a long job such as `duplicates` stops at its next check), never finished for nobody.

use crate::api::Answerer;
use crate::api::ipc::{
    ErrorCode, FrameError, Hello, MAX_REQUEST, OwnerInfo, PROTOCOL_VERSION, RemoteError, Reply, Request,
    read_frame, write_frame,
};
use crate::api::owner::Clients;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

pub const MAX_CONNECTIONS: usize = 64;
pub const HELLO_WITHIN: Duration = Duration::from_secs(5);
pub const IDLE: Duration = Duration::from_secs(60);
pub const WRITE_WITHIN: Duration = Duration::from_secs(10);

/// Everything a connection needs.
#[derive(Clone)]
struct Ctx {
    answerer: Served,
    info: OwnerInfo,
    clients: Clients,
    slots: Arc<Semaphore>,
}

/// What the socket answers with now: the writer's pipeline, or a reader's following (a
/// takeover or a lost lease swaps one for the other while the socket stays).
pub type Served = Arc<std::sync::RwLock<Answerer>>;

impl Ctx {
    fn answerer(&self) -> Answerer {
        self.answerer.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A running server; [`Server::stop`] stops accepting and removes the socket it bound.
#[derive(Debug)]
pub struct Server {
    path: PathBuf,
    /// The inode of the socket this server bound: a successor's socket at the same path is
    /// never removed.
    inode: u64,
    task: tokio::task::JoinHandle<()>,
}

/// The user this process runs as (the owner of `/proc/self`).
pub fn own_uid() -> u32 {
    static UID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UID.get_or_init(|| std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX))
}

/// Whether the process at the other end of `stream` runs as this user; else who it is.
pub fn same_user(stream: &UnixStream) -> Result<(), String> {
    match stream.peer_cred() {
        Ok(c) if c.uid() == own_uid() => Ok(()),
        Ok(c) => Err(format!("uid {}", c.uid())),
        Err(e) => Err(format!("an unknown user ({e})")),
    }
}

/// Refuse a socket folder another user could have made or can enter: whoever controls it can
/// listen in the owner's place.
pub fn check_private(dir: &Path) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(dir)?;
    let why = if !m.is_dir() {
        Some("is not a folder".to_string())
    } else if m.uid() != own_uid() {
        Some(format!("belongs to another user (uid {})", m.uid()))
    } else if m.mode() & 0o077 != 0 {
        Some(format!("can be entered by other users (mode {:o})", m.mode() & 0o777))
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "the socket folder {} {why}, so a process there could pose as cairn's owner; \
                 remove it (or set XDG_RUNTIME_DIR to a private folder) and try again",
                dir.display()
            ),
        )),
    }
}

/// Bind the socket at `path`: its folder made private to this user (0700) and refused if someone
/// else owns it, a socket left by a dead owner replaced (the caller holds the lock, so any socket
/// there is stale), the socket 0600.
pub fn bind(path: &Path) -> std::io::Result<(UnixListener, u64)> {
    let dir = path.parent().ok_or_else(|| std::io::Error::other("a socket path needs a folder"))?;
    std::fs::create_dir_all(dir)?;
    if std::fs::symlink_metadata(dir)?.uid() == own_uid() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    check_private(dir)?;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let inode = std::fs::symlink_metadata(path)?.ino();
    Ok((listener, inode))
}

impl Server {
    /// Serve `answerer` on `listener` (from [`bind`]) on the current tokio runtime, as the
    /// process `info` describes; the connections say who they are in `clients`.
    pub fn start(
        (listener, inode): (UnixListener, u64),
        path: PathBuf,
        answerer: Served,
        info: OwnerInfo,
        clients: Clients,
    ) -> Self {
        let ctx = Ctx { answerer, info, clients, slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)) };
        let task = tokio::spawn(async move {
            let mut next = 0u64;
            loop {
                let stream = match listener.accept().await {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!("socket: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                next += 1;
                tokio::spawn(connection(ctx.clone(), stream, next));
            }
        });
        Self { path, inode, task }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop accepting and remove the socket if it is still the one bound here (a successor may
    /// have bound its own at the path since); connections in progress finish or fail.
    pub fn stop(&self) {
        self.task.abort();
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn send(stream: &mut UnixStream, reply: &Reply) -> Result<(), FrameError> {
    match tokio::time::timeout(WRITE_WITHIN, write_frame(stream, reply)).await {
        Ok(r) => r,
        Err(_) => Err(FrameError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client stopped reading",
        ))),
    }
}

fn error(code: ErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error(RemoteError::new(code, message))
}

/// Whether a connection may be served: by this user, within the connection limit (the slot it
/// holds while open). A refusal is said to the client.
async fn admit(ctx: &Ctx, stream: &mut UnixStream) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Err(who) = same_user(stream) {
        tracing::warn!("socket: refused a connection from another user: {who}");
        let _ = send(stream, &error(ErrorCode::BadRequest, "this owner serves its own user only")).await;
        return None;
    }
    let slot = ctx.slots.clone().try_acquire_owned().ok();
    if slot.is_none() {
        let busy = format!("the owner serves {MAX_CONNECTIONS} connections already; try again");
        let _ = send(stream, &error(ErrorCode::Busy, busy)).await;
    }
    slot
}

/// What came next on a connection.
enum Next {
    Request(Box<Request>),
    /// A whole frame that is not a request (said to the client): the connection may go on.
    NotARequest,
    /// The client closed, went quiet for `wait`, or broke the framing (said to it).
    Done,
}

/// The next request on a connection, read after the bytes `early` (sent while the last request
/// ran), waiting at most `wait` for it; what is read past it goes back in `early`.
async fn next_request(stream: &mut UnixStream, early: &mut Vec<u8>, wait: std::time::Duration) -> Next {
    let mut sent = std::io::Cursor::new(std::mem::take(early));
    let mut from = tokio::io::AsyncReadExt::chain(&mut sent, &mut *stream);
    let read = tokio::time::timeout(wait, read_frame(&mut from, MAX_REQUEST)).await;
    *early = sent.get_ref()[sent.position() as usize..].to_vec();
    let frame = match read {
        Err(_) | Ok(Err(FrameError::Closed)) => return Next::Done,
        Ok(Err(FrameError::TooLarge(n, max))) => {
            let over = format!("a request of {n} bytes is over the {max}-byte limit");
            let _ = send(stream, &error(ErrorCode::BadRequest, over)).await;
            return Next::Done;
        }
        Ok(Err(e)) => {
            let _ = send(stream, &error(ErrorCode::BadRequest, e.to_string())).await;
            return Next::Done;
        }
        Ok(Ok(f)) => f,
    };
    match serde_json::from_slice(&frame) {
        Ok(r) => Next::Request(Box::new(r)),
        Err(e) => {
            let _ = send(stream, &error(ErrorCode::BadRequest, format!("not a request: {e}"))).await;
            Next::NotARequest
        }
    }
}

async fn connection(ctx: Ctx, mut stream: UnixStream, id: u64) {
    let Some(_slot) = admit(&ctx, &mut stream).await else { return };
    let mut hello: Option<Hello> = None;
    // Bytes the client sent while its last request ran (its next request, early).
    let mut early: Vec<u8> = Vec::new();
    loop {
        let wait = if hello.is_none() { HELLO_WITHIN } else { IDLE };
        let request = match next_request(&mut stream, &mut early, wait).await {
            Next::Request(r) => *r,
            // The frame boundary held, so the connection can go on (once it has said hello).
            Next::NotARequest if hello.is_some() => continue,
            Next::NotARequest | Next::Done => break,
        };
        let reply = match (&hello, request) {
            (None, Request::Hello(h)) => {
                let reply = check_hello(&h)
                    .unwrap_or_else(|| Reply::Ok(serde_json::to_value(&ctx.info).unwrap_or_default()));
                let ok = matches!(reply, Reply::Ok(_));
                if ok {
                    ctx.clients.lock().unwrap_or_else(|p| p.into_inner()).insert(id, h.clone());
                    hello = Some(h);
                }
                if send(&mut stream, &reply).await.is_err() || !ok {
                    break;
                }
                continue;
            }
            (None, other) => error(ErrorCode::BadRequest, format!("`{}` before `hello`", other.verb())),
            (Some(_), Request::Subscribe) => {
                subscribe(&ctx, &mut stream).await;
                break;
            }
            (Some(_), request) => match answer(&ctx, &stream, &mut early, request).await {
                Some(reply) => reply,
                None => break,
            },
        };
        if send(&mut stream, &reply).await.is_err() {
            break;
        }
    }
    ctx.clients.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
}

/// A request answered within its time limit; `None` when the client went while it ran (its
/// work is dropped).
async fn answer(ctx: &Ctx, stream: &UnixStream, early: &mut Vec<u8>, request: Request) -> Option<Reply> {
    let limit = request.time_limit();
    let verb = request.verb();
    cairn_index::fault::point("server.request");
    let answerer = ctx.answerer();
    let answer = tokio::time::timeout(limit, crate::api::dispatch(&answerer, request));
    let answer = tokio::select! {
        a = answer => a,
        () = gone(stream, early) => {
            tracing::info!("socket: a client went while `{verb}` ran; its work is dropped");
            return None;
        }
    };
    Some(match answer {
        Ok(Ok(v)) => Reply::Ok(v),
        Ok(Err(e)) => failed(e),
        Err(_) => error(ErrorCode::Timeout, format!("`{verb}` took longer than {} s", limit.as_secs())),
    })
}

/// Until the client has gone (its end closed, or a request frame's worth of bytes sent before
/// its last reply); what it sends meanwhile is kept in `early` for the next read.
async fn gone(stream: &UnixStream, early: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        match stream.try_read(&mut buf) {
            Ok(0) => return,
            Ok(n) if early.len() + n > MAX_REQUEST + 4 => return,
            Ok(n) => early.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

fn check_hello(h: &Hello) -> Option<Reply> {
    let scoring = cairn_query::layers::SCORING_VERSION;
    (h.protocol != PROTOCOL_VERSION || h.scoring_version != scoring).then(|| {
        error(
            ErrorCode::VersionMismatch,
            format!(
                "this database's owner speaks protocol {PROTOCOL_VERSION} with scoring {scoring}; the client (pid {}) \
                 speaks protocol {} with scoring {}: run the same cairn build, or stop the owner",
                h.pid, h.protocol, h.scoring_version
            ),
        )
    })
}

/// The error of a pipeline call, classified.
fn failed(e: crate::Error) -> Reply {
    Reply::Error(as_remote(e))
}

/// A failure as the socket (and `cairn serve`) says it: its code and message.
pub fn as_remote(e: crate::Error) -> RemoteError {
    use crate::Error as E;
    match e {
        E::Query(q) if q.is_usage() => RemoteError::new(ErrorCode::Usage, q.to_string()),
        E::Config(m) => RemoteError::new(ErrorCode::Usage, m),
        E::Stopped => RemoteError::new(ErrorCode::Unavailable, "the owner is stopping; try again"),
        E::NotWriter(m) => RemoteError::new(ErrorCode::NotWriter, m),
        E::Remote(r) => r,
        other => RemoteError::new(ErrorCode::Failed, other.to_string()),
    }
}

/// Stream every event to the client until it goes away or stops reading.
async fn subscribe(ctx: &Ctx, stream: &mut UnixStream) {
    use futures::StreamExt;
    let mut events = match ctx.answerer() {
        Answerer::Owner(o) => o.pipeline().subscribe(),
        Answerer::Reader(r) => {
            let _ = send(stream, &error(ErrorCode::Failed, r.needs_owner("subscribe").to_string())).await;
            return;
        }
    };
    if send(stream, &Reply::Ok(serde_json::Value::Null)).await.is_err() {
        return;
    }
    while let Some(e) = events.next().await {
        let reply = Reply::Ok(serde_json::to_value(&*e).unwrap_or_default());
        if send(stream, &reply).await.is_err() {
            return;
        }
    }
}
