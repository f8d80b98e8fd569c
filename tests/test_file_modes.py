"""Owner-only files: the store, its WAL, run directories, recordings and spool files are
created 0600/0700 whatever the umask; an existing store keeps its mode; the child of
`gpuscope run` keeps the user's umask."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import kernel, run_cli, write_trace

REPO = Path(__file__).resolve().parents[1]


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=["umask022", "umask000"])
def umask(request: pytest.FixtureRequest) -> int:
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_new_store_and_its_folder_are_owner_only(tmp_path: Path, umask: int) -> None:
    db = tmp_path / "new" / "deeper" / "store.duckdb"
    trace = write_trace(tmp_path / "t.json", [kernel("k", 0.0, 1.0)])
    r = run_cli("ingest", trace, "--db", db, "-q")
    assert r.code == 0, r.err
    assert _mode(db) == 0o600
    assert _mode(db.parent) == 0o700 and _mode(db.parent.parent) == 0o700
    # the user's umask is back once the command returns
    assert os.umask(umask) == umask


def test_wal_is_owner_only_while_a_writer_holds_it(tmp_path: Path, umask: int) -> None:
    from gpuscope import store
    from gpuscope.paths import private_umask

    db = tmp_path / "s.duckdb"
    previous = private_umask()
    try:
        con = store.connect(db)
        con.execute("INSERT INTO runs (id, name, status, source, created_ns) VALUES (1, 'r', 'complete', 'run', 1)")
        wal = Path(str(db) + ".wal")
        assert wal.exists()
        assert _mode(wal) == 0o600
        con.close()
    finally:
        os.umask(previous)


@pytest.mark.parametrize("shared_mode", [0o644, 0o640])
def test_existing_store_keeps_its_mode(tmp_path: Path, umask: int, shared_mode: int) -> None:
    db = tmp_path / "shared.duckdb"
    trace = write_trace(tmp_path / "t.json", [kernel("k", 0.0, 1.0)])
    assert run_cli("ingest", trace, "--db", db, "-q").code == 0
    os.chmod(db, shared_mode)
    assert run_cli("ingest", trace, "--db", db, "-q").code == 0
    assert _mode(db) == shared_mode


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_record_out_is_owner_only(tmp_path: Path, umask: int, suffix: str) -> None:
    out = tmp_path / f"rec{suffix}"
    r = run_cli("record", "--seconds", "0.3", "--interval", "0.1", "--out", out)
    assert r.code == 0, r.err
    assert _mode(out) == 0o600


def test_ingest_spool_files_are_owner_only(tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spool of a .gz trace is written to the temporary folder: watch it while ingest runs."""
    spool_root = tmp_path / "tmp"
    spool_root.mkdir()
    monkeypatch.setenv("TMPDIR", str(spool_root))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    events = [kernel(f"k{i}", float(i * 10), 1.0) for i in range(60000)]
    trace = write_trace(tmp_path / "big.json.gz", events)
    seen: dict[str, int] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:  # ingest removes its spool folder while the walk may be inside it
                for p in spool_root.rglob("*"):
                    try:
                        seen[str(p)] = _mode(p)
                    except FileNotFoundError:
                        pass
            except FileNotFoundError:
                pass
            time.sleep(0.005)

    t = threading.Thread(target=watch)
    t.start()
    try:
        assert run_cli("ingest", trace, "--db", tmp_path / "s.duckdb", "-q").code == 0
    finally:
        stop.set()
        t.join()
    assert seen, "no spool file was seen"
    for path, mode in seen.items():
        assert mode & 0o077 == 0, (path, oct(mode))


@pytest.mark.parametrize("user_umask", [0o022, 0o000], ids=["umask022", "umask000"])
def test_run_directory_is_private_and_child_keeps_user_umask(tmp_path: Path, user_umask: int) -> None:
    db = tmp_path / "s.duckdb"
    child_file = tmp_path / "made_by_child.txt"
    code = f"open({str(child_file)!r}, 'w').write('x')"
    p = subprocess.run(
        [sys.executable, "-c", f"import os; os.umask({user_umask}); import sys; from gpuscope.cli import main; "
                               f"sys.exit(main(['run', '--db', {str(db)!r}, '--no-profile', '--no-analyze', '--', "
                               f"{sys.executable!r}, '-c', {code!r}]))"],
        capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    (run_dir,) = list((tmp_path / "gpuscope-runs").iterdir())
    assert _mode(tmp_path / "gpuscope-runs") == 0o700
    assert _mode(run_dir) == 0o700 and _mode(run_dir / "traces") == 0o700
    boot = run_dir / "bootstrap"
    assert _mode(boot) == 0o700 and (boot / "sitecustomize.py").is_file()
    assert _mode(db) == 0o600
    # the program's own files follow the user's umask, not gpuscope's
    assert _mode(child_file) == 0o666 & ~user_umask


def test_profile_window_trace_is_owner_only(tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window's trace is written inside the profiled program, under the program's umask: the
    folder gpuscope makes for it is 0700 and the trace 0600 all the same."""
    torch = pytest.importorskip("torch")
    from gpuscope.run.bootstrap import load_child_side

    Window = load_child_side().Window

    monkeypatch.delenv("GPUSCOPE_RUN_DIR", raising=False)
    out_dir = tmp_path / "gpuscope-traces"
    window = Window(out_dir, "w")
    window.start()
    torch.ones(8, 8) @ torch.ones(8, 8)
    path = window.stop(deliver_signals=False)
    assert path is not None and path.is_file()
    assert _mode(out_dir) == 0o700
    assert _mode(path) == 0o600
    assert [p.name for p in out_dir.iterdir()] == [path.name]  # no temporary file left behind
