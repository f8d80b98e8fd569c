"""Runs kept in their run folder while the store cannot be opened (issue 30, point 3).

``gpuscope run`` runs its program whatever happens to the store. When the store stays
unavailable (another process holds it past the wait, or it cannot be opened or created), the
run's rows go to its run folder instead (:class:`PendingRun`, through
:class:`~gpuscope.sinks.rundir.RunDirSink`), a folder named
``<store dir>/gpuscope-runs/pending-<UTC time>-<pid>-<name>/`` that does not depend on a run id
from the store. :func:`store_run_folder` stores such a folder later as one run, complete with
its times, command, exit code, samples, devices, traces, marks and windows
(``gpuscope ingest RUN_DIR``), and :func:`store_pending_runs` stores every finished one beside
a store (``gpuscope run`` and ``gpuscope ingest`` do so once they have written the store). A
folder is stored once: ``stored.json`` marks it, and a lock on the folder keeps two processes
from storing it at the same moment.
"""
from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GpuscopeError, InputError, StoreBusyError
from ..fileio import read_jsonl
from ..textsafe import visible
from . import contract

if TYPE_CHECKING:  # pragma: no cover
    from ..sinks.rundir import RunDirSink
    from ..store.read import AnnotationRow

# The run folder's files are gpuscope/sinks/rundir.py's, imported where a folder is written or
# read: importing the sinks costs 0.2 s that a run with a usable store (and the program's side,
# through the wrapper) need not pay.

__all__ = ["PendingRun", "StoredRun", "annotation_rows", "pending_dir_name", "pending_folders", "runs_root",
           "say_always", "store_after_run", "store_pending_runs", "store_run_folder"]

#: ``run.json``'s ``kind``: what tells a pending run folder from any other folder with a run.json.
KIND = "gpuscope-pending-run"
#: How long storing a pending run waits for a store another process holds.
STORE_RETRY_S = 10.0


def pending_dir_name(name: str) -> str:
    """The name of a pending run's folder: ``pending-<UTC time>-<pid>-<name>`` (no run id: the
    store gave none)."""
    from ..sinks.rundir import PENDING_PREFIX

    return f"{PENDING_PREFIX}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}-{name}"


def runs_root(db: Path | str) -> Path:
    """The folder of the store's run directories (the wrapper's ``_runs_root``)."""
    return Path(db).parent / "gpuscope-runs"


@dataclass
class PendingRun:
    """A run recorded into its run folder (the store was unavailable): the sink the sampler
    writes to, and ``run.json``, kept up to date by :meth:`started` and :meth:`finish`."""

    run_dir: Path
    doc: dict[str, Any]
    sink: RunDirSink = field(init=False)

    def __post_init__(self) -> None:
        from ..sinks.rundir import RunDirSink

        self.sink = RunDirSink(self.run_dir)

    @classmethod
    def begin(cls, run_dir: Path, name: str, command: str | None, interval_s: float, host: str | None,
              reason: str) -> PendingRun:
        """The run's ``run.json`` (``recording``) in ``run_dir``, a new run folder named by
        :func:`pending_dir_name`, made like any run directory (owner-only, with its traces folder)."""
        from ..sinks.rundir import write_run_file

        doc: dict[str, Any] = {
            "kind": KIND, "state": "recording", "name": name, "command": command, "host": host,
            "interval_s": interval_s, "owner_pid": os.getpid(), "started_ns": None, "ended_ns": None,
            "exit_code": None, "status": None, "vendors": [], "profile": None, "model": None,
            "notes": [f"recorded into its run folder: the store was unavailable ({reason})"], "sampler_stats": None,
        }
        write_run_file(run_dir, doc)
        return cls(run_dir, doc)

    @classmethod
    def fall_back(cls, make_dir: Callable[[], Path], name: str, command: str | None, interval_s: float,
                  host: str | None, exc: GpuscopeError) -> PendingRun:
        """The store is unavailable (``exc``): the run goes to a new folder (``make_dir()``),
        said in one line, even with ``-q`` (the run is not where the user would look for it).
        No room for the folder either: ``exc`` is raised."""
        try:
            pending = cls.begin(make_dir(), name, command, interval_s, host, str(exc))
        except OSError:
            raise exc from None
        shown = visible(str(pending.run_dir))
        say_always(f"the store is unavailable ({exc}); the program runs anyway and its run is kept in {shown} "
                   f"(stored at the end if the store is free by then, else run `gpuscope ingest {shown}`)")
        return pending

    def started(self, started_ns: int | None, vendors: list[dict[str, Any]], profile: dict[str, Any],
                model: tuple[Any, str] | None = None) -> None:
        """The sampler runs: its start, the vendors, the profiler settings, and the model the
        program serves (``--model``: its parsed spec and where it came from)."""
        from ..sinks.rundir import write_run_file

        self.doc.update(started_ns=started_ns, vendors=vendors, profile=profile)
        if model is not None:
            self.doc["model"] = {"spec": model[0].to_json(), "source": model[1]}
        write_run_file(self.run_dir, self.doc)

    def finish(self, status: str, exit_code: int | None, ended_ns: int, started_ns: int | None = None,
               notes: list[str] | None = None) -> None:
        """The run's end: ``state`` becomes ``finished``, and the folder can be stored."""
        from ..sinks.rundir import write_run_file

        self.doc.update(state="finished", status=status, exit_code=exit_code, ended_ns=ended_ns,
                        sampler_stats=self.sink.stats)
        if started_ns is not None:
            self.doc["started_ns"] = started_ns
        self.doc["notes"] = list(self.doc.get("notes") or []) + list(notes or [])
        write_run_file(self.run_dir, self.doc)


