"""Every element-wise kernel version (chapters 2-4) against PyTorch, and the final ones against
hostile inputs.

- All versions: the check suite of kernels.check (irregular sizes, poisoned memory, float64
  reference), at the tolerance of RTOL below.
- The chapter 4 versions' loss ops (the final, deterministic kernels): wrong device, wrong dtype,
  non-contiguous, expanded and unaligned views, mismatched and empty shapes, NaN and Inf, the
  0-d result, bitwise determinism over 100 runs, the same bits in a CUDA graph and on two
  streams at once, and more than 2^31 elements.
"""

import math

import pytest
import torch

from gpu_support import (ELEMENT_WISE_CHAPTERS, case_id, element_wise_cases, kernel_names,
                         loss_of, record, version)

pytestmark = pytest.mark.gpu

from kernels.measure import correctness  # noqa: E402
from kernels.losses import LOSSES, get_loss  # noqa: E402

# Tolerances of the check suite (max relative error vs float64), 1e-5 unless listed. Only the
# chapter 2 versions whose headers say their float atomics lose digits get more: one float
# accumulator receives every element (v1: ~1e-4 at 4 M elements, per its header) or every
# thread's sum (v2: a few hundred thousand atomics, a random walk of ~1e-5).
DEFAULT_RTOL = 1e-5
RTOL = {
    "ch2_atomics/v1_atomic_per_element.cu": 1e-3,
    "ch2_atomics/v2_thread_accumulate.cu": 1e-4,
}
# v1's single float accumulator loses 3.7e-3 at 4 M elements (its header): checked up to 10^5.
MAX_ELEMENTS = {"ch2_atomics/v1_atomic_per_element.cu": 10**5}


def shapes_of(path, loss):
    limit = MAX_ELEMENTS.get(version(path))
    shapes = get_loss(loss).check_shapes
    return [(label, s) for label, s in shapes if limit is None or math.prod(s) <= limit]

CASES = element_wise_cases(ELEMENT_WISE_CHAPTERS)
# The hostile-input tests run on the chapter 4 ops named exactly after a loss (mse, smooth_l1,
# hinge): variants such as v3's mse_global_counter or v4's mse_float_tree / mse_sequential (kept for the
# chapter's comparisons, less careful on purpose) get the check suite only.
FINAL = [(f, op) for f, op in element_wise_cases(("ch4_two_pass",)) if op in LOSSES]


def rtol_of(path):
    return RTOL.get(version(path), DEFAULT_RTOL)


def built_op(path, op):
    from kernels import load

    return getattr(load(path), op)


def loss_or_skip(op):
    loss = loss_of(op)
    if loss is None:
        pytest.skip(f"op {op!r} computes none of the losses in kernels.losses.LOSSES")
    return loss


def suite_max_error(fn, loss_name):
    """The largest relative error over the check suite's cases (inf if a case raises)."""
    loss = get_loss(loss_name)
    worst = 0.0
    for _, shape in loss.check_shapes:
        generator = torch.Generator(device="cuda").manual_seed(correctness.SEED)
        inputs = loss.make_inputs(shape, generator, "cuda", None)
        try:
            got = fn(*inputs)
            torch.cuda.synchronize()
            worst = max(worst, correctness.relative_error(got, loss.reference64(inputs)))
        except Exception:
            return math.inf, len(loss.check_shapes)
    return worst, len(loss.check_shapes)


@pytest.mark.parametrize("path, op", CASES, ids=[case_id(c) for c in CASES])
def test_check_suite(path, op):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    worst, cases = suite_max_error(fn, loss)
    try:
        correctness.check(fn, loss, rtol=rtol_of(path), shapes=shapes_of(path, loss))
    except correctness.CheckFailed:
        record(version(path), f"check:{op}", "fail", worst, cases=cases)
        raise
    record(version(path), f"check:{op}", "pass", worst, cases=cases)


# --- hostile inputs (chapter 4) ----------------------------------------------------------------

final = pytest.mark.parametrize("path, op", FINAL, ids=[case_id(c) for c in FINAL])


def inputs(loss, shape, device="cuda", dtype=torch.float32, seed=1):
    generator = torch.Generator(device=device).manual_seed(seed)
    return get_loss(loss).make_inputs(shape, generator, device, dtype)


def shape_for(loss, rows=257, cols=1031):
    return (rows, cols)  # targets (cols,) for a loss that broadcasts them, else (rows, cols)


def broadcasts(loss):
    """The registry's rule: the target is one row that every row of pred shares (Hinge)."""
    return get_loss(loss).broadcast_target


def odd_shapes(loss):
    """Two irregular shapes: 2-D (rows, cols) when the target is a row, else 1-D."""
    return ((257, 1031), (1024, 1028)) if broadcasts(loss) else (((1 << 20) + 3,), (100_003,))


