"""Mutation fuzzing of the ingest (bench/fuzz_ingest.py), a few hundred cases: the seeds are
gpuscope's fixtures and, when present, the shared real traces; every case must end with exit 0
or 2 (one line, the store as it was), never a traceback, an internal error or a hang. The
benchmark runs 10,000 (bench/README.md, docs/reliability.md)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import fuzz_ingest  # noqa: E402


def test_two_hundred_mutated_traces_end_in_exit_0_or_2() -> None:
    res = fuzz_ingest.fuzz(200, seed=20261126, timeout=60.0, workers=2, progress=False)
    assert res["failures"] == [], res["failures"][:5]
    kinds = res["by_mutation"]
    assert set(kinds) == set(fuzz_ingest.MUTATIONS)  # every kind of mutation was tried
    assert sum(d["refused"] for d in kinds.values()) > 20 and sum(d["ingested"] for d in kinds.values()) > 20


def test_mutations_are_what_they_say(tmp_path: Path) -> None:
    import gzip
    import json

    rng = random.Random(3)
    seed = json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.5, "dur": 2,
                                        "args": {"device": 0, "External id": 4}}] * 5}, indent=1)
    deep, _ = fuzz_ingest.mutate(seed, "deep", rng)
    assert b"[" * 100 in deep
    bad, gz = fuzz_ingest.mutate(seed, "badgzip", rng)
    assert gz and bad[:2] == b"\x1f\x8b"
    try:
        gzip.decompress(bad)
        raise AssertionError("badgzip gave a whole gzip stream")
    except (EOFError, OSError, gzip.BadGzipFile):
        pass
    nan, _ = fuzz_ingest.mutate(seed, "nonfinite", rng)
    assert any(t in nan for t in (b"NaN", b"Infinity"))
    dup, _ = fuzz_ingest.mutate(seed, "dupkey", rng)
    dups: list[str] = []

    def pairs(items: list) -> dict:
        keys = [k for k, _ in items]
        dups.extend(k for k in set(keys) if keys.count(k) > 1)
        return dict(items)

    json.loads(dup, object_pairs_hook=pairs)
    assert dups, "no object with a key written twice"
