"""bench/workloads/overhead_ab.py's statistics: the ABBA order, pairing the rounds, the paired
relative change and the sign test's confidence interval for its median, on constructed data
whose answers are worked out by hand from the binomial distribution."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("overhead_ab", REPO / "bench" / "workloads" / "overhead_ab.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["overhead_ab"] = mod
    spec.loader.exec_module(mod)
    return mod


ab = _load()


def test_abba_order_alternates_the_first_round_of_each_pair() -> None:
    assert ab.abba_order(4) == ["on", "off", "off", "on", "on", "off", "off", "on"]
    assert ab.abba_order(1) == ["on", "off"]


def test_rounds_are_paired_two_by_two_and_an_unfinished_pair_is_dropped() -> None:
    kinds = ["on", "off", "off", "on", "on"]
    on, off = ab.pairs_of(kinds, [1.1, 1.0, 2.0, 2.4, 9.9])
    assert on == [1.1, 2.4] and off == [1.0, 2.0]
    with pytest.raises(ValueError):
        ab.pairs_of(["on", "on"], [1.0, 1.0])


def test_sign_test_interval_of_six_values_is_their_range_at_63_of_64() -> None:
    # n = 6: P(X <= 0) = 1/64, so k = 1 (2/64 <= 0.05) and k = 2 fails (2 * 7/64 > 0.05):
    # the interval is [x(1), x(6)], covering with probability 1 - 2/64
    lo, hi, cov = ab.sign_test_ci([5.0, -1.0, 3.0, 0.5, 2.0, 4.0])
    assert (lo, hi) == (-1.0, 5.0) and cov == pytest.approx(1 - 2 / 64)
    # n = 5: 2 * P(X <= 0) = 2/32 > 0.05: no 95 % interval exists
    assert ab.sign_test_ci([1.0, 2.0, 3.0, 4.0, 5.0]) is None


def test_sign_test_interval_of_ten_values_drops_one_at_each_end() -> None:
    # n = 10: P(X <= 1) = 11/1024 (2x = 0.0215 <= 0.05), P(X <= 2) = 56/1024 (2x = 0.109):
    # k = 2, the interval [x(2), x(9)], coverage 1 - 22/1024
    values = [float(v) for v in (7, 3, 10, 1, 5, 9, 2, 8, 4, 6)]
    lo, hi, cov = ab.sign_test_ci(values)
    assert (lo, hi) == (2.0, 9.0) and cov == pytest.approx(1 - 22 / 1024)
    # at 90 %: 2 * 56/1024 = 0.109 > 0.10, still k = 2; at 80 %: k = 3 ([x(3), x(8)], 1 - 112/1024)
    assert ab.sign_test_ci(values, 0.90)[:2] == (2.0, 9.0)
    lo, hi, cov = ab.sign_test_ci(values, 0.80)
    assert (lo, hi) == (3.0, 8.0) and cov == pytest.approx(1 - 112 / 1024)


def test_paired_change_is_relative_per_pair_so_drift_between_pairs_cancels() -> None:
    # the machine drifts from 1.0 to 2.0 ms per step; the sampler costs exactly 0.5 % in every pair
    off = [1.0 + 0.1 * i for i in range(11)]
    on = [x * 1.005 for x in off]
    res = ab.paired_change(on, off)
    assert res["pairs"] == 11 and res["median_pct"] == pytest.approx(0.5)
    assert res["ci_pct"] == pytest.approx([0.5, 0.5]) and res["slower_pairs"] == 11
    assert res["goal_met"] is True and res["ci_coverage"] >= 0.95


def test_paired_change_median_and_interval_on_known_changes() -> None:
    # changes of +3, -1, +2, 0, +1, +4, -2, +5, +0.5, +1.5 %: sorted -2 -1 0 0.5 1 1.5 2 3 4 5;
    # median (1 + 1.5) / 2 = 1.25; the n = 10 interval [x(2), x(9)] = [-1, 4]: upper end over 1 %
    changes = [3.0, -1.0, 2.0, 0.0, 1.0, 4.0, -2.0, 5.0, 0.5, 1.5]
    off = [2.0] * 10
    on = [2.0 * (1 + c / 100) for c in changes]
    res = ab.paired_change(on, off)
    assert res["median_pct"] == pytest.approx(1.25)
    assert res["ci_pct"] == pytest.approx([-1.0, 4.0])
    assert res["slower_pairs"] == 7 and res["goal_met"] is False
    assert "median +1.250 %" in ab.result_line(res, 10) and "NOT met" in ab.result_line(res, 10)
    # too few pairs for an interval: no verdict on the goal
    few = ab.paired_change(on[:4], off[:4])
    assert few["ci_pct"] is None and few["goal_met"] is None
    assert "no interval" in ab.result_line(few, 10)
    with pytest.raises(ValueError):
        ab.paired_change([1.0], [1.0, 2.0])
