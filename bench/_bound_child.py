#!/usr/bin/env python3
"""The least work any DuckDB-based ingest of a trace must do, as one whole process.

    python bench/_bound_child.py TRACE_OR_DIR

Starts the interpreter, imports DuckDB as gpuscope does and opens a database, streams the
trace once (gunzip, events copied out in parts of a few MiB as gpuscope's ingest cuts them:
:func:`gpuscope.ingest.read.spool_events`), and has DuckDB's JSON reader parse
the events into the nine fields that even the bare time breakdown and the kernel-to-op link
need (``ph``, ``cat``, ``name``, ``pid``, ``tid``, ``ts``, ``dur``, ``args.correlation``,
``args.External id``), on as many threads as gpuscope's ingest uses for that much JSON.
Nothing is classified, linked, stored or analyzed. The benchmark times this process from
spawn to exit: no gpuscope ingest built on DuckDB can take less on the same machine, and a
two-step ingest + analyze pays at least this plus one more interpreter with DuckDB (the floor
process). A directory (rank traces) is every trace in it: all spooled, then all parsed in one
statement on every thread (the most parallel form; gpuscope parses file by file). Prints one JSON line with the time
of each phase inside the process.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

_COLUMNS = (
    "{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', ts: 'DOUBLE', "
    "dur: 'DOUBLE', args: 'STRUCT(\"External id\" BIGINT, correlation BIGINT)'}"
)


def main() -> int:
    t0 = time.perf_counter()
    from gpuscope._db import duckdb
    from gpuscope.ingest import read
    from gpuscope.ingest.read import spool_events
    from gpuscope.ingest.stage import PARALLEL_JSON_BYTES

    from gpuscope.ingest.read import expand_paths
    from gpuscope.ingest.stage import default_threads

    con = duckdb.connect(":memory:", config={"threads": 1})
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpuscope-bound-") as tmp:
        spools = [spool_events(f, Path(tmp), part_bytes=read.SPOOL_PART_BYTES) for f in expand_paths([sys.argv[1]])]
        threads = 1
        if sum(s.json_bytes for s in spools) >= PARALLEL_JSON_BYTES:  # as gpuscope's ingest does
            threads = default_threads()
            con.execute(f"SET threads = {threads}")
        t2 = time.perf_counter()
        # in parts of a few MiB, as gpuscope reads them (less memory than one buffer)
        parts = [p for s in spools for p in s.parts]
        files = "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in parts) + "]"
        try:  # the typed reader: the fastest form, for traces whose events fit it
            con.execute(
                f"CREATE TEMP TABLE ev AS SELECT * FROM read_json({files}, format='array', "
                f"maximum_object_size=16777216, columns={_COLUMNS})"
            )
            how = "typed"
        except duckdb.Error:  # events of other shapes: parse only
            con.execute(f"CREATE TEMP TABLE ev AS SELECT json FROM read_json_objects({files}, format='array')")
            how = "objects"
        events = con.execute("SELECT count(*) FROM ev").fetchone()[0]
        t3 = time.perf_counter()
    json.dump({"events": events, "reader": how, "threads": threads, "import_connect_s": t1 - t0, "gunzip_spool_s": t2 - t1,
               "parse_s": t3 - t2}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
