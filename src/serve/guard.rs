//! Who may ask `cairn serve`: the checks every request passes before it reaches a verb.
//!
//! - **Host** (DNS rebinding: a page on another site whose name resolves to this machine must
//!   not reach it): the loopback names, the address it listens on, and the names given with
//!   `--allow-host`. Listening on every address (`0.0.0.0`), an IP literal is accepted too: a
//!   rebinding attack needs a name, never an address.
//! - **Origin** (a browser's cross-site request): absent (not a browser, or a same-origin `GET`),
//!   the origin of the `Host` itself, or one given with `--allow-origin`.
//! - **Token**: off loopback a token is required to start at all; when one is set, every request
//!   carries it as `Authorization: Bearer`, or as the cookie the sign-in form sets (a browser
//!   cannot add a header to a link it follows).

use std::net::{IpAddr, SocketAddr};

/// The cookie the sign-in form sets.
pub const COOKIE: &str = "cairn_token";

/// Why a request is refused, with its HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 403: the `Host` is not a name of this server.
    Host(String),
    /// 403: a browser on another site.
    Origin(String),
    /// 401: no token, or the wrong one.
    Token,
}

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Token => 401,
            Refusal::Host(_) | Refusal::Origin(_) => 403,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::Host(h) => format!(
                "Host `{h}` is not a name of this server; start it with `--allow-host {h}` if it is"
            ),
            Refusal::Origin(o) => format!(
                "requests from the web origin `{o}` are refused; start the server with `--allow-origin {o}` to allow it"
            ),
            Refusal::Token => "a token is required: send `Authorization: Bearer TOKEN` (the contents of the server's --token-file), or sign in at /login".into(),
        }
    }
}

/// The checks of one server.
#[derive(Debug, Clone)]
pub struct Guard {
    listen: SocketAddr,
    hosts: Vec<String>,
    origins: Vec<String>,
    token: Option<String>,
}

impl Guard {
    /// `listen` is the bound address (its real port). Off loopback, a token is required.
    pub fn new(
        listen: SocketAddr,
        hosts: Vec<String>,
        origins: Vec<String>,
        token: Option<String>,
    ) -> Result<Self, String> {
        if !listen.ip().is_loopback() && token.is_none() {
            return Err(format!(
                "refusing to listen on {listen} without a token: off loopback every request must carry one; give --token-file FILE (a file holding a long random string), or listen on 127.0.0.1"
            ));
        }
        if token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err("the token file holds fewer than 16 characters: use a long random string (e.g. `openssl rand -hex 32`)".into());
        }
        let hosts = hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect();
        let origins = origins.into_iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect();
        Ok(Self { listen, hosts, origins, token })
    }

    pub fn token_set(&self) -> bool {
        self.token.is_some()
    }

    /// Whether a request with these headers may be answered (`login`: the sign-in form, which
    /// needs no token).
    pub fn admit(
        &self,
        host: Option<&str>,
        origin: Option<&str>,
        authorization: Option<&str>,
        cookie: Option<&str>,
        login: bool,
    ) -> Result<(), Refusal> {
        let host = host.unwrap_or_default();
        if !self.host_ok(host) {
            return Err(Refusal::Host(host.to_string()));
        }
        if let Some(o) = origin
            && !self.origin_ok(o, host)
        {
            return Err(Refusal::Origin(o.to_string()));
        }
        match &self.token {
            Some(t) if !login => {
                let bearer = authorization.and_then(|a| a.strip_prefix("Bearer ")).map(str::trim);
                let cookie = cookie.and_then(|c| cookie_value(c, COOKIE));
                if [bearer, cookie].into_iter().flatten().any(|given| same(given, t)) {
                    Ok(())
                } else {
                    Err(Refusal::Token)
                }
            }
            _ => Ok(()),
        }
    }

    /// Whether `given` is the token (for the sign-in form).
    pub fn is_token(&self, given: &str) -> bool {
        self.token.as_deref().is_some_and(|t| same(given.trim(), t))
    }

    fn host_ok(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let (name, port) = split_host(&host);
        if port.is_some_and(|p| p != self.listen.port()) {
            return self.hosts.contains(&host);
        }
        let ip: Option<IpAddr> = name.trim_start_matches('[').trim_end_matches(']').parse().ok();
        match ip {
            Some(ip) if ip.is_loopback() || ip == self.listen.ip() => true,
            Some(_) if self.listen.ip().is_unspecified() => true,
            _ => name == "localhost" || self.hosts.iter().any(|h| h == name || *h == host),
        }
    }

    fn origin_ok(&self, origin: &str, host: &str) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        origin == format!("http://{}", host.to_ascii_lowercase()) || self.origins.contains(&origin)
    }
}

