//! The owner's socket: serves [`crate::ipc`] requests from the other cairn processes on the same
//! database, with the owner's pipeline.
//!
//! Bounds, so that one slow or broken client never stalls the others: at most
//! [`MAX_CONNECTIONS`] at once (the next is told `busy` and closed); `hello` within
//! [`HELLO_WITHIN`] and each later request within [`IDLE`] of the last, else the connection is
//! closed; request frames of at most [`crate::ipc::MAX_REQUEST`] (a larger one is refused unread
//! and the connection closed); every request within its time limit; every reply written within
//! [`WRITE_WITHIN`] (a client that stops reading is dropped). Each connection is a task of its
//! own.

use crate::ipc::{
    ErrorCode, FrameError, Hello, MAX_REQUEST, OwnerInfo, PROTOCOL_VERSION, RemoteError, Reply, Request,
    read_frame, write_frame,
};
use crate::status::SourceStatus;
use crate::system::Pipeline;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

pub const MAX_CONNECTIONS: usize = 64;
pub const HELLO_WITHIN: Duration = Duration::from_secs(5);
pub const IDLE: Duration = Duration::from_secs(60);
pub const WRITE_WITHIN: Duration = Duration::from_secs(10);

/// What `status` answers: the owner, its clients and its sources.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OwnerStatus {
    pub owner: OwnerInfo,
    /// The owner's memory.
    #[serde(default)]
    pub memory: crate::status::Memory,
    pub clients: Vec<Hello>,
    pub sources: Vec<SourceStatus>,
}

/// Everything a connection needs.
#[derive(Clone)]
struct Ctx {
    pipeline: Pipeline,
    config: crate::Config,
    owner: OwnerInfo,
    clients: Arc<Mutex<BTreeMap<u64, Hello>>>,
    slots: Arc<Semaphore>,
}

/// A running server; [`Server::stop`] stops accepting and removes the socket.
#[derive(Debug)]
pub struct Server {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
    clients: Arc<Mutex<BTreeMap<u64, Hello>>>,
}

/// Bind the socket at `path`: its folder made private to this user (0700), a socket left by a
/// dead owner replaced (the caller holds the lock, so any socket there is stale), the socket 0600.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    let dir = path.parent().ok_or_else(|| std::io::Error::other("a socket path needs a folder"))?;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

impl Server {
    /// Serve `pipeline` on `listener` (from [`bind`]) on the current tokio runtime.
    pub fn start(
        listener: UnixListener,
        path: PathBuf,
        pipeline: Pipeline,
        config: crate::Config,
        owner: OwnerInfo,
    ) -> Self {
        let clients: Arc<Mutex<BTreeMap<u64, Hello>>> = Arc::default();
        let ctx = Ctx {
            pipeline,
            config,
            owner,
            clients: clients.clone(),
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        };
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
        Self { path, task, clients }
    }

