"""``gpuscope run -- CMD``: run any command with telemetry sampling and, in its Python
processes, bounded PyTorch profiler windows; store everything as one run; analyze it.

The wrapper never changes the program: it puts a private copy of the bootstrap
(:mod:`gpuscope.run.bootstrap`) first on the child's ``PYTHONPATH``, points ``VLLM_TORCH_PROFILER_DIR`` at the run directory unless
set, starts the child in its own process group, forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT to
that group, and exits with the child's exit code. Telemetry goes to the store about once a
second while the child runs (status ``recording``); if gpuscope itself is killed, the run
stays ``recording`` with its owner pid in ``runs.info`` and readers show it as
``incomplete`` (``store.effective_status``). At the end the traces the child wrote are
ingested into the run, the marks and profiler windows become annotations, and the run is
analyzed. Every variable and file name shared with the child is in :mod:`gpuscope.run.contract`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GpuscopeError, InputError, ParameterError, StoreBusyError
from ..fileio import read_jsonl as _read_jsonl
from ..paths import user_umask
from ..redact import redact_argv, redact_command
from ..textsafe import raw_stream, visible
from . import contract
from .bootstrap import CHILD_FILES
from .summary import Interruption, ProfilerSummary, RunSummary
from .notes import profiler_notes, window_missed_gpu_note
from .pending import annotation_rows as _annotation_rows

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from ..otel.otlp import OtlpTarget
    from ..sampling import Sampler
    from ..sinks.memory import LiveBuffer
    from ..sinks.rundir import RunDirSink
    from ..sinks.store import StoreSink
    from ..store.read import AnnotationRow
    from .pending import PendingRun

    #: how the wrapper says what it does (the CLI's progress lines on stderr)
    Say = Callable[[str], None]

FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


@dataclass
class ProfileConfig:
    """When the bootstrap opens profiler windows in the child's Python processes."""

    enabled: bool = True
    delay_s: float = 5.0
    duration_s: float = 3.0
    windows: int = 1
    interval_s: float | None = None
    #: ``time`` (``delay_s`` after torch is imported), ``busy`` (the wrapper asks once the GPUs
    #: are busy: :mod:`gpuscope.run.busy`) or ``marks`` (at the ``after_marks``-th mark)
    when: str = "time"
    after_marks: int = 0
    #: ``busy``: the utilisation (a ratio, 0..1) the program's GPUs must stay at or above
    busy_util: float = 0.5
    #: a process opens a scheduled window only once it has used a GPU: set by :func:`execute`
    #: when the sampler found this machine's GPUs (a replay's GPUs are not the program's)
    gpu_only: bool = False

    def to_env(self) -> str:
        return contract.encode_profile(enabled=self.enabled, delay_s=self.delay_s, duration_s=self.duration_s,
                                       windows=self.windows, interval_s=self.interval_s, when=self.when,
                                       after_marks=self.after_marks, gpu_only=self.gpu_only)


@dataclass
class RunOptions:
    """Options of one ``gpuscope run``."""

    command: list[str]
    db: Path
    name: str | None = None
    hz: float = 10.0
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    tokens: int | None = None
    status_line: bool = False
    analyze: bool = True
    #: Play this recording back (looping) instead of reading the GPUs: for demos and tests.
    replay: Path | None = None
    #: The child's stdout goes to gpuscope's stderr (``--json``: stdout carries the document only).
    child_stdout_to_stderr: bool = False
    #: ``--otlp``: where the telemetry goes as OpenTelemetry metrics while the run runs, and its
    #: spans at the end.
    otlp: OtlpTarget | None = None
    #: ``--model``: (ModelSpec, source) of the model the program serves, stored with the run.
    model: tuple[Any, str] | None = None


@dataclass
class RunOutcome:
    """What a finished ``gpuscope run`` produced."""

    run_id: int
    exit_code: int
    run_dir: Path
    #: the run's summary; ``summary.to_json()`` is the ``--json`` document
    summary: RunSummary
    #: the child's marks as it wrote them (for the run's spans)
    marks: list[dict[str, Any]] = field(default_factory=list)


def _check_command(cmd: list[str]) -> None:
    if not cmd:
        raise InputError("command", "nothing to run: give the command after `--` (gpuscope run -- python app.py)")
    exe = cmd[0]
    shown = shown_program(exe)
    if os.sep in exe:
        if not Path(exe).exists():
            raise InputError(shown, "no such file")
        if not os.access(exe, os.X_OK):
            raise InputError(shown, "not executable")
    elif shutil.which(exe) is None:
        hint = " (to set a variable for the command, put `env` before it: env NAME=value CMD)" \
            if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", exe) else ""
        raise InputError(shown, f"command not found on PATH{hint}")


