"""What the screens show, read from the store and the collectors: plain data, no Textual.

Every store read opens the store read-only for one query and closes it at once, so that a
``gpuscope run`` or ``ingest`` writing the same file is never blocked for long; while a writer
holds the file, :func:`read_store` raises :class:`~gpuscope.errors.StoreBusyError` and the
screen says "store busy, retrying" and tries again at its next refresh. These functions block: screens call them from
Textual workers (``@work(thread=True)``), never on the UI thread.

What they return has every string shown with its control characters visible
(:func:`tui.text.safe_data`): names come from other people's files, and each screen shows them.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gpuscope.errors import StoreBusyError

from .text import safe_data

T = TypeVar("T")

#: How long one read waits for a writer before giving up until the next refresh (short: the UI
#: must stay responsive, and a writer's transaction is short).
BUSY_RETRY_S = 0.3


#: The store's own error, under the name tests/test_tui_run.py raises (the screens catch
#: :class:`~gpuscope.errors.StoreBusyError` itself).
StoreBusy = StoreBusyError


class NoStore(Exception):
    """No store at this path yet (``gpuscope run`` or ``gpuscope ingest`` makes one)."""


def read_store(db: Path, fn: Callable[[Any], T]) -> T:
    """``fn(connection)`` on the store opened read-only, then closed; a
    :class:`~gpuscope.errors.StoreBusyError` when a writer holds it longer than
    :data:`BUSY_RETRY_S`."""
    from gpuscope import store

    if not store.store_exists(db):
        raise NoStore(str(db))
    con = store.connect(db, read_only=True, retry_s=BUSY_RETRY_S)
    try:
        return fn(con)
    finally:
        con.close()


def store_stamp(db: Path) -> tuple[Any, ...]:
    """What a writer's commit changes: the inode, size and modification time of the store's file
    and of its write-ahead log (None where there is none). Two ``stat`` calls, no connection:
    a screen compares stamps to skip reading a store nobody wrote to."""
    out: list[Any] = []
    for path in (db, db.with_name(db.name + ".wal")):
        try:
            st = path.stat()
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


#: Vendor words in a device name that every card of that vendor carries: left out of the short
#: name the runs screen shows (what tells an H100 from an MI300X is the rest).
_VENDOR_PREFIXES = ("NVIDIA ", "AMD Instinct ", "AMD Radeon ", "AMD ", "Intel ")


def gpu_label(names: list[str]) -> str:
    """The GPUs of a run in a few characters: ``"H100 80GB HBM3"``, ``"8× MI300X"``,
    ``"H100 80GB HBM3+A100-SXM4-40GB"`` (names in device order, vendor words left out, a count
    where a name repeats); ``""`` for a run without GPUs."""
    counts: dict[str, int] = {}
    for name in names:
        short = name.strip()
        for prefix in _VENDOR_PREFIXES:
            if short.startswith(prefix) and len(short) > len(prefix):
                short = short[len(prefix):]
                break
        counts[short] = counts.get(short, 0) + 1
    return "+".join(name if n == 1 else f"{n}× {name}" for name, n in counts.items())


def runs(db: Path) -> list[dict[str, Any]]:
    """Every run, newest first (``gpuscope runs --json``'s rows), each with ``gpu``: its GPUs in
    a few characters (:func:`gpu_label`), what tells two runs of one name apart."""
    from gpuscope.store import read

    def both(con: Any) -> list[dict[str, Any]]:
        rows = read.list_runs(con)
        gpus = read.run_gpu_names(con)
        for r in rows:
            r["gpu"] = gpu_label(gpus.get(int(r["id"]), []))
        return rows

    return safe_data(read_store(db, both))


def analyze_doc(con: Any, run_id: int, top: int | None) -> dict[str, Any]:
    """``gpuscope analyze --json``'s document of ``run_id``, computed as ``analyze`` computes it
    (every op and kernel, so that the advice's sums, the host-copy time among them, are the
    figures ``analyze``, ``--json`` and the report print; the communication block's exposed
    time and stragglers added), then its ``ops`` and ``kernels`` lists cut to the first ``top``
    (None: all) for the screen's tables."""
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.analyzers.comm_compare import communication_timing

    doc = analyze_run(con, run_id)
    communication_timing(con, run_id, doc)  # as the report and compare add it
    if top is not None:
        doc["ops"], doc["kernels"] = doc["ops"][:top], doc["kernels"][:top]
    return doc


def analysis(db: Path, run_id: int, top: int = 50) -> dict[str, Any]:
    """One run's analysis (``gpuscope analyze --json``'s document, :func:`analyze_doc`)."""
    return safe_data(read_store(db, lambda con: analyze_doc(con, run_id, top)))


#: The telemetry the run screen's timeline shows: power, utilization and, where the collectors
#: read them, the NVLink / XGMI rates (shown as percent of the link, ``render.links``).
RUN_TIMELINE_METRICS = ["power_w", "gpu_util", "xgmi_nvlink_tx_bytes_per_s", "xgmi_nvlink_rx_bytes_per_s"]
#: The annotations the run screen puts on its timeline.
RUN_TIMELINE_KINDS = ["profiler_window", "mark", "device_lost"]


def run_detail(db: Path, run_id: int | None, top: int = 50) -> dict[str, Any]:
    """What the run screen shows of one run (None: the newest), in one read: ``analysis``
    (``gpuscope analyze --json``'s document, :func:`analyze_doc`, top ``top`` ops and kernels), and for its timeline
    ``devices``, ``samples`` (power, utilization, link rates) and ``annotations`` (windows, marks)."""
    from gpuscope.store import read

    def one(con: Any) -> dict[str, Any]:
        rid = read.resolve_run(con, run_id, db).id
        return {
            "analysis": analyze_doc(con, rid, top),
            "devices": read.devices(con, rid),
            "samples": read.samples(con, rid, RUN_TIMELINE_METRICS),
            "annotations": read.annotation_rows(con, rid, RUN_TIMELINE_KINDS),
            "profiling": _profiling(con, rid),
        }

    return safe_data(read_store(db, one))


def _profiling(con: Any, run_id: int) -> bool | None:
    """Whether the run's profiler windows were on (``gpuscope run``'s settings in
    ``runs.info``: False for ``--no-profile``); None for a run that does not say (an ingest)."""
    from gpuscope.store.runs import read_info

    enabled = (read_info(con, run_id).profile or {}).get("enabled")
    return enabled if isinstance(enabled, bool) else None


def compare(db: Path, run_a: int, run_b: int, roof: str = "spec") -> dict[str, Any]:
    """Two runs op by op, ``run_a`` the baseline (``gpuscope compare A B --json``'s document:
    the same analysis of each run, every op and kernel, through the same analyzer), in one read."""
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.analyzers.compare import compare_docs

    doc_a, doc_b = read_store(db, lambda con: (analyze_run(con, run_a, roof=roof),
                                               analyze_run(con, run_b, roof=roof)))
    # matched on the exact names, shown visible
    return safe_data(compare_docs(doc_a, doc_b))