def say_always(line: str) -> None:
    """One line of ``gpuscope run`` on stderr, whatever ``-q`` says."""
    print(f"gpuscope run: {line}", file=sys.stderr, flush=True)


def store_after_run(db: Path, say: Callable[[str], None], run_id: int, run_dir: Path, pending: PendingRun | None,
                    store_error: str | None, ingest_error: str | None,
                    retry_s: float) -> tuple[int, str | None, str | None]:
    """After ``gpuscope run``'s end: a ``pending`` run is stored from its run folder if the store
    takes it within ``retry_s`` (its run id, the traces' ingest error); otherwise ``store_error``
    says where it is and what to run. Then, the store taking writes, the pending runs of other
    ``gpuscope run``s beside it. Returns (run id, store error, ingest error)."""
    if pending is not None:
        try:
            stored = store_run_folder(db, run_dir, retry_s=retry_s)
        except GpuscopeError as exc:
            store_error = (f"{db}: the run could not be stored ({exc}); the program ran and its run is kept in "
                           f"{run_dir}: store it with `gpuscope ingest {run_dir}`")
            say_always(visible(store_error))
            return run_id, store_error, ingest_error
        say(f"the store is free again: the run was stored from {visible(str(run_dir))} as run {stored.run_id}")
        run_id = stored.run_id
        ingest_error = ingest_error or next((n for n in stored.notes if n.startswith("could not ingest")), None)
    if store_error is None:
        try:
            store_pending_runs(db, say, skip=run_dir)
        except (GpuscopeError, OSError) as exc:  # the run itself is stored: a note, not a failure
            say(f"pending runs beside the store were not stored ({exc})")
    return run_id, store_error, ingest_error


@dataclass
class StoredRun:
    """A run folder now in the store."""

    run_id: int
    name: str
    samples: int
    traces: int
    notes: list[str] = field(default_factory=list)


def annotation_rows(windows: list[dict[str, Any]], marks: list[dict[str, Any]]) -> list[AnnotationRow]:
    """``annotations`` rows for the profiler windows and the marks the child wrote."""
    from ..store.read import AnnotationRow

    rows: list[AnnotationRow] = []
    for w in windows:
        if isinstance(w.get("start_ns"), int) and isinstance(w.get("end_ns"), int):
            rows.append(AnnotationRow(
                kind="profiler_window", name=w.get("label") or "window", ts_ns=w["start_ns"],
                dur_ns=w["end_ns"] - w["start_ns"], device_id=None, pid=str(w.get("pid")),
                value={"path": w.get("path"), **{k: w[k] for k in ("open_ns", "written_ns") if isinstance(w.get(k), int)}}))
    for m in marks:
        if isinstance(m.get("ts_ns"), int):
            value = {k: m[k] for k in ("tokens", "prompt_tokens", "phase", "step", "fields") if k in m}
            rows.append(AnnotationRow(kind="mark", name=str(m.get("name")), ts_ns=m["ts_ns"], dur_ns=None,
                                      device_id=None, pid=str(m.get("pid")), value=value))
    return rows


