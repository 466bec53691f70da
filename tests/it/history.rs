//! Issue 50's fault suite, Jepsen's method on a small scale: real processes on simulated
//! machines (own home, state and runtime folders) against SeaweedFS, a workload of edits, faults
//! at random moments, and a checker over the whole history of what was committed and answered.
//!
//! Two machines run `cairn watch` on the same vault: one writes, the other stands by. A reader in
//! this process asks for every edit, again and again. Each round writes a new note and then,
//! after a random pause, strikes the writer or the standby: `kill -9` (the machine restarts its
//! watch a round later, so the other one must take over), `SIGSTOP` past the lease's TTL and then
//! `SIGCONT` (a laptop lid, a long pause), the store cut off from it past the TTL (each machine
//! reaches SeaweedFS through a proxy of its own, which then holds every request unanswered), or
//! nothing. The checker asserts, over the recorded history:
//!
//! - every committed edit is answered on the reader, within the bound a takeover allows;
//! - no answer says `pending_changes: 0` while lacking an edit committed over 1 s before it;
//! - at the end, once every machine stopped and the next writer ran, the tables equal a clean
//!   index of the folder.
//!
//! The two machines' wall clocks are a minute either side of the true time (libfaketime).
//!
//! `CAIRN_FAULT_ROUNDS` sets the rounds (6 by default, for CI; the long run: `scripts/bench/faults`),
//! `CAIRN_FAULT_SEED` the seed (printed, so a failing run can be replayed).

use crate::flaky::{Flaky, Mode};
use crate::machines::{Reaped, note, on_machine, tables_equal_a_clean_index, team};
use cairn_actors::replication::lease::TTL;
use cairn_actors::{Cairn, Config};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An answer must reach the reader within this of its commit, faults included: a writer killed
/// between its commit and telling the journal is noticed once the lease runs out (the TTL, and
/// the reader's 10 s look at the lease), and the next writer must open.
const ANSWERED_WITHIN: Duration = Duration::from_secs(45);
/// An answer may lack an edit committed this recently and still say nothing is pending (the
/// reader looks at the writer's head twice a second).
const HONEST_AFTER: Duration = Duration::from_secs(1);

/// One line of the history: an event a machine printed, as it was read.
struct Seen {
    at: Instant,
    machine: &'static str,
    event: Value,
}

type History = Arc<Mutex<Vec<Seen>>>;

/// What the reader answered for an edit's token.
struct Answer {
    at: Instant,
    edit: usize,
    found: bool,
    pending: Option<u64>,
}

/// `cmd`'s wall clock set `offset` off (`+60s`, `-60s`) through Debian's libfaketime (installed
/// by scripts/test); its monotonic and boot clocks only move with it, which changes no interval.
fn skewed(cmd: &mut Command, offset: &str) {
    let lib = std::path::Path::new(FAKETIME);
    assert!(lib.exists(), "{FAKETIME} is missing: scripts/test installs Debian's faketime");
    cmd.env("LD_PRELOAD", lib).env("FAKETIME", offset).env("FAKETIME_DONT_RESET", "1");
}

/// libfaketime's build for processes with threads.
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// A `cairn watch` on one machine, its events appended to the history and its log to
/// `logs/<machine>.log` (every run of that machine, one after another).
fn watch(on: &dyn Fn(&str) -> Command, machine: &'static str, history: &History, logs: &Path) -> Reaped {
    watch_said(on, machine, history, logs).0
}

/// [`watch`], and what tells when the process said it is up: that it watches (the writer) or
/// stands by (a standby prints no events until it writes). Its signal handlers are installed
/// by then: a SIGTERM before them ends a process outright, and a loaded machine starts one
/// slowly. The log is copied line by line as the process writes it.
fn watch_said(
    on: &dyn Fn(&str) -> Command,
    machine: &'static str,
    history: &History,
    logs: &Path,
) -> (Reaped, tokio::sync::oneshot::Receiver<()>) {
    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(log_of(logs, machine)).unwrap();
    let mut child = Reaped(on(machine).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let stderr = child.0.stderr.take().unwrap();
    let history = history.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(event) = serde_json::from_str::<Value>(&line) {
                history.lock().unwrap().push(Seen { at: Instant::now(), machine, event });
            }
        }
    });
    let (up, said) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        let mut up = Some(up);
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            let is_up = ["cairn: watching", "stands by to take over", "standing by to take over"]
                .iter()
                .any(|t| line.contains(t));
            if is_up && let Some(up) = up.take() {
                let _ = up.send(());
            }
        }
    });
    (child, said)
}

