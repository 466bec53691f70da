//! The owner never stops serving (real processes, faults injected through the test-only
//! `CAIRN_TEST_FAULTS` points, armed by a file once the process is where the test means to
//! break it):
//! - a panic in an actor ends the owner (exit 101, its lock released by the kernel) and a
//!   standby `cairn watch` owns within 5 s and indexes what the dead one had not committed;
//! - a panic in the model costs one query's vector arm (answered keyword-only) and one page's
//!   vectors, never the owner: the next query uses the model again;
//! - a squatted socket folder, or a listener of another user, is never talked to: a one-shot
//!   command answers from the tables within 2 s, and an owner refuses to start with a message
//!   that names the folder;
//! - a folder named relatively, or with `~`, is the one meant where the command ran;
//! - a link out of the root, made while watching, indexes nothing from outside.

use crate::support::{EventReader, cairn_bin, search_json, write};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn vault(root: &Path) {
    write(root, "harbour.md", "# The Old Harbour\n\nBoats wait for the tide by the quay.\n");
    write(root, "lighthouse.md", "# Lighthouse Keeping\n\nThe keeper polishes the great lens before dusk.\n");
    write(root, "nets.md", "# Mending Nets\n\nTorn nets are mended with tarred twine.\n");
}

/// `cairn watch --json --db DB [--source sea=ROOT]`, its stdout read as events, stderr kept.
fn watch(db: &Path, root: Option<&Path>, faults: &[(&str, &Path)]) -> (Child, EventReader) {
    let mut cmd = Command::new(cairn_bin());
    cmd.args(["watch", "--json", "--db", db.to_str().unwrap()]);
    if let Some(root) = root {
        cmd.arg("--source").arg(format!("sea={}", root.display()));
    }
    for (k, v) in faults {
        cmd.env(k, v);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let events = EventReader::new(child.stdout.take().unwrap());
    (child, events)
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut s).unwrap();
    s
}

fn first_index(events: &mut EventReader) {
    events.wait_for("the first index", |e| e["event"] == "committed" && e["chunks_pending"] == 0);
}

fn degraded(answer: &Value) -> Vec<String> {
    answer["degraded"].as_array().unwrap().iter().filter_map(|d| d.as_str().map(String::from)).collect()
}

#[test]
fn a_panic_in_an_actor_ends_the_owner_and_a_standby_owns_within_five_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db, armed) = (tmp.path().join("sea"), tmp.path().join("db"), tmp.path().join("armed"));
    vault(&root);
    let faults = [("CAIRN_TEST_FAULTS", Path::new("writer.commit")), ("CAIRN_TEST_FAULTS_WHILE", &armed)];
    let (mut owner, mut events) = watch(&db, Some(&root), &faults);
    first_index(&mut events);
    // A standby: a second watch of the same folder, a client of the owner until it goes.
    let (mut standby, mut taken) = watch(&db, Some(&root), &[]);
    let status = search_json(&db, "tide", &[]);
    assert_eq!(status["served_by"]["pid"], owner.id(), "{status}");

    // The next commit of the owner's writer panics.
    std::fs::write(&armed, "").unwrap();
    write(&root, "gulls.md", "# Gulls\n\nGulls circle the quay at dawn, waiting for the boats.\n");
    let exit = owner.wait().unwrap();
    let gone = Instant::now();
    let log = stderr_of(&mut owner);
    assert_eq!(exit.code(), Some(101), "{exit}: {log}");
    assert!(log.contains("injected fault at writer.commit"), "{log}");
    assert!(log.contains("another process can take over"), "{log}");

    // The standby owns: its own pipeline's first event.
    taken.wait_for("the standby's own pipeline", |e| e["event"] == "source_started");
    let took = gone.elapsed();
    assert!(took < Duration::from_secs(5), "the standby took {took:?} to own");
    taken.wait_for("the page the dead owner never committed, with its vectors", |e| {
        e["event"] == "page_embedded" && e["slug"] == "gulls"
            || e["event"] == "page_indexed" && e["slug"] == "gulls" && e["vectors_pending"] == 0
    });
    let answer = search_json(&db, "gulls circle the quay", &[]);
    assert_eq!(answer["results"][0]["slug"], "gulls", "{answer}");
    assert_eq!(answer["served_by"]["pid"], standby.id(), "{answer}");
    eprintln!("a panic in the writer: owner exited 101; standby owned {took:?} later");
    standby.kill().unwrap();
    standby.wait().unwrap();
}

