"""The bootstrap `gpuscope run` puts into the program, under faults (issue 20).

Nobody else can replace it: the run's folders are created fresh and owner-only, and a folder
or link found where gpuscope is about to create one is never entered. And nothing that fails
inside it changes the program: its exit status, stdout and stderr stay its own, with at most
one ``gpuscope[PID]: ...`` line per failure and process, never a traceback from gpuscope.

Most cases run the program directly in the environment ``gpuscope run`` gives it (the run
directory and private bootstrap made by the wrapper's own functions), beside the same program
run without gpuscope; a fake ``torch`` package stands in for PyTorch (it imports in
milliseconds, and it can be made to fail on import, on start or on stop).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from gpuscope.errors import InputError
from gpuscope.run import contract
from gpuscope.run.wrapper import ProfileConfig, _checked_runs_root, _new_run_dir, child_env, private_bootstrap

PY = sys.executable
NOBODY = 65534

# -- a fake torch: just what the bootstrap's windows use -------------------------------------

FAKE_TORCH_INIT = """
import os
MODE = os.environ.get("FAKE_TORCH", "")
if MODE == "import":
    raise RuntimeError("this torch is broken")
class cuda:
    @staticmethod
    def is_available():
        return False
"""

# start() and stop() leave a flag (FAKE_TORCH_FLAGS/start.PID) before failing as told, so that a
# program can wait for its window without timing anything.
FAKE_TORCH_PROFILER = """
import json, os
from torch import MODE
class ProfilerActivity:
    CPU = "cpu"
    CUDA = "cuda"
def _flag(what):
    flags = os.environ.get("FAKE_TORCH_FLAGS")
    if flags:
        open(os.path.join(flags, f"{what}.{os.getpid()}"), "w").close()
class profile:
    def __init__(self, **kw):
        pass
    def start(self):
        _flag("start")
        if MODE == "start":
            raise RuntimeError("the profiler cannot start")
    def stop(self):
        _flag("stop")
        if MODE == "stop":
            raise RuntimeError("the profiler cannot stop")
    def export_chrome_trace(self, path):
        with open(path, "w") as f:
            json.dump({"traceEvents": []}, f)
"""

#: Wait (in the program) until this process's fake profiler was started or stopped, when it runs
#: under gpuscope; without gpuscope no window ever opens, so nothing is waited for.
WAIT_FOR = """
def wait_for(what):
    import os, time
    if not os.environ.get("GPUSCOPE_RUN_DIR"):
        return
    flag = os.path.join(os.environ["FAKE_TORCH_FLAGS"], f"{what}.{os.getpid()}")
    t = time.monotonic()
    while not os.path.exists(flag) and time.monotonic() - t < 60:
        time.sleep(0.01)
