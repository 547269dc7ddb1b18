"""Chapter 7: the cluster cross-entropy (v4) and the fused linear + cross-entropy against float64.

- v4 through ``kernels.ops.cross_entropy.cross_entropy(kernel=V4)``: rows of 4097..262144 classes take
  the cluster kernel on Hopper (cluster sizes 1, 2, 8 and 16 below), others fall back to v3; loss
  and gradient for fp32/bf16/fp16, every reduction, ignore_index, label smoothing, -inf and NaN
  logits, bit-for-bit determinism, the in-place gradient op, ``opcheck``.
- ``kernels.ops.llm_head.linear_cross_entropy``: loss and both gradients against float64 for every
  dtype, several chunks, ignored tokens, smoothing, ``grad_output`` != 1, bad input, the peak
  memory it adds, ``opcheck`` and ``torch.compile``.
"""

import functools

import pytest
import torch
import torch.nn.functional as F

from gpu_support import record

pytestmark = pytest.mark.gpu

V4 = "ch7_llm_cross_entropy/v4_cluster_rows.cu"
# Relative error (kernels.measure.correctness.relative_error) allowed against float64: PyTorch's own
# bf16/fp16 paths are within these too (the inputs are rounded to the dtype before the reference
# sees them).
RTOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
# Clusters of 1 (4104), 2-3 (16392: uneven slices), 8-16 (128256, Llama 3) and 16 (262144) blocks;
# 262150 is not a multiple of 16 bytes and streams (v3).
CLASSES = [4104, 16392, 128256, 262144, 262150]


def relative_error(got, expected):
    from kernels.measure.correctness import relative_error as rel

    return rel(got.detach().double().cpu(), expected.detach().double().cpu())


@functools.lru_cache(maxsize=None)
def v4():
    from kernels import load

    return load(V4)


def ce(x, target, **kwargs):
    from kernels.ops.cross_entropy import cross_entropy

    return cross_entropy(x, target, kernel=v4(), **kwargs)


def make(rows, classes, dtype, seed=0, ignore_every=5):
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = (torch.randn(rows, classes, generator=g, device="cuda") * 3).to(dtype)
    target = torch.randint(0, classes, (rows,), generator=g, device="cuda")
    if ignore_every:
        target[::ignore_every] = -100
    return logits, target


