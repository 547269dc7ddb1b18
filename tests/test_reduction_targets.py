"""bench/reduction_targets.py on the CPU: the median of three runs, and the runs' range that a
size listed as slower prints beside its median ratio."""

import importlib.util
from pathlib import Path

import pytest

from kernels import bench

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("reduction_targets",
                                              ROOT / "bench" / "reduction_targets.py")
targets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(targets)


def test_each_providers_median_is_taken_over_the_runs():
    def run(final, compile_):
        return [bench.Measurement("mse", "final", (8,), 64, final),
                bench.Measurement("mse", "compile", (8,), 64, compile_)]

    medians = bench.median_of_runs([run(1.0, 2.0), run(3.0, 1.0), run(2.0, 5.0)])
    assert [(m.provider, m.ms) for m in medians] == [("final", 2.0), ("compile", 2.0)]


def test_the_range_pairs_each_runs_two_times():
    # final / compile per run: 1.10, 0.95, 1.02 (not min(final) / max(compile))
    assert targets.run_range([1.10, 0.95, 1.02], [1.0, 1.0, 1.0]) == ", runs x0.95-1.10"
    assert targets.run_range([2.0, 2.0], [1.0, 4.0]) == ", runs x0.50-2.00"


def test_each_run_starts_one_provider_further_and_returns_the_providers_order(monkeypatch):
    orders = []

    def fake_bench_loss(providers, loss_name, shape, **kwargs):
        orders.append(list(providers))
        return [bench.Measurement(loss_name, name, tuple(shape), 64, float(place))
                for place, name in enumerate(providers)]

    monkeypatch.setattr(bench, "bench_loss", fake_bench_loss)
    runs = bench.bench_loss_runs({"eager": None, "compile": None, "final": None}, "mse", (8,))
    assert orders == [["eager", "compile", "final"], ["compile", "final", "eager"],
                      ["final", "eager", "compile"]]
    assert [[m.provider for m in run] for run in runs] == [["eager", "compile", "final"]] * 3
    # each provider's times are its places in the three runs: 0, 1, 2 in some order
    assert [sorted(run[i].ms for run in runs) for i in range(3)] == [[0.0, 1.0, 2.0]] * 3
    assert [m.ms for m in bench.median_of_runs(runs)] == pytest.approx([1.0, 1.0, 1.0])


def test_a_slower_size_is_listed_with_its_median_ratio_and_its_runs_range():
    def m(ms):
        return bench.Measurement("mse", "x", (8,), 64, ms)

    measured = {("mse", 4096, "final"): m(1.05), ("mse", 4096, "eager"): m(2.0),
                ("mse", 4096, "compile"): m(1.0), ("mse", 1 << 20, "final"): m(1.0),
                ("mse", 1 << 20, "eager"): m(3.0), ("mse", 1 << 20, "compile"): m(1.0)}
    run_ms = {key: [value.ms] * 3 for key, value in measured.items()}
    run_ms[("mse", 4096, "final")] = [1.10, 0.95, 1.05]
    assert targets.slower_sizes("mse", [4096, 1 << 20], measured, run_ms) == [
        "2^12 (compile x1.05, runs x0.95-1.10)"]  # 2^20: level with compile is not slower
