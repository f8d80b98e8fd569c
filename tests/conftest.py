"""Shared test helpers: the CLI run in-process, the shared real traces, small trace builders."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "data" / "traces"
FIXTURES = REPO / "fixtures"


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run_cli(*args: str) -> CliResult:
    """``gpuscope ARGS`` in this process; returns its exit code, stdout and stderr."""
    from gpuscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse --help / usage errors
            code = int(exc.code or 0)
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh store path, also set as GPUSCOPE_DB."""
    path = tmp_path / "store.duckdb"
    monkeypatch.setenv("GPUSCOPE_DB", str(path))
    return path


def shared_trace(rel: str) -> Path:
    """A trace from ../shared/data/traces, or skip the test when that folder is absent."""
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"shared trace {rel} not available (../shared/data/traces is absent)")
    return path


def write_trace(path: Path, events: list[Any], gz: bool = False, **top: Any) -> Path:
    """Write a Kineto-style trace: ``{**top, "traceEvents": events}``."""
    doc = dict(top)
    doc["traceEvents"] = events
    data = json.dumps(doc, indent=1).encode()
    if gz or path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def file_digest(path: Path) -> str | None:
    """SHA-256 of the store file (and its WAL), None when absent: to show a store is unchanged."""
    if not path.exists():
        return None
    h = hashlib.sha256(path.read_bytes())
    wal = Path(str(path) + ".wal")
    if wal.exists():
        h.update(wal.read_bytes())
    return h.hexdigest()


def kernel(name: str, ts: float, dur: float, corr: int | None = None, device: int = 0, stream: int = 7,
           cat: str = "kernel", **args: Any) -> dict[str, Any]:
    a: dict[str, Any] = {"device": device, "stream": stream}
    if corr is not None:
        a["correlation"] = corr
    a.update(args)
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur, "args": a}


def runtime(name: str, ts: float, dur: float, corr: int, ext: int | None = None, pid: int = 100,
            tid: int = 100, cat: str = "cuda_runtime") -> dict[str, Any]:
    a: dict[str, Any] = {"correlation": corr}
    if ext is not None:
        a["External id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": a}


def cpu_op(name: str, ts: float, dur: float, ext: int, dims: Any = None, types: Any = None,
           pid: int = 100, tid: int = 100, cat: str = "cpu_op") -> dict[str, Any]:
    a: dict[str, Any] = {"External id": ext}
    if dims is not None:
        a["Input Dims"] = dims
    if types is not None:
        a["Input type"] = types
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": a}


@pytest.fixture
def no_user_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the developer's own spec files ($GPUSCOPE_SPECS, the XDG config file) out of a test."""
    monkeypatch.delenv("GPUSCOPE_SPECS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def specdb(no_user_specs: None) -> Any:
    """The spec database as shipped (no user overrides)."""
    from gpuscope.specs import load_specs

    return load_specs()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs for disk-full tests, unmounted after. Needs to mount (root with
    CAP_SYS_ADMIN, as in CI); skipped, saying why, elsewhere."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({m.stderr.strip() or 'not permitted'})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last block; the file to remove for room again."""
    path = folder / "fill"
    # unbuffered: a buffered file keeps what the last write could not place, and its close then
    # raises ENOSPC again (whether it does depends on how full the disk was, to the 64 KiB)
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return path


def launch_trace(path: Path, n: int = 3000) -> Path:
    """A trace of ``n`` ops, each launching one kernel (op -> launch -> kernel linked by
    correlation and External id): a small ingest for tests and benches that need many."""
    events: list[Any] = []
    for i in range(n):
        t = i * 50.0
        events += [cpu_op("aten::mm", t, 20.0, ext=i + 1), runtime("cudaLaunchKernel", t + 2, 2.0, corr=i + 1, ext=i + 1),
                   kernel("k", t + 5, 10.0, corr=i + 1)]
    return write_trace(path, events)
