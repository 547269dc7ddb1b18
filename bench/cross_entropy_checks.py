"""Correctness of the chapter 5 cross-entropy kernels on a GPU (not a timed test).

Builds every version, runs kernels.check's suite (reductions, ignore_index, label smoothing,
dtypes), robustness cases (|logits| 1e4, -inf, one dominating logit), out-of-range targets,
gradients against PyTorch's in float64, torch.autograd.gradcheck, determinism and edge cases.
Prints one line per case and a summary; exits non-zero on any failure.

    python bench/cross_entropy_checks.py
"""
import argparse
import functools
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

import torch
import torch.nn.functional as F

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import check, load
from kernels.measure.correctness import relative_error
from kernels.ops.cross_entropy import cross_entropy

VERSIONS = ["ch5_cross_entropy/v1_two_pass_row.cu", "ch5_cross_entropy/v2_online_softmax.cu",
            "ch5_cross_entropy/v3_fused_rows.cu"]
failures = []
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
require_gpus(1, "bench/cross_entropy_checks.py")


def case(name):
    def wrap(fn):
        try:
            fn()
            print(f"PASS  {name}")
        except Exception as error:  # noqa: BLE001 - report every failure, keep going
            failures.append(name)
            print(f"FAIL  {name}: {type(error).__name__}: {error}")
            traceback.print_exc(limit=3)
        return fn
    return wrap


kernels = {}
for path in VERSIONS:
    start = time.perf_counter()
    kernels[path] = load(path)
    print(f"built {path} in {time.perf_counter() - start:.1f} s ({kernels[path]})")
v3 = kernels[VERSIONS[-1]]  # the final version


for path, k in kernels.items():
    @case(f"check suite, {path}, mean fp32")
    def _():
        check(functools.partial(cross_entropy, kernel=k), "cross_entropy", rtol=1e-5)

