//! `cairn serve`: the live index over HTTP, for agents on other hosts and for people.
//!
//! - `/mcp`: the tools of `cairn mcp`, over MCP's streamable HTTP transport (rmcp's server).
//! - `/api/VERB`: every verb of the API list ([`cairn_actors::api`]), its arguments as a JSON
//!   body, its reply as JSON; `/api/check` checks a draft. Errors are JSON with the socket's codes.
//! - `/`, `/page`, `/sources`, `/telemetry`, `/diagnose`: a web page written on the server, and
//!   `/events`, the owner's events as server-sent events (the sources page refreshes from them).
//!
//! Safe by default: loopback only unless `--listen` says otherwise, and then only with a token;
//! `Host` and `Origin` checked on every request ([`guard`]); verbs that change the database only
//! with `--allow-writes`; bodies, query strings, header reads and connections bounded.
//!
//! Like `cairn mcp`, it is one more role of the database's owner: the first process on a
//! database owns it and runs the pipeline; one started while another owns it is its client.

mod guard;
mod html;

use bytes::Bytes;
use cairn_actors::api::Request as Verb;
use cairn_actors::api::ipc::ErrorCode;
use cairn_actors::{Cairn, SearchRequest};
use futures::StreamExt;
use guard::{Guard, Refusal};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, StatusCode, header};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

type Body = BoxBody<Bytes, Infallible>;
type Response = hyper::Response<Body>;

/// A request body larger than this is refused (413): a draft or a verb's arguments are far
/// smaller.
pub const MAX_BODY: usize = 1 << 20;
/// A URL query longer than this is refused (414).
pub const MAX_QUERY: usize = 8 << 10;
/// A client that has not sent its headers, or its body, within this is dropped.
pub const READ_WITHIN: Duration = Duration::from_secs(10);
/// Connections served at once (the socket's limit); more are closed at once.
pub const MAX_CONNECTIONS: usize = 64;

/// How `cairn serve` was started.
#[derive(Debug, Clone)]
pub struct Options {
    pub listen: SocketAddr,
    pub token_file: Option<PathBuf>,
    pub allow_writes: bool,
    pub allow_hosts: Vec<String>,
    pub allow_origins: Vec<String>,
}

struct Server {
    cairn: Cairn,
    guard: Guard,
    allow_writes: bool,
    mcp: StreamableHttpService<crate::mcp::CairnTools, LocalSessionManager>,
}

/// A mistake in how it was started: exit code 2, before anything is opened.
fn usage(message: String) -> anyhow::Error {
    cairn_actors::Error::Config(message).into()
}

/// Serve until SIGINT or SIGTERM; then stop answering, and drain the pipeline (as the owner).
pub async fn serve(config: cairn_actors::Config, options: Options) -> anyhow::Result<()> {
    let token = match &options.token_file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| usage(format!("--token-file {}: {e}", f.display())))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    // Checked before binding, so a refusal leaves no port taken and no database opened.
    Guard::new(options.listen, vec![], vec![], token.clone()).map_err(usage)?;
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", options.listen))?;
    let bound = listener.local_addr()?;
    let guard = Guard::new(bound, options.allow_hosts, options.allow_origins, token).map_err(usage)?;

    let cairn = Cairn::open_with(config, cairn_actors::OpenOptions::new("serve")).await?;
    let config = StreamableHttpServerConfig::default()
        // Checked by the guard first, for every path alike.
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(MAX_BODY);
    // Ends the MCP sessions when the server stops.
    let stopping = config.cancellation_token.clone();
    let mcp = {
        let cairn = cairn.clone();
        StreamableHttpService::new(
            move || Ok(crate::mcp::CairnTools::new(cairn.clone())),
            Arc::new(LocalSessionManager::default()),
            config,
        )
    };
    let server = Arc::new(Server { cairn: cairn.clone(), guard, allow_writes: options.allow_writes, mcp });
    eprintln!(
        "cairn serve: listening on http://{bound} ({:?} of {}; {}{})",
        cairn.role(),
        cairn.config().db,
        if server.guard.token_set() { "token required" } else { "no token" },
        if server.allow_writes { ", writes allowed" } else { ", reads only" }
    );

    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let stop = crate::stop_signal();
    tokio::pin!(stop);
    let why = loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("cairn serve: accept: {e}");
                    continue;
                }
            },
            _ = &mut stop => break "signal",
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!("cairn serve: {MAX_CONNECTIONS} connections open; closing a new one");
            continue;
        };
        let server = server.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let server = server.clone();
                async move { Ok::<_, Infallible>(server.answer(request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(READ_WITHIN)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!("cairn serve: connection: {e}");
            }
            drop(slot);
        });
    };
    stopping.cancel();
    cairn.shutdown().await?;
    eprintln!("cairn serve: {why}; stopped cleanly");
    Ok(())
}