"""


def fake_torch(where: Path) -> Path:
    pkg = where / "fake" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_TORCH_INIT)
    (pkg / "profiler.py").write_text(FAKE_TORCH_PROFILER)
    (where / "flags").mkdir()
    return pkg.parent


def new_run_dir(store_dir: Path) -> tuple[Path, Path]:
    """A run directory and its private bootstrap, as ``gpuscope run`` makes them."""
    run_dir = _new_run_dir(_checked_runs_root(store_dir / "s.duckdb", create=True), "1-prog")
    return run_dir, private_bootstrap(run_dir)


def environments(where: Path, profile: ProfileConfig | str, *path: Path, torch_mode: str = "",
                 ) -> tuple[Path, dict[str, str], dict[str, str]]:
    """(run directory, the program's environment under ``gpuscope run``, the same without
    gpuscope). ``profile`` is the window schedule, or any text to put in GPUSCOPE_PROFILE."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("GPUSCOPE_") and k not in ("PYTHONPATH", "VLLM_TORCH_PROFILER_DIR", "KINETO_LOG_LEVEL")}
    base.update(FAKE_TORCH=torch_mode, FAKE_TORCH_FLAGS=str(where / "flags"))
    if path:
        base["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    run_dir, boot = new_run_dir(where)
    env = child_env(run_dir, 1, profile if isinstance(profile, ProfileConfig) else ProfileConfig(), boot, base=base)
    if isinstance(profile, str):
        env[contract.ENV_PROFILE] = profile
    return run_dir, env, base


def run(program: Path, env: dict[str, str], *args: str, user: list[str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(user or []), PY, str(program), *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=program.parent)


def ours(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("gpuscope[")]


def assert_one_line_each(stderr: str) -> None:
    """What the bootstrap may add to the program's stderr: lines ``gpuscope[PID]: ...``, at most
    one per process and kind of failure, never a traceback."""
    lines = ours(stderr)
    kinds = [(line.split("]", 1)[0], line.split(": ", 2)[1]) for line in lines]
    assert len(kinds) == len(set(kinds)), stderr
    assert "Traceback" not in stderr, stderr


def write(where: Path, name: str, code: str) -> Path:
    path = where / name
    path.write_text(code)
    return path


def store_runs(db: Path) -> list[dict]:
    r = run_cli("runs", "--db", str(db), "--json")
    assert r.code == 0, r.err
    return r.json()


def gpuscope_run(db: Path, *args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "gpuscope", "run", "--db", str(db), "--no-analyze", "-q", *args],
                          capture_output=True, text=True, timeout=180, **kw)


# -- 1. nobody else can replace the bootstrap --------------------------------------------------

@pytest.mark.parametrize("umask", [0o000, 0o777])
def test_run_folders_are_created_fresh_and_owner_only_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)  # as an API caller might have it (the CLI sets 0o077 itself)
    try:
        run_dir, boot = new_run_dir(tmp_path)
    finally:
        os.umask(previous)
    for folder in (run_dir.parent, run_dir, run_dir / contract.TRACES_DIR, boot):
        assert stat.S_IMODE(folder.lstat().st_mode) == 0o700, folder
    files = sorted(boot.iterdir())
    # the bytecode cache made owner-only beside the files (the program's umask would leave it open)
    assert [f.name for f in files] == ["__pycache__", "_gpuscope_boot.py", "_gpuscope_contract.py", "sitecustomize.py"]
    for f in files:
        assert stat.S_IMODE(f.lstat().st_mode) == (0o700 if f.is_dir() else 0o600), f


def _plant_link(root: Path, elsewhere: Path) -> None:
    root.symlink_to(elsewhere, target_is_directory=True)


def _plant_others(root: Path, elsewhere: Path) -> None:
    root.mkdir(mode=0o700)
    try:
        os.chown(root, NOBODY, NOBODY)
    except PermissionError:
        pytest.skip("needs root to give a folder to another user")


def _plant_mode(mode: int):
    def plant(root: Path, elsewhere: Path) -> None:
        root.mkdir()
        os.chmod(root, mode)
    return plant


def _plant_file(root: Path, elsewhere: Path) -> None:
    root.write_text("not a folder")


@pytest.mark.parametrize("plant,says", [
    (_plant_link, "is a symbolic link"),
    (_plant_others, f"belongs to another user (uid {NOBODY})"),
    (_plant_mode(0o777), "other users can write to it (mode 0777)"),
    (_plant_mode(0o770), "other users can write to it (mode 0770)"),
    (_plant_mode(0o1777), "other users can write to it (mode 1777)"),
    (_plant_file, "is not a directory"),
], ids=["symlink", "another-users", "world-writable", "group-writable", "sticky-world-writable", "file"])
def test_a_runs_folder_others_could_write_is_refused(tmp_path: Path, plant, says: str) -> None:
    """The folder of the run directories decides who can swap a run's bootstrap: a link to
    another place, someone else's folder or one others can write is refused, in one line
    naming it, before the program or the run exists."""
    db = tmp_path / "s.duckdb"
    root = tmp_path / "gpuscope-runs"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    plant(root, elsewhere)
    ran = tmp_path / "the-program-ran"
    p = gpuscope_run(db, "--", PY, "-c", f"open({str(ran)!r}, 'w').close()")
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"gpuscope run: {root}: {says}"), p.stderr
    assert not ran.exists() and list(elsewhere.iterdir()) == []
    assert not db.exists() or store_runs(db) == []