#[test]
fn a_panic_in_the_model_costs_one_answer_its_vectors_and_never_the_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db, armed) = (tmp.path().join("sea"), tmp.path().join("db"), tmp.path().join("armed"));
    vault(&root);
    let faults = [("CAIRN_TEST_FAULTS", Path::new("embed.run")), ("CAIRN_TEST_FAULTS_WHILE", &armed)];
    let (mut owner, mut events) = watch(&db, Some(&root), &faults);
    first_index(&mut events);

    std::fs::write(&armed, "").unwrap();
    let t0 = Instant::now();
    let hurt = search_json(&db, "where are nets mended", &["--mode", "balanced"]);
    assert!(t0.elapsed() < Duration::from_secs(2), "the answer took {:?}", t0.elapsed());
    assert!(degraded(&hurt).contains(&"embed_unavailable".to_string()), "{hurt}");
    assert_eq!(hurt["results"][0]["slug"], "nets", "keyword-only, still found: {hurt}");
    assert!(hurt["notes"].to_string().contains("injected fault"), "{hurt}");
    // A page embedded while the model fails: its pages are searchable, its vectors failed.
    write(&root, "gulls.md", "# Gulls\n\nGulls circle the quay at dawn.\n");
    events.wait_for("the page, indexed by name", |e| e["event"] == "page_indexed" && e["slug"] == "gulls");
    assert!(owner.try_wait().unwrap().is_none(), "the owner died: {}", stderr_of(&mut owner));

    // Disarmed: the same model session answers again (its lock was not left poisoned).
    std::fs::remove_file(&armed).unwrap();
    let healed = search_json(&db, "where are nets mended", &["--mode", "balanced"]);
    assert!(!degraded(&healed).contains(&"embed_unavailable".to_string()), "{healed}");
    assert_eq!(healed["results"][0]["slug"], "nets");
    assert_eq!(healed["served_by"]["pid"], owner.id());
    owner.kill().unwrap();
    owner.wait().unwrap();
}

/// `cairn.toml` of the database `db` over `root`, live edits at the default pace (the
/// handover's config holds them a minute).
fn live_config(tmp: &Path, root: &Path) -> (PathBuf, PathBuf) {
    let (config, db) = crate::handover::config(tmp, "db", root);
    let text = std::fs::read_to_string(&config).unwrap().replace("debounce_ms = 60000\n", "");
    std::fs::write(&config, text).unwrap();
    (config, db)
}

