"""Every ``--json`` document is strict JSON (RFC 8259): a parser that rejects ``NaN`` and
``Infinity`` reads it. Found: ``run --json`` printed ``"dram_bw_util_mean": NaN`` (a GPM reading
absent on every tick) and ``sql --json`` printed NaN/Infinity, which ``jq`` refuses."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, run_cli
from gpuscope.render.json import document, dumps

TRACE = FIXTURES / "traces" / "cpu_tiny_llm.pt.trace.json.gz"


def _reject(token: str) -> Any:
    raise ValueError(f"not JSON: {token}")


def strict_loads(text: str) -> Any:
    """json.loads that refuses NaN, Infinity and -Infinity, as jq and RFC 8259 do."""
    return json.loads(text, parse_constant=_reject)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("strict") / "store.duckdb"
    res = run_cli("ingest", "--db", path, TRACE, "--name", "a", "--json")
    assert res.code == 0, res.err
    strict_loads(res.out)
    assert run_cli("ingest", "--db", path, TRACE, "--name", "b").code == 0
    return path


@pytest.mark.parametrize("args", [
    ("runs",),
    ("analyze", "a"),
    ("compare", "a", "b"),
    ("sql", "SELECT 'nan'::DOUBLE AS n, 'inf'::DOUBLE AS i, '-inf'::DOUBLE AS m, 1.5 AS f"),
    ("sql", "SELECT [1.0, 'nan'::DOUBLE] AS l, {'x': 'inf'::DOUBLE} AS s"),
    ("specs", "h100-sxm"),
    ("ceiling", "--gpu", "h100-sxm", "--params", "8B", "--dtype", "bf16"),
], ids=lambda a: a[0] if isinstance(a, tuple) else str(a))
def test_every_report_is_strict_json(store: Path, args: tuple[str, ...]) -> None:
    db_args = () if args[0] in ("specs", "ceiling") else ("--db", store)
    res = run_cli(*args, *db_args, "--json")
    assert res.code == 0, res.err
    strict_loads(res.out)


def test_sql_non_finite_numbers_are_null(store: Path) -> None:
    res = run_cli("sql", "--db", store, "--json", "SELECT 'nan'::DOUBLE AS n, 'inf'::DOUBLE AS i, 2.5::DOUBLE AS f")
    assert strict_loads(res.out) == [{"n": None, "i": None, "f": 2.5}]


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)


def _same_finite(a: Any, b: Any) -> bool:
    """``b`` (read back) equals ``a`` with every non-finite float as None."""
    if isinstance(a, float) and not math.isfinite(a):
        return b is None
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_finite(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(_same_finite(x, y) for x, y in zip(a, b))
    return a == b


@settings(max_examples=150, deadline=None)
@given(_values)
def test_documents_are_strict_and_exact(doc: Any) -> None:
    for text in (document(doc), document(doc, indent=1), dumps(doc, ensure_ascii=True)):
        assert _same_finite(doc, strict_loads(text))
        # DEL and the C1 controls (0x9b is a one-byte CSI) never appear raw; JSON escapes them
        assert not any(0x7f <= ord(c) <= 0x9f or ord(c) < 0x20 and c not in "\n " for c in text)