def shown_program(exe: str) -> str:
    """The program's word as an error line quotes it: redacted like the stored command (a
    variable typed where the program goes, ``HF_TOKEN=hf_...``, is not found, and its value is a
    token; a URL with a password is no file)."""
    return redact_argv([exe])[0]


def _check_private_dir(path: Path, what: str) -> None:
    """Refuse ``path`` unless it is a directory (not a symbolic link) of this user's that no other
    user can write to: whoever can write to it can rename what gpuscope creates there and put
    a folder of their own in its place, and the program would import their bootstrap."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise InputError(str(path), f"cannot use it as {what}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(str(path), f"is a symbolic link; gpuscope keeps {what} in a real directory of yours "
                                    "(remove the link, or use another --db)")
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(str(path), f"is not a directory; gpuscope keeps {what} there "
                                    "(move it away, or use another --db)")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise InputError(str(path), f"belongs to another user (uid {st.st_uid}), who could replace the bootstrap "
                                    f"gpuscope puts in {what}: use another --db")
    if st.st_mode & 0o022:
        raise InputError(str(path), f"other users can write to it (mode {stat.S_IMODE(st.st_mode):04o}) and "
                                    f"could replace the bootstrap gpuscope puts in {what}: chmod go-w it, or use "
                                    "another --db")


def private_bootstrap(run_dir: Path) -> Path:
    """A copy of the bootstrap in the run's own directory (0700, like the run directory): what
    the child imports first cannot be swapped by another user, even where gpuscope is installed
    in a directory others can write. The folder and its files are created here, never reused:
    one that exists already (a planted folder, or a link to another place) is refused."""
    _check_private_dir(run_dir, "the run directory")
    boot = run_dir / contract.BOOTSTRAP_DIR
    try:
        boot.mkdir(mode=0o700)  # mkdir(2) does not follow a link: an existing one fails here
    except FileExistsError:
        raise InputError(str(boot), "exists already; gpuscope creates the run's bootstrap folder itself") from None
    os.chmod(boot, 0o700)  # whatever the umask: mkdir's mode only ever loses bits to it
    for name, src in CHILD_FILES.items():
        # O_EXCL | O_NOFOLLOW: a new file, never one found in place (copyfile would write through a link)
        fd = os.open(boot / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)  # readable by the program whatever the umask
        with open(fd, "wb") as dst, open(src, "rb") as data:
            shutil.copyfileobj(data, dst)
    # The program's Python caches the bootstrap's bytecode beside it; left to the program's umask
    # that folder would be 0777 under umask 0. Made here, owner-only, as the rest of the folder.
    cache = boot / "__pycache__"
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o700)
    return boot


def child_env(run_dir: Path, run_id: int, profile: ProfileConfig, bootstrap_dir: Path,
              base: dict[str, str] | None = None, command: list[str] | None = None) -> dict[str, str]:
    """The child's environment (:func:`gpuscope.run.contract.child_environment`) around the
    run's private bootstrap folder (:func:`private_bootstrap`); ``command`` is the program's."""
    return contract.child_environment(dict(os.environ if base is None else base), run_dir=str(run_dir),
                                      run_id=run_id, profile=profile.to_env(), bootstrap_dir=str(bootstrap_dir),
                                      command=tuple(command or ()))


def default_run_name(command: list[str]) -> str:
    """A run's name from its command: the script of ``python script.py``, the module of
    ``python -m module``, else the program's name. Never an argument's value (it could be a
    secret, and it names the run directory), never a character a path would trip on."""
    prog = Path(command[0]).name
    name = prog
    if prog in ("python", "python3") or re.fullmatch(r"python\d(\.\d+)?", prog):
        rest = command[1:]
        for i, arg in enumerate(rest):
            if arg == "-m" and i + 1 < len(rest):
                name = rest[i + 1]
                break
            if arg.startswith("-m") and len(arg) > 2:
                name = arg[2:]
                break
            if arg == "-c" or arg.startswith("-c"):
                break  # inline code: the program's name says more than the code would
            if not arg.startswith("-"):
                if arg.endswith(".py") or Path(arg).is_file():
                    name = Path(arg).stem
                break
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "run"
    return name[:64]


def _runs_root(db: Path) -> Path:
    return db.parent / "gpuscope-runs"


def _checked_runs_root(db: Path, create: bool) -> Path:
    """The folder of the store's run directories, checked when it exists
    (:func:`_check_private_dir`): the run directories, and the bootstrap the program imports
    from them, are only as safe from other users as this folder is. ``create``: made owner-only
    when it does not exist (once the store has started: a store that cannot be written is the
    store's to refuse, and its folder the store's to make); otherwise nothing is created."""
    root = _runs_root(db)
    if create:
        try:
            root.mkdir(mode=0o700)
            os.chmod(root, 0o700)  # whatever the umask (an API caller's may be 0o777)
        except FileExistsError:
            pass
    elif not os.path.lexists(root):
        return root
    _check_private_dir(root, "its run directories")
    return root


def _new_run_dir(root: Path, base: str) -> Path:
    """A run directory nobody used before: run ids restart with a new store (a deleted store,
    another store in the same folder), and a reused directory would hand the old run's traces
    and marks to the new one. Anything already at a name (a folder, a link to another place)
    is passed over: mkdir(2) never follows a link. Created with its traces folder, owner-only."""
    for n in range(1, 10_000):
        path = root / (base if n == 1 else f"{base}.{n}")
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)  # whatever the umask
        traces = path / contract.TRACES_DIR
        traces.mkdir(mode=0o700)
        os.chmod(traces, 0o700)
        return path
    raise GpuscopeError(f"{root}: no free run directory for {base}")


def execute(opts: RunOptions, progress: Say | None = None) -> RunOutcome:
    """Run the command as a recorded run; returns when the child has exited and the run is
    stored (and analyzed unless ``opts.analyze`` is False)."""
    from .. import store
    from ..collectors import ProcessTree
    from ..pipeline import build_sampler, load_replay
    from ..sinks import LiveBuffer, StoreSink
    from .busy import busy_notes, busy_sink

    # every line said while the program runs clears the status line first (_StatusLine)
    line = _StatusLine(opts.status_line, progress or (lambda msg: None))
    say = line.say
    _check_command(opts.command)
    if not (0 < opts.hz <= 100):
        raise ParameterError("hz", "{value} is outside 0 < hz <= 100", {"value": f"{opts.hz:g}"})
    name = opts.name or default_run_name(opts.command)
    _checked_runs_root(opts.db, create=False)  # one found unfit is refused before the run exists
    tree = ProcessTree([])
    live = LiveBuffer(maxlen=4)
    replay = None
    if opts.replay is not None:
        if not Path(opts.replay).is_file():
            raise InputError(str(opts.replay), "no such recording file")
        # The recording's GPUs stand in for this machine's; its host row does not: the host that
        # runs the command (and its process tree) is this one.
        replay = load_replay(opts.replay)
    degraded: list[Any] = []
    otel = _OtlpRun(opts, name) if opts.otlp is not None else None
    # The run exists from here (every input checked); the wrapper owns its lifecycle and its
    # store sink writes samples under it, nothing else.
    # A store that stays unavailable: the program runs anyway, its run kept in its run folder (pending).
    run_id, pending = _begin_run(opts.db, name, redact_command(opts.command), 1.0 / opts.hz)
    sink = StoreSink(opts.db, run_id=run_id, source="run", final_status=None) if pending is None else pending.sink
    # --profile-when busy, and the GPU processes `gpuscope profile` asks
    busy = busy_sink(opts.profile, say, replay=opts.replay is not None)
    # the command's process tree: the processes watched, and measured in the host row
    sampler = build_sampler([sink, live, busy] + ([otel.state] if otel else []), interval_s=1.0 / opts.hz,
                            replay=replay, watch=tree, host_tree=tree, on_degradation=degraded.append)
    try:
        sampler.start()
    except BaseException:
        _abandon_run(opts.db, run_id, pending)
        raise
    root = _runs_root(opts.db)
    try:
        run_dir = pending.run_dir if pending else _new_run_dir(_checked_runs_root(opts.db, create=True), f"{run_id}-{name}")
        boot = private_bootstrap(run_dir)
    except Exception as exc:  # the program never started: the run is closed as failed, not left recording
        sampler.stop()
        try:
            _finish(opts.db, run_id, "failed", None, time.time_ns(), sampler.stats.started_ns, pending=pending)
        except (GpuscopeError, OSError):  # the store's disk is full too: the run reads as incomplete once we are gone
            pass
        reason = store.write_failure_reason(exc) if isinstance(exc, OSError) else None
        if reason is not None:  # the disk beside the store filled up: one line, not an internal error
            raise GpuscopeError(f"{root}: cannot prepare the run's folder ({reason}); the program was not "
                                "started") from None
        raise
    # a replay's GPUs are not the program's: on them it does no GPU work, and would get no window
    opts.profile.gpu_only = opts.replay is None and any(d.kind != "host" for d in sampler.devices)
    busy.attach(run_dir)
    started_ns = time.time_ns()
    late = _recording_started(opts.db, run_id, sampler, run_dir, opts.profile, pending, opts.model)
    env = child_env(run_dir, run_id, opts.profile, bootstrap_dir=boot, command=opts.command)
    child_stdout = _stderr_fd() if opts.child_stdout_to_stderr else None
    # A stop signal that comes while the child is being started is held and passed on once it
    # exists: with the default handler it would stop gpuscope alone while the program, in its own
    # process group, never hears of it (seen on a loaded machine: a Ctrl-C right after start).
    previous: dict[int, Any] = {}
    early: list[int] = []
    ignored: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        early.append(signum)

    for sname in FORWARDED_SIGNALS:
        sig = getattr(signal, sname, None)
        if sig is None:
            continue
        if signal.getsignal(sig) is signal.SIG_IGN:
            # ignored where gpuscope was started (a background job of a script): the program
            # inherits that, as it would without gpuscope (a handler set now would reset it)
            ignored.append(sig)
            continue
        previous[sig] = signal.signal(sig, hold)
    try:
        # The child keeps the user's umask: gpuscope's own files are owner-only, the program's are its business.
        if sys.version_info >= (3, 11):
            child = subprocess.Popen(opts.command, env=env, process_group=0, umask=user_umask(), stdout=child_stdout)
        else:  # process_group is 3.11's; before it the child makes its own group
            child = subprocess.Popen(opts.command, env=env, preexec_fn=os.setpgrp, umask=user_umask(),  # noqa: PLW1509
                                     stdout=child_stdout)
    except BaseException as exc:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not isinstance(exc, OSError):
            raise
        sampler.stop()
        _finish(opts.db, run_id, "failed", None, time.time_ns(), pending=pending)
        raise InputError(shown_program(opts.command[0]), f"cannot start: {exc.strerror or exc}") from None
    tree.roots = (child.pid,)
    stops: list[tuple[int, int]] = []  # (signal, ns) passed on to the child
    child_done = threading.Event()
    # Once the program is found to ignore the signal passed on: what each further one sends
    # instead (a program that merely takes long to exit, writing its window, is left alone).
    ladder: list[signal.Signals] = []
    watchers: list[threading.Timer] = []

    def check_ignored(signum: int) -> None:
        """(A timer thread, IGNORED_SIGNAL_WAIT_S after ``signum`` was passed on.)"""
        if child_done.is_set() or not ignores_signal(child.pid, signum):
            return
        ladder[:] = [signal.SIGKILL] if signum == signal.SIGTERM else [signal.SIGTERM, signal.SIGKILL]
        say(f"the program ignores {signal.Signals(signum).name}; press Ctrl-C again to send {ladder[0].name}")

    def forward(signum: int, frame: Any) -> None:
        if child_done.is_set():
            # the child is gone and the run is being stored: a second Ctrl-C must not lose it
            say("storing the run; it ends when the run is stored")
            return
        if ladder:
            signum = ladder.pop(0)
            say(f"{signum.name} sent to the program's process group"
                + (f"; press Ctrl-C again to send {ladder[0].name}" if ladder else ""))
        elif not stops:
            # Tell the bootstrap that exit has begun before the child hears of it: no profiler
            # window opens from now on (an open one is closed and written at exit).
            try:
                (run_dir / contract.STOP_FILE).touch()
            except OSError:
                pass
            say(f"{signal.Signals(signum).name} passed on to the program; waiting for it to exit"
                " (an open profiler window is written first)")
            watcher = threading.Timer(IGNORED_SIGNAL_WAIT_S, check_ignored, (signum,))
            watcher.daemon = True
            watcher.start()
            watchers.append(watcher)
        stops.append((signum, time.time_ns()))
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    for sig in previous:
        signal.signal(sig, forward)
    for sig in ignored:
        previous[sig] = signal.signal(sig, forward)
    for signum in early:  # stop signals that came while the program was being started
        forward(signum, None)
    try:
        try:
            code = _wait(child, sampler, live, started_ns, opts.status_line, line)
        finally:
            child_done.set()
            for watcher in watchers:
                watcher.cancel()
        ended_ns = time.time_ns()
        outcome = _store(opts, say, sampler, sink, degraded, run_id, run_dir, code, started_ns, ended_ns, stops,
                         pending, late)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary = outcome.summary
    summary.profiler.notes.extend(busy_notes(busy, run_dir, sampler.stats.started_ns))
    if opts.analyze and summary.store_error is None:
        summary.analysis, summary.telemetry = _analyze(opts.db, outcome.run_id, opts.tokens, opts.model)
        if opts.replay is None:  # replayed GPUs are not the ones the program ran on
            note = window_missed_gpu_note(opts.profile, summary)
            if note:
                summary.profiler.notes.append(note)
    if otel is not None:
        summary.otlp = otel.finish(outcome, name, redact_command(opts.command), started_ns, ended_ns, say)
    return outcome


class _OtlpRun:
    """``gpuscope run --otlp``: the run's telemetry as OpenTelemetry metrics while it runs (the
    monitor's instruments, the resource naming the run) and its spans at the end."""

    def __init__(self, opts: RunOptions, name: str) -> None:
        from ..otel.setup import metrics_export, resource_attributes
        from ..otel.sink import TelemetryState

        assert opts.otlp is not None
        self.endpoint, self.protocol = opts.otlp.endpoint, opts.otlp.protocol
        self.resource = resource_attributes("run", {"gpuscope.run.name": name})
        self.state = TelemetryState()
        export = metrics_export(self.state, self.resource, otlp=opts.otlp,
                                log=lambda line: None)  # the summary says how it went
        assert export.queue is not None  # an OTLP target always has its queue
        self.provider, self.queue = export.provider, export.queue

    def finish(self, outcome: RunOutcome, name: str, command: str | None, started_ns: int, ended_ns: int,
               say: Say) -> dict[str, Any]:
        from ..otel.spans import export_spans, run_span_plan

        self.provider.shutdown(timeout_millis=10_000)  # the last collection and export
        plan = run_span_plan(outcome.summary.to_json(), name=name, command=command, started_ns=started_ns,
                             ended_ns=ended_ns, windows=outcome.summary.windows, marks=outcome.marks)
        traceparent = os.environ.get("TRACEPARENT")
        try:
            spans_ok = export_spans(plan, self.endpoint, self.protocol, self.resource, traceparent=traceparent,
                                    tracestate=os.environ.get("TRACESTATE"))
        except Exception as exc:  # the run is stored: a tracing failure is a note, not an error
            spans_ok = False
            say(f"OTLP: the run's spans were not exported ({type(exc).__name__}: {exc})")
        doc = {"protocol": self.protocol, "metric_exports": self.queue.sent, "metric_export_failures": self.queue.failures,
               "metric_exports_dropped": self.queue.dropped, "spans_exported": spans_ok,
               "spans": 1 + len(plan["children"]), "mark_events": len(plan["events"]),
               "parent_traceparent": bool(traceparent)}
        if not spans_ok or self.queue.failures:
            say(f"OTLP: {self.queue.failures} metric export(s) failed; spans "
                f"{'exported' if spans_ok else 'not exported'} (is the endpoint up?)")
        return doc


