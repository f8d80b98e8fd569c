#!/usr/bin/env python3
"""Ingest a trace with ``--all-ops --threads 8`` while its staging is made to spill to disk, and
say whether it spilled, whether the ingest succeeded, and whether anything was left behind
(issue 30, "What broke" 2, on a real trace: the acceptance step ``spill_ingest``).

    python bench/workloads/spill_ingest.py TRACE --db STORE [--memory-limit 64MB] [--threads 8]

gpuscope's staging database spills once it passes its memory limit (``gpuscope.ingest.stage``:
100 MB, 512 MB for large inputs); on a machine with plenty of memory a trace must be large
for that. Here both limits are lowered to ``--memory-limit`` and every input is staged with
the threads of a large one, in this process, so the spill happens on a trace of a few hundred
thousand ops; the number of DuckDB temporary files when the write begins is counted (over 0:
it spilled). Temporary files go to a private folder, which must be empty afterwards. Prints
one JSON line: the ingest's exit code and last error line, temporary files, ops loaded, what
was left. Exit 0 when the ingest exited 0, else 1.
"""
from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--db", required=True)
    ap.add_argument("--memory-limit", default="64MB")
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args(argv)
    try:
        import gpuscope  # noqa: F401
    except ImportError:  # a script's path is its folder: the checkout, when nothing installed it
        sys.path.append(str(REPO))
    import gpuscope.ingest as ingest_pkg
    from gpuscope.cli import main as cli
    from gpuscope.ingest import stage

    tmp = Path(tempfile.mkdtemp(prefix="spill-ingest-"))
    tempfile.tempdir = str(tmp)
    stage.STAGING_MEMORY_LIMIT = args.memory_limit
    stage.LARGE_STAGING_MEMORY_LIMIT = args.memory_limit
    stage.PARALLEL_JSON_BYTES = 1  # every input staged with the threads of a large one
    seen: dict[str, Any] = {}
    real = ingest_pkg.write_run

    def write_run(staging: Any, *a: Any, **kw: Any) -> Any:
        seen["temp_files"] = staging.con.execute("SELECT count(*) FROM duckdb_temporary_files()").fetchone()[0]
        return real(staging, *a, **kw)

    ingest_pkg.write_run = write_run
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli(["ingest", "--db", args.db, "--all-ops", "--threads", str(args.threads), "--json", "-q",
                        "--name", "spill_ingest", args.trace])
        except SystemExit as exc:
            code = int(exc.code or 0)
    left = sorted(p.name for p in tmp.iterdir())
    shutil.rmtree(tmp, ignore_errors=True)
    loaded = None
    if code == 0:
        try:
            loaded = (json.loads(out.getvalue()).get("loaded") or {}).get("ops")
        except ValueError:
            pass
    errs = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    print(json.dumps({"exit": code, "error": errs[-1][:300] if code and errs else None,
                      "memory_limit": args.memory_limit, "threads": args.threads,
                      "temp_files_at_write": seen.get("temp_files"), "spilled": bool(seen.get("temp_files")),
                      "ops_loaded": loaded, "left_in_temp": left, "trace_bytes": Path(args.trace).stat().st_size}))
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
