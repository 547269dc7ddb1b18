"""bench/reduction_targets.py on the CPU: the median of three runs, and the runs' range that a
size listed as slower prints beside its median ratio."""

import importlib.util
from pathlib import Path

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
