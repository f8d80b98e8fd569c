"""A run a sampler records, as its orchestrator drives it: :class:`SampledRun`.

``gpuscope run``'s wrapper and the monitor each own the run they record: they create it
before the sampler starts, hand its id to the store sink (which writes samples under it and
nothing else), add what the sampler found once it runs, and finish it when it stops, with the
note of what the sink could not store. Each step is one short write transaction of its own
(the sink's flushes get in between) through the run lifecycle, :mod:`gpuscope.store.runs`.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .run_info import OwnerProcess, RunInfo, SamplerProcess

__all__ = ["SampledRun"]


class SampledRun:
    """The handle of one sampled run in the store at ``db``."""

    def __init__(self, db: Path | str, run_id: int) -> None:
        self.db = Path(db)
        self.run_id = int(run_id)

    @classmethod
    def begin(cls, db: Path | str, *, name: str, source: str, command: Any, interval_s: float, host: str | None,
              retry_s: float = 5.0) -> SampledRun:
        """Create the run, ``recording``, owned by this process (the sampler runs in it too): a
        run whose owner is gone reads ``incomplete``. A store the file system refuses is a
        one-line error here, before anything runs. Its start is the sampler's (:meth:`started`)."""
        from . import connection, runs

        pid = os.getpid()
        info = RunInfo(sampler=SamplerProcess(pid=pid, interval_s=interval_s), owner=OwnerProcess(pid=pid, host=host))
        with connection.writing(db, retry_s=retry_s) as con:
            run_id = runs.begin_recording(con, name=name, source=source, started_ns=None, command=command, info=info)
        return cls(db, run_id)

    def started(self, started_ns: int | None, vendors: Sequence[dict[str, Any]], more: RunInfo | None = None,
                retry_s: float = 10.0) -> None:
        """The sampler runs: its start (``started_ns``), each vendor's status (``VendorStatus.to_dict()``)
        and ``more`` of the orchestrator's own go into the run."""
        from . import connection, runs

        info = RunInfo(vendors=list(vendors)).merged(more or RunInfo())
        with connection.writing(self.db, retry_s=retry_s) as con:
            if started_ns:
                runs.set_started(con, self.run_id, started_ns)
            runs.merge_info(con, self.run_id, info)

    def finish(self, status: str, ended_ns: int | None, *, notes: Sequence[str] = (), exit_code: int | None = None,
               started_ns: int | None = None, retry_s: float = 10.0) -> None:
        """Finish the run (:func:`gpuscope.store.runs.finish`) with ``notes`` in the same write.
        A store that refuses the write raises (:class:`~gpuscope.errors.StoreWriteError`): the
        run stays ``recording`` and reads ``incomplete`` once this process is gone."""
        from . import connection, runs

        with connection.writing(self.db, retry_s=retry_s) as con:
            runs.finish(con, self.run_id, status, ended_ns, exit_code=exit_code, started_ns=started_ns, notes=notes)