def assert_close_to_float64(got, loss, pred, target, rtol=1e-5):
    expected = get_loss(loss).reference64((pred, target))
    assert got.shape == () and got.dtype == torch.float32 and got.device == pred.device
    error = correctness.relative_error(got, expected)
    assert error <= rtol, f"got {got.item():.9g}, expected {expected.item():.9g} ({error:.2e})"


def assert_like_torch(got, expected):
    """NaN where PyTorch gives NaN, the same infinity where it gives one, else close."""
    assert got.shape == expected.shape == ()
    if torch.isnan(expected):
        assert torch.isnan(got), f"PyTorch gives NaN, the kernel {got.item()}"
    elif torch.isinf(expected):
        assert got.item() == expected.item(), f"PyTorch gives {expected.item()}, the kernel {got.item()}"
    else:
        assert torch.isfinite(got), f"PyTorch gives {expected.item()}, the kernel {got.item()}"
        assert correctness.relative_error(got, expected) <= 1e-5, (got.item(), expected.item())


@final
def test_cpu_tensors_are_rejected(path, op):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    pred, target = inputs(loss, shape_for(loss), device="cpu")
    with pytest.raises((RuntimeError, NotImplementedError), match="CUDA"):
        fn(pred, target)
    with pytest.raises((RuntimeError, NotImplementedError), match="CUDA"):
        fn(pred.cuda(), target)  # one on the GPU, one on the CPU


@final
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_other_dtypes_are_rejected(path, op, dtype):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    pred, target = inputs(loss, shape_for(loss), dtype=dtype)
    with pytest.raises(RuntimeError, match="float32"):
        fn(pred, target)
    with pytest.raises(RuntimeError, match="float32"):
        fn(pred.float(), target)  # only one of them float32


@final
def test_non_contiguous_inputs(path, op):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    rows, cols = shape_for(loss)
    pred = torch.randn(cols, rows, device="cuda").t()  # transposed: strides (1, rows)
    assert not pred.is_contiguous()
    target = inputs(loss, (rows, 2 * cols))[1][..., ::2]  # every other column: stride 2
    assert not target.is_contiguous()
    assert_close_to_float64(fn(pred, target), loss, pred, target)


@final
def test_expanded_inputs(path, op):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    rows, cols = shape_for(loss)
    pred = torch.randn(1, cols, device="cuda").expand(rows, cols)  # stride 0 along the rows
    target_shape = (cols,) if broadcasts(loss) else (rows, cols)
    target = inputs(loss, (1, 1))[1].reshape(1).expand(target_shape)  # one value, stride 0
    assert pred.stride(0) == 0 and target.stride(0) == 0
    assert_close_to_float64(fn(pred, target), loss, pred, target)


@final
def test_target_broadcast_from_the_right(path, op):
    """A target of pred's trailing shape is broadcast as PyTorch does ([i, j] pairs with t[j])."""
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    for rows, cols in ((257, 1031), (300, 1024)):  # odd length, and a multiple of 4
        pred = torch.randn(rows, cols, device="cuda")
        target = inputs(loss, (1, cols))[1].reshape(cols)
        assert_close_to_float64(fn(pred, target), loss, pred, target)


@final
def test_mismatched_shapes_are_rejected(path, op):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    for pred, target in ((torch.randn(10, 20, device="cuda"), torch.ones(10, device="cuda")),
                         (torch.randn(100, device="cuda"), torch.randn(99, device="cuda"))):
        with pytest.raises(RuntimeError, match="shape"):
            fn(pred, target)
    with pytest.raises(RuntimeError, match="shape"):
        fn(torch.randn(4, 5, device="cuda"), torch.randn(5, 4, device="cuda"))


@final
def test_empty_inputs_give_nan_like_torch_mean(path, op):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    for pred, target in ((torch.empty(0, device="cuda"), torch.empty(0, device="cuda")),
                         (torch.empty(0, 5, device="cuda"), torch.ones(5, device="cuda"))):
        if not broadcasts(loss) and target.shape != pred.shape:
            target = torch.empty(pred.shape, device="cuda")
        got = fn(pred, target)
        assert got.shape == () and got.dtype == torch.float32 and got.device == pred.device
        assert torch.isnan(got), got.item()


NAN_INF_CASES = [  # (which input, position, value)
    ("pred", "middle", math.nan),
    ("pred", "last", math.nan),
    ("target", "first", math.nan),
    ("pred", "middle", math.inf),
    ("pred", "last", -math.inf),
    ("target", "middle", -math.inf),
    ("both", "middle", math.inf),  # inf - inf = NaN for MSE and Smooth L1
]


