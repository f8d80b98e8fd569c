"""``gpuscope monitor``'s loop: sample every GPU and the host (:mod:`gpuscope.pipeline`) into
the OpenTelemetry state (:mod:`gpuscope.otel.setup`) and, with a store, into one run; serve and
export until SIGTERM, Ctrl-C or the time is up; then export what it holds and stop.

The command (:mod:`gpuscope.cli.monitor`) checks every input first (flags, the OTLP target,
the recording, the store path, the endpoint's port) and hands them here as a
:class:`MonitorConfig`; nothing here names a flag.
"""
from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..collectors import Recording
    from ..sampling import Sampler
    from ..sinks.store import StoreSink
    from ..store.sampled_run import SampledRun
    from ..otel.endpoint import MetricsEndpoint
    from ..otel.otlp import OtlpTarget
    from ..sinks.base import Sink


@dataclass(frozen=True)
class MonitorConfig:
    """One monitor session, its inputs already checked."""

    #: seconds between two samples
    interval_s: float
    #: stop after this many seconds (None: at SIGTERM or Ctrl-C)
    seconds: float | None = None
    #: export over OTLP there (None: no OTLP)
    otlp: OtlpTarget | None = None
    #: the names on ``/metrics``: ``otel`` (the SDK's Prometheus reader), ``dcgm`` (dcgm-exporter's) or ``amd`` (AMD device-metrics-exporter's)
    prometheus_names: str = "otel"
    #: >0: export the processes on each GPU, this many by memory (the rest summed)
    per_process: int = 0
    #: also keep the samples in this store, as one run (source ``monitor``)
    db: str | None = None
    #: with ``db``: delete monitor samples older than this many days
    retention_days: float | None = None
    #: a recording (:func:`gpuscope.pipeline.load_replay`) whose GPUs stand in for this machine's
    replay: Recording | None = None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_monitor(config: MonitorConfig, endpoint: MetricsEndpoint | None = None,
                log: Callable[[str], None] | None = None) -> int:
    """Run one monitor session; ``endpoint``: the ``/metrics`` endpoint, bound and not yet
    started (the caller stops it). Start-up lines and problems go to ``log`` (default stderr),
    each line starting ``gpuscope monitor:``. Returns 0, or 1 when samples could not be
    written to the store (it said how many and why at the time)."""
    from ..collectors.base import EveryProcess
    from ..machine import hostname
    from ..otel.setup import metrics_export, resource_attributes
    from ..otel.sink import TelemetryState
    from ..pipeline import build_sampler
    from ..textsafe import visible

    say = log or _stderr
    names, pid_note = process_namer()
    state = TelemetryState(per_process_top=config.per_process, name_of=names)
    registry = None
    if endpoint is not None and config.prometheus_names == "dcgm":
        from ..otel.export import DcgmNames

        endpoint.render = DcgmNames(state, hostname()).render
    elif endpoint is not None and config.prometheus_names == "amd":
        from ..otel.amd import AmdNames

        endpoint.render = AmdNames(state, hostname()).render
    elif endpoint is not None:
        # a registry of the endpoint's own: no process or platform collectors, nothing else
        registry = endpoint.registry
    export = metrics_export(state, resource_attributes("monitor"), otlp=config.otlp, prometheus_registry=registry,
                            count_exports=True, log=say)

    sinks: list[Sink] = [state]
    store_sink = None
    run = None
    if config.db is not None:
        from ..sinks import StoreSink
        from ..store.sampled_run import SampledRun

        # The monitor owns its run (created here, finished below); the sink writes samples under it.
        run = SampledRun.begin(config.db, name=f"monitor {hostname()}", source="monitor", command=None,
                               interval_s=config.interval_s, host=hostname())
        # A store that refuses writes later (its disk full) never stops the monitor: the sink
        # holds the samples (bounded), says so once on stderr and retries at every flush.
        store_sink = StoreSink(config.db, run_id=run.run_id, source="monitor", flush_s=max(1.0, config.interval_s),
                               retention_s=config.retention_days * 86400 if config.retention_days is not None else None)
        sinks.append(store_sink)
    # --per-process: every process the vendor lists on a GPU, seen from here or not
    sampler = build_sampler(sinks, interval_s=config.interval_s, batch_s=min(1.0, config.interval_s),
                            replay=config.replay, watch=EveryProcess() if config.per_process else None)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        sampler.start()
        if run is not None:
            _run_started(run, sampler, say)
        gpus = [d for d in sampler.devices if d.kind != "host"]
        where = []
        if endpoint is not None:
            where.append(f"Prometheus on http://{_host_for_url(endpoint.host)}:{endpoint.port}/metrics"
                         + {"dcgm": " (dcgm-exporter names)", "amd": " (AMD device-metrics-exporter names)"}.get(
                             config.prometheus_names, ""))
        if export.queue is not None and config.otlp is not None:
            where.append(f"OTLP {config.otlp.protocol} to {export.queue.what} every {config.otlp.export_interval_s:g} s")
        if config.db is not None:
            where.append(f"the store {config.db}"
                         + (f" (keeping {config.retention_days:g} days)" if config.retention_days else ""))
        # device names from a replayed recording are somebody's text: control characters shown
        what = visible(", ".join(f"{d.key} ({d.name or d.vendor})" for d in gpus) or "no GPU")
        say(f"gpuscope monitor: {what} and the host every {config.interval_s:g} s; " + "; ".join(where))
        if config.per_process:
            say(f"gpuscope monitor: per process: the {config.per_process} largest by GPU memory on each GPU; "
                + (pid_note or "names from /proc"))
        if not gpus:
            for v in sampler.unavailable:
                say(f"gpuscope monitor: {v.vendor}: {v.reason}")
        if endpoint is not None:
            endpoint.start()
        stop.wait(config.seconds)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sampler.stop()
        if run is not None and store_sink is not None:
            _finish_run(run, store_sink, sampler.stats.ended_ns, say)
        export.shutdown()  # the readers' last collection and export: what it holds goes out
    # samples that never reached the store (it said how many and why): a failure while working
    return 1 if store_sink is not None and store_sink.rows_not_stored else 0


