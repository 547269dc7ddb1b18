"""Chapter 8's communication, checked on CPU processes over gloo (no GPU needed).

``kernels.ops.ranks`` runs the same code on GPUs over NCCL; on the CPU the per-shard statistics come
from the float64 reference, so these tests check the all-reduce logic (the max, the rescaled
sums, the owned target logits, the global (sum, count)) and the gradient formula exactly.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.ops import ranks
from kernels.ops.vocab_parallel import (MULTICAST_OFF, cross_entropy, keep_multicast_off,
                                    reference_stats, shard_bounds)


@pytest.mark.parametrize("vocab,world", [(10, 3), (11, 3), (256000, 2), (5, 5), (7, 1)])
def test_shards_cover_the_vocabulary_once(vocab, world):
    bounds = [shard_bounds(vocab, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == vocab
    assert all(stop == start for (_, stop), (start, _) in zip(bounds, bounds[1:]))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_shard_bounds_refuses_more_ranks_than_classes():
    with pytest.raises(ValueError, match="cannot give rank"):
        shard_bounds(3, 0, 4)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_one_process_matches_pytorch_and_gradcheck(reduction, smoothing):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 9, dtype=torch.float64, generator=g, requires_grad=True)
    t = torch.tensor([0, 8, -100, 3, 3, 5])
    got = cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
    want = F.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda y: cross_entropy(y, t, reduction=reduction, label_smoothing=smoothing), (x,))


def test_stats_of_two_shards_combine_to_the_whole_row():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 10, dtype=torch.float64, generator=g)
    t = torch.tensor([1, 7, -100, 9])
    left, right = reference_stats(x[:, :6], t, 0, 10), reference_stats(x[:, 6:], t, 6, 10)
    top = torch.maximum(left[:, 0], right[:, 0])
    lse = top + torch.log(left[:, 1] * torch.exp(left[:, 0] - top) +
                          right[:, 1] * torch.exp(right[:, 0] - top))
    torch.testing.assert_close(lse, torch.logsumexp(x, dim=1))
    owned = left[:, 2] + right[:, 2]  # exactly one shard owns each target
    torch.testing.assert_close(owned, torch.tensor([x[0, 1], x[1, 7], 0.0, x[3, 9]],
                                                   dtype=torch.float64))


def test_bad_target_and_bad_shapes_raise_clear_errors():
    x = torch.zeros(2, 5, dtype=torch.float64)
    with pytest.raises(IndexError, match="target 25 of row 1 is out of range"):
        cross_entropy(x, torch.tensor([0, 25]), vocab_size=20, vocab_start=0)
    with pytest.raises(IndexError, match="out of range"):
        cross_entropy(x, torch.tensor([-3, 1]))
    with pytest.raises(ValueError, match="does not fit"):
        cross_entropy(x, torch.tensor([0, 1]), vocab_start=18, vocab_size=20)
    with pytest.raises(ValueError, match="int64 tensor of shape"):
        cross_entropy(x, torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy(x, torch.tensor([0, 1]), reduction="avg")


def test_keep_multicast_off_sets_every_variable():
    env = keep_multicast_off({"NCCL_NVLS_ENABLE": "1"})
    assert all(env[k] == v for k, v in MULTICAST_OFF.items())


@pytest.mark.parametrize("processes", [2, 3])
def test_split_cross_entropy_over_gloo_matches_float64(processes):
    result = ranks.launch("check", processes, backend="gloo", echo=False)
    assert result["ranks"] == processes
    assert result["multicast_off"]
    assert len(result["cases"]) == len(ranks.CHECK_CASES)
    assert {c["split"] for c in result["cases"]} == {"vocab", "batch"}
    for case in result["cases"]:
        assert case["loss_error"] <= 1e-12 and case["grad_error"] <= 1e-12, case
        assert case["same_bits"], case
        assert case["passed"]


def test_global_mean_is_exact_and_the_mean_of_means_is_not():
    result = ranks.launch("global_mean", 3, backend="gloo", echo=False, rows=300, vocab=500)
    assert len(set(result["counted"])) == 3  # the ranks count different numbers of rows
    assert result["global_mean_error"] < 1e-6  # float32 result of a float64 computation
    assert result["mean_of_means_error"] > 0.05  # the mistake the chapter shows, measured
    assert result["same_bits"] and result["repeatable"]
    assert math.isclose(result["global_mean"], result["reference"], rel_tol=1e-6)


def test_link_bytes_follow_the_ring_formulas():
    from kernels.ops.rank_scaling import REDUCED_BYTES, STAT_BYTES, all_gather_bytes, all_reduce_bytes

    assert all_reduce_bytes(REDUCED_BYTES, 1) == 0 and all_gather_bytes(STAT_BYTES, 1) == 0
    assert all_reduce_bytes(REDUCED_BYTES, 2) == 12  # the solution's table: 12 B per row at 2
    assert all_reduce_bytes(REDUCED_BYTES, 4) == 18
    assert all_gather_bytes(STAT_BYTES, 2) == 16 and all_gather_bytes(STAT_BYTES, 64) == 63 * 16


def test_scaling_bench_counts_gpus_in_powers_of_two_and_grades_each_count():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "vocab_parallel_scaling.py"
    spec = importlib.util.spec_from_file_location("vocab_parallel_scaling", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.gpu_counts(1) == [1] and bench.gpu_counts(4) == [1, 2, 4]
    assert bench.gpu_counts(6) == [1, 2, 4]
    step = dict(loss="vocab-parallel CE", what="step", shape="8x10", gpu="G")
    rows = [dict(step, gpus=1, ms=4.0), dict(step, gpus=2, ms=2.1), dict(step, gpus=4, ms=1.2),
            dict(step, gpus=2, ms=9.0, what="two all-reduces alone")]
    lines = bench.verdicts(rows)
    assert [line.split(":")[0] for line in lines] == ["PASS", "MISS"]  # 1.90x >= 1.8; 3.33x < 3.6
    assert "on 4 x G: 3.33x" in lines[1]