def torch_grad(logits, target, grad_output=None, **kwargs):
    x = logits.detach().double().requires_grad_()
    loss = F.cross_entropy(x, target, **kwargs)
    loss.backward(None if grad_output is None else grad_output.double())
    return loss.detach(), x.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("classes", CLASSES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_and_gradient_match_float64(classes, dtype, reduction):
    rows = 7 if classes > 100_000 else 37
    logits, target = make(rows, classes, dtype)
    target[1] = classes - 1  # the last class: the end of the last block's slice
    x = logits.clone().requires_grad_()
    loss = ce(x, target, reduction=reduction, label_smoothing=0.1)
    grad_output = (torch.rand(loss.shape, device="cuda", dtype=dtype) + 0.5
                   if reduction == "none" else torch.tensor(2.5, device="cuda", dtype=dtype))
    loss.backward(grad_output)
    want_loss, want_grad = torch_grad(logits, target, grad_output, reduction=reduction,
                                      label_smoothing=0.1)
    assert loss.dtype == dtype and loss.shape == want_loss.shape
    error = max(relative_error(loss.float(), want_loss), relative_error(x.grad.float(), want_grad))
    record(V4, f"loss and gradient {rows}x{classes} {dtype} {reduction}",
           "pass" if error <= RTOL[dtype] else "fail", error, cases=1)
    assert error <= RTOL[dtype]


@pytest.mark.parametrize("classes", [16392, 128256])
def test_without_smoothing_and_without_gradient(classes):
    logits, target = make(64, classes, torch.bfloat16)
    loss = ce(logits, target)
    assert relative_error(loss.float(), torch_grad(logits, target)[0]) <= RTOL[torch.bfloat16]


@pytest.mark.parametrize("dtype, classes", [(torch.bfloat16, 16384), (torch.bfloat16, 4104),
                                           (torch.float32, 8192), (torch.float16, 6000)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_forward_alone_over_many_rows_of_one_slice(dtype, classes, reduction, smoothing):
    """Rows of one slice without a fused gradient (one block per row, many more rows than fit
    on the GPU at once): the loss of the forward alone, and the gradient from the saved
    log-sum-exp."""
    logits, target = make(3001, classes, dtype)
    if smoothing == 0:  # masked vocabulary entries (with smoothing, the loss would be inf)
        logits[2, 100:3000] = -torch.inf
        target[2] = 7
    target[4] = classes - 1
    with torch.no_grad():
        loss = ce(logits, target, reduction=reduction, label_smoothing=smoothing)
    grad_output = torch.ones_like(loss) if reduction == "none" else None
    want_loss, want_grad = torch_grad(logits, target, grad_output, reduction=reduction,
                                      label_smoothing=smoothing)
    assert relative_error(loss.float(), want_loss) <= RTOL[dtype]
    x = logits.clone().requires_grad_()
    ce(x, target, reduction=reduction, label_smoothing=smoothing,
       fused_backward=False).backward(grad_output)
    assert relative_error(x.grad.float(), want_grad) <= RTOL[dtype]


def test_minus_infinity_and_nan_logits():
    logits, target = make(6, 128256, torch.float32, ignore_every=0)
    logits[0, 5000:100_000] = -torch.inf  # masked vocabulary entries: exp gives 0
    target[0] = 7
    logits[1, 99_999] = torch.nan  # a NaN in one block's slice poisons only its row
    loss = ce(logits, target, reduction="none")
    want = F.cross_entropy(logits.double(), target, reduction="none")
    assert torch.isnan(loss[1]) and not torch.isnan(loss[[0, 2, 3, 4, 5]]).any()
    keep = [0, 2, 3, 4, 5]
    assert relative_error(loss[keep], want[keep]) <= 1e-5


def test_every_row_ignored_like_pytorch():
    logits, target = make(4, 16392, torch.float32, ignore_every=0)
    target[:] = -100
    x = logits.clone().requires_grad_()
    loss = ce(x, target)
    loss.backward()
    want_loss, want_grad = torch_grad(logits, target)
    assert torch.isnan(loss) and torch.isnan(want_loss)
    got = x.grad.double().cpu()
    assert torch.equal(torch.isnan(got), torch.isnan(want_grad.cpu()))
    assert torch.equal(got.nan_to_num(), want_grad.cpu().nan_to_num())


def test_out_of_range_target_raises_when_checked():
    logits, target = make(3, 128256, torch.bfloat16, ignore_every=0)
    target[2] = 128256
    with pytest.raises(IndexError, match="target 128256 of row 2 is out of range"):
        ce(logits, target, check_targets=True)


@pytest.mark.parametrize("classes", [16392, 262144])
def test_bitwise_deterministic(classes):
    logits, target = make(16, classes, torch.bfloat16)
    x = logits.clone().requires_grad_()
    first = ce(x, target)
    first.backward()
    grad = x.grad.clone()
    for _ in range(20):
        x.grad = None
        again = ce(x, target)
        again.backward()
        assert torch.equal(again, first) and torch.equal(x.grad, grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_gradient_into_logits_equals_the_fused_gradient(dtype, reduction):
    from kernels.ops.operators import REDUCTIONS, SAVE_GRAD

    logits, target = make(33, 128256, dtype)
    loss, grad, _ = v4().cross_entropy(logits, target, -100, REDUCTIONS[reduction], 0.1, SAVE_GRAD)
    scratch = logits.clone()
    loss_in_place = v4().cross_entropy_into_logits(scratch, target, -100, REDUCTIONS[reduction], 0.1)
    assert torch.equal(loss_in_place, loss) and torch.equal(scratch, grad)


def test_gradient_into_logits_rejects_what_it_cannot_do():
    logits, target = make(4, 16392, torch.float32)
    with pytest.raises(RuntimeError, match="reduction 1 \\(mean\\) or 2 \\(sum\\)"):
        v4().cross_entropy_into_logits(logits, target, -100, 0, 0.0)
    with pytest.raises(RuntimeError, match="contiguous"):
        v4().cross_entropy_into_logits(logits[:, :8192], target, -100, 1, 0.0)


def test_opcheck():
    from kernels.ops.operators import REDUCTIONS, SAVE_GRAD, SAVE_LSE

    for classes in (16392, 128256):
        logits, target = make(8, classes, torch.bfloat16)
        x = logits.clone().requires_grad_()
        for save in (SAVE_LSE, SAVE_GRAD):
            reduction = REDUCTIONS["none" if save == SAVE_LSE else "mean"]
            torch.library.opcheck(v4().cross_entropy, (x, target, -100, reduction, 0.1, save),
                                  test_utils=("test_schema", "test_faketensor",
                                              "test_aot_dispatch_static"))


# --- the fused linear + cross-entropy ----------------------------------------------------------

def lm_head_inputs(tokens, hidden, vocab, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    h = (torch.randn(tokens, hidden, generator=g, device="cuda")).to(dtype)
    w = (torch.randn(vocab, hidden, generator=g, device="cuda") / hidden**0.5).to(dtype)
    t = torch.randint(0, vocab, (tokens,), generator=g, device="cuda")
    t[::7] = -100
    return h, w, t


def float64_head(h, w, t, grad_output=1.0, **kwargs):
    h64 = h.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    loss = F.cross_entropy(h64 @ w64.t(), t, **kwargs)
    (loss * grad_output).backward()
    return loss.detach(), h64.grad, w64.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("reduction, smoothing, grad_output",
                         [("mean", 0.0, 1.0), ("mean", 0.1, 3.0), ("sum", 0.0, 0.5)])
def test_linear_cross_entropy_matches_float64(dtype, reduction, smoothing, grad_output):
    from kernels.ops.llm_head import linear_cross_entropy

    h, w, t = lm_head_inputs(300, 256, 16392, dtype)
    hx, wx = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = linear_cross_entropy(hx, wx, t, reduction=reduction, label_smoothing=smoothing,
                                chunk_rows=128)  # 3 chunks, the last one short
    (loss * grad_output).backward()
    want_loss, want_h, want_w = float64_head(h, w, t, grad_output, reduction=reduction,
                                             label_smoothing=smoothing)
    # PyTorch's own path in this dtype, for the tolerance: ours must not be much worse.
    hp, wp = h.clone().requires_grad_(), w.clone().requires_grad_()
    (F.cross_entropy(hp @ wp.t(), t, reduction=reduction, label_smoothing=smoothing)
     * grad_output).backward()
    for got, theirs, want in ((loss, None, want_loss), (hx.grad, hp.grad, want_h),
                              (wx.grad, wp.grad, want_w)):
        limit = RTOL[dtype] if theirs is None else max(RTOL[dtype],
                                                       2 * relative_error(theirs.float(), want))
        assert relative_error(got.float(), want) <= limit


def test_linear_cross_entropy_over_many_chunks_is_deterministic():
    """16 chunks, the last one short: float64's answer, and the same bits every run."""
    from kernels.ops.llm_head import linear_cross_entropy

    h, w, t = lm_head_inputs(2000, 256, 16392, torch.bfloat16)
    runs = []
    for _ in range(5):
        hx, wx = h.clone().requires_grad_(), w.clone().requires_grad_()
        linear_cross_entropy(hx, wx, t, chunk_rows=128).backward()
        runs.append((hx.grad, wx.grad))
    assert all(torch.equal(a, b) for run in runs[1:] for a, b in zip(run, runs[0]))
    _, want_h, want_w = float64_head(h, w, t)
    hp, wp = h.clone().requires_grad_(), w.clone().requires_grad_()
    F.cross_entropy(hp @ wp.t(), t).backward()  # PyTorch's own bf16 path sets the tolerance
    for got, theirs, want in zip(runs[0], (hp.grad, wp.grad), (want_h, want_w)):
        limit = max(RTOL[torch.bfloat16], 2 * relative_error(theirs.float(), want))
        assert relative_error(got.float(), want) <= limit


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_linear_cross_entropy_every_token_ignored_like_pytorch(dtype):
    """The mean of no tokens: a NaN loss and zero gradients, as F.cross_entropy gives (1 / count
    is inf there, and must not reach the gradients as inf * 0 = NaN)."""
    from kernels.ops.llm_head import linear_cross_entropy

    h, w, t = lm_head_inputs(200, 128, 8200, dtype)
    t[:] = -100
    hx, wx = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = linear_cross_entropy(hx, wx, t, chunk_rows=128)
    loss.backward()
    hp, wp = h.clone().requires_grad_(), w.clone().requires_grad_()
    want = F.cross_entropy(hp @ wp.t(), t)
    want.backward()
    assert torch.isnan(loss) and torch.isnan(want)
    for got, theirs in ((hx.grad, hp.grad), (wx.grad, wp.grad)):
        assert torch.equal(got, theirs) and not got.any()


def test_linear_cross_entropy_without_gradients_and_3d_hidden():
    from kernels.ops.llm_head import linear_cross_entropy

    h, w, t = lm_head_inputs(2 * 96, 128, 8200, torch.float32)
    with torch.no_grad():
        loss = linear_cross_entropy(h.view(2, 96, 128), w, t.view(2, 96), chunk_rows=64)
    assert relative_error(loss, float64_head(h, w, t)[0]) <= 1e-5


def test_linear_cross_entropy_peak_memory_is_one_chunk():
    from kernels.ops.llm_head import linear_cross_entropy

    tokens, hidden, vocab, chunk = 4096, 512, 32768, 256
    h, w, t = lm_head_inputs(tokens, hidden, vocab, torch.bfloat16)
    h.requires_grad_(), w.requires_grad_()
    linear_cross_entropy(h, w, t, chunk_rows=chunk).backward()  # warm: builds, cuBLAS workspace
    h.grad = w.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    linear_cross_entropy(h, w, t, chunk_rows=chunk).backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before - h.numel() * 2 - w.numel() * 2
    chunk_logits = chunk * vocab * 2
    assert extra <= 1.25 * chunk_logits, (extra, chunk_logits)
    assert extra < tokens * vocab * 2 / 8  # far from the full logits


def test_linear_cross_entropy_differentiates_once():
    from kernels.ops.llm_head import linear_cross_entropy

    h, w, t = lm_head_inputs(64, 64, 8200, torch.float32)
    h.requires_grad_()
    loss = linear_cross_entropy(h, w, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="differentiated once"):
        loss.backward()


def test_linear_cross_entropy_rejects_bad_input():
    from kernels.ops.llm_head import linear_cross_entropy

    h, w, t = lm_head_inputs(16, 64, 8200, torch.float32)
    with pytest.raises(TypeError, match="weight must match"):
        linear_cross_entropy(h, w.double(), t)
    with pytest.raises(ValueError, match="disagree"):
        linear_cross_entropy(h, w[:, :32], t)
    with pytest.raises(ValueError, match="target must have shape"):
        linear_cross_entropy(h, w, t[:8])
    with pytest.raises(TypeError, match="int64"):
        linear_cross_entropy(h, w, t.int())
    with pytest.raises(ValueError, match="CUDA"):
        linear_cross_entropy(h.cpu(), w, t)
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(h, w, t, reduction="none")


def test_linear_cross_entropy_opcheck_and_compile():
    from kernels.ops.llm_head import _linear_cross_entropy, linear_cross_entropy

    h, w, t = lm_head_inputs(200, 64, 8200, torch.float32)
    hx, wx = h.clone().requires_grad_(), w.clone().requires_grad_()
    torch.library.opcheck(_linear_cross_entropy, (hx, wx, t, -100, 1, 0.0, 64, True),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
    compiled = torch.compile(lambda a, b, c: linear_cross_entropy(a, b, c, chunk_rows=64),
                             fullgraph=True)
    loss = compiled(hx, wx, t)
    loss.backward()
    want_loss, want_h, want_w = float64_head(h, w, t)
    assert relative_error(loss, want_loss) <= 1e-5
    assert relative_error(hx.grad, want_h) <= 1e-5 and relative_error(wx.grad, want_w) <= 1e-5