def _owner_alive(pid: Any) -> bool:
    from .requests import pid_alive

    return isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and pid_alive(pid)


def _samples_table(samples: list[dict[str, Any]], run_id: int, device_ids: dict[str, int]) -> Any:
    """The samples as an Arrow table in the columns of the store's ``samples`` table."""
    import pyarrow as pa

    from ..metrics import METRICS

    arrow = {"DOUBLE": pa.float64(), "BIGINT": pa.int64(), "INTEGER": pa.int32()}
    ints = {m.name for m in METRICS if m.sql_type in ("BIGINT", "INTEGER")}
    cols: dict[str, list[Any]] = {"run_id": [], "device_id": [], "ts_ns": [], **{m.name: [] for m in METRICS}}
    for s in samples:
        did = device_ids.get(str(s.get("device")))
        values = s.get("values")
        if did is None or not isinstance(s.get("ts_ns"), int) or not 0 <= s["ts_ns"] < 2**63 \
                or not isinstance(values, dict):
            continue
        cols["run_id"].append(run_id)
        cols["device_id"].append(did)
        cols["ts_ns"].append(s["ts_ns"])
        for m in METRICS:
            x = values.get(m.name)
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                x = None
            elif m.name in ints:
                x = int(x)
                x = x - 2**64 if 2**63 <= x < 2**64 else x  # 64-bit bit masks: stored as their signed twin
                limit = 2**31 if m.sql_type == "INTEGER" else 2**63
                x = x if -limit <= x < limit else None  # (not a reading the sampler wrote)
            else:
                x = float(x)
            cols[m.name].append(x)
    fields = [pa.field("run_id", pa.int64()), pa.field("device_id", pa.int32()), pa.field("ts_ns", pa.int64())]
    fields += [pa.field(m.name, arrow.get(m.sql_type, pa.float64())) for m in METRICS]
    return pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in fields})


def _stats_row(stats: dict[str, Any], sink_rows: int) -> list[Any]:
    """The ``sampler_stats`` row of the sampler's figures (``SamplerStats.to_dict()``)."""
    from ..store.telemetry import SAMPLER_STATS_COLUMNS

    values = dict(stats)
    values["interval_ns"] = int(float(values.get("interval_s") or 0) * 1e9)
    values["degradations"] = json.dumps(values.get("degradations") or [])
    values["info"] = json.dumps({"rows_written": sink_rows, "sink_errors": values.get("sink_errors"),
                                 "clock_fallbacks": values.get("clock_fallbacks"), "sink": "run folder"})
    return [values.get(c) for c in SAMPLER_STATS_COLUMNS]