PLANTED_SITECUSTOMIZE = "open({marker!r}, 'w').close()\n"


def test_a_planted_run_directory_or_link_is_passed_over(tmp_path: Path) -> None:
    """Folders at the run directory's name (left over, or a link to another place with a
    bootstrap in it) are never entered: the run gets a fresh directory of its own, owner-only
    even under umask 0, and nothing is written into what was planted."""
    db = tmp_path / "s.duckdb"
    marker = tmp_path / "planted-bootstrap-ran"
    root = tmp_path / "gpuscope-runs"
    root.mkdir(mode=0o700)
    leftover = root / "1-prog"
    elsewhere = tmp_path / "elsewhere"
    for folder in (leftover, elsewhere):
        (folder / "bootstrap").mkdir(parents=True)
        (folder / "bootstrap" / "sitecustomize.py").write_text(PLANTED_SITECUSTOMIZE.format(marker=str(marker)))
    (root / "1-prog.2").symlink_to(elsewhere, target_is_directory=True)
    before = {folder: sorted(folder.rglob("*")) for folder in (leftover, elsewhere)}
    code = "import sys; print(sys.modules['sitecustomize'].__file__)"
    p = gpuscope_run(db, "--json", "--name", "prog", "--", PY, "-c", code, umask=0)
    assert p.returncode == 0, p.stderr
    run_dir = Path(json.loads(p.stdout)["run_dir"])
    assert run_dir == root / "1-prog.3"
    assert p.stderr.strip().splitlines()[0] == str(run_dir / "bootstrap" / "sitecustomize.py")
    assert not marker.exists()
    assert {folder: sorted(folder.rglob("*")) for folder in (leftover, elsewhere)} == before
    for folder in (root, run_dir, run_dir / "bootstrap", run_dir / "traces"):
        assert stat.S_IMODE(folder.lstat().st_mode) == 0o700, folder
    # the files owner-only, and the bytecode cache the program's Python writes there too
    for f in (run_dir / "bootstrap").rglob("*"):
        assert stat.S_IMODE(f.lstat().st_mode) == (0o700 if f.is_dir() else 0o600), f
    assert (run_dir / "bootstrap" / "__pycache__").is_dir()


@pytest.mark.parametrize("planted", ["link", "folder", "run-dir-link"])
def test_the_bootstrap_folder_is_never_one_found_in_place(tmp_path: Path, planted: str) -> None:
    """private_bootstrap creates the folder and its files itself: one that exists (a folder, or
    a link to a place others control) is refused, and nothing is written there."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if planted == "link":
        (run_dir / "bootstrap").symlink_to(elsewhere, target_is_directory=True)
        target = run_dir / "bootstrap"
    elif planted == "folder":
        (run_dir / "bootstrap").mkdir(mode=0o700)
        elsewhere = run_dir / "bootstrap"
        target = elsewhere
    else:  # the run directory itself is a link to another place
        target = tmp_path / "run-link"
        target.symlink_to(elsewhere, target_is_directory=True)
        run_dir = target
    with pytest.raises(InputError) as err:
        private_bootstrap(run_dir)
    assert err.value.source == str(target)
    assert list(elsewhere.iterdir()) == []


# -- 2. nothing failing inside the bootstrap changes the program -------------------------------

WAITS_FOR_THE_TIMER = """
import threading, time
import torch
# under gpuscope run: until the bootstrap's timer thread, if it started, has ended
t = time.monotonic()
while any(th.name == "gpuscope-windows" for th in threading.enumerate()) and time.monotonic() - t < 60:
    time.sleep(0.01)