def _store(opts: RunOptions, say: Say, sampler: Sampler, sink: StoreSink | RunDirSink, degraded: list[Any], run_id: int,
           run_dir: Path, code: int, started_ns: int, ended_ns: int, stops: list[tuple[int, int]],
           pending: PendingRun | None = None, late: list[Callable[[], None]] | None = None) -> RunOutcome:
    """Stop the sampler, ingest the traces, store windows and marks, and close the run. A
    ``pending`` run (the store was unavailable) is finished in its run folder, then stored from
    there if the store takes it now; ``late``: the writes the store refused at the start."""
    from .. import store

    stats = sampler.stop()
    say(f"child exited with code {code}; storing the run")
    if degraded:
        # each degradation once, in one line: the details are in the JSON summary and `gpuscope devices`
        names = sorted({f"{getattr(d, 'device', None) or '?'}/{getattr(d, 'metric', None) or '*'}" for d in degraded})
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        where = (f"not in the recording {opts.replay}" if opts.replay is not None
                 else "see `gpuscope devices`")
        say(f"telemetry: {len(names)} metric(s) not available: {shown} ({where})")
    # Only finished traces: a window's export in progress (`.tmp`, `.part`) is left out.
    traces = sorted(p for p in (run_dir / contract.TRACES_DIR).rglob("*")
                    if p.is_file() and p.name.endswith(contract.TRACE_SUFFIXES))
    ingest_error = None
    ingested: list[dict[str, Any]] | None = None  # per trace: path, events (the engines' notes)
    empty_traces: list[str] = []  # valid traces that recorded nothing: not an ingest failure
    if traces and pending is None:  # (a pending run's traces go in with it: _store_pending)
        from .. import ingest

        try:
            ingested = ingest.ingest(opts.db, traces, into_run=run_id).files
        except ingest.NoActivityError:
            empty_traces = [str(p) for p in traces]
            say(f"the profiler window{'s' if len(traces) > 1 else ''} recorded no activity (the program ran no ops "
                "while it was open): no trace to ingest")
        except (InputError, GpuscopeError) as exc:
            ingest_error = str(exc)
            say(f"could not ingest the traces: {exc}")
    windows = _read_jsonl(run_dir / contract.WINDOWS_FILE)
    marks = _read_jsonl(run_dir / contract.MARKS_FILE)
    store_error = None
    # a note of samples the sink could not store: it goes in with the run's end (a run must not
    # read complete without saying what it lacks)
    notes = [sink.missing_note] if sink.missing_note else []
    try:
        for write in late or ():  # what the store refused at the start (held past the wait): the run's info, model
            write()
        _finish(opts.db, run_id, "complete", code, ended_ns, started_ns, _annotation_rows(windows, marks),
                notes=notes, pending=pending)
    except GpuscopeError as exc:
        # The store refused the run's end (its disk full, made read-only): the program ran, and
        # its exit code is still gpuscope's. The run keeps what was written; it stays
        # `recording`, which readers show as `incomplete` once this process has exited.
        reason = store.write_failure_reason(exc)
        store_error = f"{opts.db}: the run's end could not be stored ({reason}); it shows as incomplete" \
            if reason else str(exc)
        print(f"gpuscope run: {store_error}", file=sys.stderr, flush=True)
    if pending is not None or store_error is None:  # a pending run stored now, and the pending runs of others
        from .pending import store_after_run

        run_id, store_error, ingest_error = store_after_run(opts.db, say, run_id, run_dir, pending, store_error,
                                                            ingest_error, STORE_WAIT_AT_END_S)
    events = _read_jsonl(run_dir / contract.EVENTS_FILE)
    summary = RunSummary(
        run_id=run_id, exit_code=code, run_dir=str(run_dir), sampler=stats.to_dict(),
        replay=str(opts.replay) if opts.replay else None, traces=[str(p) for p in traces], windows=windows,
        marks=len(marks), ingest_error=ingest_error, store_error=store_error,
        interrupted=Interruption(signal.Signals(stops[0][0]).name, stops[0][1]) if stops else None,
        profiler=ProfilerSummary(opts.profile.enabled, profiler_notes(opts.profile, events, windows, len(traces),
                                                                      started_ns, stops[0][1] if stops else None,
                                                                      empty_traces=empty_traces)))
    # the engines' own profilers (vLLM, SGLang): what they wrote, who held each process's session
    from .engines import engine_trace_notes

    summary.profiler.notes.extend(engine_trace_notes(opts.command, traces, windows, events, ingested))
    return RunOutcome(run_id, code, run_dir, summary, marks=marks)


