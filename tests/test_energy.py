"""Telemetry on the traces' time base: samples matched to the kernel running at that instant."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import cpu_op, kernel, run_cli, runtime, write_trace

BASE_NS = 1_700_000_000_000_000_000
PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
          "computeMinor": 0, "numSms": 132, "warpSize": 32}]


def test_samples_take_the_class_of_the_kernel_running_then(tmp_path: Path, db: Path) -> None:
    bf16 = "c10::BFloat16"
    events = [
        cpu_op("aten::mm", 0, 20, ext=1, dims=[[8192, 8192], [8192, 8192]], types=[bf16, bf16]),
        runtime("cudaLaunchKernel", 5, 5, corr=1, ext=1),
        kernel("sm90_xmma_gemm_bf16", 100, 1500, corr=1),           # 100..1600 µs: compute-bound
        kernel("ncclDevKernel_AllReduce", 2000, 400, corr=2),       # 2000..2400 µs: communication
        kernel("mystery_kernel", 3000, 100, corr=3),                # 3000..3100: unknown (no model)
    ]
    path = write_trace(tmp_path / "t.json", events, deviceProperties=PROPS, baseTimeNanoseconds=BASE_NS)
    assert run_cli("ingest", path).code == 0
    from gpuscope import store
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.analyzers.energy import telemetry_by_bound

    con = store.connect(db)
    with store.transaction(con):
        con.execute("INSERT INTO devices (run_id, device_id, key, source, device_index, vendor, kind, name) "
                    "VALUES (1, 5, 'nvml/gpu0', 'telemetry', 0, 'nvidia', 'gpu', 'NVIDIA H100 80GB HBM3')")
        for t_us, power, util in ((500, 600.0, 1.0), (1000, 640.0, 1.0), (1800, 90.0, 0.0), (2200, 250.0, 1.0),
                                  (3050, 300.0, 1.0), (9000, 70.0, 0.0)):   # the last is outside the traced span
            con.execute("INSERT INTO samples (run_id, device_id, ts_ns, power_w, gpu_util) VALUES (1, 5, ?, ?, ?)",
                        [BASE_NS + t_us * 1000, power, util])
    con.close()
    con = store.connect(db, read_only=True)
    try:
        doc = analyze_run(con, 1)
        bounds = {k["name"]: k["bound"] for k in doc["kernels"] if k["category"] == "compute"}
        out = telemetry_by_bound(con, 1, bounds)
    finally:
        con.close()
    assert bounds["sm90_xmma_gemm_bf16"] == "compute_bound"
    assert out["compute_bound"]["samples"] == 2 and out["compute_bound"]["power_w_mean"] == pytest.approx(620.0)
    assert out["idle"] == {"samples": 1, "power_w_mean": 90.0, "gpu_util_mean": 0.0}
    assert out["communication"]["power_w_mean"] == pytest.approx(250.0)
    assert out["unknown"]["samples"] == 1
    assert sum(v["samples"] for v in out.values()) == 5


# --------------------------------------------------------------------------------------------
# Energy counters that go back: read step by step

from gpuscope.analyzers.energy import (  # noqa: E402
    COUNTER_WRAPS_J,
    counter_steps,
    device_energy,
    generation_summary,
)

TICK_NS = 100_000_000  # 10 Hz
NVML_WRAP_J = 2**32 * 1e-3
AMD_WRAP_J = 2**32 * 15.259e-6
HWMON_WRAP_J = 2**32 * 1e-6


def _ts(n: int) -> list[int]:
    return [BASE_NS + i * TICK_NS for i in range(n)]


@pytest.mark.parametrize("name,values,joules,resets,wraps,rejected", [
    ("monotonic", [100.0, 169.0, 238.0, 307.0], [69, 69, 69], 0, 0, 0),
    # a driver reload: the counter restarts from 0; its first value is the energy since
    ("driver reload", [1000.0, 1069.0, 30.0, 99.0], [69, 30, 69], 1, 0, 0),
    # a replay starting over: back to an unrelated value, the step across is unknown
    ("replay loop", [98765501.1, 98765570.1, 98765501.1, 98765570.1], [69, None, 69], 1, 0, 0),
    ("32-bit wrap, mJ", [NVML_WRAP_J - 89, NVML_WRAP_J - 20, 49.0, 118.0], [69, 69, 69], 0, 1, 0),
    ("32-bit wrap, AMD ticks", [AMD_WRAP_J - 99, AMD_WRAP_J - 30, 39.0, 108.0], [69, 69, 69], 0, 1, 0),
    ("32-bit wrap, µJ", [HWMON_WRAP_J - 79, HWMON_WRAP_J - 10, 59.0], [69, 69], 0, 1, 0),
    # further forward in 0.1 s than 700 W can go: a glitch, not energy
    ("implausible jump", [100.0, 169.0, 50_000.0, 50_069.0], [69, None, 69], 0, 0, 1),
    ("jitter back", [100.0, 99.9, 168.9], [0, 69], 0, 0, 0),
])
def test_counter_steps(name: str, values: list[float], joules: list, resets: int, wraps: int, rejected: int) -> None:
    got = counter_steps(_ts(len(values)), values, 700.0)
    assert [None if j is None else pytest.approx(j, abs=1e-6) for j in got.joules] == joules, name
    assert (got.resets, got.wraps, got.rejected) == (resets, wraps, rejected), name


def test_a_coarse_counter_moves_in_lumps_that_are_not_rejected() -> None:
    # a counter that updates once a second (690 J at 690 W) read at 10 Hz: a lump of 690 J in
    # 0.1 s is more than 700 W allows over 0.1 s, but not over the second since it last moved
    values = [1000.0 + 690.0 * (i // 10) for i in range(31)]
    got = counter_steps(_ts(31), values, 700.0)
    assert got.rejected == 0 and sum(j for j in got.joules if j is not None) == pytest.approx(3 * 690.0 - 0)
    assert got.joules.count(None) == 0


def test_wrap_points_cover_each_vendor_unit() -> None:
    assert NVML_WRAP_J in COUNTER_WRAPS_J and AMD_WRAP_J in COUNTER_WRAPS_J and HWMON_WRAP_J in COUNTER_WRAPS_J


def _looping_rows(n: int, period: int, power_w: float = 690.0) -> list[tuple[int, float, float]]:
    """A replayed recording: the counter starts over every ``period`` readings, power steady."""
    step_j = power_w * TICK_NS / 1e9
    return [(t, 98_765_501.1 + step_j * (i % period), power_w) for i, t in enumerate(_ts(n))]


def test_a_counter_that_starts_over_sums_its_steps_and_agrees_with_power() -> None:
    rows = _looping_rows(100, 30)   # 9.9 s, three times back to the start
    last_minus_first = rows[-1][1] - rows[0][1]
    dev = device_energy(rows)
    s = dev.summary
    assert s["energy_source"] == "counter"
    assert s["energy_integrated_j"] == pytest.approx(690.0 * 9.9)
    # the steps across the three restarts are filled in from power: the whole run is counted
    assert s["energy_counter_j"] == pytest.approx(690.0 * 9.9)
    assert last_minus_first < 0.2 * s["energy_counter_j"]  # what last - first would have said
    assert s["counter"]["resets"] == 3 and s["counter"]["bridged_s"] == pytest.approx(0.3)
    assert "went back 3 time(s)" in s["note"] and "disagree" not in s["note"]
    # energy in a stretch: linear within a step
    assert dev.energy_in(BASE_NS + TICK_NS // 2, BASE_NS + 10 * TICK_NS + TICK_NS // 2) == pytest.approx(690.0)


def test_a_disagreement_over_20_percent_is_reported_with_the_source_chosen() -> None:
    rows = [(t, 1000.0 + 100.0 * i, 690.0) for i, t in enumerate(_ts(30))]  # counter: 1000 W; power: 690 W
    s = device_energy(rows).summary
    assert s["energy_source"] == "counter" and s["energy_j"] == pytest.approx(2900.0)
    assert "disagree by 31 %" in s["note"] and "reporting the counter" in s["note"]
    rows = [(t, 1000.0 + 75.0 * i, 690.0) for i, t in enumerate(_ts(30))]  # 750 W against 690 W: within 20 %
    assert device_energy(rows).summary["note"] is None


def test_a_counter_that_never_moves_gives_way_to_integrated_power() -> None:
    rows = [(t, 5000.0, 300.0) for t in _ts(20)]
    s = device_energy(rows).summary
    assert s["energy_source"] == "integrated power" and s["energy_j"] == pytest.approx(300.0 * 1.9)
    assert "did not advance" in s["note"]


def test_without_power_the_time_a_counter_cannot_tell_is_said() -> None:
    rows = [(t, e, None) for t, e, _ in _looping_rows(61, 30)]
    s = device_energy(rows).summary
    assert s["energy_source"] == "counter" and s["energy_integrated_j"] is None
    assert s["energy_counter_j"] == pytest.approx(69.0 * 58)
    assert s["counter"]["unknown_s"] == pytest.approx(0.2) and "0.2 s not counted" in s["note"]


# --------------------------------------------------------------------------------------------
# Tokens from marks: generated apart from prompt, warm-up left out

MS = 1_000_000


def _m(ms: int, pid: int = 1, **value) -> tuple[int, int, dict]:
    return (BASE_NS + ms * MS, pid, value)


def test_generated_prompt_and_warmup_tokens_are_kept_apart() -> None:
    marks = [
        _m(0, phase="warmup", prompt_tokens=128, tokens=2), _m(50, phase="warmup", tokens=2), _m(60),
        _m(1000, phase="prefill", prompt_tokens=128, tokens=2),     # 1000..1100: prefill
        _m(1100, phase="decode", tokens=2), _m(1120, phase="decode", tokens=2), _m(1140, phase="decode", tokens=2),
        _m(1160, name="generation_done"),                              # ends the last decode step
        _m(5000, phase="prefill", prompt_tokens=128, tokens=2),     # the last mark: not closed
    ]
    g = generation_summary(marks, energy_in=lambda a, b: 200.0 * (b - a) / 1e9)   # 200 W
    assert g["source"] == "marks" and g["basis"] == "steps"
    assert g["generated_tokens"] == 2 + 3 * 2 + 2 and g["prompt_tokens"] == 256
    assert g["warmup"] == {"marks": 2, "generated_tokens": 4, "prompt_tokens": 128}
    assert g["unclosed_tokens"] == 2
    # closed prefill + decode steps: 1000..1160 ms, 8 generated tokens
    assert g["seconds"] == pytest.approx(0.16) and g["tokens_per_s"] == pytest.approx(8 / 0.16)
    assert g["energy_j"] == pytest.approx(32.0) and g["energy_per_token_j"] == pytest.approx(4.0)
    assert g["decode"]["tokens"] == 6 and g["decode"]["tokens_per_s"] == pytest.approx(6 / 0.06)
    assert g["decode"]["energy_per_token_j"] == pytest.approx(2.0)
    assert g["prefill"]["prompt_tokens"] == 128 and g["prefill"]["tokens_per_s"] == pytest.approx(1280.0)


def test_marks_without_a_phase_are_decode_steps_and_processes_in_parallel_add_up() -> None:
    marks = [_m(t, pid=p, tokens=4) for p in (1, 2) for t in (0, 100, 200)]
    g = generation_summary(marks)
    # each process: two closed steps of 100 ms, side by side: 16 tokens in 0.2 s
    assert g["generated_tokens"] == 24 and g["tokens_per_s"] == pytest.approx(80.0)
    assert g["prefill"] is None and g["decode"]["steps"] == 4


def test_tokens_option_counts_over_the_whole_run() -> None:
    marks = [_m(0, phase="prefill", prompt_tokens=64, tokens=1), _m(100, phase="decode", tokens=1), _m(200)]
    g = generation_summary(marks, tokens=1000, run_span_ns=(BASE_NS - 10**9, BASE_NS + 4 * 10**9),
                           energy_in=lambda a, b: 500.0)
    assert g["source"] == "--tokens" and g["basis"] == "run" and g["generated_tokens"] == 1000
    assert g["tokens_per_s"] == pytest.approx(200.0) and g["energy_per_token_j"] == pytest.approx(0.5)
    assert g["prompt_tokens"] == 64 and g["prefill"]["prompt_tokens"] == 64


def test_steps_held_by_the_profiler_are_left_out_of_the_rates() -> None:
    """On an H100 machine the profiler's start-up stood the decode loop still for 5.6 s: a step
    across it is the profiler's time. Steps of the profiled process that overlap the window,
    from the call that opened it until its trace was written, are counted apart; other processes
    are not touched."""
    marks = [_m(t, pid=1, phase="decode", tokens=8) for t in (0, 40, 80, 6000, 6040, 6080)]
    marks += [_m(t, pid=2, phase="decode", tokens=8) for t in (0, 40, 80)]
    held = [(1, BASE_NS + 100 * MS, BASE_NS + 6000 * MS)]  # open..written; the 80 -> 6000 step is in it
    g = generation_summary(marks, profiled=held)
    assert g["profiled"] == {"steps": 1, "generated_tokens": 8, "prompt_tokens": 0, "kept": False}
    # pid 1: 4 steps of 40 ms; pid 2: 2 steps of 40 ms in parallel with pid 1's first two
    assert g["decode"]["steps"] == 6 and g["decode"]["tokens"] == 48
    assert g["decode"]["tokens_per_s"] == pytest.approx(48 / 0.16)
    assert generation_summary(marks)["decode"]["steps"] == 7  # without windows every closed step counts
    # a pid given as text (as annotations store it) is the same process
    assert generation_summary(marks, profiled=[("1", *held[0][1:])])["profiled"]["steps"] == 1
    # when every step was under the profiler, the rates are over them and say so
    g = generation_summary(marks[:3], profiled=[(1, BASE_NS - MS, BASE_NS + 10**9)])
    assert g["profiled"]["kept"] is True and g["decode"]["steps"] == 2


def test_a_real_h100_recording_with_energy_read_once_a_second() -> None:
    """The H100 recording of 2026-11-26 (fixtures/recordings): the energy field was read on 29
    of 301 ticks (once a second), power on every tick. The counter is reported; the 0.8 s after
    its last reading (which the sum of its steps alone left out: 2.4 % of the run's energy) is
    filled in from power, and the whole agrees with integrated power within 1 %."""
    import gzip
    import json

    from conftest import FIXTURES

    path = FIXTURES / "recordings" / "h100_sxm_bf16_matmul.jsonl.gz"
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    gpu = [r for r in rows[1:] if r.get("device") == "gpu0"]
    readings = [(r["ts_ns"], r["values"].get("energy_j"), r["values"].get("power_w")) for r in gpu]
    assert sum(e is not None for _, e, _ in readings) == 29
    d = device_energy(readings, max_power_w=700.0)
    s = d.summary
    assert s["energy_source"] == "counter" and s["note"] is None
    assert s["counter"]["resets"] == s["counter"]["rejected_steps"] == s["counter"]["wraps"] == 0
    counted = [(t, e) for t, e, _ in readings if e is not None]
    tail_s = (readings[-1][0] - counted[-1][0]) / 1e9
    assert s["counter"]["bridged_s"] == pytest.approx(tail_s) and s["counter"]["unknown_s"] == 0
    tail_j = d.power.between(counted[-1][0], readings[-1][0])[0]
    assert tail_j > 500  # about 0.8 s at 690 W
    assert s["energy_j"] == pytest.approx(counted[-1][1] - counted[0][1] + tail_j)
    assert abs(s["energy_integrated_j"] - s["energy_j"]) / s["energy_j"] < 0.01
    # a window wholly after the last counter reading has its energy too (it was 0 J)
    assert d.energy_in(counted[-1][0] + 10**8, readings[-1][0]) == pytest.approx(
        d.power.between(counted[-1][0] + 10**8, readings[-1][0])[0])