/// A client that goes while its `duplicates` runs takes the job with it: the owner drops the
/// request, and the job stops at its next check (here each check waits 300 ms, a test hook),
/// instead of running on for nobody; the owner serves on.
#[test]
fn a_long_job_stops_when_its_client_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sea");
    vault(&root);
    let (config, db) = live_config(tmp.path(), &root);
    let env: [(&str, &std::ffi::OsStr); 3] = [
        ("CAIRN_TEST_FAULTS", "duplicates.check".as_ref()),
        ("CAIRN_TEST_FAULTS_DELAY_MS", "300".as_ref()),
        ("RUST_LOG", "warn,cairn_actors=info".as_ref()),
    ];
    let mut owner = crate::handover::Watch::with(&config, &env);
    owner.wait_line("cairn: up to date", Duration::from_secs(300));
    let mut client = Command::new(cairn_bin())
        .args(["duplicates", "--db", db.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    owner.wait_line("injected delay of 300 ms at duplicates.check", Duration::from_secs(60));
    client.kill().unwrap();
    client.wait().unwrap();
    owner.wait_line("a client went while `duplicates` ran; its work is dropped", Duration::from_secs(10));
    owner.wait_line("duplicates: stopped early, its caller went", Duration::from_secs(10));
    let answer = search_json(&db, "where are nets mended", &[]);
    assert_eq!(answer["results"][0]["slug"], "nets", "{answer}");
    owner.stop();
}

/// While a long job runs (`duplicates`, each of its checks here waiting 1 s, a test hook: a job
/// of many seconds), edits commit and no search waits on it: every search's own latency stays
/// under 200 ms, and the job still runs when they are done.
#[test]
fn no_search_waits_on_a_long_job_and_edits_commit_meanwhile() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sea");
    vault(&root);
    for i in 0..10 {
        write(
            &root,
            &format!("meeting-{i}.md"),
            "# Weekly meeting\n\nAgenda, decisions and actions of the week.\n",
        );
    }
    let (config, db) = live_config(tmp.path(), &root);
    let env: [(&str, &std::ffi::OsStr); 2] =
        [("CAIRN_TEST_FAULTS", "duplicates.check".as_ref()), ("CAIRN_TEST_FAULTS_DELAY_MS", "1000".as_ref())];
    let mut owner = crate::handover::Watch::with(&config, &env);
    owner.wait_line("cairn: up to date", Duration::from_secs(300));
    let mut job = Command::new(cairn_bin())
        .args(["duplicates", "--json", "--db", db.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    owner.wait_line("injected delay of 1000 ms at duplicates.check", Duration::from_secs(60));
    let mut latencies = Vec::new();
    for i in 0..10 {
        write(&root, &format!("edit-{i}.md"), &format!("# Edit {i}\n\nA note written while the job runs.\n"));
        let answer = search_json(&db, "where are nets mended", &[]);
        assert_eq!(answer["results"][0]["slug"], "nets", "{answer}");
        latencies.push(answer["latency_ms"].as_f64().unwrap());
    }
    owner.wait_line("committed 1 pages", Duration::from_secs(60));
    assert!(job.try_wait().unwrap().is_none(), "the job ended before the searches and an edit's commit");
    let worst = latencies.iter().copied().fold(0.0, f64::max);
    assert!(worst < 200.0, "a search took {worst} ms while the job ran: {latencies:?}");
    // Its end is not this test's subject (the job's own tests are `duplicates`').
    job.kill().unwrap();
    job.wait().unwrap();
    eprintln!("searches while the job ran: worst {worst:.1} ms of {latencies:?}");
    owner.stop();
}

/// A commit whose resident-index update waits (for the write lock, behind long reads; here a
/// test hook's 4 s wait where it takes the lock) holds up no search: the update runs on a
/// blocking thread, never on the actors' thread that answers searches.
#[test]
fn a_commit_waiting_for_the_index_lock_holds_up_no_search() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, armed) = (tmp.path().join("sea"), tmp.path().join("armed"));
    vault(&root);
    let (config, db) = live_config(tmp.path(), &root);
    let env: [(&str, &std::ffi::OsStr); 3] = [
        ("CAIRN_TEST_FAULTS", "resident.apply".as_ref()),
        ("CAIRN_TEST_FAULTS_WHILE", armed.as_os_str()),
        ("CAIRN_TEST_FAULTS_DELAY_MS", "4000".as_ref()),
    ];
    let mut owner = crate::handover::Watch::with(&config, &env);
    owner.wait_line("cairn: up to date", Duration::from_secs(300));
    std::fs::write(&armed, "").unwrap();
    write(&root, "gulls.md", "# Gulls\n\nGulls circle the quay at dawn.\n");
    let waiting = owner.wait_line("injected delay of 4000 ms at resident.apply", Duration::from_secs(60));
    let t0 = Instant::now();
    let answer = search_json(&db, "where are nets mended", &[]);
    let took = t0.elapsed();
    std::fs::remove_file(&armed).unwrap();
    assert_eq!(answer["results"][0]["slug"], "nets", "{answer}");
    assert!(
        took < Duration::from_secs(2) && waiting.elapsed() < Duration::from_secs(4),
        "the search took {took:?} while a commit waited for the index"
    );
    owner.wait_line("committed 1 pages", Duration::from_secs(60));
    owner.wait_line("0 to go", Duration::from_secs(60));
    let answer = search_json(&db, "gulls circle the quay", &[]);
    assert_eq!(answer["results"][0]["slug"], "gulls", "{answer}");
    owner.stop();
}

/// `cairn ARGS --db DB` with `XDG_RUNTIME_DIR` set to `runtime`.
fn cairn_in(runtime: &Path, db: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(cairn_bin());
    c.args(args).args(["--db", db.to_str().unwrap()]).env("XDG_RUNTIME_DIR", runtime);
    c
}

fn nobody() -> Option<u32> {
    // Only root can hand a folder or a process to another user.
    (cairn_actors::roles::server::own_uid() == 0).then_some(65534)
}

