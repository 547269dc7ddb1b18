"""Chapter 6's operators (kernels/ops/operators.py) against PyTorch: values and gradients in float64,
torch.library.opcheck, torch.compile with no graph break, CUDA graphs, no host synchronisation,
hostile inputs, and the cross-entropy's device-side assertion on a bad target.
"""

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from gpu_support import GUESS_SCALES, ROOT, record

pytestmark = pytest.mark.gpu

from kernels.measure.correctness import relative_error  # noqa: E402
from kernels import bench  # noqa: E402
from kernels.losses import get_loss  # noqa: E402

from kernels.losses import ELEMENT_WISE  # noqa: E402  (every loss of the registry)

PARAM = {"smooth_l1": 0.5, "bce_with_logits": 2.5}  # beta, pos_weight: not the defaults
REDUCTIONS = ("mean", "sum", "none")
# (dtype, rtol of the loss, rtol of the gradient): bf16 keeps 8 bits of mantissa, fp16 11.
DTYPES = ((torch.float32, 1e-5, 1e-5), (torch.bfloat16, 1e-2, 2e-2), (torch.float16, 2e-3, 4e-3))
VERSION = "ch6_operators/fused_losses.cu"


@pytest.fixture(scope="module")
def ops():
    from kernels.ops import operators

    return operators.build()


def inputs(name, shape, dtype=torch.float32, seed=0, grad=("pred",)):
    g = torch.Generator(device="cuda").manual_seed(seed)
    pred, target = get_loss(name).make_inputs(shape, g, "cuda", dtype)
    return pred.requires_grad_("pred" in grad), target.requires_grad_("target" in grad)


def param_of(name):
    """The loss's parameter as PyTorch names it, set to the value the tests use."""
    loss = get_loss(name)
    return {loss.param[0]: PARAM.get(name, loss.param[1])} if loss.param else {}


def call(ops, name, pred, target, reduction):
    return getattr(ops, name)(pred, target, reduction, **param_of(name))


def reference(name, pred, target, reduction):
    """The loss and its gradients in float64, by autograd on PyTorch's own expression."""
    p = pred.detach().double().requires_grad_(pred.requires_grad)
    t = target.detach().double().requires_grad_(target.requires_grad)
    return get_loss(name).reference_reduced(p, t, reduction, **param_of(name)), p, t


def assert_close(got, expected, rtol, what):
    assert got.shape == expected.shape, (what, tuple(got.shape), tuple(expected.shape))
    error = relative_error(got, expected)
    assert error <= rtol, f"{what}: relative error {error:.2e} > {rtol:.0e}"
    return error


# --- values and gradients --------------------------------------------------------------------

def pytorch_in(dtype, name, pred, target, reduction, g):
    """PyTorch's own loss and gradients computed in ``dtype`` (what its users get)."""
    p = pred.detach().clone().requires_grad_(pred.requires_grad)
    t = target.detach().clone().requires_grad_(target.requires_grad)
    loss = get_loss(name).reference_reduced(p, t, reduction, **param_of(name))
    loss.backward(g.to(dtype))
    return loss, p.grad, t.grad


@pytest.mark.parametrize("dtype,rtol,grad_rtol", DTYPES, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ELEMENT_WISE)
def test_loss_and_gradient_match_float64(ops, name, reduction, dtype, rtol, grad_rtol):
    """Within rtol of float64, or no further than PyTorch's own result in this dtype (a float16
    sum overflows, float16 gradients of a mean over millions of elements are subnormal)."""
    worst = 0.0
    for label, shape in get_loss(name).check_shapes:
        grads = ("pred", "target") if dtype == torch.float32 else ("pred",)
        pred, target = inputs(name, shape, dtype, grad=grads)
        loss = call(ops, name, pred, target, reduction)
        want, p, t = reference(name, pred, target, reduction)
        assert loss.dtype == dtype and loss.shape == want.shape, (label, loss.dtype, loss.shape)
        g = torch.randn(loss.shape, device="cuda", dtype=torch.float64) if reduction == "none" \
            else torch.tensor(3.0, device="cuda", dtype=torch.float64)
        theirs, their_dp, their_dt = pytorch_in(dtype, name, pred, target, reduction, g)
        if torch.isfinite(theirs).all():
            tol = max(rtol, 2 * relative_error(theirs, want))
            worst = max(worst, assert_close(loss, want, tol, f"{name} {label} loss"))
        else:  # PyTorch overflows too (a float16 sum): so must we
            assert torch.equal(torch.isinf(loss), torch.isinf(theirs)), (label, loss, theirs)
        loss.backward(g.to(dtype))
        want.backward(g)
        # The forward rounds f'/n to the dtype and the backward rounds again after multiplying by
        # grad_output; PyTorch rounds once. Where f'/n is subnormal (float16, a mean over
        # millions), each rounding adds up to half a subnormal step: 4x PyTorch's own error.
        tol = max(grad_rtol, 4 * relative_error(their_dp, p.grad))
        assert_close(pred.grad, p.grad, tol, f"{name} {label} d/dpred")
        if target.requires_grad:
            tol = max(grad_rtol, 4 * relative_error(their_dt, t.grad))
            assert_close(target.grad, t.grad, tol, f"{name} {label} d/dtarget")
    record(VERSION, f"{name} {reduction} {dtype} values and gradients", "pass", worst)