impl Server {
    async fn answer(&self, request: hyper::Request<Incoming>) -> Response {
        let header = |name: header::HeaderName| request.headers().get(name).and_then(|v| v.to_str().ok());
        let path = request.uri().path().to_string();
        if request.uri().query().is_some_and(|q| q.len() > MAX_QUERY) {
            return error(
                StatusCode::URI_TOO_LONG,
                "bad_request",
                format!("the query string is over {MAX_QUERY} bytes"),
            );
        }
        let login = path == "/login";
        if let Err(refused) = self.guard.admit(
            header(header::HOST),
            header(header::ORIGIN),
            header(header::AUTHORIZATION),
            header(header::COOKIE),
            login,
        ) {
            return refusal(&refused, request.method() == Method::GET && !path.starts_with("/api/"));
        }
        let query = form(request.uri().query().unwrap_or_default());
        let q = |key: &str| query.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v.as_str());
        match (request.method().clone(), path.as_str()) {
            (_, "/mcp") => self.mcp.handle(request).await,
            (Method::POST, p) if p.starts_with("/api/") => {
                let verb = p.trim_start_matches("/api/").to_string();
                match read_body(request).await {
                    Ok(body) => self.api(&verb, &body).await,
                    Err(e) => e,
                }
            }
            (Method::GET, "/events") => self.events().await,
            (Method::GET, "/app.js") => {
                respond(StatusCode::OK, "text/javascript", html::SCRIPT.as_bytes().to_vec())
            }
            (Method::GET, "/") => {
                let form = html::Form {
                    query: q("q"),
                    mode: if q("mode").is_empty() { "balanced" } else { q("mode") },
                    sources: q("source"),
                    tags: q("tag"),
                    paths: q("path"),
                    types: q("type"),
                    after: q("after"),
                    before: q("before"),
                };
                self.search_page(&form).await
            }
            (Method::GET, "/page") => self.page(q("source"), q("slug")).await,
            (Method::GET, "/sources") => self.sources(q("part") == "table").await,
            (Method::GET, "/telemetry") => match self.cairn.stats(None).await {
                Ok(stats) => page(html::telemetry(&json_of(&stats))),
                Err(e) => failed_page("Telemetry", &e.to_string()),
            },
            (Method::GET, "/diagnose") => self.diagnose(q("q"), q("target")).await,
            (Method::GET, "/login") => page(html::login(None)),
            (Method::POST, "/login") => match read_body(request).await {
                Ok(body) => self.sign_in(&body),
                Err(e) => e,
            },
            _ => error(StatusCode::NOT_FOUND, "not_found", format!("nothing at {path}")),
        }
    }

    /// One verb of the API list (or `check`), its arguments the body's JSON object.
    async fn api(&self, verb: &str, body: &[u8]) -> Response {
        let mut args: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(e) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "bad_request",
                        format!("the body is not JSON: {e}"),
                    );
                }
            }
        };
        if verb == "check" {
            return match serde_json::from_value::<cairn_query::check::Draft>(args) {
                Ok(draft) => reply(self.cairn.check(&draft).await),
                Err(e) => error(StatusCode::BAD_REQUEST, "bad_request", format!("`check`: {e}")),
            };
        }
        let Some(object) = args.as_object_mut() else {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "the body is a JSON object of the verb's arguments",
            );
        };
        object.insert("verb".into(), Value::String(verb.into()));
        let request: Verb = match serde_json::from_value(args) {
            Ok(r @ (Verb::Hello(_) | Verb::Subscribe)) => {
                return error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("`{}` is not a verb of the API", r.verb()),
                );
            }
            Ok(r) => r,
            Err(e) if e.to_string().starts_with("unknown variant") => {
                return error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("no verb `{verb}`: see README, \"The API\""),
                );
            }
            Err(e) => return error(StatusCode::BAD_REQUEST, "bad_request", format!("`{verb}`: {e}")),
        };
        if request.changes() && !self.allow_writes {
            return error(
                StatusCode::FORBIDDEN,
                "read_only",
                format!(
                    "`{verb}` changes the database; this server answers reads only (start it with --allow-writes)"
                ),
            );
        }
        if matches!(request, Verb::Status(_)) {
            // As this process sees itself (as `cairn status` does).
            return reply(self.cairn.status().await.map(|s| json_of(&s)));
        }
        reply(self.cairn.ask_json(request).await)
    }

    /// The owner's events, one server-sent event each, until the client goes.
    async fn events(&self) -> Response {
        let events = match self.cairn.subscribe().await {
            Ok(e) => e,
            Err(e) => return reply::<()>(Err(e)),
        };
        let frames = Shareable(std::sync::Mutex::new(events)).map(|e| {
            let data = serde_json::to_string(&*e).unwrap_or_default();
            Ok::<_, Infallible>(Frame::data(Bytes::from(format!("data: {data}\n\n"))))
        });
        hyper::Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-store")
            .body(BodyExt::boxed(StreamBody::new(frames)))
            .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "event stream"))
    }

    async fn search_page(&self, form: &html::Form<'_>) -> Response {
        if form.query.trim().is_empty() {
            return page(html::search(form, None, None));
        }
        let list = |text: &str| -> Vec<String> {
            text.split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect()
        };
        let day = |text: &str| Some(text.trim().to_string()).filter(|t| !t.is_empty());
        let args = crate::search_args::SearchArgs {
            sources: list(form.sources),
            mode: Some(form.mode.to_string()),
            limit: None,
            window: None,
            tags: list(form.tags),
            paths: list(form.paths),
            types: list(form.types),
            after: day(form.after),
            before: day(form.before),
        };
        let request = match args.request(form.query) {
            Ok(r) => r,
            Err(e) => {
                return page(html::search(
                    &html::Form { mode: "balanced", ..*form },
                    None,
                    Some(&e.to_string()),
                ));
            }
        };
        match self.cairn.search(request).await {
            Ok(answer) => page(html::search(form, Some(&json_of(&answer)), None)),
            Err(e) => page(html::search(form, None, Some(&e.to_string()))),
        }
    }

    async fn page(&self, source: &str, slug: &str) -> Response {
        match self.cairn.get(source, slug).await {
            Ok(Some(p)) => {
                let links = self.cairn.links(source, slug).await.ok().flatten();
                page(html::page(&json_of(&p), links.map(|l| json_of(&l)).as_ref()))
            }
            Ok(None) => with_status(
                StatusCode::NOT_FOUND,
                failed_page("No such page", &format!("no page `{slug}` in source `{source}`")),
            ),
            Err(e) => failed_page("Page", &e.to_string()),
        }
    }

    async fn sources(&self, table_only: bool) -> Response {
        match self.cairn.status().await {
            Ok(status) if table_only => page(html::sources_table(&json_of(&status))),
            Ok(status) => page(html::sources(&json_of(&status))),
            Err(e) => failed_page("Sources", &e.to_string()),
        }
    }

    async fn diagnose(&self, query: &str, target: &str) -> Response {
        if query.is_empty() || target.is_empty() {
            return page(html::diagnose(query, target, None, None));
        }
        let Some((source, slug)) = target.split_once(':') else {
            return page(html::diagnose(query, target, None, Some("the page is SOURCE:SLUG")));
        };
        match self.cairn.diagnose(SearchRequest::new(query), source, slug).await {
            Ok(d) => page(html::diagnose(query, target, Some(&json_of(&d)), None)),
            Err(e) => page(html::diagnose(query, target, None, Some(&e.to_string()))),
        }
    }

    /// The sign-in form's post: the token as a cookie only this site's pages send.
    fn sign_in(&self, body: &[u8]) -> Response {
        let fields = form(&String::from_utf8_lossy(body));
        let given = fields.iter().find(|(k, _)| k == "token").map_or("", |(_, v)| v.as_str());
        if !self.guard.is_token(given) {
            return with_status(StatusCode::UNAUTHORIZED, page(html::login(Some("That is not the token."))));
        }
        hyper::Response::builder()
            .status(StatusCode::SEE_OTHER)
            .header(header::LOCATION, "/")
            .header(
                header::SET_COOKIE,
                format!("{}={given}; HttpOnly; SameSite=Strict; Path=/", guard::COOKIE),
            )
            .body(Full::new(Bytes::new()).boxed())
            .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "sign-in"))
    }
}

