"""Chapter 8's kernels (kernels/ch8_multi_gpu/vocab_shard.cu) against the float64 reference, and
the vocab-parallel cross-entropy over NCCL on 1 GPU and, where there are two, on 2 GPUs."""

import pytest
import torch

from gpu_support import record
from kernels.measure.correctness import relative_error
from kernels.ops import ranks
from kernels.ops.vocab_parallel import (KERNEL_FILE, reference_grad, reference_stats, shard_grad,
                                        shard_stats)

pytestmark = pytest.mark.gpu

def _shard(rows, cols, dtype, seed=0, masked=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (4 * torch.randn(rows, cols, device="cuda", generator=g)).to(dtype)
    if masked:  # the first columns of every row masked out, as a causal or padding mask does
        x[:, :masked] = -torch.inf
    return x


# cols: multiples of 8 (16-byte loads for every dtype), of 4 only (fp32 vectors, scalar bf16),
# and odd (scalar loads); one row longer than a block's 4 loads x 512 threads x 8 values.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows,cols,start,vocab", [(7, 1000, 0, 1000), (33, 4100, 4100, 8200),
                                                  (5, 4097, 100, 9000), (3, 50000, 0, 128000),
                                                  (1, 1, 5, 6)])
def test_shard_stats_match_float64(dtype, rows, cols, start, vocab):
    x = _shard(rows, cols, dtype, masked=min(cols - 1, 3))
    t = torch.randint(0, vocab, (rows,), device="cuda")
    t[0] = start + cols - 1  # one target owned by this shard, in its last column
    if rows > 2:
        t[1] = -100
    got = shard_stats(x, t, start, vocab, want_sum=True)
    want = reference_stats(x.cpu(), t.cpu(), start, vocab, want_sum=True)
    assert got.dtype == torch.float32 and got.shape == (rows, 4)
    got = got.double().cpu()
    error = ((got[:, 1] - want[:, 1]).abs() / want[:, 1].abs()).max().item()  # the sum of exp
    record(KERNEL_FILE, f"shard_stats {rows}x{cols} {dtype}", "pass" if error <= 2e-5 else "fail",
           error, cases=1)
    torch.testing.assert_close(got[:, 0], want[:, 0], rtol=0, atol=0)  # max: exact
    torch.testing.assert_close(got[:, 1], want[:, 1], rtol=2e-5, atol=0)  # ex2.approx, fp32 sums
    torch.testing.assert_close(got[:, 2], want[:, 2], rtol=0, atol=0)  # a logit: exact
    finite = torch.isfinite(want[:, 3])
    torch.testing.assert_close(got[finite, 3], want[finite, 3], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cols,start", [(4096, 0), (4097, 333), (20000, 20000)])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_shard_grad_matches_float64(dtype, cols, start, smoothing):
    rows, vocab = 9, 40000
    x = _shard(rows, cols, dtype, seed=3)
    t = torch.randint(0, vocab, (rows,), device="cuda")
    t[0], t[1] = start, -100
    lse = torch.logsumexp(x.float(), dim=1) + 0.5  # any lse: the kernel takes it as given
    scale = torch.rand(rows, device="cuda") + 0.1
    scale[1] = 0.0  # an ignored row: zero gradient
    got = shard_grad(x, t, lse, scale, start, vocab, label_smoothing=smoothing)
    want = reference_grad(x.cpu(), t.cpu(), lse.cpu(), scale.cpu(), start, vocab,
                          label_smoothing=smoothing)
    assert got.dtype == dtype and got.shape == x.shape
    assert torch.all(got[1] == 0)
    error = relative_error(got, want)
    record(KERNEL_FILE, f"shard_grad {cols} {dtype} smoothing {smoothing}",
           "pass" if error <= ranks.TOLERANCE[dtype] else "fail", error, cases=1)
    assert error <= ranks.TOLERANCE[dtype]


def test_bad_input_raises():
    x = _shard(4, 100, torch.float32)
    t = torch.zeros(4, dtype=torch.long, device="cuda")
    with pytest.raises(RuntimeError, match="must lie inside the vocabulary"):
        shard_stats(x, t, 50, 120)
    with pytest.raises(RuntimeError, match="target must have shape"):
        shard_stats(x, t[:3], 0, 100)
    with pytest.raises(RuntimeError, match="CUDA tensors"):
        shard_stats(x, t.cpu(), 0, 100)
    with pytest.raises(RuntimeError, match="row_scale must be a float32 vector"):
        shard_grad(x, t, torch.zeros(4, device="cuda"), torch.zeros(3, device="cuda"), 0, 100)


def test_one_gpu_over_nccl():
    result = ranks.launch("check", 1, echo=False)
    assert result["multicast_off"]
    assert all(case["passed"] for case in result["cases"]), result["cases"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpus_over_nccl():
    result = ranks.launch("check", 2, echo=False)
    assert result["ranks"] == 2 and result["multicast_off"]
    for case in result["cases"]:
        assert case["passed"] and case["same_bits"], case
    mean = ranks.launch("global_mean", 2, echo=False)
    assert mean["global_mean_error"] < 1e-6 and mean["same_bits"] and mean["repeatable"]
