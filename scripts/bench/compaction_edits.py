"""Edits during the first compaction after a backfill (issue 30), through a real owner.

Usage: compaction_edits.py CAIRN DB VAULT EDITS. Starts `cairn watch --json` on DB (made by
scripts/bench/compaction), edits EDITS pages of VAULT one at a time as the GCIDE bench does
(append a line, wait for `page_indexed`, then for `page_embedded`), and prints each edit's
time to searchable with the upkeep runs (`optimized`: steps, longest step) the owner made."""
import json
import pathlib
import random
import subprocess
import sys
import threading
import time

BIN, DB, VAULT, EDITS = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), int(sys.argv[4])
t0 = time.monotonic()
proc = subprocess.Popen([BIN, "watch", "--json", "--db", DB, "--source", f"gcide={VAULT}"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
items, cond = [], threading.Condition()


def pump(stream, events):
    for raw in stream:
        try:
            item = json.loads(raw) if events else raw.rstrip()
        except ValueError:
            item = raw.rstrip()
        with cond:
            items.append((time.monotonic(), item))
            cond.notify_all()


def wait(pred, since, timeout=600):
    end = time.monotonic() + timeout
    with cond:
        while True:
            for t, item in items[since:]:
                if pred(item):
                    return t, item
            if not cond.wait(max(end - time.monotonic(), 0)):
                proc.kill()
                sys.exit(f"timed out; last lines: {items[-5:]}")


def event(name, **fields):
    return lambda i: isinstance(i, dict) and i.get("event") == name and all(i.get(k) == v for k, v in fields.items())


threading.Thread(target=pump, args=(proc.stdout, True), daemon=True).start()
threading.Thread(target=pump, args=(proc.stderr, False), daemon=True).start()
wait(lambda i: isinstance(i, str) and "up to date" in i, 0)
print(f"owner up to date after {time.monotonic() - t0:.1f} s", flush=True)
pages = sorted(VAULT.rglob("*.md"))
latencies = []
for n, page in enumerate(random.Random(7).sample(pages, EDITS)):
    rel = str(page.relative_to(VAULT))
    since, t = len(items), time.monotonic()
    with page.open("a", encoding="utf-8") as f:
        f.write(f"\nCompaction bench edit {n}: zqc{n}marker.\n")
    t_indexed, e = wait(event("page_indexed", path=rel), since)
    latencies.append((t_indexed - t) * 1000)
    if e.get("vectors_pending", 0):
        wait(event("page_embedded", slug=e["slug"]), since)
wait(event("optimized", compacted=True), 0, 300)
print("edit -> searchable, ms, in order:", " ".join(f"{x:.0f}" for x in latencies))
s = sorted(latencies)
print(f"p50 {s[len(s) // 2]:.0f} ms, p99 {s[min(len(s) - 1, int(len(s) * .99))]:.0f} ms, max {s[-1]:.0f} ms")
for t, i in items:
    if event("optimized")(i):
        print(f"at {t - t0:.1f} s: upkeep {i['ms']} ms{' (compacted)' if i.get('compacted') else ''}, "
              f"{i.get('steps', '?')} steps, longest {i.get('longest_step', '?')} {i.get('longest_step_ms', '?')} ms")
proc.terminate()
proc.wait()