/// A stream a response body can hold (a body must be `Sync`; the stream is only ever polled
/// through `&mut`, so the lock is never taken).
struct Shareable<S>(std::sync::Mutex<S>);

impl<S: futures::Stream + Unpin> futures::Stream for Shareable<S> {
    type Item = S::Item;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        let inner = self.get_mut().0.get_mut().unwrap_or_else(|p| p.into_inner());
        inner.poll_next_unpin(cx)
    }
}

/// The body, bounded in size and in time.
async fn read_body(request: hyper::Request<Incoming>) -> Result<Bytes, Response> {
    let too_large =
        || error(StatusCode::PAYLOAD_TOO_LARGE, "bad_request", format!("the body is over {MAX_BODY} bytes"));
    // Said to be too large: refused before a byte of it is read.
    if hyper::body::Body::size_hint(request.body()).lower() > MAX_BODY as u64 {
        return Err(too_large());
    }
    let limited = Limited::new(request.into_body(), MAX_BODY);
    match tokio::time::timeout(READ_WITHIN, limited.collect()).await {
        Ok(Ok(body)) => Ok(body.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(error(StatusCode::BAD_REQUEST, "bad_request", format!("reading the body: {e}"))),
        Err(_) => {
            Err(error(StatusCode::REQUEST_TIMEOUT, "timeout", format!("the body took over {READ_WITHIN:?}")))
        }
    }
}

/// `a=1&b=x+y` as pairs, %-escapes and `+` decoded.
fn form(query: &str) -> Vec<(String, String)> {
    let decode =
        |s: &str| percent_encoding::percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned();
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn json_of(v: &impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A verb's reply, or its error with the socket's code.
fn reply<T: serde::Serialize>(answer: cairn_actors::Result<T>) -> Response {
    match answer {
        Ok(v) => respond(StatusCode::OK, "application/json", serde_json::to_vec(&v).unwrap_or_default()),
        Err(e) => {
            let remote = cairn_actors::roles::server::as_remote(e);
            let status = match remote.code {
                ErrorCode::BadRequest | ErrorCode::Usage => StatusCode::BAD_REQUEST,
                ErrorCode::VersionMismatch | ErrorCode::NotWriter => StatusCode::CONFLICT,
                ErrorCode::Busy | ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
                ErrorCode::Failed => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let code = serde_json::to_value(remote.code).unwrap_or(Value::Null);
            let body =
                json!({"error": {"code": code, "message": remote.message, "retryable": remote.retryable}});
            respond(status, "application/json", body.to_string().into_bytes())
        }
    }
}

/// A JSON error of this server's own (not a verb's).
fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": code, "message": message.into(), "retryable": false}});
    respond(status, "application/json", body.to_string().into_bytes())
}

fn refusal(refused: &Refusal, as_page: bool) -> Response {
    let status = StatusCode::from_u16(refused.status()).unwrap_or(StatusCode::FORBIDDEN);
    match refused {
        // A person at a browser is shown the sign-in form.
        Refusal::Token if as_page => with_status(status, page(html::login(None))),
        _ => error(status, "refused", refused.message()),
    }
}

fn page(html: String) -> Response {
    respond(StatusCode::OK, "text/html; charset=utf-8", html.into_bytes())
}

fn failed_page(title: &str, message: &str) -> Response {
    with_status(
        StatusCode::SERVICE_UNAVAILABLE,
        page(html::layout(title, &format!("<p class=note>{}</p>", html::esc(message)))),
    )
}

fn with_status(status: StatusCode, mut response: Response) -> Response {
    *response.status_mut() = status;
    response
}

fn plain(status: StatusCode, what: &str) -> Response {
    respond(status, "text/plain", format!("cairn serve: {what} failed").into_bytes())
}

fn respond(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response {
    let mut r = hyper::Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_str(content_type).unwrap_or(header::HeaderValue::from_static("text/plain")),
    );
    // Pages are never framed by another site, and say where scripts may come from.
    h.insert(header::X_FRAME_OPTIONS, header::HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("default-src 'self'; style-src 'unsafe-inline'"),
    );
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_form_decodes_escapes_and_pluses() {
        assert_eq!(
            super::form("q=stack+ovwrflow&target=foldoc%3Akw&x"),
            [
                ("q".into(), "stack ovwrflow".into()),
                ("target".into(), "foldoc:kw".into()),
                ("x".into(), String::new())
            ]
        );
    }
}