def _stderr_fd() -> int:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (tests): the process's own
        return 2


#: Seconds between two updates of the status line.
STATUS_INTERVAL_S = 0.5


class _StatusLine:
    """The status line on a terminal's stderr, and the one way gpuscope says something while
    the program runs: :meth:`say` clears the line first, so that a message (the forwarding
    handler's, a warning from another thread) starts at the line's beginning instead of being
    glued to the status (``... 91 samples^Cgpuscope run: SIGINT passed on``); the next update
    draws the status again below it."""

    def __init__(self, enabled: bool, say: Say) -> None:
        self.enabled = enabled
        self._say = say
        self.shown = False
        # Re-entrant: a signal handler runs on the main thread between two bytecodes, possibly
        # while the main thread is inside draw(); another thread (the ignored-signal warning)
        # waits until the line is complete.
        self._lock = threading.RLock()

    def draw(self, text: str) -> None:
        """Show ``text`` (already visible: :func:`_status`) as the status line."""
        with self._lock:
            # set before the write: a handler that runs right after it must clear the line
            self.shown = True
            # gpuscope's own sequences (back to the line's start, erase to its end) go past the
            # CLI's VisibleStream
            err = raw_stream(sys.stderr)
            err.write("\r" + text + "\x1b[K")
            err.flush()

    def clear(self) -> None:
        """Erase the status line if it is shown."""
        with self._lock:
            if self.shown:
                self.shown = False
                err = raw_stream(sys.stderr)
                err.write("\r\x1b[K")
                err.flush()

    def say(self, msg: str) -> None:
        """Say ``msg`` (a progress line) on a line of its own."""
        with self._lock:
            self.clear()
            self._say(msg)


