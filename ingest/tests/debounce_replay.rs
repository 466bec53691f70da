//! Replays every `fixtures/events/debounce/*.json` through the debouncer: events at logical
//! times, and at each `expect` step the changes that must settle then (in order).

use cairn_ingest::{Debouncer, RawEvent, Settled};
use std::path::PathBuf;

#[derive(serde::Deserialize)]
struct Case {
    description: String,
    quiet_ms: u64,
    steps: Vec<Step>,
}

#[derive(serde::Deserialize)]
struct Step {
    at: u64,
    event: Option<RawEvent>,
    expect: Option<Vec<Settled>>,
}

#[test]
fn debounce_cases_replay_to_their_expected_output() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("../fixtures/events/debounce");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 10, "fixture cases missing in {}", dir.display());
    for file in files {
        let case: Case = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut d = Debouncer::new(case.quiet_ms);
        for step in case.steps {
            if let Some(event) = step.event {
                d.push(event, step.at);
            }
            if let Some(expected) = step.expect {
                let got = d.tick(step.at);
                assert_eq!(got, expected, "{} ({}) at {}", file.display(), case.description, step.at);
            }
        }
        assert_eq!(d.pending(), 0, "{}: changes left unsettled", file.display());
    }
}