fn log_of(logs: &Path, machine: &str) -> std::path::PathBuf {
    logs.join(format!("{machine}.log"))
}

/// The last lines `machine` logged (for a failure's message).
fn log_tail(logs: &Path, machine: &str) -> String {
    let log = std::fs::read_to_string(log_of(logs, machine)).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// When edit `i` was first committed, by any machine.
fn committed(history: &History, i: usize) -> Option<Instant> {
    let slug = format!("edit-{i}");
    history
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.event["event"] == "page_indexed" && s.event["slug"] == slug)
        .map(|s| s.at)
}

/// The history's last events, each with its machine (for a failure's message).
fn tail(history: &History) -> String {
    let h = history.lock().unwrap();
    let start = h.first().map(|s| s.at);
    h.iter()
        .rev()
        .take(40)
        .rev()
        .map(|s| {
            format!("{:>8.3} s {}: {}", start.map_or(0.0, |t| (s.at - t).as_secs_f64()), s.machine, s.event)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn signal(child: &Reaped, sig: &str) {
    let pid = child.0.id().to_string();
    assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
}

/// A small xorshift generator: runs are reproducible from their seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_under_kills_and_pauses_are_all_answered_and_never_hidden_behind_nothing_pending() {
    let rounds: usize = std::env::var("CAIRN_FAULT_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let seed: u64 =
        std::env::var("CAIRN_FAULT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
        });
    eprintln!("fault suite: {rounds} rounds, seed {seed}");
    let mut rng = Rng(seed);
    let (tmp, weed, vault, db) = team("history", 3);
    let source = format!("nt={}", vault.display());
    let proxies: BTreeMap<&str, Flaky> = ["a", "b"].map(|m| (m, Flaky::start(weed.ports[6]))).into();
    let on = |m: &str| {
        let mut c = on_machine(&weed, tmp.path(), m, &db, &["watch", "--json", "--source", &source]);
        c.env("AWS_ENDPOINT", proxies[m].endpoint());
        // Their clocks disagree by two minutes, each a minute off the store's and the reader's:
        // nothing that decides (the lease, freshness) may read a wall clock.
        skewed(&mut c, if m == "a" { "-60s" } else { "+60s" });
        c
    };
    let history: History = Arc::default();

    let mut machines: BTreeMap<&'static str, Reaped> = BTreeMap::new();
    machines.insert("a", watch(&on, "a", &history, tmp.path()));
    let first = Instant::now();
    while !history
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.event["event"] == "committed" && s.event["chunks_pending"] == 0)
    {
        assert!(first.elapsed() < Duration::from_secs(300), "A's first index");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    machines.insert("b", watch(&on, "b", &history, tmp.path()));

    let mut config = Config::new(db.clone(), vec![]);
    config.storage = weed.options();
    let reader = Cairn::open(config).await.unwrap();
    let mut answers: Vec<Answer> = Vec::new();
    let ask = async |answers: &mut Vec<Answer>, edit: usize| {
        let req = cairn_actors::SearchRequest {
            mode: cairn_actors::Mode::Fast,
            ..cairn_actors::SearchRequest::new(format!("tok{edit}q"))
        };
        let a = reader.search(req).await.unwrap();
        let found = a.results.iter().any(|r| r.slug == format!("edit-{edit}"));
        answers.push(Answer { at: Instant::now(), edit, found, pending: a.pending_changes });
        found
    };
    // Every edit so far, asked over and over for `d` (while a fault lasts).
    let ask_every_edit = async |answers: &mut Vec<Answer>, last: usize, d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until {
            for e in 0..=last {
                ask(answers, e).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };

    let mut faults = BTreeMap::<&str, usize>::new();
    let mut dead: Option<&'static str> = None;
    for i in 0..rounds {
        crate::support::write(&vault, &format!("edit-{i}.md"), &note(i, &format!(" It says tok{i}q.")));
        // A random moment of the edit's way: debounce, parse, commit, journal, or after.
        let pause = Instant::now() + Duration::from_millis(rng.below(1500));
        while Instant::now() < pause {
            ask(&mut answers, i).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A machine killed last round comes back now: this round's edit was the standby's to take.
        if let Some(m) = dead.take() {
            machines.insert(m, watch(&on, m, &history, tmp.path()));
        }
        let writer = reader.status().await.unwrap().writer.map(|w| w.pid);
        let (struck, other) = match machines.iter().find(|(_, c)| Some(c.0.id()) == writer) {
            Some((m, _)) => (*m, if *m == "a" { "b" } else { "a" }),
            None => ("a", "b"),
        };
        let target = if rng.below(4) == 0 { other } else { struck };
        match rng.below(4) {
            0 => {
                *faults.entry("kill -9").or_default() += 1;
                let mut gone = machines.remove(target).unwrap();
                signal(&gone, "-KILL");
                let _ = gone.0.wait();
                dead = Some(target);
            }
            1 => {
                *faults.entry("SIGSTOP past the TTL").or_default() += 1;
                signal(&machines[target], "-STOP");
                ask_every_edit(&mut answers, i, TTL + Duration::from_secs(2)).await;
                signal(&machines[target], "-CONT");
            }
            2 => {
                *faults.entry("store cut off past the TTL").or_default() += 1;
                proxies[target].set(Mode::Hang);
                ask_every_edit(&mut answers, i, TTL + Duration::from_secs(2)).await;
                proxies[target].set(Mode::Pass);
            }
            _ => *faults.entry("none").or_default() += 1,
        }
        // The round ends once the edit is answered (or its bound is long past: the checker says so).
        let since = Instant::now();
        while !ask(&mut answers, i).await && since.elapsed() < ANSWERED_WITHIN * 2 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    eprintln!("fault suite: faults {faults:?}, {} answers", answers.len());

    // The checker.
    let mut violations = Vec::new();
    let mut worst = Duration::ZERO;
    let mut by_edit: BTreeMap<usize, Vec<&Answer>> = BTreeMap::new();
    for a in &answers {
        by_edit.entry(a.edit).or_default().push(a);
    }
    for i in 0..rounds {
        let answers = by_edit.remove(&i).unwrap_or_default();
        // A writer killed between its table commit and its events never says it committed; the
        // next writer finds the page already stored and says nothing either. Its commit is then
        // known from the reader alone: no later than the first answer that found it.
        let Some(at) = committed(&history, i).or_else(|| answers.iter().find(|a| a.found).map(|a| a.at))
        else {
            violations.push(format!("edit {i} was never committed (no writer said so, no answer found it)"));
            continue;
        };
        match answers.iter().find(|a| a.found) {
            Some(a) => {
                let took = a.at.saturating_duration_since(at);
                worst = worst.max(took);
                if took > ANSWERED_WITHIN {
                    violations.push(format!("edit {i} answered {took:?} after its commit"));
                }
            }
            None => violations.push(format!("edit {i} never answered on the reader")),
        }
        for a in answers.iter().filter(|a| !a.found && a.pending == Some(0)) {
            if a.at > at + HONEST_AFTER {
                violations.push(format!(
                    "an answer {:?} after edit {i}'s commit lacked it and said nothing was pending",
                    a.at - at
                ));
                break;
            }
        }
    }
    eprintln!("fault suite: slowest commit → answered on the reader {worst:?}");
    assert!(
        violations.is_empty(),
        "seed {seed}: {violations:#?}\nthe machines' last events:\n{}",
        tail(&history)
    );

    if let Some(m) = dead.take() {
        let (child, first) = watch_said(&on, m, &history, tmp.path());
        machines.insert(m, child);
        // Stopped only once it is up to be stopped.
        tokio::time::timeout(Duration::from_secs(120), first)
            .await
            .unwrap_or_else(|_| panic!("{m} did not say it watches or stands by within 120 s of its start"))
            .unwrap_or_else(|_| panic!("{m} exited before it said it watches or stands by"));
    }
    // Every machine stops cleanly (the writer commits what is pending and gives the lease back),
    // then the next writer converges the tables: a one-shot index on another machine (what a
    // chunk still waiting for its vector at the stop needs, and what any restart does).
    reader.shutdown().await.unwrap();
    for c in machines.values() {
        signal(c, "-CONT");
    }
    for (m, c) in machines.iter_mut() {
        signal(c, "-TERM");
        let status = c.0.wait().unwrap();
        assert!(
            status.success(),
            "{m} stops cleanly, not {status}; its log's end:\n{}\nthe machines' last events:\n{}",
            log_tail(tmp.path(), m),
            tail(&history)
        );
    }
    let mut next = on_machine(&weed, tmp.path(), "z", &db, &["index", "--source", &source]);
    let out = next.output().unwrap();
    assert!(out.status.success(), "the next writer: {}", String::from_utf8_lossy(&out.stderr));
    tables_equal_a_clean_index(tmp.path(), &weed, &db, &source, &format!("seed {seed}: the bucket's tables"))
        .await;
    let _ = std::fs::remove_dir_all(cairn_actors::core::paths::DbPaths::of(&db).dir());
}
