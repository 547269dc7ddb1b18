"""The chapter 5 cross-entropy kernels against F.cross_entropy.

API under test (kernels/ops/cross_entropy.py): ``cross_entropy(logits, target, ignore_index=-100,
reduction="mean", label_smoothing=0.0, kernel=None, check_targets=False, fused_backward=True)``,
running the ops of one kernel file (``kernel=``; by default ``FINAL``, the chapter's last version).

- Every version of kernels/ch5_cross_entropy/: the check suite for each reduction.
- The final version: ignore_index, label smoothing, out-of-range targets, huge and infinite
  logits, NaN, bf16/fp16, the gradient (fused and not, gradcheck in float64), bad arguments,
  empty inputs, strided views, determinism and more than 2^31 logits.
"""

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from gpu_support import (CROSS_ENTROPY_CHAPTER, GUESS_SCALES, kernel_files, ops_of, record,
                         version)

pytestmark = pytest.mark.gpu

from kernels.measure import correctness  # noqa: E402
from kernels.losses import get_loss  # noqa: E402

FILES = [f for f in kernel_files(CROSS_ENTROPY_CHAPTER) if "cross_entropy" in ops_of(f)]
REDUCTIONS = ("mean", "sum", "none")
RTOL = 1e-5


@functools.lru_cache(maxsize=None)
def kernel_of(path=None):
    from kernels import load
    from kernels.ops.cross_entropy import FINAL

    return load(path or FINAL)


def ce(kernel=None, **fixed):
    """F.cross_entropy's signature, computed by one kernel file."""
    from kernels.ops.cross_entropy import cross_entropy

    k = kernel if kernel is not None else kernel_of()

    def op(logits, target, **kwargs):
        return cross_entropy(logits, target, kernel=k, **fixed, **kwargs)

    return op


def make(rows, classes, dtype=torch.float32, seed=3):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return get_loss("cross_entropy").make_inputs((rows, classes), g, "cuda", dtype)


def assert_matches(got, expected, rtol=RTOL):
    """Same shape and dtype; NaN and infinities where the reference has them; else close."""
    assert got.shape == expected.shape, (tuple(got.shape), tuple(expected.shape))
    got, expected = got.detach().double().cpu(), expected.detach().double().cpu()
    assert torch.equal(torch.isnan(got), torch.isnan(expected)), (got, expected)
    finite = torch.isfinite(expected)
    assert torch.equal(got[~finite & ~torch.isnan(expected)],
                       expected[~finite & ~torch.isnan(expected)]), "infinities differ"
    if finite.any():
        error = correctness.relative_error(got[finite], expected[finite])
        assert error <= rtol, f"relative error {error:.2e} > {rtol:.0e}"


def reference(logits, target, **kwargs):
    with torch.no_grad():
        return F.cross_entropy(logits.double(), target, **kwargs)


# --- every version: the check suite ------------------------------------------------------------

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("path", FILES, ids=version)
def test_check_suite(path, reduction):
    op = ce(kernel_of(path))
    loss = get_loss("cross_entropy")
    worst = 0.0
    for _, shape in loss.check_shapes:
        logits, target = make(*shape, seed=correctness.SEED)
        try:
            worst = max(worst, correctness.relative_error(op(logits, target, reduction=reduction),
                                                          reference(logits, target,
                                                                    reduction=reduction)))
        except Exception:
            worst = math.inf
    try:
        correctness.check(op, "cross_entropy", rtol=RTOL, reduction=reduction)
    except correctness.CheckFailed:
        record(version(path), f"check:{reduction}", "fail", worst, cases=len(loss.check_shapes))
        raise
    record(version(path), f"check:{reduction}", "pass", worst, cases=len(loss.check_shapes))


# --- the final version -------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_ignore_index(reduction, ignore_index):
    logits, target = make(1000, 37)
    target[::7] = ignore_index
    got = ce()(logits, target, reduction=reduction, ignore_index=ignore_index)
    assert_matches(got, reference(logits, target, reduction=reduction, ignore_index=ignore_index).float())


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_every_row_ignored(reduction):
    logits, target = make(50, 10)
    target[:] = -100
    got = ce()(logits, target, reduction=reduction)
    assert_matches(got, reference(logits, target, reduction=reduction).float())  # mean: NaN


