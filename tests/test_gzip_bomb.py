"""A gzip bomb is refused while it streams (exit 2, one line naming the file and the limit),
leaves the store and the temporary folder as they were; real traces pass with the defaults."""
from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import SHARED_TRACES, file_digest, kernel, run_cli, write_trace
from gpuscope.ingest import read


def _bomb(path: Path, inflated_mib: int, prefix: bytes = b'{"traceEvents": [', suffix: bytes = b"]}") -> Path:
    """A valid gzip stream of a trace head followed by ``inflated_mib`` MiB of spaces."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (1 << 20)
    with open(path, "wb") as f:
        f.write(comp.compress(prefix))
        for _ in range(inflated_mib):
            f.write(comp.compress(block))
        f.write(comp.compress(suffix))
        f.write(comp.flush())
    return path


@pytest.fixture
def tmpdir_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return tmp


def _existing_store(tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    t = write_trace(tmp_path / "ok.json", [kernel("k", 0.0, 1.0)])
    assert run_cli("ingest", t, "--db", db, "-q").code == 0
    return db


def test_bomb_refused_early(tmp_path: Path, tmpdir_watch: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.json.gz", 400)  # ~400 KB that inflate to 400 MiB
    assert bomb.stat().st_size < 2 << 20
    db = _existing_store(tmp_path)
    before = file_digest(db)
    r = run_cli("ingest", bomb, "--db", db, "-q")
    assert r.code == 2
    (line,) = r.err.strip().splitlines()
    assert str(bomb) in line and "200x" in line and "--max-inflate-ratio" in line and "Traceback" not in r.err
    assert file_digest(db) == before
    assert list(tmpdir_watch.iterdir()) == []


def test_bomb_refused_through_analyze_and_compare(tmp_path: Path, tmpdir_watch: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.json.gz", 300)
    db = _existing_store(tmp_path)
    before = file_digest(db)
    for args in (("analyze", bomb), ("compare", bomb, "1")):
        r = run_cli(*args, "--db", db)
        assert r.code == 2 and "gzip bomb" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert file_digest(db) == before
    assert list(tmpdir_watch.iterdir()) == []


def test_bomb_in_a_directory_is_refused_not_skipped(tmp_path: Path, tmpdir_watch: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    write_trace(folder / "rank0.json", [kernel("k", 0.0, 1.0)])
    _bomb(folder / "rank1.json.gz", 300)
    r = run_cli("ingest", folder, "--db", tmp_path / "s.duckdb", "-q")
    assert r.code == 2 and "rank1.json.gz" in r.err and "gzip bomb" in r.err
    assert not (tmp_path / "s.duckdb").exists()


def test_the_flag_raises_the_limit(tmp_path: Path, tmpdir_watch: Path) -> None:
    """With a higher limit the same file is read to its end (here it then fails for what it
    is, an empty array padded with blanks), and _Input lets it through whole."""
    path = _bomb(tmp_path / "padded.json.gz", 300)
    r = run_cli("ingest", path, "--db", tmp_path / "s.duckdb", "-q")
    assert r.code == 2 and "gzip bomb" in r.err
    r = run_cli("ingest", path, "--db", tmp_path / "s.duckdb", "-q", "--max-inflate-ratio", "5000")
    assert "gzip bomb" not in r.err and "Traceback" not in r.err
    inp = read._Input(path, max_inflate_ratio=5000)
    try:
        while inp.read():
            pass
    finally:
        inp.close()
    assert inp.inflated_bytes > 300 << 20
    assert list(tmpdir_watch.iterdir()) == []
    for bad in ("0", "-3", "abc", "nan"):
        r = run_cli("ingest", path, "--db", tmp_path / "s.duckdb", "--max-inflate-ratio", bad)
        assert r.code == 2 and "--max-inflate-ratio" in r.err


def test_small_repetitive_files_are_not_refused(tmp_path: Path) -> None:
    """Under the absolute floor the ratio does not matter: a tiny, very compressible trace is fine."""
    path = _bomb(tmp_path / "tiny.json.gz", 20, prefix=json.dumps({"traceEvents": [kernel("k", 0.0, 1.0)]}).encode(),
                 suffix=b"\n")
    r = run_cli("ingest", path, "--db", tmp_path / "s.duckdb", "-q")
    assert r.code == 0, r.err


@pytest.mark.parametrize("bad", ["truncated", "not_gzip"])
def test_broken_gzip_still_named_precisely(tmp_path: Path, tmpdir_watch: Path, bad: str) -> None:
    good = write_trace(tmp_path / "t.json.gz", [kernel("k", float(i), 1.0) for i in range(2000)])
    path = tmp_path / f"{bad}.json.gz"
    if bad == "truncated":
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
        expect = "truncated gzip"
    else:
        path.write_bytes(b"\x1f\x8b" + os.urandom(4000))
        expect = "gzip"
    r = run_cli("ingest", path, "--db", tmp_path / "s.duckdb", "-q")
    assert r.code == 2 and expect in r.err and len(r.err.strip().splitlines()) == 1
    assert list(tmpdir_watch.iterdir()) == []


def test_real_traces_are_far_below_the_ratio() -> None:
    files = sorted(SHARED_TRACES.rglob("*.gz")) if SHARED_TRACES.exists() else []
    files += sorted((Path(__file__).resolve().parents[1] / "fixtures").rglob("*.json.gz"))
    for f in files:
        inp = read._Input(f)
        try:
            while inp.read():
                pass
        finally:
            inp.close()
        assert inp.inflated_bytes < read.MAX_INFLATE_RATIO / 5 * f.stat().st_size, f


def _members(path: Path, member: bytes, copies: int, head: bytes = b"", tail: bytes = b"") -> Path:
    """A gzip file of ``copies`` identical members (one compression, written many times: a large
    inflated size costs the test no compression time); ``head``/``tail`` members around them."""
    packed = gzip.compress(member, compresslevel=6)
    with open(path, "wb") as f:
        if head:
            f.write(gzip.compress(head))
        for _ in range(copies):
            f.write(packed)
        if tail:
            f.write(gzip.compress(tail))
    return path


def _trace_like_text(mib: int) -> bytes:
    """Kernel events with varied numbers and names: text that compresses about as well as real
    Kineto JSON (10-25x), not like blanks."""
    import random

    rnd = random.Random(7)
    parts, size = [], 0
    while size < mib << 20:
        ev = kernel(f"void gemm_{rnd.randrange(400)}<float, {rnd.randrange(64)}>(float*, int)",
                    round(rnd.uniform(0, 1e9), 3), round(rnd.uniform(1, 900), 3), corr=rnd.randrange(10**7),
                    grid=[rnd.randrange(4096), 1, 1])
        s = json.dumps(ev) + ",\n"
        parts.append(s)
        size += len(s)
    return "".join(parts).encode()


def test_past_the_floor_a_real_ratio_passes_and_a_lowered_limit_refuses(tmp_path: Path, tmpdir_watch: Path) -> None:
    """The two rules together: 320 MiB inflated (past the 256 MiB floor) at a trace-like ratio
    passes the default limit to the end; lowered below that ratio, the same file is refused
    with exit 2, one line, the store unchanged and nothing left in the temporary folder."""
    block = _trace_like_text(16)
    path = _members(tmp_path / "big.json.gz", block, 20, head=b'{"traceEvents": [',
                    tail=json.dumps(kernel("k", 0.0, 1.0)).encode() + b"]}")
    ratio = 20 * len(block) / path.stat().st_size
    assert 5 < ratio < read.MAX_INFLATE_RATIO / 4, ratio
    inp = read._Input(path)
    try:
        while inp.read():
            pass
    finally:
        inp.close()
    assert inp.inflated_bytes > 20 * len(block) > read.INFLATE_MIN_BYTES

    db = _existing_store(tmp_path)
    before = file_digest(db)
    r = run_cli("ingest", path, "--db", db, "-q", "--max-inflate-ratio", f"{ratio / 2:.1f}")
    assert r.code == 2, r.err
    (line,) = r.err.strip().splitlines()
    assert str(path) in line and f"{ratio / 2:.1f}x" in line and "gzip bomb" in line
    assert file_digest(db) == before
    assert list(tmpdir_watch.iterdir()) == []


def _interrupt_child(script: str, tmp: Path, wait_for: Callable[[], bool], timeout_s: float = 120) -> tuple[int, str]:
    """Run ``script`` in a Python child with SIGINT at its default (a background child would
    otherwise inherit SIG_IGN), send it SIGINT once ``wait_for()`` holds; its code and stderr."""
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "TMPDIR": str(tmp)}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), text=True)
    deadline = time.monotonic() + timeout_s
    try:
        while not wait_for():
            if child.poll() is not None or time.monotonic() > deadline:
                out, err = child.communicate()
                pytest.fail(f"the child ended or stalled before the moment to interrupt it: {child.returncode} {err}")
            time.sleep(0.02)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=timeout_s)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, err


def test_ctrl_c_while_spooling_leaves_no_temporary_files(tmp_path: Path, tmpdir_watch: Path) -> None:
    """SIGINT while a large .gz streams to its spool: exit 130, one line, the spool folder gone,
    the store unchanged."""
    path = _members(tmp_path / "padded.json.gz", b" " * (64 << 20), 64, head=b'{"traceEvents": [', tail=b"]}")
    db = _existing_store(tmp_path)
    before = file_digest(db)

    def spooling() -> bool:
        return any(f.stat().st_size > 8 << 20 for f in tmpdir_watch.glob("gpuscope-ingest-*/events-*"))

    code, err = _interrupt_child(
        f"import sys; from gpuscope.cli import main; sys.exit(main(['ingest', {str(path)!r}, '--db', {str(db)!r}, "
        f"'-q', '--max-inflate-ratio', '1000000']))", tmpdir_watch, spooling)
    assert code == 130 and err.strip() == "gpuscope ingest: interrupted", (code, err)
    assert list(tmpdir_watch.iterdir()) == []
    assert file_digest(db) == before


def test_ctrl_c_while_duckdb_parses_is_an_interrupt_not_an_error(tmp_path: Path, tmpdir_watch: Path) -> None:
    """SIGINT while DuckDB runs a staging query: DuckDB turns the KeyboardInterrupt into a
    RuntimeError of its own; the command still ends as interrupted (130), not as an internal
    error, with its temporary files removed. The child makes the staging query a long one and
    says when it runs (a real trace would finish before a test could time its signal)."""
    t = write_trace(tmp_path / "t.json.gz", [kernel("k", float(i), 1.0) for i in range(1000)], gz=True)
    db = _existing_store(tmp_path)
    before = file_digest(db)
    flag = tmp_path / "in-duckdb"
    script = f"""
import sys
from collections.abc import Callable
from pathlib import Path
from gpuscope.ingest import stage
from gpuscope.cli import main
real = stage.load_trace
def slow_load_trace(batches, *args, **kwargs):
    Path({str(flag)!r}).write_text("x")
    batches.con.execute("SELECT count(*) FROM range(1000000000000) t(i) WHERE i % 7 = 3").fetchall()
    return real(batches, *args, **kwargs)
stage.load_trace = slow_load_trace
sys.exit(main(["ingest", {str(t)!r}, "--db", {str(db)!r}, "-q"]))
"""
    code, err = _interrupt_child(script, tmpdir_watch, flag.exists)
    assert code == 130 and err.strip() == "gpuscope ingest: interrupted", (code, err)
    assert list(tmpdir_watch.iterdir()) == []
    assert file_digest(db) == before