for kwargs in ({"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 3},
               {"ignore_index": 3, "reduction": "none"}, {"label_smoothing": 0.1},
               {"label_smoothing": 0.1, "ignore_index": 3, "reduction": "sum"}):
    @case(f"check suite, final, fp32 {kwargs}")
    def _():
        check(functools.partial(cross_entropy, kernel=v3), "cross_entropy", rtol=1e-5, **kwargs)

for dtype, rtol in ((torch.bfloat16, 8e-3), (torch.float16, 1e-3), (torch.float64, 1e-12)):
    for kwargs in ({}, {"reduction": "none", "label_smoothing": 0.2}):
        @case(f"check suite, final, {dtype} {kwargs} (rtol {rtol}: the output's own rounding)")
        def _():
            check(functools.partial(cross_entropy, kernel=v3), "cross_entropy", rtol=rtol,
                  dtype=dtype, **kwargs)


def compare_rows(got, expected, rtol=1e-5):
    """Per-row losses: same NaN/inf pattern, finite values within rtol of the largest."""
    got, expected = got.double().cpu(), expected.double().cpu()
    same_nan = torch.equal(torch.isnan(got), torch.isnan(expected))
    finite = torch.isfinite(expected)
    same_inf = torch.equal(got[~finite & ~torch.isnan(expected)],
                           expected[~finite & ~torch.isnan(expected)])
    assert same_nan and same_inf, f"NaN/inf pattern differs: got {got}, expected {expected}"
    if finite.any():
        err = relative_error(got[finite], expected[finite])
        assert err <= rtol, f"relative error {err:.2e} > {rtol}"


def robust_inputs(rows, classes, dtype, gen):
    x = torch.randn(rows, classes, generator=gen, device="cuda", dtype=torch.float32)
    t = torch.randint(0, classes, (rows,), generator=gen, device="cuda")
    x[0] *= 1e4                                    # magnitude 1e4
    x[1, ::3] = -float("inf")                      # many -inf, target may be one of them
    x[1, t[1]] = 0.5
    x[2, ::3] = -float("inf"); x[2, t[2]] = -float("inf")  # target logit -inf: loss +inf
    x[3] = 0.0; x[3, 5 % classes] = 1e4            # one logit dominates
    x[4] = -float("inf")                           # whole row -inf: NaN (as PyTorch)
    x[5, 7 % classes] = float("nan")               # NaN: NaN
    return x.to(dtype), t


for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for classes in (10, 128, 1001, 4096, 50257, 131072):
        @case(f"robustness (1e4, -inf, dominant, NaN), final, {dtype}, 64 x {classes}")
        def _():
            gen = torch.Generator(device="cuda").manual_seed(classes)
            x, t = robust_inputs(64, classes, dtype, gen)
            if dtype == torch.float16:
                x = x.float().clamp(-6e4, 6e4).to(dtype)  # 1e4 * randn overflows fp16
            got = cross_entropy(x, t, reduction="none", kernel=v3, check_targets=False)
            expected = F.cross_entropy(x.double(), t, reduction="none")
            compare_rows(got, expected, rtol=1e-5 if dtype == torch.float32 else 8e-3)


@case("out-of-range targets with check_targets=True: IndexError, context still fine")
def _():
    # (Without the check, the final version stops with a device-side assertion, which ends the
    # process's CUDA context: tests/gpu/test_operators.py checks that in a subprocess.)
    x = torch.randn(100, 1000, device="cuda")
    for bad in (1000, -5, 1 << 40):
        t = torch.randint(0, 1000, (100,), device="cuda")
        t[37] = bad
        try:
            cross_entropy(x, t, kernel=v3, check_targets=True)
            raise AssertionError("no IndexError")
        except IndexError as error:
            assert "out of range" in str(error) and "row 37" in str(error), str(error)
    torch.cuda.synchronize()
    t = torch.randint(0, 1000, (100,), device="cuda")
    assert relative_error(cross_entropy(x, t, kernel=v3), F.cross_entropy(x.double(), t)) < 1e-5


def grad_case(shape, dtype, reduction, fused, rtol, grad_scale=1.0, **kwargs):
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    x = torch.randn(shape, generator=gen, device="cuda", dtype=dtype)
    t = torch.randint(0, shape[1], (shape[0],), generator=gen, device="cuda")
    if shape[0] > 3:
        t[::3] = kwargs.get("ignore_index", -100)  # a third of the rows ignored
    xg = x.clone().requires_grad_()
    loss = cross_entropy(xg, t, reduction=reduction, kernel=v3, fused_backward=fused, **kwargs)
    go = torch.full_like(loss, grad_scale) if reduction != "none" else \
        torch.randn(loss.shape, generator=gen, device="cuda", dtype=dtype)
    loss.backward(go)
    xr = x.double().requires_grad_()
    F.cross_entropy(xr, t, reduction=reduction, **kwargs).backward(go.double())
    err = relative_error(xg.grad, xr.grad)
    assert xg.grad.dtype == dtype and err <= rtol, f"gradient relative error {err:.2e} > {rtol}"


for shape in ((1, 1), (33, 10), (129, 1001), (4097, 128), (7, 131075), (64, 4096), (8, 50257)):
    for reduction in ("mean", "sum", "none"):
        for fused in (True, False):
            @case(f"gradient vs float64, fp32 {shape} {reduction} fused={fused}, grad_output 1 & 2.5")
            def _():
                grad_case(shape, torch.float32, reduction, fused, 1e-5)
                grad_case(shape, torch.float32, reduction, fused, 1e-5, grad_scale=2.5,
                          label_smoothing=0.1, ignore_index=1)

for dtype in (torch.bfloat16, torch.float16, torch.float64):
    @case(f"gradient vs float64, {dtype} (256, 4096) and (5, 131072), mean, fused")
    def _():
        rtol = 1e-12 if dtype == torch.float64 else 1e-2
        grad_case((256, 4096), dtype, "mean", True, rtol)
        grad_case((5, 131072), dtype, "mean", True, rtol)


for reduction in ("mean", "sum", "none"):
    @case(f"torch.autograd.gradcheck, float64 (6 x 11) + (3 x 9), {reduction}, label_smoothing "
          f"0.15, ignore_index 2 (fused_backward=False)")
    def _():
        for rows, classes in ((6, 11), (3, 9)):
            gen = torch.Generator(device="cuda").manual_seed(rows)
            x = torch.randn(rows, classes, generator=gen, device="cuda", dtype=torch.float64,
                            requires_grad=True)
            t = torch.randint(0, classes, (rows,), generator=gen, device="cuda")
            t[0] = 2
            fn = lambda x: cross_entropy(x, t, ignore_index=2, reduction=reduction,  # noqa: E731
                                         label_smoothing=0.15, kernel=v3, fused_backward=False)
            assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-8, rtol=1e-6)


