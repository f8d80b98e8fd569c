"""The JSON reports on the shared real traces are those kept in fixtures/golden/ (taken before
the restructuring of issue 15): a change of structure must not change a number. Regenerate
with ``python tests/golden.py`` only for an intended change of output."""
from __future__ import annotations

import json

import pytest

import golden


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not golden.available():
        pytest.skip(f"shared traces not available under {golden.SHARED_TRACES}")
    return golden.produce(tmp_path_factory.mktemp("golden"))


@pytest.mark.parametrize("name", [name for name, _ in golden.COMMANDS])
def test_output_matches_golden(produced: dict, name: str) -> None:
    path = golden.GOLDEN / name
    assert path.exists(), f"{path} missing: run python tests/golden.py"
    expected = json.loads(path.read_text())
    diffs = golden.differences(expected, produced[name])
    assert not diffs, f"{name} differs from the golden output:\n" + "\n".join(diffs[:20])


def test_differences_sees_a_changed_number() -> None:
    """The comparison itself can fail: a changed total, a missing key and a reordered list."""
    doc = {"time_us": {"compute": 10692.0}, "ops": [{"name": "a"}, {"name": "b"}]}
    assert golden.differences(doc, doc) == []
    assert golden.differences(doc, {"time_us": {"compute": 10693.0}, "ops": doc["ops"]})
    assert golden.differences(doc, {"time_us": {}, "ops": doc["ops"]})
    assert golden.differences(doc, {"time_us": doc["time_us"], "ops": doc["ops"][::-1]})
    assert golden.differences({"x": 1}, {"x": 1.0}) == []  # JSON int vs float of the same value
    assert golden.differences({"x": None}, {"x": 0}) != []