# Class counts at the edges of the final version's row layouts (4 threads per row up to 128
# classes, a warp up to 1024, a block of 128 up to 4096; a thread per row for up to 16 classes
# of any length, a warp up to 512), and row counts that leave the last block part-filled.
LAYOUT_CLASSES = (1, 4, 10, 16, 17, 100, 128, 132, 500, 1024, 1028, 4096, 4100)


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, RTOL), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("classes", LAYOUT_CLASSES)
def test_every_row_layout(classes, dtype, rtol):
    for rows in (1, 7, 65, 1003):
        logits, target = make(rows, classes, dtype=dtype)
        target[1::5] = -100
        for reduction in REDUCTIONS:
            got = ce()(logits, target, reduction=reduction)
            assert_matches(got.float(), reference(logits, target, reduction=reduction).float(), rtol)
        x = logits.clone().requires_grad_()
        ce()(x, target).backward()
        assert_matches(x.grad.float(), _torch_grad(logits, target).float(), rtol)


@pytest.mark.parametrize("reduction", ("mean", "sum"))
def test_many_rows_final_sum(reduction):
    """More than 32768 rows: blocks add chunks of losses first, then one block the chunks."""
    logits, target = make(2 * 32768 + 7, 10)
    target[::5] = -100
    results = torch.stack([ce()(logits, target, reduction=reduction) for _ in range(20)])
    assert torch.unique(results.view(torch.int32)).numel() == 1, "not deterministic"
    assert_matches(results[0], reference(logits, target, reduction=reduction).float())


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.1, 1.0])
def test_label_smoothing(reduction, smoothing):
    logits, target = make(513, 1001)
    target[::5] = -100
    got = ce()(logits, target, reduction=reduction, label_smoothing=smoothing)
    assert_matches(got, reference(logits, target, reduction=reduction,
                                  label_smoothing=smoothing).float())


@pytest.mark.parametrize("bad", ["classes", "negative", "huge"])
def test_out_of_range_target_raises(bad):
    """check_targets=True raises before any kernel runs; versions 1 and 2 return NaN for the row
    and raise their flag (the final version's device-side assertion: test_operators.py)."""
    logits, target = make(100, 10)
    target[42] = {"classes": 10, "negative": -1, "huge": 1 << 40}[bad]
    with pytest.raises(IndexError, match="target .* of row 42 is out of range"):
        ce(check_targets=True)(logits, target)
    for path in FILES:
        if "cross_entropy_scale_grad" in ops_of(path):
            continue  # the final version stops the process instead
        got = ce(kernel_of(path))(logits, target, reduction="none")
        assert torch.isnan(got[42]) and torch.isfinite(torch.cat([got[:42], got[43:]])).all()
        _, _, flag = kernel_of(path).cross_entropy(logits, target, -100, 1, 0.0, 0)
        assert flag.item() == 1


@pytest.mark.parametrize("scale", [1e4, -1e4])
def test_huge_logits(scale):
    logits, target = make(300, 4099)
    logits = logits * scale
    for reduction in REDUCTIONS:
        assert_matches(ce()(logits, target, reduction=reduction),
                       reference(logits, target, reduction=reduction).float())
    shifted = logits + 1e4  # log-sum-exp must not overflow
    assert_matches(ce()(shifted, target, reduction="none"),
                   reference(shifted, target, reduction="none").float())


def test_minus_infinity_logits():
    logits, target = make(64, 1000)
    for row in range(0, 64, 2):  # -inf away from the target: finite loss
        logits[row, (target[row] + 1) % 1000] = -math.inf
    logits[1, target[1]] = -math.inf  # at the target: +inf
    logits[3, :] = -math.inf  # the whole row: NaN in PyTorch
    for reduction in REDUCTIONS:
        assert_matches(ce()(logits, target, reduction=reduction),
                       reference(logits, target, reduction=reduction).float())


