//! A client of the process that owns a database: each call connects to the owner's socket,
//! says `hello`, sends one request and reads its reply, so a call always reaches whoever owns the
//! database at that moment. (The connection of [`Client::greet`] is the exception: the call that
//! follows it within [`SPARE_FOR`] uses it, which saves a one-shot command a second connection.)
//! A call the owner never answers (it died) fails with a retryable error within its time limit;
//! nothing hangs.

use crate::api::ipc::{
    ErrorCode, FrameError, Hello, MAX_REPLY, OwnerInfo, RemoteError, Reply, Request, read_frame, write_frame,
};
use crate::core::event::Event;
use futures::stream::BoxStream;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UnixStream;

/// Time to connect and hear `hello` back.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);
/// Grace beyond a request's own limit before the client gives up on the reply.
const GRACE: Duration = Duration::from_secs(5);

/// How long the connection of [`Client::greet`] is kept for the next call. Short: the owner
/// closes idle connections, and a later call should reach whoever owns the database by then.
const SPARE_FOR: Duration = Duration::from_secs(1);

type Spare = Arc<Mutex<Option<(UnixStream, OwnerInfo, Instant)>>>;

/// A client of one database's owner.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    purpose: String,
    spare: Spare,
}

fn io(e: impl std::fmt::Display) -> RemoteError {
    RemoteError::new(ErrorCode::Unavailable, e.to_string())
}

impl Client {
    /// A client for the owner listening on `socket`; `purpose` says what this process is.
    pub fn new(socket: &Path, purpose: &str) -> Self {
        Self { socket: socket.to_path_buf(), purpose: purpose.into(), spare: Spare::default() }
    }

    /// [`Client::hello`], keeping the connection for the next call (if it comes soon).
    pub async fn greet(&self) -> Result<OwnerInfo, RemoteError> {
        let (stream, owner) = self.hello().await?;
        *self.spare.lock().unwrap_or_else(|p| p.into_inner()) = Some((stream, owner.clone(), Instant::now()));
        Ok(owner)
    }

    /// The kept connection if it is fresh, else a new one.
    async fn connection(&self) -> Result<(UnixStream, OwnerInfo), RemoteError> {
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).take();
        match spare {
            Some((stream, owner, at)) if at.elapsed() < SPARE_FOR => Ok((stream, owner)),
            _ => self.hello().await,
        }
    }

    /// Connect and say hello: the owner's description, or why there is none to talk to.
    pub async fn hello(&self) -> Result<(UnixStream, OwnerInfo), RemoteError> {
        let attempt = async {
            // Only an owner of this user's own, in a folder only this user controls.
            if let Some(dir) = self.socket.parent()
                && let Err(e) = crate::roles::server::check_private(dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(RemoteError::new(ErrorCode::Unavailable, e.to_string()));
            }
            let mut stream = UnixStream::connect(&self.socket).await.map_err(|e| {
                RemoteError::new(
                    ErrorCode::Unavailable,
                    format!("no owner listens on {}: {e}", self.socket.display()),
                )
            })?;
            if let Err(who) = crate::roles::server::same_user(&stream) {
                return Err(RemoteError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "{} is served by {who}, not by this user; not talking to it",
                        self.socket.display()
                    ),
                ));
            }
            write_frame(&mut stream, &Request::Hello(Hello::new(&self.purpose))).await.map_err(io)?;
            let owner: OwnerInfo = read_reply(&mut stream, "hello").await?;
            Ok((stream, owner))
        };
        tokio::time::timeout(CONNECT_WITHIN, attempt).await.unwrap_or_else(|_| {
            Err(RemoteError::new(ErrorCode::Unavailable, "the owner did not answer `hello` in time"))
        })
    }

    /// One request and its reply.
    pub async fn call<T: DeserializeOwned>(&self, request: Request) -> Result<T, RemoteError> {
        let verb = request.verb();
        let limit = request.time_limit();
        let (mut stream, owner) = self.connection().await?;
        let exchange = async {
            write_frame(&mut stream, &request).await.map_err(io)?;
            read_reply(&mut stream, verb).await
        };
        let answer = match limit.checked_add(GRACE) {
            Some(l) => tokio::time::timeout(l, exchange).await.unwrap_or_else(|_| {
                Err(RemoteError::new(ErrorCode::Timeout, format!("`{verb}` got no answer in time")))
            }),
            None => exchange.await,
        };
        answer.map_err(|e| match e.code {
            ErrorCode::Unavailable => RemoteError::new(
                ErrorCode::Unavailable,
                format!(
                    "the owner (pid {}, cairn {}) went away during `{verb}` ({}); try again: another process may own the database by now",
                    owner.pid, owner.purpose, e.message
                ),
            ),
            _ => e,
        })
    }

    /// Any verb, asked of the owner.
    pub async fn ask<V: crate::api::Verb>(&self, verb: V) -> Result<V::Reply, RemoteError> {
        self.call(verb.into_request()).await
    }

    /// Every event from now on, as the owner emits them; the stream ends when the owner goes.
    pub async fn subscribe(&self) -> Result<BoxStream<'static, Event>, RemoteError> {
        let (mut stream, _) = self.hello().await?;
        write_frame(&mut stream, &Request::Subscribe).await.map_err(io)?;
        let _: serde_json::Value = read_reply(&mut stream, "subscribe").await?;
        Ok(Box::pin(futures::stream::unfold(stream, |mut s| async move {
            loop {
                match read_reply::<Event>(&mut s, "subscribe").await {
                    Ok(e) => return Some((e, s)),
                    Err(e) if e.code == ErrorCode::BadRequest => continue,
                    Err(_) => return None,
                }
            }
        })))
    }
}

async fn read_reply<T: DeserializeOwned>(stream: &mut UnixStream, verb: &str) -> Result<T, RemoteError> {
    let frame = read_frame(stream, MAX_REPLY).await.map_err(|e| match e {
        FrameError::Closed => RemoteError::new(ErrorCode::Unavailable, "the connection closed"),
        other => io(other),
    })?;
    match serde_json::from_slice::<Reply>(&frame) {
        Ok(Reply::Ok(v)) => serde_json::from_value(v).map_err(|e| {
            RemoteError::new(
                ErrorCode::BadRequest,
                format!("the owner's answer to `{verb}` is not understood: {e}"),
            )
        }),
        Ok(Reply::Error(e)) => Err(e),
        Err(e) => Err(RemoteError::new(
            ErrorCode::BadRequest,
            format!("the owner's answer to `{verb}` is not a reply: {e}"),
        )),
    }
}