@case("fused backward: a second backward through the same graph raises")
def _():
    x = torch.randn(8, 16, device="cuda", requires_grad=True)
    t = torch.randint(0, 16, (8,), device="cuda")
    loss = cross_entropy(x, t, kernel=v3)
    loss.backward(retain_graph=True)
    try:
        loss.backward()
        raise AssertionError("no error")
    except RuntimeError as error:
        assert "once" in str(error)


@case("determinism: 10 runs at 32768 x 4096 give the same bits (loss and gradient)")
def _():
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(32768, 4096, generator=gen, device="cuda")
    t = torch.randint(0, 4096, (32768,), generator=gen, device="cuda")
    outs = {cross_entropy(x, t, kernel=v3).item() for _ in range(10)}
    assert len(outs) == 1, outs
    grads = []
    for _ in range(2):
        xg = x.clone().requires_grad_()
        cross_entropy(xg, t, kernel=v3).backward()
        grads.append(xg.grad)
    assert torch.equal(grads[0], grads[1])


@case("edge cases: 0 rows, every row ignored (mean NaN, sum 0), 1-D logits, strided logits")
def _():
    x = torch.randn(0, 5, device="cuda")
    t = torch.zeros(0, dtype=torch.long, device="cuda")
    for red in ("mean", "sum", "none"):
        got, want = cross_entropy(x, t, reduction=red, kernel=v3), F.cross_entropy(x, t, reduction=red)
        assert got.shape == want.shape and torch.equal(got.isnan().cpu(), want.isnan().cpu())
    x = torch.randn(4, 5, device="cuda", requires_grad=True)
    t = torch.full((4,), -100, device="cuda")
    assert cross_entropy(x, t, kernel=v3).isnan().item() and F.cross_entropy(x, t).isnan().item()
    assert cross_entropy(x, t, reduction="sum", kernel=v3).item() == 0.0
    loss = cross_entropy(x, t, kernel=v3)
    loss.backward()
    assert torch.equal(x.grad, torch.zeros_like(x))  # as PyTorch: ignored rows get no gradient
    x1, t1 = torch.randn(7, device="cuda"), torch.tensor(3, device="cuda")
    for red in ("mean", "none"):
        got, want = cross_entropy(x1, t1, reduction=red, kernel=v3), F.cross_entropy(x1, t1, reduction=red)
        assert got.shape == want.shape and relative_error(got, want.double()) < 1e-5
    xs = torch.randn(4096, 64, device="cuda")[:, 1:61]  # strided: copied once
    ts = torch.randint(0, 60, (4096,), device="cuda")
    assert relative_error(cross_entropy(xs, ts, kernel=v3), F.cross_entropy(xs.double(), ts)) < 1e-5
    xo = torch.randn(4097 * 128 + 1, device="cuda")[1:].view(4097, 128)  # not 16-byte aligned
    to = torch.randint(0, 128, (4097,), device="cuda")
    assert relative_error(cross_entropy(xo, to, kernel=v3), F.cross_entropy(xo.double(), to)) < 1e-5


