"""Paths that are not regular files, and temporaries that follow planted links (issue 27,
classes 1 and 3).

Every command that takes ``--db`` and every command that writes ``--out`` is given, in a table,
each kind of thing an attacker (or a slip) can put at the path: a character device (``mknod c
1 3``, /dev/null's numbers), a FIFO, a socket, a directory, a link to nothing, a link to a
victim file, to a directory, to a device, to a FIFO. Each must end with exit 2 and one line on
stderr (no traceback), without blocking, and leave the thing and the victim as they were (same
inode, type, mode, size, content); no temporary may be left. A planted link or FIFO at the
temporary name makes the write fail, never write through. ``--out -`` writes to stdout.
``kill -9`` during an export leaves a temporary that the next export removes; SIGTERM removes
it at once.

All paths are relative to the test's own folder (``chdir``), which keeps socket paths short.
A FIFO that blocked an open would hang the test: an alarm turns that into a failure.
"""
from __future__ import annotations

import functools
import gzip
import io
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, REPO, CliResult, run_cli

TRACE = FIXTURES / "traces" / "cpu_tiny_llm.pt.trace.json.gz"
VICTIM_TEXT = b"the victim's own content\n"


# -- the things planted at a path --------------------------------------------------------------

def _chardev(p: Path) -> None:
    try:
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers, in the test's folder
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD)")


def _blockdev(p: Path) -> None:
    try:
        os.mknod(p, stat.S_IFBLK | 0o600, os.makedev(7, 0))  # a loop device's numbers; never opened
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD)")


def _socket(p: Path) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(p))
    s.close()  # the socket file stays


def _victim(p: Path) -> Path:
    v = p.parent / "victim.txt"
    if not v.exists():
        v.write_bytes(VICTIM_TEXT)
        os.chmod(v, 0o644)
    return v


def _victim_dir(p: Path) -> Path:
    d = p.parent / "victim_dir"
    if not d.exists():
        d.mkdir()
        (d / "keep.txt").write_bytes(VICTIM_TEXT)
    return d


PLANT: dict[str, Callable[[Path], None]] = {
    "chardev": _chardev,
    "blockdev": _blockdev,
    "fifo": lambda p: os.mkfifo(p),
    "socket": _socket,
    "directory": lambda p: (p.mkdir(), (p / "mine.txt").write_bytes(VICTIM_TEXT)),
    "dangling_link": lambda p: os.symlink("nowhere/at-all", p),
    "link_to_victim": lambda p: os.symlink(_victim(p).name, p),
    "link_to_dir": lambda p: os.symlink(_victim_dir(p).name, p),
    "link_to_chardev": lambda p: (_chardev(p.parent / "dev0"), os.symlink("dev0", p)),
    "link_to_fifo": lambda p: (os.mkfifo(p.parent / "fifo0"), os.symlink("fifo0", p)),
    "link_loop": lambda p: (os.symlink(p.name, p.parent / "loop0"), os.symlink("loop0", p)),
}


def _snapshot(folder: Path) -> dict[str, Any]:
    """What is in ``folder`` (and one level down): per name its type, inode, mode, size, device
    numbers and, for regular files, content; a link's target text."""
    snap: dict[str, Any] = {}
    for root in [folder, *[p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]]:
        for p in sorted(root.iterdir()):
            st_ = os.lstat(p)
            entry: tuple[Any, ...] = (stat.S_IFMT(st_.st_mode), st_.st_ino, stat.S_IMODE(st_.st_mode), st_.st_rdev)
            if stat.S_ISREG(st_.st_mode):
                entry += (p.read_bytes(),)
            elif stat.S_ISLNK(st_.st_mode):
                entry += (os.readlink(p),)
            snap[str(p.relative_to(folder))] = entry
    return snap


def _temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if ".tmp-" in p.name or ".old-" in p.name]