def test_nan_logit_gives_nan_for_its_row():
    logits, target = make(64, 1000)
    logits[5, 17] = math.nan
    for reduction in REDUCTIONS:
        assert_matches(ce()(logits, target, reduction=reduction),
                       reference(logits, target, reduction=reduction).float())


@pytest.mark.parametrize("dtype, rtol", [(torch.bfloat16, 1e-2), (torch.float16, 2e-3)])
@pytest.mark.parametrize("shape", [(257, 1031), (64, 4096), (3, 131075)])
def test_half_precision_logits(dtype, rtol, shape):
    logits, target = make(*shape, dtype=dtype)
    for reduction in REDUCTIONS:
        got = ce()(logits, target, reduction=reduction)
        torch_got = F.cross_entropy(logits, target, reduction=reduction)
        assert got.dtype == torch_got.dtype == dtype
        assert_matches(got.float(), reference(logits, target, reduction=reduction).float(), rtol)


def _torch_grad(logits, target, grad_output=None, **kwargs):
    x = logits.detach().double().requires_grad_()
    loss = F.cross_entropy(x, target, **kwargs)
    loss.backward(grad_output.double() if grad_output is not None else None)
    return x.grad


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("shape", [(257, 1031), (33, 10), (5, 131075)])
def test_gradient(dtype, rtol, reduction, fused, shape):
    logits, target = make(*shape, dtype=dtype)
    target[::4] = -100
    x = logits.clone().requires_grad_()
    loss = ce(fused_backward=fused)(x, target, reduction=reduction, label_smoothing=0.05)
    grad_output = (torch.rand(loss.shape, device="cuda", dtype=dtype) + 0.5
                   if reduction == "none" else torch.tensor(3.0, device="cuda", dtype=dtype))
    loss.backward(grad_output)
    expected = _torch_grad(logits, target, grad_output, reduction=reduction, label_smoothing=0.05)
    assert x.grad.dtype == dtype and x.grad.shape == logits.shape
    assert_matches(x.grad.float(), expected.float(), rtol)


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("shape", [(257, 1031), (33, 10), (5, 131075)])
def test_gradient_is_right_whatever_the_guess(dtype, rtol, reduction, shape):
    """Scales one step after another, as a loss weight and GradScaler give them: the forward
    multiplies by the last one (kernels/ops/grad_guess.py), the backward divides it out."""
    logits, target = make(*shape, dtype=dtype)
    target[::4] = -100
    x = logits.clone().requires_grad_()
    for scale in GUESS_SCALES:
        x.grad = None
        (ce()(x, target, reduction=reduction, label_smoothing=0.05) * scale).backward()
        g = torch.tensor(scale, device="cuda", dtype=torch.float64)
        expected = _torch_grad(logits, target, g, reduction=reduction, label_smoothing=0.05)
        if scale == 0.0:
            assert torch.equal(x.grad, torch.zeros_like(x)), shape
        else:
            assert_matches(x.grad.float(), expected.float(), rtol)


def test_a_right_guess_leaves_the_forward_s_gradient_as_it_wrote_it():
    logits, target = make(4096, 1000)
    x = logits.clone().requires_grad_()
    for _ in range(2):  # the first backward keeps 1024 as the guess
        x.grad = None
        (ce()(x, target) * 1024).backward()
    op = kernel_of().ops["cross_entropy"]
    forward = op(logits, target, -100, 1, 0.0, 2, torch.tensor(1024.0, device="cuda"))[1]
    assert torch.equal(x.grad, forward)


def test_the_guess_argument_is_checked():
    ops = kernel_of().ops
    logits, target = make(8, 10)
    one = torch.ones((), device="cuda")
    with pytest.raises(RuntimeError, match="needs save=2"):
        ops["cross_entropy"](logits, target, -100, 1, 0.0, 1, one)
    with pytest.raises(RuntimeError, match="grad_guess must be one float32"):
        ops["cross_entropy"](logits, target, -100, 1, 0.0, 2, one.double())
    with pytest.raises(RuntimeError, match="grad_guess must be one float32"):
        ops["cross_entropy_scale_grad"](logits.clone(), one, torch.ones(2, device="cuda"))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_gradcheck_float64(reduction, smoothing):
    logits, target = make(6, 7, dtype=torch.float64)
    target[2] = -100
    x = logits.clone().requires_grad_()
    op = ce(fused_backward=False)
    assert torch.autograd.gradcheck(
        lambda v: op(v, target, reduction=reduction, label_smoothing=smoothing), (x,),
        eps=1e-6, atol=1e-5, rtol=1e-4)