print("done")
"""


@pytest.mark.parametrize("setting", [
    "not json", "[1]", '{"delay_s": "soon"}', '{"windows": "many"}', '{"delay_s": -1}',
    '{"delay_s": 0, "duration_s": -0.5}', '{"delay_s": NaN}', '{"delay_s": 1e300}',
])
def test_garbage_profile_settings_cost_the_program_one_line(tmp_path: Path, setting: str) -> None:
    program = write(tmp_path, "prog.py", WAITS_FOR_THE_TIMER)
    _, env, _ = environments(tmp_path, setting, fake_torch(tmp_path))
    p = run(program, env)
    assert (p.returncode, p.stdout) == (0, "done\n"), p.stderr
    lines = ours(p.stderr)
    assert len(lines) == 1 and p.stderr == lines[0] + "\n", p.stderr
    assert_one_line_each(p.stderr)
    assert list((tmp_path / "flags").iterdir()) == []  # refused whole: no window half-opened


TORCH_FAILS = WAIT_FOR + """
import sys
if sys.argv[1] == "absent":  # no torch anywhere on the search path
    sys.path[:] = [p for p in sys.path if not p.endswith(("site-packages", "dist-packages"))]
import torch
wait_for("start" if sys.argv[1] == "start" else "stop")
print("done")
"""


@pytest.mark.parametrize("mode", ["absent", "import", "start", "stop"])
def test_a_missing_or_failing_torch_leaves_the_program_its_own(tmp_path: Path, mode: str) -> None:
    """torch absent or failing to import: the program's own error, read exactly as without
    gpuscope (no frame of the bootstrap in its traceback). A profiler that fails to start or
    stop: one line, and the program runs on."""
    program = write(tmp_path, "prog.py", TORCH_FAILS)
    fake = fake_torch(tmp_path)
    path = [] if mode == "absent" else [fake]
    _, env, without = environments(tmp_path, ProfileConfig(delay_s=0, duration_s=0.05), *path, torch_mode=mode)
    p = run(program, env, mode)
    if mode in ("absent", "import"):
        ref = run(program, without, mode)
        assert ref.returncode == 1 and "Traceback" in ref.stderr
        if mode == "import" and sys.version_info < (3, 11):  # 3.10 shows the bootstrap's frame (sitecustomize.py)
            assert ours(p.stderr) == [] and p.stderr.splitlines()[-1] == ref.stderr.splitlines()[-1]
            p.stderr = ref.stderr
        assert (p.returncode, p.stdout, p.stderr) == (ref.returncode, ref.stdout, ref.stderr)
    else:
        assert (p.returncode, p.stdout) == (0, "done\n"), p.stderr
        (line,) = ours(p.stderr)
        assert p.stderr == line + "\n" and f"the profiler cannot {mode}" in line
        assert_one_line_each(p.stderr)


MARKS = """
import os, shutil, sys
import gpuscope
marks = os.path.join(os.environ["GPUSCOPE_RUN_DIR"], "marks.jsonl")
gpuscope.mark("first", tokens=1)
if sys.argv[1] == "bad arguments":
    for _ in range(3):
        gpuscope.mark("bad", tokens="many")
    gpuscope.mark("bad", prompt_tokens=object())
    gpuscope.mark("bad", step=[1])
else:  # the marks file, then the whole run directory, vanish
    os.unlink(marks)
    gpuscope.mark("after the file vanished", tokens=1)
    print("kept:", [l.count("after the file vanished") for l in open(marks)])
    shutil.rmtree(os.environ["GPUSCOPE_RUN_DIR"])
    for _ in range(3):
        gpuscope.mark("after the folder vanished", tokens=1)
print("done")
"""


@pytest.mark.parametrize("fault", ["bad arguments", "vanished"])
def test_marks_that_cannot_be_written_cost_one_line(tmp_path: Path, fault: str) -> None:
    """A decode loop marking with a bad argument, or after the run directory was removed, gets
    one line for it, not one per mark; a mark after its file was deleted goes to a new file."""
    program = write(tmp_path, "prog.py", MARKS)
    _, env, _ = environments(tmp_path, ProfileConfig(delay_s=600))
    p = run(program, env, fault)
    expected = "done\n" if fault == "bad arguments" else "kept: [1]\ndone\n"
    assert (p.returncode, p.stdout) == (0, expected), p.stderr
    (line,) = ours(p.stderr)
    assert p.stderr == line + "\n" and "gpuscope.mark failed" in line
    assert ("ValueError" if fault == "bad arguments" else "FileNotFoundError") in line


DAMAGED = """
import os, json
import torch                      # the bootstrap's windows would start here
import gpuscope
gpuscope.mark("step", tokens=1)
with open(os.path.join(os.environ["GPUSCOPE_RUN_DIR"], "marks.jsonl")) as f:
    print([json.loads(line)["name"] for line in f])