/// `name` and its port, from a `Host` header (`[::1]:80`, `localhost`).
fn split_host(host: &str) -> (&str, Option<u16>) {
    match host.rsplit_once(':') {
        Some((name, port)) if !name.ends_with(':') && (name.starts_with('[') || !name.contains(':')) => {
            match port.parse() {
                Ok(p) => (name, Some(p)),
                Err(_) => (host, None),
            }
        }
        _ => (host, None),
    }
}

/// One cookie's value from a `Cookie` header.
fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').filter_map(|c| c.trim().split_once('=')).find(|(n, _)| *n == name).map(|(_, v)| v)
}

/// Equal, in a time that does not tell how much of it matched.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123";

    fn loopback() -> Guard {
        Guard::new("127.0.0.1:7767".parse().unwrap(), vec![], vec![], None).unwrap()
    }

    #[test]
    fn off_loopback_it_needs_a_long_token_to_start() {
        let any: SocketAddr = "0.0.0.0:7767".parse().unwrap();
        assert!(Guard::new(any, vec![], vec![], None).unwrap_err().contains("--token-file"));
        assert!(Guard::new(any, vec![], vec![], Some("short".into())).unwrap_err().contains("16"));
        assert!(Guard::new(any, vec![], vec![], Some(TOKEN.into())).is_ok());
    }

    #[test]
    fn a_rebound_name_or_another_port_is_refused_and_loopback_names_pass() {
        let g = loopback();
        for ok in ["127.0.0.1:7767", "localhost:7767", "localhost", "[::1]:7767"] {
            assert_eq!(g.admit(Some(ok), None, None, None, false), Ok(()), "{ok}");
        }
        for bad in ["evil.example:7767", "127.0.0.1:80", "", "10.0.0.5:7767"] {
            assert!(matches!(g.admit(Some(bad), None, None, None, false), Err(Refusal::Host(_))), "{bad}");
        }
        let named =
            Guard::new("127.0.0.1:7767".parse().unwrap(), vec!["notes.lan".into()], vec![], None).unwrap();
        assert_eq!(named.admit(Some("notes.lan:7767"), None, None, None, false), Ok(()));
    }

    #[test]
    fn a_cross_site_origin_is_refused_unless_allowed() {
        let g = loopback();
        let host = Some("127.0.0.1:7767");
        assert_eq!(g.admit(host, Some("http://127.0.0.1:7767"), None, None, false), Ok(()));
        assert!(matches!(
            g.admit(host, Some("https://evil.example"), None, None, false),
            Err(Refusal::Origin(_))
        ));
        assert!(matches!(g.admit(host, Some("null"), None, None, false), Err(Refusal::Origin(_))));
        let allowed =
            Guard::new("127.0.0.1:7767".parse().unwrap(), vec![], vec!["https://app.example/".into()], None)
                .unwrap();
        assert_eq!(allowed.admit(host, Some("https://app.example"), None, None, false), Ok(()));
    }

    #[test]
    fn with_a_token_every_request_carries_it_by_header_or_cookie() {
        let g = Guard::new("0.0.0.0:7767".parse().unwrap(), vec![], vec![], Some(TOKEN.into())).unwrap();
        let host = Some("192.168.1.9:7767");
        assert_eq!(g.admit(host, None, None, None, false), Err(Refusal::Token));
        assert_eq!(
            g.admit(host, None, Some("Bearer wrong-token-wrong-token"), None, false),
            Err(Refusal::Token)
        );
        assert_eq!(g.admit(host, None, Some(&format!("Bearer {TOKEN}")), None, false), Ok(()));
        assert_eq!(g.admit(host, None, None, Some(&format!("a=b; {COOKIE}={TOKEN}")), false), Ok(()));
        // The sign-in form itself, and only it, is reached without one.
        assert_eq!(g.admit(host, None, None, None, true), Ok(()));
        // On every address, a name still has to be given.
        assert!(matches!(g.admit(Some("evil.example:7767"), None, None, None, true), Err(Refusal::Host(_))));
    }
}