def _wait(child: subprocess.Popen[Any], sampler: Sampler, live: LiveBuffer, started_ns: int, status_line: bool,
          line: _StatusLine | None = None) -> int:
    """Wait for the child without waking up more than the status line needs: ``Popen.wait``
    with a timeout polls every 50 ms (about 50 wake-ups a second, in a loop of 0.25 s
    timeouts), and on a machine whose cores the program keeps busy each wake-up preempts one
    of its threads. Signals still reach the forwarding handlers: both waits are interruptible.
    ``line``: the status line the run's messages share (:class:`_StatusLine`; one of its own
    when not given)."""
    if line is None:
        line = _StatusLine(status_line, lambda msg: None)
    if not status_line:
        code = child.wait()  # blocked in waitpid
    else:
        done = threading.Event()

        def reap() -> None:
            try:
                child.wait()
            finally:
                done.set()

        threading.Thread(target=reap, name="gpuscope-wait", daemon=True).start()
        while not done.wait(STATUS_INTERVAL_S):
            line.draw(_status(sampler, live, started_ns))
        line.clear()
        code = child.wait()  # already reaped: returns its exit status
    # A child killed by a signal: the shell convention 128 + signal number.
    return code if code >= 0 else 128 - code


#: Seconds after the first signal passed on to the program before gpuscope checks whether the
#: program ignores it (a background job of a script starts with SIGINT ignored, and would never
#: stop on Ctrl-C): then it says so, and what a further Ctrl-C sends.
IGNORED_SIGNAL_WAIT_S = 5.0