"""


@pytest.mark.parametrize("name,damage", [
    ("_gpuscope_boot.py", "syntax error"), ("_gpuscope_contract.py", "syntax error"),
    ("_gpuscope_boot.py", "deleted"), ("_gpuscope_contract.py", "deleted"),
])
def test_a_damaged_bootstrap_copy_leaves_the_program_working(tmp_path: Path, name: str, damage: str) -> None:
    """The run's copy of the bootstrap cut short or deleted before the program starts: the
    program (which imports torch and gpuscope and marks) runs as it would, its marks kept.
    (A broken copy of sitecustomize.py itself gets Python's own two-line "Error in
    sitecustomize" message, as any sitecustomize would: nothing of gpuscope's runs to help.)"""
    program = write(tmp_path, "prog.py", DAMAGED)
    run_dir, env, _ = environments(tmp_path, ProfileConfig(delay_s=0, duration_s=30), fake_torch(tmp_path))
    copy = run_dir / "bootstrap" / name
    if damage == "deleted":
        copy.unlink()
    else:
        copy.write_text(copy.read_text() + "\n)(\n")
    p = run(program, env)
    assert (p.returncode, p.stdout) == (0, "['step']\n"), p.stderr
    assert len(ours(p.stderr)) <= 1 and len(p.stderr.splitlines()) == len(ours(p.stderr)), p.stderr
    assert_one_line_each(p.stderr)


def test_the_programs_own_failing_sitecustomize_reads_as_without_gpuscope(tmp_path: Path) -> None:
    """Python's own words for it, as without gpuscope, and the bootstrap still starts."""
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text('raise RuntimeError("the program\'s own sitecustomize")\n')
    program = write(tmp_path, "prog.py", "import torch\nprint('done')\n")
    run_dir, env, without = environments(tmp_path, ProfileConfig(delay_s=600), own, fake_torch(tmp_path))
    p, ref = run(program, env), run(program, without)
    assert "Error in sitecustomize" in ref.stderr and ref.stdout == "done\n"
    assert (p.returncode, p.stdout, p.stderr) == (ref.returncode, ref.stdout, ref.stderr)
    assert '"event":"armed"' in (run_dir / contract.EVENTS_FILE).read_text()  # its windows were armed


EXITS = WAIT_FOR + """
import os, signal, sys, time
import torch


def main(how):
    wait_for("start")  # under gpuscope run: a profiler window is open from here on
    print("working", flush=True)
    if how == "os._exit":
        os._exit(7)
    if how == "sys.exit":
        sys.exit(3)
    if how == "uncaught":
        raise KeyError("the program's own error")
    if how == "SIGTERM":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # not reached: SIGTERM's default action ends the program (exit code 0 if it did not)
    if how == "fork":
        pid = os.fork()
        if pid == 0:
            print("forked", flush=True)
            sys.exit(9)  # runs the exit handlers it inherited
        print("forked child's exit code", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        sys.exit(5)
    if how == "spawn":
        import multiprocessing as mp
        child = mp.get_context("spawn").Process(target=sys.exit, args=(4,))
        child.start()
        child.join()
        print("spawned child's exit code", child.exitcode)
        sys.exit(6)


if __name__ == "__main__":
    main(sys.argv[1])
"""


@pytest.mark.parametrize("how", ["os._exit", "sys.exit", "uncaught", "SIGTERM", "fork", "spawn"])
def test_the_program_exits_as_its_own_inside_a_window(tmp_path: Path, how: str) -> None:
    """However the program ends, with a profiler window open, or forks or spawns: its exit
    status, stdout and stderr are those it has without gpuscope. A forked process never writes
    the window it inherited (the parent's, to the parent's file)."""
    program = write(tmp_path, "prog.py", EXITS)
    run_dir, env, without = environments(tmp_path, ProfileConfig(delay_s=0, duration_s=60), fake_torch(tmp_path))
    p, ref = run(program, env, how), run(program, without, how)
    assert ref.returncode == {"os._exit": 7, "sys.exit": 3, "uncaught": 1, "SIGTERM": -15, "fork": 5, "spawn": 6}[how]
    assert (p.returncode, p.stdout, p.stderr) == (ref.returncode, ref.stdout, ref.stderr)
    windows = [json.loads(line) for line in (run_dir / "windows.jsonl").read_text().splitlines()] \
        if (run_dir / "windows.jsonl").exists() else []
    for w in windows:  # each process writes its own window, to its own file
        assert f"_{w['pid']}_window" in w["path"], windows
    assert len({w["path"] for w in windows}) == len(windows), windows


def test_a_run_directory_that_turns_unwritable_costs_one_line_per_failure(tmp_path: Path) -> None:
    """The run directory made read-only while the program runs (as another user than root,
    whom modes do not stop): marks and the window's trace cannot be written; the program runs
    to its end with one line for each."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the program as another user")
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    where = Path(tempfile.mkdtemp(prefix="gpuscope-faults-"))  # tmp_path's parents are root's alone
    try:
        os.chmod(where, 0o755)
        fake = fake_torch(where)
        program = write(where, "prog.py", WAIT_FOR + """
import os
import gpuscope
rd = os.environ["GPUSCOPE_RUN_DIR"]
os.chmod(os.path.join(rd, "traces"), 0o500)
os.chmod(rd, 0o500)  # from here on nothing can be created in the run directory
for _ in range(3):
    gpuscope.mark("step", tokens=1)
import torch
wait_for("stop")
print("done")
""")
        run_dir, env, _ = environments(where, ProfileConfig(delay_s=0, duration_s=0.05), fake, REPO)
        for path in [where, *where.rglob("*")]:
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
        probe = run(write(where, "probe.py", "import gpuscope, json\n"), env, user=as_nobody)
        if probe.returncode != 0:
            pytest.skip(f"this Python does not run as uid {NOBODY}: {probe.stderr.strip()[-200:]}")
        p = run(program, env, user=as_nobody)
        assert (p.returncode, p.stdout) == (0, "done\n"), p.stderr
        lines = ours(p.stderr)
        assert len(p.stderr.splitlines()) == len(lines) == 2, p.stderr  # the marks, and the window
        assert "gpuscope.mark failed: PermissionError" in lines[0] and "profiler window failed" in lines[1]
        assert_one_line_each(p.stderr)
    finally:
        shutil.rmtree(where, ignore_errors=True)


DAMAGES_THE_RUN_DIR = """
import os, shutil, sys
rd = os.environ["GPUSCOPE_RUN_DIR"]
print("working")
if sys.argv[1] == "removed":
    shutil.rmtree(rd)
else:  # folders where gpuscope reads files, a file where it looks for traces
    for name in ("marks.jsonl", "windows.jsonl", "profiler.jsonl"):
        os.mkdir(os.path.join(rd, name))
    shutil.rmtree(os.path.join(rd, "traces"))
    open(os.path.join(rd, "traces"), "w").close()
sys.exit(4)
"""


@pytest.mark.parametrize("damage", ["removed", "replaced"])
def test_gpuscope_run_exits_with_the_programs_code_whatever_became_of_the_run_directory(tmp_path: Path,
                                                                                       damage: str) -> None:
    db = tmp_path / "s.duckdb"
    program = write(tmp_path, "prog.py", DAMAGES_THE_RUN_DIR)
    p = gpuscope_run(db, "--", PY, str(program), damage)
    assert p.returncode == 4, p.stderr
    assert p.stdout.startswith("working\n") and "internal error" not in p.stderr
    (stored,) = store_runs(db)
    assert stored["status"] == "complete" and stored["exit_code"] == 4