def _lock(run_dir: Path) -> int:
    """An exclusive lock on the folder (released when the process ends, however it ends); an
    :class:`InputError` when another process holds it."""
    import fcntl

    fd = os.open(run_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise InputError(visible(str(run_dir)), "another process is storing this run folder right now") from None
    return fd


def store_run_folder(db: Path | str, run_dir: Path | str, retry_s: float = STORE_RETRY_S) -> StoredRun:
    """Store the pending run folder ``run_dir`` as one run of the store at ``db``: created
    with its name, command, times and info, its devices and samples, its traces (ingested into
    it), its marks and windows, then finished with its status and exit code. ``stored.json``
    marks the folder afterwards. A folder that is not a pending run, one stored already, or one
    whose gpuscope still records it is an :class:`InputError`; a store another process holds
    past ``retry_s`` is a :class:`~gpuscope.errors.StoreBusyError` (nothing written)."""
    from ..sinks.rundir import DEVICES_FILE, SAMPLES_FILE, STORED_FILE, write_run_file

    import duckdb  # noqa: F401 - the full package: its Arrow scans (the samples) need duckdb._sources

    from .. import ingest, store
    from ..machine import hostname
    from ..store import runs, telemetry
    from ..store.run_info import OwnerProcess, RunInfo, SamplerProcess

    run_dir = Path(run_dir)
    doc = _pending_doc(run_dir)
    fd = _lock(run_dir)
    try:
        _refuse_stored(run_dir)  # (again, under the lock: another process may have just stored it)
        status = doc.get("status") if doc.get("state") == "finished" else runs.INCOMPLETE
        if status not in runs.FINAL_STATUSES:
            status = runs.INCOMPLETE
        devices = read_jsonl(run_dir / DEVICES_FILE)
        samples = read_jsonl(run_dir / SAMPLES_FILE)
        started_ns = doc.get("started_ns") if isinstance(doc.get("started_ns"), int) else None
        ended_ns = doc.get("ended_ns") if isinstance(doc.get("ended_ns"), int) else None
        if ended_ns is None:  # its gpuscope died: the run ends at its last sample
            ended_ns = max((s["ts_ns"] for s in samples if isinstance(s.get("ts_ns"), int)), default=started_ns)
        interval_s = doc.get("interval_s") if isinstance(doc.get("interval_s"), (int, float)) else None
        pid = os.getpid()
        info = RunInfo(sampler=SamplerProcess(pid=pid, interval_s=interval_s), owner=OwnerProcess(pid=pid, host=hostname()),
                       vendors=[v for v in doc.get("vendors") or [] if isinstance(v, dict)], run_dir=str(run_dir),
                       profile=doc.get("profile") if isinstance(doc.get("profile"), dict) else None)
        stored_samples = 0
        with store.writing(db, retry_s=retry_s) as con:
            run_id = runs.begin_recording(con, name=str(doc.get("name") or run_dir.name), source="run",
                                          started_ns=started_ns, command=doc.get("command"), info=info)
            base = telemetry.next_device_id(con, run_id)
            device_ids: dict[str, int] = {}
            for d in devices:
                if not isinstance(d.get("key"), str) or d["key"] in device_ids:
                    continue
                did = base + len(device_ids)
                device_ids[d["key"]] = did
                telemetry.insert_device(
                    con, run_id, did, key=d["key"], index=d.get("index"), vendor=d.get("vendor"), kind=d.get("kind"),
                    name=d.get("name"), spec_key=d.get("spec_key"), memory_total_bytes=d.get("memory_total_bytes"),
                    compute_capability=d.get("compute_capability"), num_sms=d.get("num_sms"),
                    warp_size=d.get("warp_size"), uuid=d.get("uuid"), pci_bus_id=d.get("pci_bus_id"),
                    properties=props if isinstance(props := d.get("properties"), dict) else {})
            table = _samples_table([s for s in samples if not s.get("lost")], run_id, device_ids)
            if table.num_rows:
                telemetry.append_samples(con, table, table.column_names)
            stored_samples = table.num_rows
            for s in samples:
                if s.get("lost") and isinstance(s.get("ts_ns"), int):
                    key = str(s.get("device"))
                    telemetry.insert_device_lost(con, run_id, key, s["ts_ns"], device_ids.get(key))
            model = doc.get("model")
            if isinstance(model, dict) and isinstance(model.get("spec"), dict):
                runs.set_model(con, run_id, model["spec"], model.get("source"))
        notes = [str(n) for n in doc.get("notes") or []]
        # Marked at once: whatever fails from here, the folder is never stored a second time
        # (a run left unfinished reads `incomplete` once this process is gone).
        write_run_file(run_dir, {"run_id": run_id, "db": str(Path(db).absolute()), "stored_ns": time.time_ns()},
                       STORED_FILE)
        # Only finished traces: a window's export in progress (`.tmp`, `.part`) is left out.
        traces = sorted(p for p in (run_dir / contract.TRACES_DIR).rglob("*")
                        if p.is_file() and p.name.endswith(contract.TRACE_SUFFIXES))
        if traces:
            try:
                ingest.ingest(db, traces, into_run=run_id)
            except GpuscopeError as exc:
                notes.append(f"could not ingest the traces: {exc}")
        rows = annotation_rows(read_jsonl(run_dir / contract.WINDOWS_FILE), read_jsonl(run_dir / contract.MARKS_FILE))
        with store.writing(db, retry_s=retry_s) as con:
            if rows:
                telemetry.insert_annotations(con, run_id, rows)
            stats = doc.get("sampler_stats")
            if isinstance(stats, dict):
                try:
                    telemetry.insert_sampler_stats(con, run_id, _stats_row(stats, len(samples)))
                except (ValueError, TypeError):
                    notes.append("the sampler's figures in the run folder were unreadable: not stored")
            runs.finish(con, run_id, status, ended_ns, exit_code=doc.get("exit_code")
                        if isinstance(doc.get("exit_code"), int) else None, started_ns=started_ns, notes=notes)
        return StoredRun(run_id, str(doc.get("name") or run_dir.name), stored_samples, len(traces),
                         [n for n in notes if n.startswith("could not")])
    finally:
        os.close(fd)


def _pending_doc(run_dir: Path) -> dict[str, Any]:
    """``run.json`` of a pending run folder that can be stored now; an :class:`InputError`
    naming the folder otherwise."""
    from ..sinks.rundir import RUN_FILE, read_run_file

    shown = visible(str(run_dir))
    try:
        st = os.lstat(run_dir)
    except OSError as exc:
        raise InputError(shown, f"cannot read the run folder ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(shown, "not a run folder")
    try:
        doc = read_run_file(run_dir)
    except (ValueError, GpuscopeError) as exc:
        raise InputError(shown, f"not a gpuscope run folder ({exc})") from None
    if doc is None or doc.get("kind") != KIND:
        raise InputError(shown, f"not a run folder gpuscope kept for later (no {RUN_FILE} of a run recorded while "
                                "the store was unavailable)")
    _refuse_stored(run_dir)
    if doc.get("state") != "finished" and _owner_alive(doc.get("owner_pid")) and doc.get("owner_pid") != os.getpid():
        raise InputError(shown, f"still being recorded (by gpuscope pid {doc.get('owner_pid')}): store it once it "
                                "has ended")
    return doc


def _refuse_stored(run_dir: Path) -> None:
    from ..sinks.rundir import STORED_FILE, read_run_file

    try:
        stored = read_run_file(run_dir, STORED_FILE)
    except ValueError:
        stored = {}
    if stored is not None:
        where = f" in {visible(str(stored['db']))}" if isinstance(stored.get("db"), str) else ""
        raise InputError(visible(str(run_dir)), f"already stored as run {stored.get('run_id')}{where}; nothing was "
                                                "written (a run folder is stored once)")


def pending_folders(root: Path) -> list[Path]:
    """The pending run folders in the store's run folder ``root`` that can be stored: this
    user's real folders (not links), not writable by others, finished (or whose gpuscope is
    gone), not stored yet; oldest first."""
    from ..sinks.rundir import PENDING_PREFIX, RUN_FILE, STORED_FILE

    try:
        entries = sorted(root.glob(f"{PENDING_PREFIX}*"))
    except OSError:
        return []
    found = []
    for d in entries:
        try:
            st = os.lstat(d)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            continue
        if (d / STORED_FILE).exists() or not (d / RUN_FILE).exists():
            continue
        found.append(d)
    return found


def store_pending_runs(db: Path | str, say: Callable[[str], None], retry_s: float = 2.0,
                       skip: Path | None = None) -> list[StoredRun]:
    """Store the pending run folders beside the store at ``db`` (:func:`pending_folders`),
    saying each in one line; a folder that cannot be stored is said and left for later. A
    store busy past ``retry_s`` stops here quietly (the next command tries again)."""
    done = []
    for run_dir in pending_folders(runs_root(db)):
        if skip is not None and run_dir == skip:
            continue
        try:
            stored = store_run_folder(db, run_dir, retry_s=retry_s)
        except StoreBusyError:
            break
        except InputError as exc:
            if "still being recorded" in exc.message or "storing this run folder" in exc.message:
                continue  # another gpuscope's: not ours to store now
            say(f"pending run {exc}")
            continue
        except GpuscopeError as exc:
            say(f"could not store the pending run {visible(str(run_dir))}: {exc}")
            continue
        say(f"stored the pending run {visible(str(run_dir))} as run {stored.run_id} '{visible(stored.name)}' "
            f"({stored.samples} samples, {stored.traces} traces)")
        done.append(stored)
    return done