@pytest.fixture
def no_hang() -> Iterator[None]:
    """A command that blocks (a FIFO opened for reading) fails the test instead of hanging it."""
    def _alarm(signum: int, frame: Any) -> None:
        raise TimeoutError("the command blocked")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def store_with_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one run (the CPU fixture trace), shared read-only by the --out tests."""
    db = tmp_path_factory.mktemp("store") / "s.duckdb"
    r = run_cli("ingest", "-q", "--db", db, TRACE)
    assert r.code == 0, r.err
    return db


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUSCOPE_DB", raising=False)
    return tmp_path


def _one_line_refusal(r: CliResult, command: str) -> None:
    lines = r.err.strip().splitlines()
    assert r.code == 2, (r.code, r.err)
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    # record may say first which vendors it could not find; the refusal is the last line, one line
    assert lines and lines[-1].startswith(f"gpuscope {command}: "), r.err
    if command != "record":
        assert len(lines) == 1, r.err


# -- --db --------------------------------------------------------------------------------------

DB_COMMANDS: dict[str, list[str]] = {
    "runs": ["runs"],
    "sql": ["sql", "SELECT 1"],
    "analyze": ["analyze"],
    "compare": ["compare", "1", "2"],
    "ingest": ["ingest", "-q", str(TRACE)],
    "export": ["export", "--format", "chrome", "--out", "o.json"],
    "report": ["report", "--out", "o.html"],
    "tui": ["tui"],
    "run": ["run", "-q", "--", sys.executable, "-c", "pass"],
    "monitor": ["monitor", "--seconds", "0.1"],
}
DB_KINDS = ["chardev", "blockdev", "fifo", "socket", "directory", "dangling_link", "link_to_chardev", "link_to_fifo",
            "link_to_dir", "link_loop"]


@pytest.mark.parametrize("kind", DB_KINDS)
@pytest.mark.parametrize("command", list(DB_COMMANDS))
def test_db_that_is_not_a_regular_file_is_refused_and_untouched(here: Path, no_hang: None, command: str,
                                                                kind: str) -> None:
    PLANT[kind](here / "db")
    before = _snapshot(here)
    args = DB_COMMANDS[command]
    r = run_cli(args[0], "--db", "db", *args[1:])
    _one_line_refusal(r, command)
    assert "db" in r.err.splitlines()[-1]
    assert _snapshot(here) == before  # nothing made, removed or replaced; the device is still a device
    assert not _temporaries(here)


def test_a_link_to_a_real_store_still_works(here: Path, store_with_run: Path) -> None:
    """--db through a symbolic link is a legitimate use: what it points to is judged and used."""
    real = here / "real.duckdb"
    real.write_bytes(store_with_run.read_bytes())
    os.symlink("real.duckdb", "link.duckdb")
    r = run_cli("runs", "--db", "link.duckdb", "--json")
    assert r.code == 0, r.err
    assert len(r.json()) == 1
    r = run_cli("ingest", "-q", "--db", "link.duckdb", TRACE)
    assert r.code == 0, r.err
    assert os.path.islink("link.duckdb") and len(run_cli("runs", "--db", "real.duckdb", "--json").json()) == 2


def test_an_empty_regular_file_is_still_no_store_yet_but_not_through_a_link(here: Path) -> None:
    Path("empty.duckdb").touch()
    r = run_cli("ingest", "-q", "--db", "empty.duckdb", TRACE)
    assert r.code == 0, r.err
    Path("empty2").touch()
    os.symlink("empty2", "link.duckdb")
    before = _snapshot(here)
    r = run_cli("ingest", "-q", "--db", "link.duckdb", TRACE)
    _one_line_refusal(r, "ingest")
    assert _snapshot(here) == before


@pytest.mark.parametrize("suffix, kind", [(".wal", k) for k in ("fifo", "link_to_victim", "dangling_link", "directory",
                                                                 "chardev")]
                         + [(".tmp", k) for k in ("link_to_dir", "fifo", "regular_file", "dangling_link")])
def test_a_thing_planted_beside_the_store_is_refused(here: Path, store_with_run: Path, no_hang: None, suffix: str,
                                                      kind: str) -> None:
    """DuckDB writes NAME.wal beside the store, and spills into NAME.tmp: a link or FIFO planted
    there must not be written through."""
    Path("s.duckdb").write_bytes(store_with_run.read_bytes())
    PLANT[kind](here / f"s.duckdb{suffix}")
    before = _snapshot(here)
    r = run_cli("ingest", "-q", "--db", "s.duckdb", TRACE)
    _one_line_refusal(r, "ingest")
    assert f"s.duckdb{suffix}" in r.err
    assert _snapshot(here) == before


# -- --out -------------------------------------------------------------------------------------

FILE_OUTS: dict[str, list[str]] = {
    "perfetto": ["export", "--format", "perfetto"],
    "chrome": ["export", "--format", "chrome"],
    "report": ["report"],
    "record": ["record", "--seconds", "0.2", "--interval", "0.1"],
}
DIR_OUTS: dict[str, list[str]] = {"parquet": ["export", "--format", "parquet"], "csv": ["export", "--format", "csv"]}
FILE_KINDS = ["chardev", "blockdev", "fifo", "socket", "directory", "dangling_link", "link_to_victim", "link_to_dir",
              "link_to_chardev", "link_to_fifo", "link_loop"]
DIR_KINDS = ["chardev", "fifo", "socket", "regular_file", "dangling_link", "link_to_victim", "link_to_dir",
             "directory"]
PLANT["regular_file"] = lambda p: (p.write_bytes(VICTIM_TEXT), os.chmod(p, 0o644))


def _out_args(what: str, out: str, db: Path, force: bool) -> list[str]:
    args = {**FILE_OUTS, **DIR_OUTS}[what]
    db_args = [] if what == "record" else ["--db", str(db)]
    return [*args, *db_args, "--out", out, *(["--force"] if force else [])]


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize("what", list(FILE_OUTS))
def test_file_out_that_is_not_a_regular_file_is_refused_and_untouched(here: Path, store_with_run: Path, no_hang: None,
                                                                      what: str, kind: str, force: bool) -> None:
    PLANT[kind](here / "out")
    before = _snapshot(here)
    r = run_cli(*_out_args(what, "out", store_with_run, force))
    _one_line_refusal(r, FILE_OUTS[what][0])
    assert r.err.strip().splitlines()[-1].split(": ")[1] == "out"
    assert _snapshot(here) == before
    assert not _temporaries(here)


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("kind", DIR_KINDS)
@pytest.mark.parametrize("what", list(DIR_OUTS))
def test_directory_out_that_gpuscope_did_not_write_is_refused_and_untouched(here: Path, store_with_run: Path,
                                                                            no_hang: None, what: str, kind: str,
                                                                            force: bool) -> None:
    """A user's own directory (one file of theirs in it) is never removed, --force or not."""
    PLANT[kind](here / "out")
    before = _snapshot(here)
    r = run_cli(*_out_args(what, "out", store_with_run, force))
    _one_line_refusal(r, "export")
    assert _snapshot(here) == before
    assert not _temporaries(here)