#[test]
fn a_squatted_socket_folder_or_another_users_listener_is_never_talked_to() {
    let Some(other) = nobody() else {
        eprintln!("not root: no other user to squat with; the check is covered by the unit test");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (root, db, runtime) = (tmp.path().join("sea"), tmp.path().join("db"), tmp.path().join("run"));
    vault(&root);
    std::fs::create_dir_all(&runtime).unwrap();
    let out =
        cairn_in(&runtime, &db, &["index", "--source", &format!("sea={}", root.display())]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let socket =
        cairn_actors::core::paths::DbPaths::of(db.to_str().unwrap()).socket_in(Some(runtime.clone()));
    let folder = socket.parent().unwrap().to_path_buf();

    // Another user made the socket folder first and listens in it (the way there open to them).
    std::fs::create_dir_all(&folder).unwrap();
    for open in [tmp.path(), &runtime, folder.parent().unwrap()] {
        std::fs::set_permissions(open, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    chown(&folder, other);
    let listener = Command::new("setpriv")
        .args(["--reuid", &other.to_string(), "--regid", &other.to_string(), "--clear-groups", "/usr/bin/python3", "-c"])
        .arg("import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print('up', flush=True); c,_=s.accept(); c.sendall(b'\\x00\\x00\\x00\\x02{}'); time.sleep(60)")
        .arg(&socket)
        .stdout(Stdio::piped())
        .spawn();
    let Ok(mut listener) = listener else {
        eprintln!("setpriv is not available; the squatted folder alone is checked");
        return;
    };
    let mut up = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(listener.stdout.take().unwrap()), &mut up)
        .unwrap();
    assert_eq!(up.trim(), "up");

    // A one-shot search: not the impostor's answer, the tables' own, at once.
    let t0 = Instant::now();
    let out = cairn_in(&runtime, &db, &["search", "--json", "tarred twine"]).output().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2) + Duration::from_secs(1), "took {:?}", t0.elapsed());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["results"][0]["slug"], "nets");
    assert_eq!(answer["served_by"]["role"], "reader", "{answer}");

    // An owner will not bind there: it says whose folder it is and what to do.
    let out = cairn_in(&runtime, &db, &["watch", "--once"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&folder.display().to_string()) && err.contains("another user"), "{err}");

    // The folder made ours again (0700), yet the one listening there is another user.
    chown(&folder, 0);
    std::fs::set_permissions(&folder, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let out = cairn_in(&runtime, &db, &["search", "--json", "tarred twine"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["served_by"]["role"], "reader", "never the impostor: {answer}");
    let _ = listener.kill();
    let _ = listener.wait();
}

fn chown(path: &Path, uid: u32) {
    let ok = Command::new("chown").arg(format!("{uid}:{uid}")).arg(path).status().unwrap();
    assert!(ok.success());
}

#[test]
fn relative_and_home_folders_are_the_ones_meant_where_the_command_ran() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, db) = (tmp.path().join("home"), tmp.path().join("db"));
    vault(&home.join("sea"));
    vault(&home.join("work/bay"));
    // The owner runs elsewhere (its working directory is the temporary folder's parent). It holds
    // the database before the command below runs, or that command would be the owner itself.
    let (mut owner, mut events) = watch(&db, None, &[]);
    events.wait_for("the owner up", |e| e["event"] == "system_started");
    let elsewhere = Command::new(cairn_bin())
        .current_dir(home.join("work"))
        .env("HOME", &home)
        .args([
            "watch",
            "--once",
            "--db",
            db.to_str().unwrap(),
            "--source",
            "sea=~/sea",
            "--source",
            "bay=bay",
        ])
        .output()
        .unwrap();
    assert!(elsewhere.status.success(), "{}", String::from_utf8_lossy(&elsewhere.stderr));
    events.wait_for("both indexed", |e| {
        e["event"] == "committed" && e["chunks_pending"] == 0 && e["source"] == "bay"
    });
    let out =
        Command::new(cairn_bin()).args(["status", "--json", "--db", db.to_str().unwrap()]).output().unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    let roots: Vec<(String, PathBuf)> = status["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["source"].as_str().unwrap().to_string(), PathBuf::from(s["root"].as_str().unwrap())))
        .collect();
    assert!(roots.contains(&("sea".into(), home.join("sea"))), "{roots:?}");
    assert!(roots.contains(&("bay".into(), home.join("work/bay"))), "{roots:?}");
    owner.kill().unwrap();
    owner.wait().unwrap();
}

#[test]
fn a_link_out_of_the_root_made_while_watching_indexes_nothing_from_outside() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db, outside) = (tmp.path().join("sea"), tmp.path().join("db"), tmp.path().join("outside"));
    vault(&root);
    write(&outside, "secret.md", "# Secret\n\nThe vault must never hold the word zanzibarite.\n");
    let (mut owner, mut events) = watch(&db, Some(&root), &[]);
    first_index(&mut events);
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    // A page written after the link is a marker: once it is indexed, the link's events were seen.
    write(&root, "later.md", "# Later\n\nWritten after the link.\n");
    events.wait_for("the later page", |e| e["event"] == "page_indexed" && e["slug"] == "later");
    let flush = Command::new(cairn_bin()).args(["flush", "--db", db.to_str().unwrap()]).output().unwrap();
    assert!(flush.status.success(), "{}", String::from_utf8_lossy(&flush.stderr));
    let answer = search_json(&db, "zanzibarite", &[]);
    let slugs: Vec<&str> =
        answer["results"].as_array().unwrap().iter().filter_map(|r| r["slug"].as_str()).collect();
    assert!(!slugs.iter().any(|s| s.contains("secret")), "{answer}");
    owner.kill().unwrap();
    owner.wait().unwrap();
}
