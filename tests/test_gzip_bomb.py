"""A gzip bomb is refused while it streams (exit 2, one line naming the file and the limit),
leaves the store and the temporary folder as they were; real traces pass with the defaults."""
from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path

import pytest

from conftest import SHARED_TRACES, file_digest, kernel, run_cli, write_trace
from gpuscope import trace


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
    inp = trace._Input(path, max_inflate_ratio=5000)
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
        inp = trace._Input(f)
        try:
            while inp.read():
                pass
        finally:
            inp.close()
        assert inp.inflated_bytes < trace.MAX_INFLATE_RATIO / 5 * f.stat().st_size, f