@pytest.mark.parametrize("what", ["perfetto", "chrome", "report", "record"])
def test_an_existing_regular_file_needs_force_then_is_replaced_owner_only(here: Path, store_with_run: Path,
                                                                          what: str) -> None:
    """Without --force: exit 2, untouched. With --force: a new file (new inode) of mode 0600 in
    its place, whatever the old one's mode; a hard link to the old file keeps the old content."""
    PLANT["regular_file"](here / "out")
    os.link("out", "hardlink")
    before = _snapshot(here)
    r = run_cli(*_out_args(what, "out", store_with_run, False))
    _one_line_refusal(r, FILE_OUTS[what][0])
    assert _snapshot(here) == before
    old_ino = os.lstat("out").st_ino
    r = run_cli(*_out_args(what, "out", store_with_run, True))
    if what == "record" and "no device to record" in r.err:
        pytest.skip("no device to record here, not even the host")
    assert r.code == 0, r.err
    st_ = os.lstat("out")
    assert stat.S_ISREG(st_.st_mode) and stat.S_IMODE(st_.st_mode) == 0o600 and st_.st_ino != old_ino
    assert Path("out").read_bytes() != VICTIM_TEXT
    assert Path("hardlink").read_bytes() == VICTIM_TEXT and stat.S_IMODE(os.lstat("hardlink").st_mode) == 0o644
    assert not _temporaries(here)


