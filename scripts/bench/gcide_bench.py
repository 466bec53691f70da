"""Issue 30: the end-to-end scale benchmark on the GCIDE vault, run by scripts/bench/gcide.

    gcide_bench.py BIN VAULT WORK EVAL

Everything goes through real processes as a user runs them: one `cairn watch` owner from an
empty database, `cairn search` processes and one `cairn mcp` client asking it over its socket,
files edited in the vault, `cairn duplicates` and `cairn selftest`, restarts. It prints one line
per figure, each beside its goal where the issue sets one.

Environment: CAIRN_BENCH_QUERIES (per mode, default 1002: a third of each kind),
CAIRN_BENCH_EDITS (default 50), CAIRN_BENCH_LAST_VECTOR=1 to wait for the last vector (half an
hour to an hour of model time on 2 cores), then make the edits at once (the first of them meet
the upkeep's first compaction after the backfill) and ask every query again in steady state;
without it the edits are made while the owner still embeds the first index. With a database
in WORK already (kept by CAIRN_BENCH_KEEP, or made by scripts/bench/million), the owner reopens
it and only the queries are asked; CAIRN_BENCH_REOPEN=all then makes the edits and the restarts
too (not `duplicates` and `selftest`).
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

BIN, VAULT, WORK, EVAL = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
DB = WORK / "db"
# A database a run kept (CAIRN_BENCH_KEEP): reopened, and only the queries asked again.
REOPEN = DB.exists()
QUERIES = int(os.environ.get("CAIRN_BENCH_QUERIES", "1002"))
EDITS = int(os.environ.get("CAIRN_BENCH_EDITS", "50"))
LAST_VECTOR = os.environ.get("CAIRN_BENCH_LAST_VECTOR") == "1"
REOPEN_ALL = REOPEN and os.environ.get("CAIRN_BENCH_REOPEN") == "all"
# The goals at 200k pages, or (CAIRN_BENCH_GOALS=1m, scripts/bench/million) at 1M chunks.
GOALS = {"balanced p99 ms": 50, "settled MiB": 1536, "restart": "first answer <= 3 s"}
if os.environ.get("CAIRN_BENCH_GOALS") == "1m":
    GOALS = {"balanced p99 ms": 100, "settled MiB": 2048, "restart": "open from the snapshot <= 5 s"}
LIMIT = 1800  # seconds a `duplicates` or `selftest` run may take before it is stopped and said so
rng = random.Random(30)


def say(line):
    print(line, flush=True)


def q(values, f):
    v = sorted(values)
    return v[min(len(v) - 1, int(f * len(v)))] if v else float("nan")


def front(path):
    """A page's title and body (the text after its frontmatter)."""
    text = path.read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    head, body = (m.group(1), m.group(2)) if m else ("", text)
    t = re.search(r"^title: (.*)$", head, re.M)
    title = t.group(1).strip() if t else path.stem
    if title.startswith(('"', "'")):
        title = json.loads(title) if title.startswith('"') else title[1:-1].replace("''", "'")
    return title, body