def _run_started(run: SampledRun, sampler: Sampler, say: Callable[[str], None]) -> None:
    """The sampler's start and its vendors into the monitor's run; a store that refuses the
    write (a full disk) never stops the monitor: its samples are the sink's to hold."""
    from ..errors import StoreError, StoreWriteError

    try:
        run.started(sampler.stats.started_ns, [v.to_dict() for v in sampler.vendors])
    except (StoreError, StoreWriteError) as exc:
        say(f"gpuscope monitor: {exc}")


def _finish_run(run: SampledRun, sink: StoreSink, ended_ns: int | None, say: Callable[[str], None]) -> None:
    """Finish the monitor's run ``complete`` with the note of the samples its sink could not
    store. A store that still refuses leaves it ``recording`` (read ``incomplete`` once the
    monitor is gone), said once: not again when the sink already said the store refuses."""
    from ..errors import StoreError, StoreWriteError
    from ..store.runs import COMPLETE

    try:
        run.finish(COMPLETE, ended_ns, notes=[sink.missing_note] if sink.missing_note else ())
    except (StoreError, StoreWriteError) as exc:
        if sink.refusing is None:
            from ..store import write_failure_reason

            reason = write_failure_reason(exc)
            say(f"gpuscope monitor: {run.db}: the run's end could not be stored ({reason})" if reason
                else f"gpuscope monitor: {exc}")


def process_namer(proc: str = "/proc") -> tuple[Callable[[int], str], str | None]:
    """``(name_of(pid), note)``: a process's executable name (``/proc/PID/comm``), and a note
    when names cannot be trusted here. NVML and AMD SMI list the host's pids; a monitor in a
    container (a PID namespace of its own, ``NSpid`` with more than one entry) either cannot
    see them or sees other processes under the same numbers, so it names none ("?")."""
    try:
        with open(f"{proc}/self/status", encoding="utf-8") as f:
            nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
    except OSError:
        nspid = []
    if len(nspid) > 1:
        return (lambda pid: "?"), ("this monitor runs in a PID namespace of its own (a container): the GPU's pids "
                                   "are the host's, so they are exported as the vendor gives them and not named")

    def name_of(pid: int) -> str:
        try:
            with open(f"{proc}/{pid}/comm", encoding="utf-8", errors="replace") as f:
                return f.read().strip() or "?"
        except OSError:
            return "?"  # gone, or not visible from here
    return name_of, None


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host