# Known, documented differences from PyTorch (measured on the H100, 2026-11-22).
INF_BECOMES_NAN = {
    "ch4_two_pass/v4_kahan_lanes.cu": "v4 (chapter 4's accuracy study, not a final kernel): "
    "Kahan's compensation computes (t - sum) - y = inf - inf, so an infinite input gives NaN "
    "where PyTorch gives inf",
}


@final
@pytest.mark.parametrize("which, where, value", NAN_INF_CASES,
                         ids=[f"{w}-{p}-{v}" for w, p, v in NAN_INF_CASES])
def test_nan_and_inf_propagate_like_torch(path, op, which, where, value):
    loss = loss_or_skip(op)
    # a known deviation is asserted, not skipped: the day it changes, this says so
    deviation = INF_BECOMES_NAN.get(version(path)) if math.isinf(value) else None
    fn = built_op(path, op)
    for shape in odd_shapes(loss):
        pred, target = inputs(loss, shape)
        for name, tensor in (("pred", pred), ("target", target)):
            if which in (name, "both"):
                flat = tensor.view(-1)
                index = {"first": 0, "middle": flat.numel() // 2, "last": flat.numel() - 1}[where]
                flat[index] = value
        expected = get_loss(loss).reference(pred, target)  # PyTorch, float32
        got = fn(pred, target)
        if deviation and torch.isinf(expected):
            assert torch.isnan(got), (f"{shape}: the kernel gives {got.item()}, no longer the "
                                      f"NaN of INF_BECOMES_NAN ({deviation}): update it")
        else:
            assert_like_torch(got, expected)


@final
def test_result_is_0d_float32_on_the_input_device(path, op):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    pred, target = inputs(loss, shape_for(loss))
    got = fn(pred, target)
    assert got.shape == torch.Size([]) and got.dim() == 0
    assert got.dtype == torch.float32 and got.device == pred.device


@final
@pytest.mark.parametrize("offsets", [(1, 1), (1, 0), (0, 3), (2, 1)],
                         ids=["both+1", "pred+1", "target+3", "pred+2,target+1"])
def test_unaligned_views(path, op, offsets):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    for shape in odd_shapes(loss):
        pred, target = inputs(loss, shape)
        p_off, t_off = offsets
        pred_base = torch.empty(pred.numel() + p_off, device="cuda")
        pred_base[p_off:] = pred.reshape(-1)
        target_base = torch.empty(target.numel() + t_off, device="cuda")
        target_base[t_off:] = target.reshape(-1)
        pred_view = pred_base[p_off:].view(pred.shape)  # contiguous, not 16-byte aligned
        target_view = target_base[t_off:].view(target.shape)
        assert_close_to_float64(fn(pred_view, target_view), loss, pred_view, target_view)


@final
@pytest.mark.parametrize(
    "n", [4, 5, 100, 2048, 4095, 4096, 4100, 8188, 8192, 8196, 16380, 16384, 16388, 32768,
          65532, 65536, 65540, 131068, 131072, 131076, 262140, 262144, 262148])
def test_sizes_on_either_side_of_the_single_block_limits(path, op, n):
    """Version 5's single block changes shape above 2^12 and 2^13 elements and gives way, above
    2^14, to one cluster (on Hopper: 8 blocks with 2 loads per input per thread up to 2^16, 4 up
    to 2^17, 16 blocks up to 2^18; two passes before Hopper) and above 2^18 to two passes. Each
    shape skips the vectors past the end and adds the last 0-3 elements one by one, or, where
    the input fills every load (4096, 8192, 16384, 65536, 131072 and 262144), runs a copy
    without bounds checks. A broadcast target is a row of 4 (vector loads) or, for sizes not a
    multiple of 4, the whole row."""
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    shape = ((n // 4, 4) if n % 4 == 0 else (1, n)) if broadcasts(loss) else (n,)
    pred, target = inputs(loss, shape)
    assert_close_to_float64(fn(pred, target), loss, pred, target)


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 9,
                    reason="thread-block clusters need Hopper (compute capability 9.0)")
@pytest.mark.parametrize("loss, shape", [("mse", (1 << 16,)), ("hinge", (256, 256)),
                                         ("smooth_l1", ((1 << 18) - 4,))])
def test_a_cluster_on_hopper_and_two_passes_in_a_build_for_older_gpus(loss, shape):
    """Version 5 at mid sizes: a build for the Hopper present launches one kernel, the cluster;
    a build of compute_75 PTX (what a T4 runs, here compiled by the driver for the H100) has no
    clusters and must launch pass 1 and pass 2. Both give the float64 result."""
    from kernels import load

    pred, target = inputs(loss, shape)
    for archs, wanted in ((None, ["cluster_mean_vec"]),
                          (("7.5+PTX",), ["tile_partials", "finish_mean"])):
        fn = getattr(load("ch4_two_pass/v5_block_tiles.cu", archs=archs), loss)
        fn(pred, target)  # warm: the first call asks what the GPU runs
        names = kernel_names(lambda: fn(pred, target))
        assert len(names) == len(wanted), (archs, names)
        assert all(w in name for w, name in zip(wanted, names)), (archs, names)
        assert_close_to_float64(fn(pred, target), loss, pred, target)


@final
@pytest.mark.parametrize("shape", [(64, 64), (51, 80), (128, 64), (102, 80), (2, 2048),
                                   (1365, 12), (3, 4096), (16, 1024), (2, 8192), (512, 64),
                                   (257, 128), (64, 1024), (1000, 124), (32, 4096), (2, 65536),
                                   (64, 4096), (3000, 84), (2, 131072)])
def test_broadcast_rows_of_every_length_in_the_single_block(path, op, shape):
    """Version 5's single block and its cluster (above 2^14 elements) find a broadcast row's
    vector by a mask where the row's length is a power of two, and by a division otherwise:
    rows of both kinds, in each shape. A power-of-two row that divides the threads' stride is
    read once per thread; (2, 8192), (2, 65536) and (2, 131072) are the ones that do not (8192 >
    4 x 1024, 65536 > 4 x 8 x 1024, 131072 > 4 x 16 x 1024), so each of their loads masks its
    own index."""
    loss = loss_or_skip(op)
    if not broadcasts(loss):
        pytest.skip(f"{loss}: the target has the prediction's shape")
    fn = built_op(path, op)
    pred, target = inputs(loss, shape)
    assert_close_to_float64(fn(pred, target), loss, pred, target)


@final
def test_bitwise_deterministic_over_100_runs(path, op):
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    shape = (2049, 2048) if broadcasts(loss) else ((1 << 22) + 7,)
    pred, target = inputs(loss, shape)
    results = torch.stack([fn(pred, target) for _ in range(100)])
    bits = torch.unique(results.view(torch.int32))
    assert bits.numel() == 1, f"{bits.numel()} different results over 100 runs"


@final
def test_the_same_bits_in_a_cuda_graph_and_on_two_streams(path, op):
    """An op must work where PyTorch's does: captured into a CUDA graph (torch.compile's
    mode="reduce-overhead"), whose replay gives the eager call's bits, and called on two streams
    at once, each call with its own workspace. A launcher that kept state between calls (version
    3's counter of finished blocks in a global, instead of each call's workspace) would let
    calls in flight on two streams count into one counter, and a block that is not the last take
    the others' partials before they are written."""
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    shape = (513, 2048) if broadcasts(loss) else ((1 << 20) + 7,)
    pred, target = inputs(loss, shape)
    eager = fn(pred, target)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(pred, target)  # the allocator's blocks for the capture, made outside it
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fn(pred, target)
    graph.replay()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    results = []
    for _ in range(50):
        for s in streams:
            with torch.cuda.stream(s):
                results.append(fn(pred, target))
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    bits = lambda r: r.view(torch.int32).item()  # noqa: E731
    assert bits(captured) == bits(eager)
    assert {bits(r) for r in results} == {bits(eager)}
    assert_close_to_float64(eager, loss, pred, target)


@final
def test_more_than_2_31_elements(path, op):
    """Indices past 2^31 need 64-bit arithmetic: compare with float64 computed in chunks."""
    loss = loss_or_skip(op)
    fn = built_op(path, op)
    # 2^31 + 65536 predictions with a target row of 65536, or 2^31 + 4099 pairs
    shape = (32769, 65536) if broadcasts(loss) else ((1 << 31) + 4099,)
    n = math.prod(shape)
    need = get_loss(loss).min_bytes(shape) + (2 << 30)
    free, _ = torch.cuda.mem_get_info()
    if free < need:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of GPU memory, {free / 2**30:.1f} GiB free")
    pred, target = inputs(loss, shape)
    got = fn(pred, target)
    total = 0.0
    rows = 1 << 12 if broadcasts(loss) else 1 << 26
    for start in range(0, shape[0], rows):
        p = pred[start:start + rows]
        t = target if broadcasts(loss) else target[start:start + rows]
        total += get_loss(loss).reference64((p, t)).item() * p.numel()
    expected = torch.tensor(total / n, dtype=torch.float64)
    error = correctness.relative_error(got, expected)
    del pred, target
    torch.cuda.empty_cache()
    record(version(path), f"2^31+ elements:{op}", "pass" if error <= 1e-5 else "fail", error,
           cases=1)
    assert error <= 1e-5, f"got {got.item():.9g}, expected {expected.item():.9g} ({error:.2e})"