def ignores_signal(pid: int, signum: int) -> bool:
    """Whether the live process ``pid`` has ``signum``'s disposition set to ignore (its
    ``SigIgn`` mask in ``/proc/PID/status``, Linux). False where that cannot be read (another
    system, a process gone or a zombie): a program that handles the signal itself and goes on
    is not "ignoring" it (it may be writing a profiler window, or shutting down)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    fields = dict(ln.split(":", 1) for ln in text.splitlines() if ":" in ln)
    if fields.get("State", "").strip().startswith(("Z", "X")):
        return False
    try:
        mask = int(fields.get("SigIgn", "0").strip(), 16)
    except ValueError:
        return False
    return bool(mask >> (signum - 1) & 1)


def _status(sampler: Sampler, live: LiveBuffer, started_ns: int) -> str:
    elapsed = (time.time_ns() - started_ns) / 1e9
    parts = [f"gpuscope: {elapsed:6.1f} s", f"{sampler.stats.ticks} samples"]
    for dev, s in sorted(live.latest().items()):
        util, power = s.get("gpu_util"), s.get("power_w")
        if util is None and power is None:
            continue
        bits = [dev]
        if util is not None:
            bits.append(f"{100 * util:3.0f}%")
        if power is not None:
            bits.append(f"{power:4.0f} W")
        parts.append(" ".join(bits))
    return visible(" | ".join(parts))


@contextmanager
def _writing(db: Path) -> Iterator[Any]:
    """One short write transaction on the store (the sampler has flushed and let go of it); a
    write the store's file system refuses is a one-line error (``store.writing``)."""
    from .. import store

    with store.writing(db, retry_s=10.0) as con:
        yield con