    /// The clients connected now.
    pub fn clients(&self) -> Vec<Hello> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop accepting and remove the socket (connections in progress finish or fail).
    pub fn stop(&self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
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

async fn connection(ctx: Ctx, mut stream: UnixStream, id: u64) {
    let Ok(_slot) = ctx.slots.clone().try_acquire_owned() else {
        let _ = send(
            &mut stream,
            &error(
                ErrorCode::Busy,
                format!("the owner serves {MAX_CONNECTIONS} connections already; try again"),
            ),
        )
        .await;
        return;
    };
    let mut hello: Option<Hello> = None;
    loop {
        let wait = if hello.is_none() { HELLO_WITHIN } else { IDLE };
        let frame = match tokio::time::timeout(wait, read_frame(&mut stream, MAX_REQUEST)).await {
            Err(_) | Ok(Err(FrameError::Closed)) => break,
            Ok(Err(FrameError::TooLarge(n, max))) => {
                let _ = send(
                    &mut stream,
                    &error(
                        ErrorCode::BadRequest,
                        format!("a request of {n} bytes is over the {max}-byte limit"),
                    ),
                )
                .await;
                break;
            }
            Ok(Err(e)) => {
                let _ = send(&mut stream, &error(ErrorCode::BadRequest, e.to_string())).await;
                break;
            }
            Ok(Ok(f)) => f,
        };
        let request: Request = match serde_json::from_slice(&frame) {
            Ok(r) => r,
            Err(e) => {
                // The frame boundary held, so the connection can go on.
                let _ = send(&mut stream, &error(ErrorCode::BadRequest, format!("not a request: {e}"))).await;
                if hello.is_none() {
                    break;
                }
                continue;
            }
        };
        let reply = match (&hello, request) {
            (None, Request::Hello(h)) => {
                let reply = check_hello(&h)
                    .unwrap_or_else(|| Reply::Ok(serde_json::to_value(&ctx.owner).unwrap_or_default()));
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
            (Some(_), request) => {
                let limit = request.time_limit();
                let verb = request.verb();
                match tokio::time::timeout(limit, handle(&ctx, request)).await {
                    Ok(r) => r,
                    Err(_) => {
                        error(ErrorCode::Timeout, format!("`{verb}` took longer than {} s", limit.as_secs()))
                    }
                }
            }
        };
        if send(&mut stream, &reply).await.is_err() {
            break;
        }
    }
    ctx.clients.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
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
    use crate::Error as E;
    match e {
        E::Query(q) if q.is_usage() => error(ErrorCode::Usage, q.to_string()),
        E::Config(m) => error(ErrorCode::Usage, m),
        E::Stopped => error(ErrorCode::Unavailable, "the owner is stopping; try again"),
        other => error(ErrorCode::Failed, other.to_string()),
    }
}

fn ok<T: Serialize>(r: crate::Result<T>) -> Reply {
    match r {
        Ok(v) => match serde_json::to_value(&v) {
            Ok(v) => Reply::Ok(v),
            Err(e) => error(ErrorCode::Failed, e.to_string()),
        },
        Err(e) => failed(e),
    }
}

/// This process, as the owner that answered.
fn served_by() -> cairn_query::ServedBy {
    cairn_query::ServedBy { pid: std::process::id(), role: cairn_query::Role::Owner }
}

async fn handle(ctx: &Ctx, request: Request) -> Reply {
    let p = &ctx.pipeline;
    match request {
        Request::Hello(_) => error(ErrorCode::BadRequest, "`hello` was already said"),
        Request::Search { request } => ok(p.search(request).await),
        Request::Get { source, slug } => ok(p
            .get(&source, &slug)
            .await
            .map(|page| page.map(|page| crate::host::PageWithBody { served_by: Some(served_by()), ..page }))),
        Request::Diagnose { request, source, slug } => ok(p
            .diagnose(request, &source, &slug)
            .await
            .map(|d| cairn_query::Diagnosis { served_by: Some(served_by()), ..d })),
        Request::Stats { days } => {
            ok(crate::stats::collect(&ctx.config, ctx.config.event_log_dir().as_deref(), days).await)
        }
        Request::Status => {
            let clients = ctx.clients.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
            ok(Ok(OwnerStatus {
                owner: ctx.owner.clone(),
                memory: crate::status::Memory::now(),
                clients,
                sources: p.status(),
            }))
        }
        Request::Flush { vectors, token } => ok(p.flush_marked(true, vectors, token).await),
        Request::AddSource { source } => ok(p.add_source(source).await),
        Request::RemoveSource { id, forget } => ok(p.remove_source(&id, forget).await),
        Request::Reindex { id } => ok(p.reindex(&id).await),
        Request::Reconcile { id, allow_removals } => ok(p.reconcile(&id, allow_removals).await),
        Request::Links { source, slug } => ok(p.links(&source, &slug).await),
        Request::Duplicates { threshold } => ok(p.duplicates(threshold).await),
        Request::Subscribe => error(ErrorCode::BadRequest, "`subscribe` is handled by the connection"),
    }
}

/// Stream every event to the client until it goes away or stops reading.
async fn subscribe(ctx: &Ctx, stream: &mut UnixStream) {
    use futures::StreamExt;
    let mut events = ctx.pipeline.subscribe();
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