@pytest.mark.parametrize("fmt", list(DIR_OUTS))
def test_force_replaces_an_earlier_export_only_while_untouched(here: Path, store_with_run: Path, fmt: str) -> None:
    assert run_cli(*_out_args(fmt, "out", store_with_run, False)).code == 0
    assert stat.S_IMODE(os.lstat("out").st_mode) == 0o700
    r = run_cli(*_out_args(fmt, "out", store_with_run, True))
    assert r.code == 0, r.err
    Path("out/my_notebook.ipynb").write_bytes(VICTIM_TEXT)  # the user's own work in it now
    before = _snapshot(here)
    r = run_cli(*_out_args(fmt, "out", store_with_run, True))
    _one_line_refusal(r, "export")
    assert _snapshot(here) == before
    assert not _temporaries(here)


@pytest.mark.parametrize("plant", ["link_to_victim", "fifo", "dangling_link", "directory", "regular_file"])
@pytest.mark.parametrize("what", ["chrome", "report", "record", "csv"])
def test_a_thing_planted_at_the_temporary_name_is_never_written_through(
        here: Path, store_with_run: Path, no_hang: None, monkeypatch: pytest.MonkeyPatch, what: str, plant: str) -> None:
    """Temporary names are random; were one guessed (here: the random part fixed by the test) and
    planted, O_CREAT|O_EXCL|O_NOFOLLOW (mkdir for a directory) refuses it: exit 2, the planted
    thing and its victim untouched, --out not made. The old predictable name is ignored too."""
    import gpuscope.fileio as fileio

    monkeypatch.setattr(fileio.secrets, "token_hex", lambda n: "0123456789abcdef")
    name = fileio.temp_name(Path("out")).name
    PLANT[plant](here / name)
    PLANT["link_to_victim"](here / f".out.tmp-{os.getpid()}")  # the name gpuscope used before
    before = _snapshot(here)
    r = run_cli(*_out_args(what, "out", store_with_run, False))
    if what == "record" and "no device to record" in r.err:
        pytest.skip("no device to record here, not even the host")
    _one_line_refusal(r, FILE_OUTS.get(what, ["export"])[0])
    assert _snapshot(here) == before and not Path("out").exists()


@pytest.mark.parametrize("what", ["chrome", "report"])
def test_the_store_itself_is_never_an_output(here: Path, store_with_run: Path, what: str) -> None:
    """--out naming the store (or a hard link to it) with --force would have replaced the store."""
    Path("s.duckdb").write_bytes(store_with_run.read_bytes())
    os.link("s.duckdb", "hard.duckdb")
    before = _snapshot(here)
    for out in ("s.duckdb", "hard.duckdb"):
        r = run_cli(*_out_args(what, out, here / "s.duckdb", True))
        _one_line_refusal(r, FILE_OUTS[what][0])
    assert _snapshot(here) == before