@pytest.mark.parametrize("name", ELEMENT_WISE)
def test_backward_of_one_costs_no_scaling_and_matches(ops, name):
    """loss.backward() (grad_output 1) returns the forward's gradient unchanged."""
    pred, target = inputs(name, bench.element_wise_shape(1 << 20, name), seed=1)
    loss = call(ops, name, pred, target, "mean")
    loss.backward()
    want, p, _ = reference(name, pred, target, "mean")
    want.backward()
    assert_close(pred.grad, p.grad, 1e-5, name)


# --- the loss-scaling guess: the forward multiplies by the last grad_output ------------------

@pytest.mark.parametrize("dtype,rtol,grad_rtol", DTYPES, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("name", ELEMENT_WISE)
def test_gradient_is_right_whatever_the_guess(ops, name, dtype, rtol, grad_rtol):
    """Scales as a loss weight and GradScaler give them, one step after another: a miss, a hit,
    a smaller scale, 0 (never used as a factor), a scale beyond the guess's range: every
    gradient against float64. float16 takes no guess, and must be right all the same."""
    pred, target = inputs(name, (1000, 37), dtype, seed=2)
    want, p, _ = reference(name, pred, target, "mean")
    for scale in GUESS_SCALES:
        if dtype == torch.float16 and scale > 2**15:  # the scaled fp16 loss itself is inf
            continue
        pred.grad, p.grad = None, None
        (call(ops, name, pred, target, "mean") * scale).backward()
        (want * scale).backward(retain_graph=True)
        if scale == 0.0:
            assert torch.equal(pred.grad, torch.zeros_like(pred)), name
            continue
        g = torch.tensor(scale, device="cuda", dtype=torch.float64)
        theirs = pytorch_in(dtype, name, pred, target, "mean", g)[1]
        tol = max(grad_rtol, 4 * relative_error(theirs, p.grad))  # two roundings, as above
        assert_close(pred.grad, p.grad, tol, f"{name} {dtype} x{scale:g}")
    record(VERSION, f"{name} {dtype} gradients over {len(GUESS_SCALES)} scaled steps", "pass")


def test_a_right_guess_leaves_the_forward_s_gradient_as_it_wrote_it(ops):
    """The second step at one scale: the backward's factor is exactly 1, so the gradient is the
    forward's, bit for bit (the first step stores the scale as the guess)."""
    pred, target = inputs("mse", (1 << 20,), seed=3)
    for _ in range(2):
        pred.grad = None
        (ops.mse(pred, target) * 1024).backward()
    guess = torch.tensor(1024.0, device="cuda")
    forward = ops.element_wise.ops["mse"](pred.detach(), target, 1, 0.0, True, guess)[1]
    assert torch.equal(pred.grad, forward)


def test_two_scales_of_one_loss_in_one_backward(ops):
    """Both forwards read one guess; each backward divides out its own forward's."""
    (a, ta), (b, tb) = inputs("mse", (4097,), seed=4), inputs("mse", (4097,), seed=5)
    for _ in range(3):
        a.grad = b.grad = None
        (0.5 * ops.mse(a, ta) + 2.0 * ops.mse(b, tb)).backward()
        for x, t, weight in ((a, ta, 0.5), (b, tb, 2.0)):
            want, p, _ = reference("mse", x, t, "mean")
            (want * weight).backward()
            assert_close(x.grad, p.grad, 1e-5, f"mse x{weight}")


def test_non_contiguous_grad_output_for_none(ops):
    pred, target = inputs("mse", (64, 48))
    loss = ops.mse(pred, target, reduction="none")
    g = torch.randn(48, 64, device="cuda").t()  # a transposed view
    assert not g.is_contiguous()
    loss.backward(g)
    assert_close(pred.grad, 2 * (pred - target).detach() * g, 1e-6, "mse none")


def test_hinge_broadcast_target_gradient(ops):
    """(N, D) predictions with a (D,) target: d/dtarget sums over the rows, as autograd does."""
    pred, target = inputs("hinge", (257, 1031), grad=("pred", "target"))
    ops.hinge(pred, target).backward()
    want, p, t = reference("hinge", pred, target, "mean")
    want.backward()
    assert_close(pred.grad, p.grad, 1e-5, "d/dpred")
    assert_close(target.grad, t.grad, 1e-5, "d/dtarget (summed over rows)")


@pytest.mark.parametrize("pos_weight", [None, 0.25, 3.0])
def test_bce_with_logits_pos_weight_and_extreme_logits(ops, pos_weight):
    """Logits of +-100 (e^x overflows float32 beyond 88) and PyTorch's default pos_weight."""
    pred, target = inputs("bce_with_logits", (100_003,), grad=("pred", "target"))
    pred.data[:8] = torch.tensor([100.0, -100.0, 88.7, -88.7, 0.0, 20.0, -20.0, 1e-3])
    kwargs = {} if pos_weight is None else {"pos_weight": pos_weight}
    loss = ops.bce_with_logits(pred, target, **kwargs)
    p, t = pred.detach().double().requires_grad_(), target.detach().double().requires_grad_()
    weight = None if pos_weight is None else torch.tensor(pos_weight, dtype=torch.float64,
                                                          device="cuda")
    want = F.binary_cross_entropy_with_logits(p, t, pos_weight=weight)
    assert_close(loss, want, 1e-5, "loss")
    loss.backward()
    want.backward()
    assert_close(pred.grad, p.grad, 1e-5, "d/dlogits")
    assert_close(target.grad, t.grad, 1e-5, "d/dtarget")


def test_bce_with_logits_rejects_a_tensor_pos_weight(ops):
    x = torch.randn(4, 3, device="cuda")
    with pytest.raises(TypeError, match="pos_weight must be a Python number"):
        ops.bce_with_logits(x, x.sigmoid(), pos_weight=torch.ones(3, device="cuda"))


@pytest.mark.parametrize("beta", [0.0, 0.25, 1.0, 3.0])
def test_smooth_l1_beta(ops, beta):
    pred, target = inputs("smooth_l1", (100_003,), grad=("pred", "target"))
    loss = ops.smooth_l1(pred, target, beta=beta)
    want = F.smooth_l1_loss(pred.double(), target.double(), beta=beta)
    assert_close(loss, want, 1e-5, f"beta {beta}")
    loss.backward()
    p, t = pred.detach().double().requires_grad_(), target.detach().double().requires_grad_()
    F.smooth_l1_loss(p, t, beta=beta).backward()
    assert_close(pred.grad, p.grad, 1e-5, "d/dpred")
    assert_close(target.grad, t.grad, 1e-5, "d/dtarget")


def test_kinks_follow_pytorch(ops):
    """At |d| == beta, d == 0 and 1 - p y == 0 the gradient is PyTorch's."""
    p = torch.tensor([1.0, -1.0, 0.0, 2.0, 0.5], device="cuda", requires_grad=True)
    t = torch.tensor([0.0, 0.0, 0.0, 1.0, 2.0], device="cuda")
    ops.smooth_l1(p, t, beta=1.0).backward()
    p2 = p.detach().clone().requires_grad_()
    F.smooth_l1_loss(p2, t, beta=1.0).backward()
    assert torch.equal(p.grad, p2.grad)
    y = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0], device="cuda")
    p3 = torch.tensor([1.0, -1.0, 0.5, 2.0, 3.0], device="cuda", requires_grad=True)
    ops.hinge(p3, y).backward()
    p4 = p3.detach().clone().requires_grad_()
    torch.clamp(1 - p4 * y, min=0).mean().backward()
    assert torch.equal(p3.grad, p4.grad)


