#!/usr/bin/env python3
"""Mutation fuzzing of `gpuscope ingest` with real traces.

    python bench/fuzz_ingest.py [--cases 10000] [--seed 1] [--timeout 20] [--workers N] [--json]

Seeds are the start (a few hundred events, header kept) of every shared trace in
``../shared/data/traces`` and of gpuscope's own fixtures (fixtures/traces). Each case is one seed
with one to three mutations, written as ``.json`` or ``.json.gz``:

  truncate      the file cut at a random byte
  bitflip       1-16 random bits flipped
  typeswap      a value replaced by one of another JSON type (``"ts": "200"``, ``"args": 7``, ...)
  hugenum       a number replaced by 1e308, -1e308, 2**70, 1e-320 or 123456789012345678901234567890
  nonfinite     a number replaced by NaN, Infinity or -Infinity (not JSON, but Python writes them)
  deep          a value wrapped in 100-5000 levels of ``[``
  hugestring    a string replaced by 1-8 MiB of text
  dupkey        a key written twice in one object with different values
  unicode       a string replaced by odd unicode (lone surrogates escaped, RTL marks, NUL escapes)
  badgzip       a ``.gz`` name on bytes that are not gzip, or a gzip stream cut short

Every case runs ``gpuscope ingest FILE --db STORE -q`` in a worker process (``main()`` in a
loop; a case that takes longer than ``--timeout`` seconds is a hang: the worker is killed and
replaced) on a store that already holds a run, and must end with exit 0 (the store has one run
more) or 2 (one line on stderr naming the file, the store byte for byte as it was); never a
traceback, an internal error (exit 1) or a hang. The summary counts cases by mutation and
outcome and lists every failure with its case number, which ``--case N --out FILE`` writes out
again (the same ``--seed``) to replay it by hand.

Exit code: 0 when every case ended as it must, 1 otherwise, 2 on unusable arguments.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "traces"
FIXTURES = REPO / "fixtures" / "traces"
SEED_EVENTS = 300
MUTATIONS = ("truncate", "bitflip", "typeswap", "hugenum", "nonfinite", "deep", "hugestring", "dupkey", "unicode",
             "badgzip")


# -- seeds ------------------------------------------------------------------------------------

def _load(path: Path) -> Any:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def seeds(max_events: int = SEED_EVENTS) -> dict[str, str]:
    """Seed name -> JSON text: the head of each trace that exists (shared traces, fixtures)."""
    out: dict[str, str] = {}
    paths = sorted(FIXTURES.glob("*.json*")) + (sorted(SHARED.rglob("*.json.gz")) if SHARED.exists() else [])
    for path in paths:
        if path.stat().st_size > 64 << 20:
            continue
        try:
            doc = _load(path)
        except (OSError, ValueError):
            continue
        events = doc.get("traceEvents") if isinstance(doc, dict) else doc
        if not isinstance(events, list) or not events:
            continue
        # the head, plus the GPU activity and launches further on, so that linking has work
        head = events[:max_events] + [e for e in events[max_events:] if isinstance(e, dict)
                                       and str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "cuda_runtime")][:50]
        small = dict(doc, traceEvents=head) if isinstance(doc, dict) else head
        name = str(path.relative_to(SHARED if SHARED in path.parents else FIXTURES))
        out[name] = json.dumps(small, indent=1)
    return out


# -- mutations --------------------------------------------------------------------------------

def _values(node: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every (path, value) in a parsed document, below the top level."""
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            found.append((path + (k,), v))
            found.extend(_values(v, path + (k,)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found.append((path + (i,), v))
            found.extend(_values(v, path + (i,)))
    return found


def _set(doc: Any, path: tuple, value: Any) -> None:
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value


class _Raw:
    """A value written verbatim into the JSON text (NaN, deep nesting, duplicate keys)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _dump(doc: Any) -> str:
    raws: dict[str, str] = {}

    def enc(o: Any) -> Any:
        if isinstance(o, _Raw):
            key = f"__raw_{len(raws)}__"
            raws[key] = o.text
            return key
        if isinstance(o, dict):
            return {k: enc(v) for k, v in o.items()}
        if isinstance(o, list):
            return [enc(v) for v in o]
        return o

    text = json.dumps(enc(doc), indent=1, allow_nan=True)
    for key, raw in raws.items():
        text = text.replace(json.dumps(key), raw, 1)
    return text


def mutate(text: str, kind: str, rng: random.Random) -> tuple[bytes, bool]:
    """One mutation of a seed's JSON text: (the file's bytes, whether to name it .gz)."""
    gz = rng.random() < 0.3
    if kind in ("truncate", "bitflip", "badgzip"):
        data = bytearray(text.encode())
        if kind == "truncate":
            return bytes(data[: rng.randrange(len(data))]), gz
        if kind == "bitflip":
            for _ in range(rng.randint(1, 16)):
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
            return bytes(data), gz
        packed = gzip.compress(bytes(data), compresslevel=1)
        if rng.random() < 0.5:
            return packed[: rng.randrange(10, max(11, len(packed) - 1))], True  # a gzip stream cut short
        return b"\x1f\x8b" + bytes(data[2:200]), True  # gzip's magic on bytes that are not gzip
    doc = json.loads(text)
    vals = _values(doc)
    if kind == "typeswap":
        path, v = rng.choice(vals)
        choices = ["200", 7, 3.5, True, None, [], {}, [1, 2], {"a": "b"}, ""]
        _set(doc, path, rng.choice([c for c in choices if type(c) is not type(v)]))
    elif kind == "hugenum":
        nums = [(p, v) for p, v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)] or vals
        path, _ = rng.choice(nums)
        _set(doc, path, rng.choice([1e308, -1e308, 2 ** 70, 1e-320, _Raw("123456789012345678901234567890"),
                                    -(2 ** 63) - 1]))
    elif kind == "nonfinite":
        nums = [(p, v) for p, v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)] or vals
        path, _ = rng.choice(nums)
        _set(doc, path, _Raw(rng.choice(["NaN", "Infinity", "-Infinity"])))
    elif kind == "deep":
        path, _ = rng.choice(vals)
        n = rng.choice([100, 600, 2000, 5000])
        _set(doc, path, _Raw("[" * n + "1" + "]" * n))
    elif kind == "hugestring":
        strs = [(p, v) for p, v in vals if isinstance(v, str)] or vals
        path, _ = rng.choice(strs)
        _set(doc, path, "x" * (rng.randint(1, 8) << 20))
    elif kind == "dupkey":
        objs = [(p, v) for p, v in vals if isinstance(v, dict) and v]
        if objs:
            path, obj = rng.choice(objs)
            key = rng.choice(list(obj))
            inner = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in obj.items())
            _set(doc, path, _Raw("{" + inner + f", {json.dumps(key)}: {json.dumps(rng.choice([0, 'dup', None]))}" + "}"))
    elif kind == "unicode":
        strs = [(p, v) for p, v in vals if isinstance(v, str)] or vals
        path, _ = rng.choice(strs)
        _set(doc, path, _Raw(rng.choice(['"\\ud800"', '"\\udfff\\ud800x"', '"\\u0000nul"', '"\\u202eevil"',
                                         '"\U0001f600 emoji"', '"\\\\"'])))
    return _dump(doc).encode("utf-8", "surrogatepass"), gz


def make_case(seed_text: str, rng: random.Random) -> tuple[bytes, bool, list[str]]:
    kinds = [rng.choice(MUTATIONS) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    data, gz = seed_text.encode(), False
    for kind in kinds:
        try:
            text = data.decode("utf-8")
            json.loads(text)
        except (UnicodeDecodeError, ValueError, RecursionError):
            # no longer JSON Python can read back: only byte-level mutations apply
            kind = rng.choice(["truncate", "bitflip"])
            text = data.decode("utf-8", "surrogateescape")
            if kind == "truncate":
                data = data[: rng.randrange(max(1, len(data)))]
            else:
                b = bytearray(data)
                i = rng.randrange(max(1, len(b)))
                if b:
                    b[i] ^= 1 << rng.randrange(8)
                data = bytes(b)
            continue
        try:
            data, gz2 = mutate(text, kind, rng)
        except RecursionError:  # nested too deeply for Python to walk: cut it instead
            data, gz2 = data[: rng.randrange(max(1, len(data)))], False
            kinds.append("truncate")
        gz = gz or gz2
        if kind == "badgzip":
            return data, True, kinds
    if gz:
        data = gzip.compress(data, compresslevel=1)
    return data, gz, kinds


# -- running cases ----------------------------------------------------------------------------

def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in (path, path.with_name(path.name + ".wal")):
        if p.exists():
            h.update(p.read_bytes())
    return h.hexdigest()


def run_case(case_file: Path, store: Path, baseline: Path, base_digest: str) -> dict[str, Any]:
    """One ingest on a copy of the baseline store, in this process; what it did."""
    import contextlib
    import io

    from gpuscope.cli import main

    shutil.copyfile(baseline, store)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["ingest", str(case_file), "--db", str(store), "-q"])
        except SystemExit as exc:
            rc = int(exc.code or 0)
        except BaseException as exc:  # noqa: BLE001 - the finding itself
            rc = -1
            err.write(f"Traceback (escaped main): {type(exc).__name__}: {exc}\n")
    wall = time.perf_counter() - t0
    msg = err.getvalue().strip()
    problems = []
    if rc not in (0, 2):
        problems.append(f"exit {rc}")
    if "Traceback" in msg or "internal error" in msg:
        problems.append("traceback or internal error")
    if rc == 2:
        if len(msg.splitlines()) != 1:
            problems.append(f"{len(msg.splitlines())} lines on stderr")
        if _digest(store) != base_digest:
            problems.append("the store changed on failure")
    return {"rc": rc, "wall_s": wall, "stderr": msg[-300:], "problems": problems}


def _worker(conn: Any, workdir: str, baseline: str, base_digest: str) -> None:
    os.environ.setdefault("TMPDIR", workdir)
    store = Path(workdir) / "store.duckdb"
    while True:
        job = conn.recv()
        if job is None:
            return
        name, data, gz, part_bytes = job
        case_file = Path(workdir) / ("case.json.gz" if gz else "case.json")
        case_file.write_bytes(data)
        from gpuscope.ingest import read

        read.SPOOL_PART_BYTES = part_bytes  # small parts exercise the cuts and the batches
        conn.send(run_case(case_file, store, Path(baseline), base_digest))


class Pool:
    """Worker processes that run cases, each killed and replaced when a case hangs."""

    def __init__(self, n: int, tmp: Path, baseline: Path, base_digest: str, timeout: float) -> None:
        self.tmp, self.baseline, self.base_digest, self.timeout = tmp, baseline, base_digest, timeout
        self.ctx = mp.get_context("spawn")
        self.slots = [self._spawn(i) for i in range(n)]

    def _spawn(self, i: int) -> tuple[Any, Any]:
        wd = self.tmp / f"w{i}-{time.monotonic_ns()}"
        wd.mkdir()
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(child, str(wd), str(self.baseline), self.base_digest), daemon=True)
        p.start()
        return p, parent

    def run(self, jobs: list[tuple]) -> list[dict[str, Any]]:
        results: list[dict[str, Any] | None] = [None] * len(jobs)
        pending = list(range(len(jobs)))
        busy: dict[int, tuple[int, float]] = {}
        while pending or busy:
            for s, (_, conn) in enumerate(self.slots):
                if s not in busy and pending:
                    j = pending.pop(0)
                    conn.send(jobs[j])
                    busy[s] = (j, time.monotonic())
            for s, (j, t0) in list(busy.items()):
                p, conn = self.slots[s]
                if conn.poll(0.01):
                    results[j] = conn.recv()
                    del busy[s]
                elif time.monotonic() - t0 > self.timeout or not p.is_alive():
                    hung = p.is_alive()
                    p.kill()
                    p.join()
                    results[j] = {"rc": None, "wall_s": time.monotonic() - t0, "stderr": "",
                                  "problems": ["hang" if hung else f"worker died (exit {p.exitcode})"]}
                    del busy[s]
                    self.slots[s] = self._spawn(s)
        return [r for r in results if r is not None]

    def close(self) -> None:
        for p, conn in self.slots:
            try:
                conn.send(None)
            except OSError:
                pass
            p.join(5)
            if p.is_alive():
                p.kill()


def baseline_store(tmp: Path) -> Path:
    """A store holding one run (of a tiny trace), the state every case starts from."""
    import contextlib
    import io

    from gpuscope.cli import main

    trace = tmp / "base.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
         "args": {"device": 0, "stream": 7}}]}))
    db = tmp / "baseline.duckdb"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["ingest", str(trace), "--db", str(db), "-q"]) == 0
    return db


def cases(corpus: dict[str, str], seed: int):
    """The cases of a fuzz run, in order: (number, seed name, bytes, gz, mutations, part size)."""
    names = sorted(corpus)
    rng = random.Random(seed)
    k = 0
    while True:
        name = rng.choice(names)
        data, gz, kinds = make_case(corpus[name], rng)
        part = rng.choice([1 << 12, 1 << 14, 4 << 20])
        yield k, name, data, gz, kinds, part
        k += 1


def fuzz(n_cases: int, seed: int, timeout: float, workers: int, progress: bool = True) -> dict[str, Any]:
    corpus = seeds()
    if not corpus:
        raise SystemExit("fuzz_ingest: no seed traces (fixtures/traces or ../shared/data/traces)")
    names = sorted(corpus)
    stream = cases(corpus, seed)
    tmp = Path(tempfile.mkdtemp(prefix="gpuscope-fuzz-"))
    try:
        baseline = baseline_store(tmp)
        pool = Pool(workers, tmp, baseline, _digest(baseline), timeout)
        by_kind: dict[str, dict[str, int]] = {}
        failures = []
        t0 = time.monotonic()
        done = 0
        try:
            while done < n_cases:
                batch = []
                meta = []
                for _ in range(min(50, n_cases - done)):
                    k, name, data, gz, kinds, part = next(stream)
                    batch.append((f"{name}:{k}", data, gz, part))
                    meta.append((name, k, kinds, gz, len(data)))
                for (name, k, kinds, gz, size), r in zip(meta, pool.run(batch)):
                    outcome = "bad" if r["problems"] else ("ingested" if r["rc"] == 0 else "refused")
                    for kind in set(kinds):
                        d = by_kind.setdefault(kind, {"ingested": 0, "refused": 0, "bad": 0})
                        d[outcome] += 1
                    if r["problems"]:
                        failures.append({"seed": name, "case": k, "mutations": kinds, "gz": gz, "bytes": size, **r})
                        if progress:
                            print(f"fuzz_ingest: BAD {name}:{k} {kinds}: {r['problems']} {r['stderr'][:200]}",
                                  file=sys.stderr, flush=True)
                done += len(batch)
                if progress:
                    rate = done / max(time.monotonic() - t0, 1e-9)
                    print(f"fuzz_ingest: {done}/{n_cases} cases, {len(failures)} bad, {rate:.1f} cases/s",
                          file=sys.stderr, flush=True)
        finally:
            pool.close()
        return {"cases": n_cases, "seed": seed, "seeds": names, "timeout_s": timeout, "by_mutation": by_kind,
                "failures": failures, "wall_s": time.monotonic() - t0}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds before a case counts as a hang (default 20)")
    ap.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--case", type=int, help="write case N of this --seed to --out (and its part size to stdout)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.case is not None:
        if a.out is None or a.case < 0:
            print("fuzz_ingest: --case N needs --out FILE", file=sys.stderr)
            return 2
        for k, name, data, gz, kinds, part in cases(seeds(), a.seed):
            if k == a.case:
                a.out.write_bytes(data)
                print(json.dumps({"case": k, "seed_trace": name, "mutations": kinds, "gz": gz, "part_bytes": part}))
                return 0
    if a.cases < 1 or a.workers < 1 or a.timeout <= 0:
        print("fuzz_ingest: --cases, --workers and --timeout must be positive", file=sys.stderr)
        return 2
    res = fuzz(a.cases, a.seed, a.timeout, a.workers)
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        print(f"{res['cases']} cases from {len(res['seeds'])} seed traces in {res['wall_s']:.0f} s (seed {res['seed']}):")
        for kind, d in sorted(res["by_mutation"].items()):
            print(f"  {kind:11s} ingested {d['ingested']:6d}  refused (exit 2) {d['refused']:6d}  bad {d['bad']:4d}")
        print(f"bad cases: {len(res['failures'])}")
        for f in res["failures"][:20]:
            print(f"  {f['seed']}:{f['case']} {f['mutations']} -> {f['problems']}: {f['stderr'][:160]}")
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