def test_hostile_output_names_and_odd_places(here: Path, store_with_run: Path, no_hang: None) -> None:
    """/dev/stdout (a link) and /dev/null (a device) as --out, with --force: refused, one line."""
    for out in ("/dev/stdout", "/dev/null"):
        for what in ("chrome", "report"):
            r = run_cli(*_out_args(what, out, store_with_run, True))
            _one_line_refusal(r, FILE_OUTS[what][0])
            assert "--out -" in r.err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_full_disk_while_exporting_is_one_line_and_leaves_nothing(store_with_run: Path, small_fs: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The temporary fills the disk: exit 1, one line naming --out and the reason, no temporary."""
    from conftest import fill

    monkeypatch.chdir(small_fs)
    fill(small_fs)
    for what in ("chrome", "report", "csv"):
        r = run_cli(*_out_args(what, "out", store_with_run, False))
        assert r.code in (1, 2) and "Traceback" not in r.err and "internal error" not in r.err, r.err
        (line,) = r.err.strip().splitlines()
        assert "out" in line and ("no space left" in line or "cannot write" in line), line
        assert not _temporaries(small_fs) and not Path("out").exists()


# -- --out - ----------------------------------------------------------------------------------

def _run_binary_stdout(*args: str) -> tuple[int, bytes, str]:
    """The CLI in this process with a binary-capable stdout (as a real one has ``.buffer``)."""
    from gpuscope.cli import main

    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8")
    err = io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in args])
        out.flush()
    return code, raw.getvalue(), err.getvalue()


@pytest.mark.parametrize("json_flag", [False, True])
def test_out_dash_writes_the_file_to_stdout_and_the_summary_to_stderr(here: Path, store_with_run: Path,
                                                                      json_flag: bool) -> None:
    flags = ["--json"] if json_flag else []
    code, data, err = _run_binary_stdout("export", "--db", store_with_run, "--format", "chrome", "--out", "-", *flags)
    assert code == 0, err
    assert json.loads(data)["traceEvents"]
    if json_flag:
        assert json.loads(err)["out"] == "-"
    else:
        assert len(err.strip().splitlines()) == 1 and "standard output" in err
    code, data, err = _run_binary_stdout("export", "--db", store_with_run, "--format", "perfetto", "--out", "-", *flags)
    assert code == 0, err
    assert json.loads(gzip.decompress(data))["traceEvents"]
    code, data, err = _run_binary_stdout("report", "--db", store_with_run, "--out", "-", *flags)
    assert code == 0, err
    assert data.lstrip().lower().startswith(b"<!doctype html")
    assert list(here.iterdir()) == []  # nothing was written beside


@pytest.mark.parametrize("what", ["parquet", "csv", "record"])
def test_out_dash_is_refused_where_the_output_is_not_one_file(here: Path, store_with_run: Path, what: str) -> None:
    r = run_cli(*_out_args(what, "-", store_with_run, False))
    _one_line_refusal(r, {**FILE_OUTS, **DIR_OUTS}[what][0])
    assert list(here.iterdir()) == []


# -- stale temporaries -------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["file", "dir", "link", "fifo"]),
                          st.sampled_from(["dead", "alive", "self"]),
                          st.sampled_from(["host", "other_host", "bad_random", "no_mark"])),
                min_size=1, max_size=8))
def test_sweep_removes_only_own_dead_writers_temporaries(tmp_path_factory: pytest.TempPathFactory,
                                                         entries: list[tuple[str, str, str]]) -> None:
    """Property: of everything named like a temporary in a folder, the sweep removes exactly the
    regular files and directories of this host's writers whose process is gone; links (and what
    they point to), FIFOs, live writers' files, other hosts' and other names stay."""
    import gpuscope.fileio as fileio

    folder = tmp_path_factory.mktemp("sweep")
    victim = folder / "victim"
    victim.write_bytes(VICTIM_TEXT)
    dead = _dead_pid()
    host = fileio._host_tag()
    expect_removed = set()
    for i, (kind, pid_kind, name_kind) in enumerate(entries):
        pid = {"dead": dead, "alive": 1, "self": os.getpid()}[pid_kind]
        tag = host if name_kind != "other_host" else ("0" * 8 if host != "0" * 8 else "1" * 8)
        rand = "0123456789abcdef" if name_kind != "bad_random" else "xyz"
        name = f".out{i}.tmp-{tag}-{pid}-{rand}" if name_kind != "no_mark" else f".out{i}.tmpx-{tag}-{pid}-{rand}"
        p = folder / name
        if kind == "file":
            p.write_bytes(b"x")
        elif kind == "dir":
            p.mkdir()
            (p / "a.csv").write_bytes(b"x")
        elif kind == "link":
            os.symlink("victim", p)
        else:
            os.mkfifo(p)
        if kind in ("file", "dir") and pid_kind == "dead" and name_kind == "host":
            expect_removed.add(name)
    names_before = set(os.listdir(folder))
    removed = {p.name for p in fileio.sweep_stale_temporaries(folder)}
    assert removed == expect_removed
    assert set(os.listdir(folder)) == names_before - expect_removed
    assert victim.read_bytes() == VICTIM_TEXT


_BLOCKING_EXPORT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    import gpuscope.store.timeline as tl
    import gpuscope.export.tables as tables
    orig = tl.event_queries

    def blocked(*a, **k):
        for i, q in enumerate(orig(*a, **k)):
            yield q
            if i == 0:  # the temporary is open and holds the head: wait to be killed
                print("writing", flush=True)
                while True:
                    time.sleep(0.05)

    tl.event_queries = blocked

    def blocked_rows(*a, **k):
        print("writing", flush=True)
        while True:
            time.sleep(0.05)

    tables._write_rows = blocked_rows
    from gpuscope.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("fmt", ["perfetto", "parquet"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_export_leaves_nothing_after_the_next(here: Path, store_with_run: Path, fmt: str, sig: int) -> None:
    """A real export process stopped while its temporary is open: SIGTERM removes the temporary
    at once (exit 143, as a process SIGTERM ended); after kill -9 it stays, and the next export into the
    folder removes it."""
    script = here / "blocking_export.py"
    script.write_text(_BLOCKING_EXPORT.format(repo=str(REPO)))
    p = subprocess.Popen([sys.executable, str(script), "export", "--db", str(store_with_run), "--format", fmt,
                          "--out", "out"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=here)
    try:
        assert p.stdout is not None
        assert p.stdout.readline() == b"writing\n"  # the event: the temporary exists now
        assert len(_temporaries(here)) == 1
        p.send_signal(sig)
        code = p.wait(timeout=60)
    finally:
        p.kill()
        p.wait()
    assert not Path("out").exists()
    if sig == signal.SIGTERM:
        assert code == 128 + signal.SIGTERM and not _temporaries(here), (code, p.stderr.read() if p.stderr else b"")
        return
    assert code == -signal.SIGKILL and len(_temporaries(here)) == 1
    r = run_cli(*_out_args(fmt, "other", store_with_run, False))
    assert r.code == 0, r.err
    assert not _temporaries(here)


# -- files gpuscope reads that the user names: a recording to replay, a spec file -------------

IN_KINDS = ["chardev", "fifo", "socket", "directory", "dangling_link", "link_to_chardev", "link_to_fifo", "link_loop"]
READERS: dict[str, Callable[[], list[str]]] = {
    "tui --replay": lambda: ["tui", "--replay", "in"],
    "monitor --replay": lambda: ["monitor", "--replay", "in", "--db", "m.duckdb", "--seconds", "0.1"],
    "run --replay": lambda: ["run", "-q", "--replay", "in", "--db", "r.duckdb", "--", sys.executable, "-c", "pass"],
    "specs (GPUSCOPE_SPECS)": lambda: ["specs"],
}


@pytest.mark.parametrize("kind", IN_KINDS)
@pytest.mark.parametrize("reader", list(READERS))
def test_an_input_file_that_is_not_a_regular_file_is_refused_without_blocking(
        here: Path, no_hang: None, monkeypatch: pytest.MonkeyPatch, reader: str, kind: str) -> None:
    """A FIFO given as a recording or a spec file blocked the command for good; a character
    device such as /dev/zero was read for ever."""
    PLANT[kind](here / "in")
    if reader.startswith("specs"):
        monkeypatch.setenv("GPUSCOPE_SPECS", "in")
    before = _snapshot(here)
    args = READERS[reader]()
    r = run_cli(*args)
    _one_line_refusal(r, args[0])
    assert "in" in r.err.splitlines()[-1]
    assert _snapshot(here) == before


def test_an_endless_device_as_a_spec_file_is_refused(here: Path, no_hang: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_SPECS", "/dev/zero")
    r = run_cli("specs")
    _one_line_refusal(r, "specs")
    assert "character device" in r.err


def test_a_spec_file_too_large_is_refused(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.specs import load

    big = here / "big.json"
    with open(big, "wb") as f:  # sparse: no disk used
        f.truncate(load.MAX_SPEC_FILE_BYTES + 1)
    monkeypatch.setenv("GPUSCOPE_SPECS", str(big))
    r = run_cli("specs")
    _one_line_refusal(r, "specs")
    assert "larger than" in r.err


@pytest.mark.parametrize("command", ["runs", "ingest", "sql"])
def test_an_empty_db_path_is_refused_not_taken_for_the_default(here: Path, monkeypatch: pytest.MonkeyPatch,
                                                              command: str) -> None:
    """``--db "$STORE"`` with an unset variable: the command must not quietly write the default store."""
    default = here / "default.duckdb"
    monkeypatch.setenv("GPUSCOPE_DB", str(default))
    args = {"runs": ["runs"], "ingest": ["ingest", "-q", str(TRACE)], "sql": ["sql", "SELECT 1"]}[command]
    r = run_cli(args[0], "--db", "", *args[1:])
    _one_line_refusal(r, command)
    assert "--db" in r.err and not default.exists()