def test_nan_propagates(ops):
    for name in ELEMENT_WISE:
        pred, target = inputs(name, (64, 64) if name == "hinge" else (4099,))
        pred.data[7] = float("nan")
        assert torch.isnan(call(ops, name, pred, target, "mean"))
        assert torch.isnan(call(ops, name, pred, target, "none")).any()


def test_mixed_dtypes_promote_like_pytorch(ops):
    pred = torch.randn(1000, device="cuda", dtype=torch.bfloat16)
    target = torch.randn(1000, device="cuda")
    got = ops.mse(pred, target)
    want = F.mse_loss(pred, target)
    assert got.dtype == want.dtype == torch.float32
    assert_close(got, want.double(), 1e-5, "promoted")


def test_zero_d_results_and_empty_inputs(ops):
    pred, target = inputs("mse", (3, 5))
    assert ops.mse(pred, target).shape == () and ops.mse(pred, target, "sum").shape == ()
    empty = torch.empty(0, device="cuda")
    assert torch.isnan(ops.mse(empty, empty)) and ops.mse(empty, empty, "sum").item() == 0
    assert ops.mse(empty, empty, "none").shape == (0,)


def test_bitwise_deterministic(ops):
    pred, target = inputs("mse", ((1 << 24) + 3,), grad=())
    first = ops.mse(pred, target)
    assert all(torch.equal(first, ops.mse(pred, target)) for _ in range(20))


