"""Golden outputs: the JSON reports of gpuscope on the shared real traces, kept in
``fixtures/golden/`` so that a restructuring that changes any number is caught.

``python tests/golden.py`` (re)writes the files; ``tests/test_golden.py`` compares. Both call
the installed console script's entry point (``gpuscope = gpuscope.cli:main``) in this
process, with the environment, working folder and width a subprocess was given: 30 commands
in child processes cost 30 interpreter start-ups and imports, most of the module's time on a
loaded machine (bench/README.md, "Test suite times"). Rewrite only for an intended change of
output, and say which in the commit.
"""
from __future__ import annotations

import functools
import io
import json
import math
import os
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "data" / "traces"
GOLDEN = REPO / "fixtures" / "golden"

# Ingested in this order into one fresh store, so run ids are the same every time.
TRACES = [
    "hta/a100_alexnet.json.gz",
    "hta/a100_sxm4_80gb_training_large.json.gz",
    "hta/a100_triton_kernel.json.gz",
    "hta/mi250_rocm6.2_minitoy_train.json.gz",
    "hta/cpu_only.pt.trace.json.gz",
    "hta/legacy_capitalized_categories.json.gz",
    "tracelens/qwen1.5-0.5b-chat/h100.json.gz",
    "tracelens/qwen1.5-0.5b-chat/mi300x.json.gz",
    "tracelens/b200_eager.json.gz",
    "tracelens/mi210_gpu_only.json.gz",
    "tracelens/vllm_decode_cudagraph",
]

# (golden file, arguments after `gpuscope`); RUN ids refer to the ingest order above (1-based).
COMMANDS: list[tuple[str, list[str]]] = [
    *[(f"analyze_{i + 1}.json", ["analyze", str(i + 1), "--json"]) for i in range(len(TRACES))],
    ("analyze_7_as_h200.json", ["analyze", "7", "--json", "--gpu", "h200-sxm"]),
    ("compare_7_8.json", ["compare", "7", "8", "--json"]),
    ("compare_1_3.json", ["compare", "1", "3", "--json"]),
    ("compare_4_10.json", ["compare", "4", "10", "--json"]),
    ("runs.json", ["runs", "--json"]),
    ("ceiling_mi300x_70b.json", ["ceiling", "--json", "--gpu", "mi300x", "--params", "70B", "--dtype", "fp16",
                                 "--claimed-tps", "314"]),
    ("ceiling_h100_8b_batch.json", ["ceiling", "--json", "--gpu", "h100-sxm", "--params", "8B", "--dtype", "bf16",
                                    "--batch", "32", "--context", "4096", "--layers", "32", "--kv-heads", "8",
                                    "--head-dim", "128", "--claimed-tps", "2000", "--claim-aggregate"]),
    ("ceiling_b200_fp8_tp.json", ["ceiling", "--json", "--gpu", "b200", "--model-bytes", "405GB",
                                  "--gpus", "8", "--batch", "4", "--context", "8k", "--kv-bytes-per-token", "516096"]),
]

# Fields that change from one ingest to the next and carry no analysis: the time the run row
# was written. The trace folder's absolute path appears in stored commands.
VOLATILE_KEYS = {"created_ns"}


def available() -> bool:
    return all((SHARED_TRACES / t).exists() for t in TRACES)


@functools.lru_cache(maxsize=1)
def _entry_point() -> Callable[[list[str]], int]:
    """The function the installed ``gpuscope`` console script calls (its entry point), so that
    the goldens do not depend on where ``main`` lives."""
    from importlib.metadata import entry_points

    (ep,) = entry_points(group="console_scripts", name="gpuscope")
    return ep.load()


def _gpuscope(db: Path, args: list[str]) -> str:
    """``gpuscope ARGS`` against the store ``db``, as a child process would run it (GPUSCOPE_DB,
    100 columns, no user spec file from GPUSCOPE_SPECS, the store's folder as working folder),
    but in this process; its standard output."""
    env = {"GPUSCOPE_DB": str(db), "COLUMNS": "100", "GPUSCOPE_SPECS": None}
    saved = {k: os.environ.get(k) for k in env}
    cwd = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.chdir(db.parent)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = _entry_point()(args)
            except SystemExit as exc:  # argparse usage errors
                code = int(exc.code or 0)
    finally:
        os.chdir(cwd)
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old
    if code != 0:
        raise RuntimeError(f"gpuscope {' '.join(args)} exited {code}: {err.getvalue().strip()}")
    return out.getvalue()


def normalize(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: normalize(v) for k, v in doc.items() if k not in VOLATILE_KEYS}
    if isinstance(doc, list):
        return [normalize(v) for v in doc]
    if isinstance(doc, str):
        return doc.replace(str(SHARED_TRACES), "$TRACES")
    return doc


def produce(workdir: Path) -> dict[str, Any]:
    """Ingest the shared traces into a fresh store under ``workdir`` and return every golden
    document, normalized."""
    db = workdir / "golden.duckdb"
    for rel in TRACES:
        _gpuscope(db, ["ingest", str(SHARED_TRACES / rel), "--json"])
    return {name: normalize(json.loads(_gpuscope(db, args))) for name, args in COMMANDS}


def differences(expected: Any, actual: Any, path: str = "$", rel_tol: float = 1e-9) -> list[str]:
    """Where ``actual`` differs from ``expected``; floats equal within ``rel_tol`` (DuckDB sums
    in parallel, so the last digits of a float total may depend on the order of the threads)."""
    out: list[str] = []
    if isinstance(expected, dict) and isinstance(actual, dict):
        for k in expected.keys() | actual.keys():
            if k not in actual:
                out.append(f"{path}.{k}: missing")
            elif k not in expected:
                out.append(f"{path}.{k}: unexpected {actual[k]!r:.80}")
            else:
                out += differences(expected[k], actual[k], f"{path}.{k}", rel_tol)
    elif isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            out.append(f"{path}: {len(actual)} items, expected {len(expected)}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += differences(e, a, f"{path}[{i}]", rel_tol)
    elif (isinstance(expected, float) or isinstance(actual, float)) and \
            isinstance(expected, (int, float)) and isinstance(actual, (int, float)) and \
            not isinstance(expected, bool) and not isinstance(actual, bool):
        if not math.isclose(expected, actual, rel_tol=rel_tol, abs_tol=1e-9):
            out.append(f"{path}: {actual!r}, expected {expected!r}")
    elif expected != actual or type(expected) is not type(actual):
        out.append(f"{path}: {actual!r:.120}, expected {expected!r:.120}")
    return out


def main() -> int:
    import tempfile

    if not available():
        print(f"golden: the shared traces are not all under {SHARED_TRACES}", file=sys.stderr)
        return 2
    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        docs = produce(Path(tmp))
    for name, doc in docs.items():
        (GOLDEN / name).write_text(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"golden: wrote {len(docs)} files to {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