# -- the run's lifecycle: the wrapper is its one orchestrator, through gpuscope.store.runs ------

#: How long ``gpuscope run`` waits for a store another process holds (creating, migrating or
#: writing it) before it records the run into its run folder instead.
STORE_WAIT_S = 10.0
#: How long a run kept in its run folder waits for the store at its end (it can be stored later).
STORE_WAIT_AT_END_S = 2.0


def _begin_run(db: Path, name: str, command: str | None, interval_s: float) -> tuple[int, PendingRun | None]:
    """Create the run, ``recording``, owned by this process (a run whose owner is gone reads
    ``incomplete``): its id, and None. Its start is the sampler's (:func:`_recording_started`).

    A store that stays unavailable (held by another process past :data:`STORE_WAIT_S`, or one
    that cannot be opened or created) does not stop the program: the run is recorded into a
    pending run folder (:class:`~gpuscope.run.pending.PendingRun`), said in one line, and
    ``(0, the pending run)`` returned. A store that cannot be written at all (read-only) or a
    disk too full for it is refused as before: bad input, or a failure, before the program starts."""
    from ..errors import StoreError, StoreReadOnlyError
    from ..machine import hostname
    from ..store.sampled_run import SampledRun
    from .pending import PendingRun, pending_dir_name

    try:
        return SampledRun.begin(db, name=name, source="run", command=command, interval_s=interval_s,
                                host=hostname(), retry_s=STORE_WAIT_S).run_id, None
    except StoreReadOnlyError:
        raise
    except StoreError as exc:
        return 0, PendingRun.fall_back(lambda: _new_run_dir(_checked_runs_root(db, create=True), pending_dir_name(name)),
                                       name, command, interval_s, hostname(), exc)