def test_strided_and_unaligned_inputs(ops):
    base = torch.randn(3 * 4099 + 1, device="cuda")
    pred = base[1:4100]  # starts 4 bytes in: not 16-byte aligned
    target = torch.randn(4099 * 2, device="cuda")[::2]  # strided
    assert_close(ops.mse(pred, target), F.mse_loss(pred.double(), target.double()), 1e-5, "views")


# --- hostile input: a clear Python error, never garbage ---------------------------------------

@pytest.mark.parametrize("case,error,match", [
    ("float64", TypeError, "float32, bfloat16 or float16"),
    ("int", TypeError, "float32, bfloat16 or float16"),
    ("cpu", RuntimeError, "CUDA tensors"),
    ("shape", ValueError, "must equal pred shape"),
    ("broadcast mse", ValueError, "must equal pred shape"),
    ("reduction", ValueError, "reduction must be"),
    ("beta", ValueError, "beta must be >= 0"),
])
def test_bad_arguments_raise(ops, case, error, match):
    p = torch.randn(10, 4, device="cuda")
    args = {
        "float64": lambda: ops.mse(p.double(), p.double()),
        "int": lambda: ops.mse(p.int(), p.int()),
        "cpu": lambda: ops.mse(p.cpu(), p.cpu()),
        "shape": lambda: ops.mse(p, torch.randn(10, 5, device="cuda")),
        "broadcast mse": lambda: ops.mse(p, torch.randn(4, device="cuda")),
        "reduction": lambda: ops.mse(p, p, reduction="avg"),
        "beta": lambda: ops.smooth_l1(p, p, beta=-1.0),
    }[case]
    with pytest.raises(error, match=match):
        args()


def test_raw_ops_check_their_arguments(ops):
    """Called directly through torch.ops, the binding's checks answer."""
    k = ops.element_wise.ops
    p = torch.randn(10, 4, device="cuda")
    with pytest.raises(RuntimeError, match="one dtype"):
        k["mse"](p, p.half(), 1, 0.0, False)
    with pytest.raises(RuntimeError, match="shape only"):
        k["mse"](p, torch.randn(4, device="cuda"), 1, 0.0, False)
    with pytest.raises(RuntimeError, match="must equal pred shape"):
        k["hinge"](p, torch.randn(3, device="cuda"), 1, 0.0, False)
    with pytest.raises(RuntimeError, match="reduction must be"):
        k["mse"](p, p, 7, 0.0, False)
    with pytest.raises(RuntimeError, match="grad_output must be one value"):
        k["loss_scale_grad"](p.clone(), torch.ones(2, device="cuda"))
    with pytest.raises(RuntimeError, match="contiguous"):
        k["loss_scale_grad"](p.t(), torch.ones((), device="cuda"))
    with pytest.raises(RuntimeError, match="grad_guess must be one float32"):
        k["mse"](p, p, 1, 0.0, True, torch.ones(2, device="cuda"))
    with pytest.raises(RuntimeError, match="grad_guess must be one float32"):
        one = torch.ones((), device="cuda")
        k["loss_scale_grad"](p.clone(), one, one.half())
    with pytest.raises(RuntimeError, match="needs want_grad and reduction mean or sum"):
        k["mse"](p, p, 0, 0.0, True, torch.ones((), device="cuda"))


def test_second_backward_through_the_fused_gradient_raises(ops):
    pred, target = inputs("mse", (1000,))
    loss = ops.mse(pred, target)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="scaled in place"):
        loss.backward()