class Owner:
    """A `cairn watch --json` process: its events (stdout) and lines (stderr), timed from spawn."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([BIN, "watch", "--json", "--db", str(DB), "--source", f"gcide={VAULT}"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.items = []  # (time, event dict or stderr line), as they came
        self.cond = threading.Condition()
        threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True).start()

    def _read(self, stream, is_json):
        for line in stream:
            now = time.monotonic()
            try:
                item = json.loads(line) if is_json else line.rstrip()
            except json.JSONDecodeError:
                continue
            with self.cond:
                self.items.append((now, item))
                self.cond.notify_all()

    def seen(self):
        with self.cond:
            return len(self.items)

    def wait(self, found, timeout, what, since=0):
        """The first (time, item) from the `since`-th on that `found` accepts: events are dicts,
        stderr lines strings."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                while since < len(self.items):
                    t, item = self.items[since]
                    since += 1
                    if found(item):
                        return t, item
                if self.proc.poll() is not None:
                    sys.exit(f"the owner exited ({self.proc.returncode}) before {what}:\n" + self.tail())
                left = deadline - time.monotonic()
                if left <= 0:
                    sys.exit(f"no {what} within {timeout} s:\n" + self.tail())
                self.cond.wait(min(left, 1.0))

    def idle_upkeep(self):
        """Wait for the upkeep the owner runs once its writer has been idle (12 s after the last
        commit: compaction, pruning, the snapshot), so a memory reading after it is settled."""
        with self.cond:
            last = max((t for t, e in self.items if event("committed")(e)), default=self.t0)
            since = len(self.items)
            while since > 0 and self.items[since - 1][0] > last:
                since -= 1
        while True:
            t, _ = self.wait(event("optimized"), 300, "the idle upkeep", since=since)
            with self.cond:
                since = next(i for i, (ti, _) in enumerate(self.items) if ti >= t) + 1
            if t - last >= 11:
                return

    def tail(self):
        return "\n".join(i for _, i in self.items if isinstance(i, str))[-4000:]

    def mib(self, *fields):
        """Fields of the owner's /proc status, in MiB."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return [int(re.search(rf"{k}:\s+(\d+)", status).group(1)) / 1024 for k in fields]

    def rss(self):
        return tuple(self.mib("VmRSS", "VmHWM"))

    def rss_parts(self):
        """The resident memory that is the process's own (heap) and that is mapped files' pages
        (the chunk file, LanceDB's files), which the kernel takes back under pressure."""
        anon, file = self.mib("RssAnon", "RssFile")
        out = subprocess.run([BIN, "status", "--json", "--db", str(DB)], capture_output=True, text=True)
        try:
            memory = json.loads(out.stdout)["memory"]
            cache = f", LanceDB's caches {memory['store_cache_mib']:.0f} MiB"
            if "store_metadata_cache_mib" in memory:
                cache += f" (metadata {memory['store_metadata_cache_mib']:.0f})"
        except (ValueError, KeyError, TypeError):
            cache = ""
        return f"anonymous {anon:.0f} MiB, file pages {file:.0f} MiB{cache}"

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(900)


def event(name, **match):
    return lambda e: isinstance(e, dict) and e.get("event") == name and all(e.get(k) == v for k, v in match.items())


def line(text):
    return lambda s: isinstance(s, str) and text in s


def search(query, mode):
    """One `cairn search` process: (answer, its own latency ms, the process's wall ms)."""
    w0 = time.monotonic()
    out = subprocess.run([BIN, "search", "--json", "--db", str(DB), "--mode", mode, "--limit", "10", "--", query],
                         capture_output=True, text=True)
    wall = (time.monotonic() - w0) * 1000
    if out.returncode != 0:
        sys.exit(f"cairn search {query!r} failed: {out.stderr}")
    a = json.loads(out.stdout)
    return a, a["latency_ms"], wall


class Mcp:
    """One `cairn mcp` client over stdio (JSON-RPC, a message per line)."""

    def __init__(self):
        self.proc = subprocess.Popen([BIN, "mcp", "--db", str(DB)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.id = 0
        self.call("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                 "clientInfo": {"name": "gcide-bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def call(self, method, params):
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        while True:
            reply = json.loads(self.proc.stdout.readline())
            if reply.get("id") == self.id:
                if "error" in reply:
                    sys.exit(f"mcp {method}: {reply['error']}")
                return reply["result"]

    def search(self, query, mode):
        w0 = time.monotonic()
        r = self.call("tools/call", {"name": "search", "arguments": {"query": query, "mode": mode}})
        wall = (time.monotonic() - w0) * 1000
        if r.get("isError"):
            sys.exit(f"mcp search {query!r}: {r}")
        return json.loads(r["content"][0]["text"])["latency_ms"], wall

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(60)


# ---------------------------------------------------------------- the queries, made before the run
pages = sorted(VAULT.rglob("*.md"))
STOP = set("a an the of to in on for by with or and as at from is be that this which it its".split())


def phrase(path):
    """Two to four consecutive words of a page's definition, its headword's words left out."""
    title, body = front(path)
    head = {w.casefold() for w in re.findall(r"[A-Za-z]+", title)}
    words = [w for w in re.findall(r"[A-Za-z]+", body) if w.casefold() not in head]
    n = rng.randint(2, 4)
    for _ in range(20):
        if len(words) < n + 1:
            return None
        i = rng.randrange(len(words) - n + 1)
        run = words[i:i + n]
        if sum(w.casefold() not in STOP for w in run) >= 2:
            return " ".join(run)
    return None


def outside():
    """Free text from outside the vault: Cranfield's requests and FOLDOC's titles."""
    cran = EVAL / "cranfield" / "queries.jsonl"
    foldoc = EVAL / "foldoc" / "vault"
    if not cran.exists() or not foldoc.is_dir():
        sys.exit(f"the free-text queries come from {EVAL}/cranfield and {EVAL}/foldoc, which are missing")
    texts = [json.loads(l)["query"].rstrip(" .") for l in cran.read_text().splitlines() if l.strip()]
    titles = [front(p)[0] for p in sorted(foldoc.rglob("*.md"))]
    return texts + rng.sample(titles, len(texts))


per_kind = QUERIES // 3
heads = [(front(p)[0], p) for p in rng.sample(pages, per_kind)]
phrases = []
for p in rng.sample(pages, per_kind * 3):
    t = phrase(p)
    if t:
        phrases.append((t, p))
    if len(phrases) == per_kind:
        break
free = rng.sample(outside(), per_kind)
kinds = {"headword": heads, "phrase": phrases, "free text": [(t, None) for t in free]}

# ---------------------------------------------------------------- from an empty database
owner = Owner()
if REOPEN:
    t_up, _ = owner.wait(line("cairn: up to date"), 3600, "the reopened owner up to date")
    _, started = owner.wait(event("source_started", source="gcide"), 60, "source_started")
    now, peak = owner.rss()
    say(f"reopened a database: up to date {t_up - owner.t0:.1f} s after the owner's start; source open "
        f"{started.get('open_ms')} ms, from snapshot: {started.get('from_snapshot')} (goal for a first open "
        f"from the tables: peak <= 2560 MiB); owner RSS {now:.0f} MiB ({owner.rss_parts()}), peak {peak:.0f} MiB")
else:
    t_name, _ = owner.wait(line("every page is searchable by name"), 3600, "every page searchable by name")
    by_name = t_name - owner.t0
    now, peak = owner.rss()
    say(f"pages {len(pages)}: every page searchable by name and keyword after {by_name:.1f} s "
        f"(goal <= 60 s: {by_name / 60:.2f} x the bound); owner RSS then {now:.0f} MiB, peak {peak:.0f} MiB")

# ---------------------------------------------------------------- clients while the owner works

def ask_all(state):
    """Every query of every kind in every mode from `cairn search` processes, with one `cairn mcp`
    client asking balanced queries meanwhile."""
    mcp_lat, mcp_stop = [], threading.Event()

    def mcp_client():
        client, own = Mcp(), random.Random(31)
        mixed = [t for t, _ in heads + phrases] + free
        while not mcp_stop.is_set():
            mcp_lat.append(client.search(own.choice(mixed), "balanced")[0])
        client.close()

    mcp_thread = threading.Thread(target=mcp_client, daemon=True)
    mcp_thread.start()
    for mode in ["fast", "balanced", "thorough"]:
        for kind, asked in kinds.items():
            took, wall, hit1, hit10 = [], [], 0, 0
            for text, page in asked:
                a, ms, w = search(text, mode)
                took.append(ms)
                wall.append(w)
                if page is not None:
                    rel = str(page.relative_to(VAULT))
                    paths = [r["path"] for r in a["results"]]
                    hit1 += bool(paths) and paths[0] == rel
                    hit10 += rel in paths
            hits = f"Hit@1 {hit1 / len(asked):.3f}, Hit@10 {hit10 / len(asked):.3f}; " if kind != "free text" else ""
            goal = f" (goal: balanced p99 <= {GOALS['balanced p99 ms']} ms)" if mode == "balanced" else ""
            say(f"{mode}, {len(asked)} {kind} queries {state}: {hits}answer p50 {q(took, .5):.1f} ms, "
                f"p95 {q(took, .95):.1f} ms, p99 {q(took, .99):.1f} ms, max {max(took):.1f} ms; "
                f"process wall p50 {q(wall, .5):.0f} ms{goal}")
    mcp_stop.set()
    mcp_thread.join()
    say(f"one `cairn mcp` client meanwhile, balanced, {len(mcp_lat)} queries: answer p50 {q(mcp_lat, .5):.1f} ms, "
        f"p95 {q(mcp_lat, .95):.1f} ms, p99 {q(mcp_lat, .99):.1f} ms")
    now, peak = owner.rss()
    say(f"owner RSS after the queries {now:.0f} MiB ({owner.rss_parts()}), peak {peak:.0f} MiB")


if REOPEN:
    ask_all("in steady state, reopened")
    if not REOPEN_ALL:
        owner.stop()
        sys.exit(0)
else:
    state = "while the owner embeds the first index"
    ask_all(state)


# ---------------------------------------------------------------- edits
def edit_pages(state):
    """EDITS pages appended to, each timed from the write to `page_indexed` and `page_embedded`;
    with the upkeep runs (`optimized`) the owner made meanwhile, which an edit may wait behind."""
    indexed, embedded = [], []
    since = owner.seen()
    for i, page in enumerate(rng.sample(pages, EDITS)):
        rel = str(page.relative_to(VAULT))
        seen = owner.seen()
        t0 = time.monotonic()
        with page.open("a", encoding="utf-8") as f:
            f.write(f"\nBench edit {i}: zqx{i}marker appended to measure the time to searchable.\n")
        t_ix, e = owner.wait(event("page_indexed", path=rel), 300, f"{rel} indexed", since=seen)
        indexed.append((t_ix - t0) * 1000)
        slug = e["slug"]
        if e.get("vectors_pending", 0) == 0:
            embedded.append(indexed[-1])
            continue
        t_em, _ = owner.wait(event("page_embedded", slug=slug), 600, f"{rel} embedded", since=seen)
        embedded.append((t_em - t0) * 1000)
    with owner.cond:
        upkeep = [e for _, e in owner.items[since:] if event("optimized")(e)]
    runs = ", ".join(f"{e.get('ms')} ms{' (compacted)' if e.get('compacted') else ''} in {e.get('steps', '?')} steps "
                     f"(longest {e.get('longest_step', '?')} {e.get('longest_step_ms', '?')} ms)" for e in upkeep)
    say(f"{EDITS} edits {state}: edit -> searchable p50 {q(indexed, .5):.0f} ms, p99 {q(indexed, .99):.0f} ms "
        f"(goal p99 <= 1 s); edit -> vectors p50 {q(embedded, .5):.0f} ms, p99 {q(embedded, .99):.0f} ms; "
        f"upkeep runs meanwhile: {runs or 'none'}")


# ---------------------------------------------------------------- the last vector
if REOPEN_ALL:
    edit_pages("in steady state, reopened")
    owner.idle_upkeep()
    now, peak = owner.rss()
    say(f"owner RSS settled after the queries, the edits and the idle upkeep {now:.0f} MiB (goal <= {GOALS['settled MiB']}; "
        f"{owner.rss_parts()}), peak {peak:.0f} MiB")
elif LAST_VECTOR:
    t_done, _ = owner.wait(line("cairn: up to date"), 4 * 3600, "the last vector")
    with owner.cond:
        embed_ms = sum(e.get("embed_ms", 0) for _, e in owner.items if event("committed")(e))
    took = t_done - owner.t0
    now, peak = owner.rss()
    say(f"last vector after {took:.0f} s; the model's own time {embed_ms / 1000:.0f} s "
        f"({took / max(embed_ms / 1000, 1e-9):.2f} x it, goal <= 1.05); owner RSS at the last vector {now:.0f} MiB "
        f"({owner.rss_parts()}; the model gives its batches' memory back 2 s later), peak {peak:.0f} MiB")
    # At once, as a user goes on editing when the index is done: the first edits meet the
    # upkeep's first compaction after the backfill.
    edit_pages("in steady state, from the last vector on")
    ask_all("in steady state")
    owner.idle_upkeep()
    now, peak = owner.rss()
    say(f"owner RSS settled after the edits, the queries and the idle upkeep {now:.0f} MiB "
        f"(goal <= {GOALS['settled MiB']}; {owner.rss_parts()})")
else:
    edit_pages(state)


# ---------------------------------------------------------------- duplicates and selftest
def while_running(args):
    """Run `cairn ARGS` to the end while searches go on; its wall time and the searches' latencies."""
    probe = [t for t, _ in heads[:50] + phrases[:50]]
    took, done = [], threading.Event()

    def ask():
        i = 0
        while not done.is_set():
            took.append(search(probe[i % len(probe)], ["fast", "balanced"][i % 2])[1])
            i += 1

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    w0 = time.monotonic()
    try:
        out = subprocess.run([BIN, *args, "--db", str(DB)], capture_output=True, text=True, timeout=LIMIT)
        ok = "ok" if out.returncode == 0 else f"exit {out.returncode}: {out.stderr.strip()[-300:]}"
    except subprocess.TimeoutExpired:
        ok = f"stopped: not done after {LIMIT} s"
    wall = time.monotonic() - w0
    done.set()
    asker.join()
    slow = sum(t > 200 for t in took)
    say(f"`cairn {' '.join(args)}` on the whole vault: {wall:.1f} s ({ok}); {len(took)} searches meanwhile: "
        f"p50 {q(took, .5):.1f} ms, p99 {q(took, .99):.1f} ms, max {max(took, default=0):.1f} ms, "
        f"{slow} over 200 ms (goal 0)")


if not REOPEN_ALL:
    while_running(["duplicates", "--json"])
    while_running(["selftest", "--json"])


# ---------------------------------------------------------------- restarts
def restart(why, stopped=lambda: None):
    """Stop the owner, run `stopped` (the owner saves its snapshot as it stops), start it again."""
    global owner
    owner.stop()
    stopped()
    owner = Owner()
    owner.wait(event("system_started"), 300, "system_started")
    a, ms, _ = search(heads[0][0], "fast")
    first = time.monotonic() - owner.t0
    _, started = owner.wait(event("source_started", source="gcide"), 300, "source_started")
    now, peak = owner.rss()
    say(f"restart {why}: first answer {first:.2f} s after the owner's start ({len(a['results'])} results); "
        f"source open {started.get('open_ms')} ms, from snapshot: {started.get('from_snapshot')} "
        f"(goal: {GOALS['restart']}); owner RSS {now:.0f} MiB ({owner.rss_parts()}), peak {peak:.0f} MiB")


restart("of the owner")
removed = []


def remove_snapshots():
    for s in (DB / "snapshots").glob("*.snapshot"):
        s.unlink()
        removed.append(s)


restart("with the snapshot removed, as after an upgrade: opened from the tables", remove_snapshots)
say(f"(snapshot files removed: {len(removed)})")
owner.stop()
