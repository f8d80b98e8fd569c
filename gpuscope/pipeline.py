"""Assembling a sampler pipeline, in one place: which collectors sample (this machine's
vendors and host, or a recording's GPUs played in a loop beside this host), which processes
they watch, and which sinks get the rows. ``gpuscope monitor`` (:mod:`gpuscope.monitor.loop`),
``gpuscope run`` (:mod:`gpuscope.run.wrapper`) and the TUI's live screen build their
:class:`~gpuscope.sampling.Sampler` here; each brings its own sinks and its own idea of the
processes to watch.

    from gpuscope.pipeline import build_sampler, load_replay

    sampler = build_sampler([LiveBuffer()], interval_s=1.0, replay=load_replay("rec.jsonl"))
    sampler.start()

The collectors are not opened here (:meth:`Sampler.start` opens them, under its time limit),
so building a pipeline never touches a vendor library.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .collectors import Collector, Degradation, ProcessTree, Recording
    from .collectors.base import WatchedProcesses
    from .sampling import Sampler
    from .sinks.base import Sink


def load_replay(path: str | Path) -> Recording:
    """The recording at ``path`` as GPUs that stand in for this machine's: its host device and
    rows left out, since the host shown beside them is this one (an
    :class:`~gpuscope.errors.InputError` for a file that is not a recording)."""
    from .collectors.replay import gpus_only

    return gpus_only(path)


def collectors_for(replay: Recording | None = None, host_tree: ProcessTree | None = None) -> list[Collector]:
    """The collectors of a pipeline, not yet opened: ``replay``'s GPUs (looped) and this host,
    or, without a recording, this machine's vendors and host
    (:func:`gpuscope.collectors.default_collectors`). ``host_tree``: the process tree whose
    CPU time and memory the host row measures too (``gpuscope run``'s command); None for the
    host alone."""
    from .collectors import HostCollector, ReplayCollector, default_collectors

    if replay is not None:
        return [ReplayCollector(replay, loop=True), HostCollector(host_tree)]
    return default_collectors(host_tree)


def build_sampler(sinks: Sequence[Sink], *, interval_s: float, replay: Recording | str | Path | None = None,
                  watch: WatchedProcesses | None = None, host_tree: ProcessTree | None = None,
                  batch_s: float | None = None,
                  on_degradation: Callable[[Degradation], None] | None = None) -> Sampler:
    """A sampler (not started) over :func:`collectors_for` that hands its rows to ``sinks``.

    ``replay``: a recording (as :func:`load_replay` gives it, or its path, loaded here) whose
    GPUs stand in for this machine's. ``watch``: the processes whose GPU use the collectors
    report each tick (a :class:`~gpuscope.collectors.ProcessTree`, every process, or None for
    none). ``host_tree``: see :func:`collectors_for`. ``batch_s`` (seconds between two
    batches to the sinks) and ``on_degradation`` as :class:`~gpuscope.sampling.Sampler`
    takes them; ``batch_s`` None keeps the sampler's default."""
    from .sampling import Sampler

    if isinstance(replay, (str, Path)):
        replay = load_replay(replay)
    kw: dict[str, Any] = {} if batch_s is None else {"batch_s": batch_s}
    return Sampler(collectors_for(replay, host_tree), sinks, interval_s=interval_s, tree=watch,
                   on_degradation=on_degradation, **kw)