def test_forward_kernels_of_earlier_chapters_refuse_backward():
    from kernels import load

    v5 = load("ch4_two_pass/v5_block_tiles.cu")
    pred, target = inputs("mse", (1000,))
    with pytest.raises(NotImplementedError, match="computes the loss only"):
        v5.mse(pred, target).backward()


# --- operator registration: opcheck, compile, CUDA graphs, no host sync -----------------------

def opcheck_cases(name):
    """Every shape of the check suite in fp32 (bf16 and fp16 on the first two), every reduction,
    with and without the fused gradient, with and without a target that requires grad."""
    for i, (_, shape) in enumerate(get_loss(name).check_shapes):
        for dtype in (torch.float32, torch.bfloat16, torch.float16) if i < 2 else (torch.float32,):
            for reduction in (0, 1, 2):
                for want_grad, target_grad in ((False, False), (True, False), (True, True)):
                    yield shape, dtype, reduction, want_grad, target_grad


# With a guess other than grad_output, an eager backward scales the op's gradient output in
# place (as the design says: the forward's gradient is scaled, not copied), and opcheck's
# test_aot_dispatch_dynamic then compares that scaled tensor with the traced run's. What that
# test checks, the gradient of a traced op given a guess, test_a_guess_under_torch_compile checks.
WITHOUT_AOT = ("test_schema", "test_autograd_registration", "test_faketensor")


@pytest.mark.parametrize("name", ELEMENT_WISE)
def test_opcheck_element_wise(ops, name):
    op = ops.element_wise.ops[name]
    runs = 0
    for shape, dtype, reduction, want_grad, target_grad in opcheck_cases(name):
        grads = ("pred", "target") if target_grad else ("pred",)
        pred, target = inputs(name, shape, dtype, grad=grads)
        param = PARAM.get(name, 0.0)
        torch.library.opcheck(op.default, (pred, target, reduction, param, want_grad))
        runs += 1
        if want_grad and reduction != 0:  # with a guess of grad_output (see below)
            guess = torch.tensor(3.0, device="cuda")
            torch.library.opcheck(op.default, (pred, target, reduction, param, want_grad, guess),
                                  test_utils=WITHOUT_AOT)
            runs += 1
    record(VERSION, f"{name} opcheck ({runs} argument sets)", "pass")


def test_a_guess_under_torch_compile_is_divided_out(ops):
    """LossOps passes no guess under torch.compile; an op given one there still divides it out
    (its traced backward multiplies out of place)."""
    mse, ce = ops.element_wise.ops["mse"], ops.cross_entropy_kernel.ops["cross_entropy"]
    pred, target = inputs("mse", (4099,), seed=6)
    logits = torch.randn(77, 1001, device="cuda", requires_grad=True)
    labels = torch.randint(0, 1001, (77,), device="cuda")
    guess = torch.tensor(3.0, device="cuda")

    def step(p, t, x, y):
        return 5.0 * mse(p, t, 1, 0.0, True, guess)[0] + 7.0 * ce(x, y, -100, 1, 0.0, 2, guess)[0]

    torch.compile(step, fullgraph=True)(pred, target, logits, labels).backward()
    want, p, _ = reference("mse", pred, target, "mean")
    x = logits.detach().double().requires_grad_()
    (5.0 * want + 7.0 * F.cross_entropy(x, labels)).backward()
    assert_close(pred.grad, p.grad, 1e-5, "mse, compiled with a guess")
    assert_close(logits.grad, x.grad, 1e-5, "cross_entropy, compiled with a guess")


def test_opcheck_scale_grad_with_a_guess(ops):
    grad = torch.randn(64, 33, device="cuda")
    two, three = torch.tensor(2.0, device="cuda"), torch.tensor(3.0, device="cuda")
    torch.library.opcheck(ops.element_wise.ops["loss_scale_grad"].default, (grad, two, three))


def test_opcheck_cross_entropy(ops):
    k = ops.cross_entropy_kernel.ops
    two, three = torch.tensor(2.0, device="cuda"), torch.tensor(3.0, device="cuda")
    for _, shape in get_loss("cross_entropy").check_shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        logits, target = get_loss("cross_entropy").make_inputs(shape, g, "cuda")
        target[1::3] = -100  # (not every row: opcheck compares NaN with NaN as different)
        logits.requires_grad_()
        for reduction in (0, 1, 2):
            for save in (0, 1, 2):
                if save == 2 and reduction == 0:
                    continue  # the fused gradient is for "mean" and "sum"
                torch.library.opcheck(k["cross_entropy"].default,
                                      (logits, target, -100, reduction, 0.1, save))
            if reduction != 0:  # with a guess of grad_output
                torch.library.opcheck(k["cross_entropy"].default,
                                      (logits, target, -100, reduction, 0.1, 2, three),
                                      test_utils=WITHOUT_AOT)
        grad = torch.randn(shape, device="cuda")
        torch.library.opcheck(k["cross_entropy_scale_grad"].default, (grad, two))
        torch.library.opcheck(k["cross_entropy_scale_grad"].default, (grad, two, three))


