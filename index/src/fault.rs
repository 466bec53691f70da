//! What a bug costs. A panic where one is expected (the parser or the model on one hostile page,
//! one query's embedding) is caught by [`contained`] and costs that piece of work. Anywhere else
//! it means the process's state can no longer be trusted: with [`exit_on_panic`] installed (the
//! `cairn` binary does) the process exits at once, so the kernel releases its owner lock and a
//! standby or the next command takes over and converges from the tables — rather than a live
//! process that holds the lock and the socket while its actors are dead.
//!
//! [`point`] is the test-only fault hook that proves it: `CAIRN_TEST_FAULTS=name` panics at every
//! pass through the point `name`, `name@N` only at the N-th (a comma-separated list of either).
//! With `CAIRN_TEST_FAULTS_WHILE=FILE` too, a point fires only while that file exists (a test
//! arms it once the process has reached the state it means to break). With
//! `CAIRN_TEST_FAULTS_KILL=1` a point that fires is a `kill -9` of the process instead of a
//! panic: no hook, no destructor, no flush runs (what a power cut or the OOM killer leaves).
//! With `CAIRN_TEST_FAULTS_DELAY_MS=N` it is a wait of N ms where it stands instead (what a
//! thread that waits for a lock, a disk or a peer does), said on stderr when it starts.

use std::cell::Cell;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    /// Inside [`contained`] on this thread.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Run `f`, turning a panic into an error message: the failure of this one piece of work.
pub fn contained<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let before = CONTAINED.replace(true);
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    CONTAINED.set(before);
    result.map_err(|p| panic_message(&*p))
}

/// [`contained`] for a future: a panic while it is polled (LanceDB's on a torn manifest) is the
/// failure of this one piece of work.
pub async fn contained_async<F: std::future::Future>(f: F) -> Result<F::Output, String> {
    use futures::FutureExt;
    let mut fut = Box::pin(AssertUnwindSafe(f).catch_unwind());
    let caught = futures::future::poll_fn(move |cx| {
        let before = CONTAINED.replace(true);
        let r = fut.as_mut().poll(cx);
        CONTAINED.set(before);
        r
    })
    .await;
    caught.map_err(|p| panic_message(&*p))
}

/// The message of a caught panic.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// The exit status of a process ended by a panic (Rust's own for a panicking main).
pub const PANIC_EXIT: i32 = 101;

/// From now on, a panic outside [`contained`] on any thread prints its message (the default
/// hook) and ends the process with [`PANIC_EXIT`].
pub fn exit_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        if CONTAINED.get() {
            return;
        }
        tracing::error!("cairn stops after a panic ({info}); another process takes the database over");
        eprintln!("cairn: stopping after the panic above, so that another process can take over");
        std::process::exit(PANIC_EXIT);
    }));
}

/// The points armed by `CAIRN_TEST_FAULTS`: name → the pass that panics (0 = every pass).
fn armed() -> &'static HashMap<String, (u64, AtomicU64)> {
    static ARMED: OnceLock<HashMap<String, (u64, AtomicU64)>> = OnceLock::new();
    ARMED.get_or_init(|| arming(&std::env::var("CAIRN_TEST_FAULTS").unwrap_or_default()))
}

/// The points a `CAIRN_TEST_FAULTS` value arms, each with the pass that fires (0 = every one).
fn arming(spec: &str) -> HashMap<String, (u64, AtomicU64)> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once('@') {
            Some((name, n)) => (name.to_string(), (n.parse().unwrap_or(1), AtomicU64::new(0))),
            None => (s.to_string(), (0, AtomicU64::new(0))),
        })
        .collect()
}

/// A test-only fault point: panics when `CAIRN_TEST_FAULTS` arms `name` (see the module).
pub fn point(name: &str) {
    point_after(name, || {});
}

/// [`point`], running `before` first when it fires: what a write has buffered is put on disk,
/// so the panic leaves the torn file a kill at that moment would.
pub fn point_after(name: &str, before: impl FnOnce()) {
    if let Some(pass) = firing(name) {
        before();
        if std::env::var_os("CAIRN_TEST_FAULTS_KILL").is_some() {
            kill_me(&format!("injected kill at {name} (pass {pass})"));
        }
        if let Some(ms) = std::env::var("CAIRN_TEST_FAULTS_DELAY_MS").ok().and_then(|v| v.parse().ok()) {
            eprintln!("cairn: injected delay of {ms} ms at {name} (pass {pass})");
            std::thread::sleep(std::time::Duration::from_millis(ms));
            return;
        }
        panic!("injected fault at {name} (pass {pass})");
    }
}

/// [`point`] in async code: its delay is a wait of the task, not of the thread that polls it
/// (a blocked worker thread would hold up every task queued on it, which a slow step does not).
pub async fn point_async(name: &str) {
    let delay = std::env::var("CAIRN_TEST_FAULTS_DELAY_MS").ok().and_then(|v| v.parse::<u64>().ok());
    match delay {
        Some(ms) if std::env::var_os("CAIRN_TEST_FAULTS_KILL").is_none() => {
            if let Some(pass) = firing(name) {
                eprintln!("cairn: injected delay of {ms} ms at {name} (pass {pass})");
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
        }
        _ => point(name),
    }
}

/// Whether the point `name` fires on this pass (armed, its file there, its pass reached): the pass.
fn firing(name: &str) -> Option<u64> {
    let (at, passes) = armed().get(name)?;
    static WHILE: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    if WHILE
        .get_or_init(|| std::env::var_os("CAIRN_TEST_FAULTS_WHILE").map(Into::into))
        .as_ref()
        .is_some_and(|f| !f.exists())
    {
        return None;
    }
    let pass = passes.fetch_add(1, Ordering::SeqCst) + 1;
    (*at == 0 || pass == *at).then_some(pass)
}

/// `kill -9` of this process, after saying why on stderr. Never returns.
fn kill_me(why: &str) -> ! {
    eprintln!("cairn: {why}");
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
    loop {
        // The signal is on its way; nothing more of this process may run.
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contained_panic_is_an_error_of_that_work_only() {
        assert_eq!(contained(|| 7), Ok(7));
        let e = contained(|| -> u32 { panic!("bad page") }).unwrap_err();
        assert_eq!(e, "bad page");
        let e = contained(|| -> u32 { panic!("{} pages", 3) }).unwrap_err();
        assert_eq!(e, "3 pages");
        // Nested: leaving the inner one keeps the outer one contained.
        let outer = contained(|| {
            let _ = contained(|| 1);
            CONTAINED.get()
        });
        assert_eq!(outer, Ok(true));
        assert!(!CONTAINED.get());
    }

    #[test]
    fn a_fault_spec_arms_each_named_point_at_its_pass() {
        let armed = arming(" writer.commit@3, embed.run ,,snapshot.save@x");
        let at = |name: &str| armed.get(name).map(|(at, _)| *at);
        assert_eq!(at("writer.commit"), Some(3));
        assert_eq!(at("embed.run"), Some(0), "no pass: every pass");
        assert_eq!(at("snapshot.save"), Some(1), "an unreadable pass: the first");
        assert_eq!(armed.len(), 3);
        assert!(arming("").is_empty());
    }
}