def test_cpu_tensors_are_rejected():
    logits, target = make(10, 5)
    with pytest.raises((RuntimeError, NotImplementedError), match="CUDA"):
        ce()(logits.cpu(), target.cpu())
    with pytest.raises((RuntimeError, NotImplementedError), match="CUDA"):
        ce()(logits, target.cpu())


def test_int32_targets_are_rejected():
    logits, target = make(10, 5)
    with pytest.raises(TypeError, match="int64"):
        ce()(logits, target.int())
    with pytest.raises(RuntimeError, match="int64"):  # the op itself checks too
        kernel_of().cross_entropy(logits, target.int(), -100, 1, 0.0, 0)


def test_bad_shapes_are_rejected():
    logits, target = make(10, 5)
    with pytest.raises(RuntimeError, match="shape"):
        kernel_of().cross_entropy(logits, target[:9], -100, 1, 0.0, 0)
    with pytest.raises((RuntimeError, ValueError), match="shape"):
        ce()(logits.reshape(2, 5, 5), target[:2])


def test_one_row_logits_like_torch():
    logits, target = make(1, 1000)
    for reduction in REDUCTIONS:
        got = ce()(logits[0], target[0], reduction=reduction)
        assert_matches(got, reference(logits[0], target[0], reduction=reduction).float())


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_empty_rows_like_torch(reduction):
    logits = torch.empty(0, 10, device="cuda")
    target = torch.empty(0, dtype=torch.int64, device="cuda")
    got = ce()(logits, target, reduction=reduction)
    assert_matches(got, reference(logits, target, reduction=reduction).float())  # mean: NaN


def test_result_is_0d_of_the_logits_dtype_on_their_device():
    logits, target = make(100, 10)
    got = ce()(logits, target)
    assert got.dim() == 0 and got.dtype == torch.float32 and got.device == logits.device


def test_strided_and_unaligned_logits():
    logits, target = make(1031, 257)
    transposed = logits.t().contiguous().t()  # same values, column-major
    assert not transposed.is_contiguous()
    assert_matches(ce()(transposed, target), reference(logits, target).float())
    for offset in (1, 3):
        base = torch.empty(logits.numel() + offset, device="cuda")
        base[offset:] = logits.reshape(-1)
        view = base[offset:].view(logits.shape)  # contiguous, not 16-byte aligned
        for reduction in REDUCTIONS:
            assert_matches(ce()(view, target, reduction=reduction),
                           reference(logits, target, reduction=reduction).float())


@pytest.mark.parametrize("shape", [(4097, 1001), (1024, 4096), (7, 131075)])
def test_bitwise_deterministic_over_100_runs(shape):
    logits, target = make(*shape)
    op = ce()
    results = torch.stack([op(logits, target) for _ in range(100)])
    assert torch.unique(results.view(torch.int32)).numel() == 1


def test_more_than_2_31_logits():
    rows, classes = 16385, 131075  # 2^31 + 180227 logits, 8.6 GB of float32
    free, _ = torch.cuda.mem_get_info()
    need = rows * classes * 4 + (4 << 30)
    if free < need:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of GPU memory, {free / 2**30:.1f} GiB free")
    logits, target = make(rows, classes)
    got = ce()(logits, target, reduction="sum")
    total = 0.0
    for start in range(0, rows, 1024):
        total += reference(logits[start:start + 1024], target[start:start + 1024],
                           reduction="sum").item()
    error = correctness.relative_error(got, torch.tensor(total, dtype=torch.float64))
    del logits
    torch.cuda.empty_cache()
    record(kernel_of().source, "2^31+ logits", "pass" if error <= RTOL else "fail",
           error, cases=1)
    assert error <= RTOL, f"relative error {error:.2e}"