def train_step_graph_breaks(ops, loss_fn):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10)).cuda()

    def forward(x, y):
        return loss_fn(model(x), y)

    x = torch.randn(256, 32, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda") if loss_fn == ops.cross_entropy \
        else torch.randn(256, 10, device="cuda")
    explanation = torch._dynamo.explain(forward)(x, y)
    compiled = torch.compile(forward, fullgraph=True)
    loss = compiled(x, y)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    eager = forward(x, y)
    eager.backward()
    for got, want in zip(grads, (p.grad for p in model.parameters())):
        assert_close(got, want.double(), 1e-4, "compiled gradient")
    assert_close(loss.detach(), eager.detach().double(), 1e-5, "compiled loss")
    return explanation.graph_break_count


@pytest.mark.parametrize("name", ELEMENT_WISE + ("cross_entropy",))
def test_torch_compile_fullgraph_training_step(ops, name):
    torch._dynamo.reset()
    breaks = train_step_graph_breaks(ops, getattr(ops, name))
    assert breaks == 0
    record(VERSION, f"{name} torch.compile(fullgraph=True) train step", "pass")


def test_cuda_graph_capture_of_forward_and_backward(ops):
    pred, target = inputs("mse", (1 << 16,))
    logits = torch.randn(512, 1000, device="cuda", requires_grad=True)
    labels = torch.randint(0, 1000, (512,), device="cuda")

    def step():
        pred.grad, logits.grad = None, None
        (ops.mse(pred, target) * 2 + ops.cross_entropy(logits, labels)).backward()

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    pred.grad, logits.grad = None, None
    with torch.cuda.graph(graph):
        (ops.mse(pred, target) * 2 + ops.cross_entropy(logits, labels)).backward()
    pred.data.copy_(torch.randn_like(pred))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(pred.grad, 4 * (pred - target).detach().double() / pred.numel(), 1e-5, "mse grad")


def test_default_path_never_waits_for_the_gpu(ops):
    """torch.cuda.set_sync_debug_mode('error') raises on any synchronising call."""
    pred, target = inputs("smooth_l1", (1 << 20,))
    logits = torch.randn(256, 1000, device="cuda", requires_grad=True)
    labels = torch.randint(0, 1000, (256,), device="cuda")
    labels[::5] = -100
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for reduction in REDUCTIONS:
            loss = ops.smooth_l1(pred, target, reduction) * 1024
            loss.backward(torch.ones_like(loss))
            ce = ops.cross_entropy(logits, labels, reduction=reduction, label_smoothing=0.1)
            ce.backward(torch.ones_like(ce))
    finally:
        torch.cuda.set_sync_debug_mode(0)


def test_rerunning_a_build_cell_registers_nothing_twice():
    from kernels import load
    from kernels.ops import operators

    first = operators.build()
    again = operators.build()  # what re-running a notebook cell does
    assert first.element_wise is again.element_wise
    assert load(operators.FUSED_LOSSES_FILE) is first.element_wise


BAD_TARGET_SCRIPT = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {root!r})
    from kernels.ops import operators
    ops = operators.build()
    logits = torch.randn(64, 10, device="cuda")
    target = torch.randint(0, 10, (64,), device="cuda")
    target[17] = {bad}
    loss = ops.cross_entropy(logits, target)   # returns at once: nothing waits
    print("returned", flush=True)
    try:
        loss.item()                            # the next synchronisation
    except RuntimeError as error:
        print("RuntimeError:", str(error).splitlines()[0], flush=True)
""")


@pytest.mark.parametrize("bad", [10, -1, 1 << 40])
def test_bad_target_stops_with_a_device_side_assert(bad):
    script = BAD_TARGET_SCRIPT.format(root=str(ROOT), bad=bad)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    output = proc.stdout + proc.stderr
    assert "returned" in output, output[-3000:]
    assert "device-side assert triggered" in output, output[-3000:]
    assert "target is out of range" in output, output[-3000:]