BAD_ARGUMENTS = {  # name: (call, the exception it must raise); each runs in its own process
    "int32 target": ("cross_entropy(x, torch.zeros(4, dtype=torch.int32, device='cuda'))", "TypeError"),
    "target length != rows (wrapper)": ("cross_entropy(x, torch.zeros(3, dtype=torch.long, device='cuda'))", "RuntimeError"),
    "target length != rows (op)": ("k.cross_entropy(x, torch.zeros(3, dtype=torch.long, device='cuda'), -100, 1, 0.0, 0)", "RuntimeError"),
    "2-D target (op)": ("k.cross_entropy(x, torch.zeros(4, 1, dtype=torch.long, device='cuda'), -100, 1, 0.0, 0)", "RuntimeError"),
    "int32 target (op)": ("k.cross_entropy(x, torch.zeros(4, dtype=torch.int32, device='cuda'), -100, 1, 0.0, 0)", "RuntimeError"),
    "CPU target (op)": ("k.cross_entropy(x, torch.zeros(4, dtype=torch.long), -100, 1, 0.0, 0)", "RuntimeError"),
    "int logits (op)": ("k.cross_entropy(x.int(), torch.zeros(4, dtype=torch.long, device='cuda'), -100, 1, 0.0, 0)", "RuntimeError"),
    "reduction 7 (op)": ("k.cross_entropy(x, torch.zeros(4, dtype=torch.long, device='cuda'), -100, 7, 0.0, 0)", "RuntimeError"),
    "save 5 (op)": ("k.cross_entropy(x, torch.zeros(4, dtype=torch.long, device='cuda'), -100, 1, 0.0, 5)", "RuntimeError"),
    "backward, lse of wrong length (op)": ("k.cross_entropy_backward(torch.ones(4, device='cuda'), x, torch.zeros(4, dtype=torch.long, device='cuda'), torch.zeros(3, device='cuda'), -100, 0.0)", "RuntimeError"),
    "scale_grad, 2 grad_outputs (op)": ("k.cross_entropy_scale_grad(x.clone(), torch.ones(2, device='cuda'))", "RuntimeError"),
    "reduction 'avg'": ("cross_entropy(x, torch.zeros(4, dtype=torch.long, device='cuda'), reduction='avg')", "ValueError"),
    "label_smoothing 1.5": ("cross_entropy(x, torch.zeros(4, dtype=torch.long, device='cuda'), label_smoothing=1.5)", "ValueError"),
    "3-D logits": ("cross_entropy(x[None], torch.zeros(4, dtype=torch.long, device='cuda'))", "ValueError"),
    "gradient from v1 (no backward)": ("cross_entropy(x.requires_grad_(), torch.zeros(4, dtype=torch.long, device='cuda'), kernel=load(VERSIONS[0]))", "NotImplementedError"),
}
CHILD = """
import faulthandler, sys, torch
faulthandler.enable()
sys.path.insert(0, {root!r})
from kernels import load
from kernels.ops.cross_entropy import cross_entropy
VERSIONS = {versions!r}
k = load(VERSIONS[-1])
x = torch.randn(4, 5, device="cuda")
try:
    {call}
    print("NO ERROR")
except {error} as e:
    print("RAISED", type(e).__name__, str(e).splitlines()[0][:150])
torch.cuda.synchronize()
"""


@case("bad arguments raise clear errors, each in its own process (a crash shows as a signal)")
def _():
    import os
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = []
    for name, (call, error) in BAD_ARGUMENTS.items():
        code = CHILD.format(root=root, versions=VERSIONS, call=call, error=error)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120)
        out = (proc.stdout.strip().splitlines() or [""])[-1]
        ok = proc.returncode == 0 and out.startswith("RAISED")
        print(f"    {'ok ' if ok else 'BAD'} {name:<36} rc {proc.returncode}: {out}")
        if not ok:
            print("      " + "\n      ".join((proc.stderr or "").strip().splitlines()[-8:]))
            bad.append(name)
    assert not bad, f"{bad}"


print(f"\n{len(failures)} failure(s)" + (": " + "; ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