def _recording_started(db: Path, run_id: int, sampler: Sampler, run_dir: Path, profile: ProfileConfig,
                       pending: PendingRun | None = None,
                       model: tuple[Any, str] | None = None) -> list[Callable[[], None]]:
    """Add what is known once the sampler runs and the run directory exists: the sampler's
    start, each vendor's status, the run directory, the profiler settings and the model. A
    store held past the wait here does not keep the program from starting: the write is
    returned, for :func:`_store` to do with the run's end."""
    from ..store.run_info import RunInfo
    from ..store.sampled_run import SampledRun
    from .pending import say_always

    vendors, settings = [v.to_dict() for v in sampler.vendors], json.loads(profile.to_env())
    if pending is not None:
        pending.started(sampler.stats.started_ns, vendors, settings, model)
        return []

    def write() -> None:
        SampledRun(db, run_id).started(sampler.stats.started_ns, vendors, RunInfo(run_dir=str(run_dir), profile=settings))
        if model is not None:
            from ..store import runs as store_runs

            with _writing(db) as con:
                store_runs.set_model(con, run_id, model[0].to_json(), model[1])

    try:
        write()
    except StoreBusyError as exc:
        say_always(f"the store is busy ({exc}); the program starts anyway, and the run's details are stored with "
                   "its end")
        return [write]
    return []


def _abandon_run(db: Path, run_id: int, pending: PendingRun | None = None) -> None:
    """The sampler did not start: the run is finished ``failed`` rather than left recording
    (a store that refuses even that leaves it to read ``incomplete`` once we are gone)."""
    try:
        _finish(db, run_id, "failed", None, time.time_ns(), pending=pending)
    except (GpuscopeError, OSError):
        pass


def _finish(db: Path, run_id: int, status: str, code: int | None, ended_ns: int, started_ns: int | None = None,
            annotations: list[AnnotationRow] | None = None, notes: list[str] | None = None,
            pending: PendingRun | None = None) -> None:
    """Close the run (status, exit code, end) and store its annotations and ``notes`` (appended
    to the run's info), in one transaction. A ``pending`` run is closed in its run folder (its
    windows and marks are there already)."""
    from ..store.telemetry import insert_annotations
    from ..store import runs

    if pending is not None:
        pending.finish(status, code, ended_ns, started_ns, notes)
        return
    with _writing(db) as con:
        if annotations:
            insert_annotations(con, run_id, annotations)
        runs.finish(con, run_id, status, ended_ns, exit_code=code, started_ns=started_ns, notes=notes or ())


def _analyze(db: Path, run_id: int, tokens: int | None,
             model: tuple[Any, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's analysis document and its telemetry over the run (with ``by_kernel_class``)."""
    from .. import store
    from ..analyzers.breakdown import analyze_run
    from ..analyzers.energy import run_telemetry, telemetry_by_bound

    con = store.connect(db, read_only=True)
    try:
        doc = analyze_run(con, run_id, model=model[0] if model else None,
                          model_source=f"--model {model[1]}" if model else None)
        tele = run_telemetry(con, run_id, tokens=tokens)
        bounds = {k["name"]: k.get("bound", "unknown") for k in doc["kernels"] if k.get("category") == "compute"}
        tele["by_kernel_class"] = telemetry_by_bound(con, run_id, bounds)
    finally:
        con.close()
    return doc, tele
