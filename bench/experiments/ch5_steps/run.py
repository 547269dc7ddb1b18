"""Check and time chapter 5's version 3 split into steps of one change each (README.md here).

    python bench/experiments/ch5_steps/run.py      # on one GPU; about 3 minutes on an H100

Builds every step of this folder, chapter 5's version 2 (the steps' start) and its current
version 3 (what the last step must equal) with ``kernels.load``, several builds at once. Then:

1. checks every op of every step against PyTorch in float64 on irregular shapes (row lengths
   10, 33, 1000, 4096, 4097, 50257, 128256; 20011 rows of 10 take the final sum's chunked
   path): reductions none/mean/sum, with and without ignored rows, label smoothing, the saved
   lse and the backward op, the fused gradient and its rescaling, bf16/fp16/fp64, each where the
   step claims it, and that a step refuses what it does not claim. One PASS/FAIL line per step
   and check.
2. times every step, version 2, version 3 and eager PyTorch side by side on the same inputs
   (``kernels.bench``: median of three runs in turn), the forward at about 2^26 fp32 logits per
   shape (rows of 10, 128, 4096 and 50257 classes), bf16 at 4096 classes for the last step,
   and forward+backward at 32768 x 4096 fp32 for the steps that have a backward; prints a
   ladder table per shape and a PASS/MISS line: the last step within 3% of version 3.

Writes nothing into book/results. Exits 1 on any FAIL or MISS. A bad target is not checked: the
steps stop on it with a device-side assertion, which would end the process's CUDA context.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

HERE = ROOT / "bench" / "experiments" / "ch5_steps"
SCRIPT = "bench/experiments/ch5_steps/run.py"
V2 = "ch5_cross_entropy/v2_online_softmax.cu"
V3 = "ch5_cross_entropy/v3_fused_rows.cu"
# (label, file, the one change, what it claims beyond fp32 forward losses). Claims: "lse" (the
# saved log-sum-exp and the backward op), "fused" (the forward writes the gradient; scale_grad),
# "smoothing" (label_smoothing != 0), "dtypes" (bf16, fp16, fp64).
STEPS = [
    ("v2", V2, "chapter 5's version 2: online softmax, a block of 256 per row", set()),
    ("v3", "v3_final_sum.cu", "the final sum: -0.0 marks ignored rows, float64, chunked", set()),
    ("v4", "v4_threads_by_length.cu", "1-32 threads per row up to 1024 classes, by length",
     set()),
    ("v5", "v5_wide_loads.cu", "16-byte loads, 4 in flight, one expf per value", set()),
    ("v6", "v6_ex2.cu", "exp as one MUFU.EX2 (exp_diff)", set()),
    ("v7", "v7_row_in_registers.cu", "rows that fit held in registers; long rows: 512 threads",
     set()),
    ("v8", "v8_lse_backward.cu", "the backward from the saved lse (a second read)", {"lse"}),
    ("v9", "v9_fused_gradient.cu", "the forward writes the gradient", {"lse", "fused"}),
    ("v10", "v10_label_smoothing.cu", "label smoothing", {"lse", "fused", "smoothing"}),
    ("v11", "v11_dtypes.cu", "bf16, fp16, fp64: the drop-in for version 3",
     {"lse", "fused", "smoothing", "dtypes"}),
    ("chapter v3", V3, "chapter 5's version 3 (v3_fused_rows.cu), to be replaced",
     {"lse", "fused", "smoothing", "dtypes"}),
]
# This folder's files by their full path (a path relative to kernels/ names the chapter's).
STEPS = [(label, str(HERE / path) if "/" not in path else path, change, claims)
         for label, path, change, claims in STEPS]
LAST, CURRENT = "v11", "chapter v3"
CHECK_SHAPES = [(20011, 10), (1531, 33), (257, 1000), (129, 4096), (67, 4097), (19, 50257),
                (7, 128256)]
TIME_CLASSES = [10, 128, 4096, 50257]
TOLERANCE = {"float32": 2e-5, "bfloat16": 1.6e-2, "float16": 2e-3, "float64": 1e-12}
failures = []


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-timing", action="store_true", help="check only")
    return parser.parse_args()


def build_all():
    """Every file built at once, each in a process of its own (a build is one nvcc run on one
    core), then loaded here from the build cache."""
    from kernels import KernelBuildError, load
    from kernels.build.loader import builds_in_processes
    from kernels.build.toolchain import target_archs

    archs = target_archs()  # the GPU's, asked here: the builders do not touch CUDA
    started = time.perf_counter()
    with builds_in_processes([path for _, path, _, _ in STEPS], archs, len(STEPS)) as futures:
        for path, future in futures.items():
            try:
                future.result()
            except KernelBuildError as error:
                print(f"FAIL  build {path}\n{error}")
                raise SystemExit(1) from None
    built = {label: load(path, archs=archs) for label, path, _, _ in STEPS}
    print(f"built {len(built)} files in {time.perf_counter() - started:.0f} s")
    return built


def inputs(rows, classes, dtype, seed, ignored=False):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = (3 * torch.randn(rows, classes, generator=gen, device="cuda")).to(dtype)
    t = torch.randint(0, classes, (rows,), generator=gen, device="cuda")
    if ignored:
        t[::7] = -100  # every 7th row ignored, the first among them
    return x, t


def verdict(label, name, err, tol):
    ok = err <= tol
    if not ok:
        failures.append(f"{label}: {name}")
    print(f"{'PASS' if ok else 'FAIL'}  {label:<10} {name:<58} rel. error {err:.1e} "
          f"(<= {tol:.0e})")


def refuses(label, name, call):
    """A step must refuse what it does not claim (the binding raises on cudaErrorNotSupported)."""
    try:
        call()
        ok = False
    except RuntimeError as error:
        ok = "does not support" in str(error)
    if not ok:
        failures.append(f"{label}: refuses {name}")
    print(f"{'PASS' if ok else 'FAIL'}  {label:<10} refuses {name}")


def check_step(label, kernel, claims):
    import torch
    import torch.nn.functional as F

    from kernels.measure.correctness import relative_error
    from kernels.ops.schema import REDUCTIONS, SAVE_GRAD, SAVE_LSE, SAVE_NOTHING

    op = kernel.cross_entropy
    worst = {}  # (check name) -> the largest error over the shapes

    def note(name, got, ref):
        worst[name] = max(worst.get(name, 0.0), relative_error(got, ref))

    smoothings = (0.0, 0.1) if "smoothing" in claims else (0.0,)
    for seed, (rows, classes) in enumerate(CHECK_SHAPES):
        for ignored in (False, True):
            x, t = inputs(rows, classes, torch.float32, seed, ignored)
            xd = x.double()
            for eps in smoothings:
                for reduction, code in REDUCTIONS.items():
                    ref = F.cross_entropy(xd, t, reduction=reduction, label_smoothing=eps)
                    got = op(x, t, -100, code, eps, SAVE_NOTHING, None)[0]
                    note(f"loss, {reduction}, eps {eps}, ignored rows {ignored}", got, ref)
                if "lse" in claims:
                    loss, lse, _ = op(x, t, -100, REDUCTIONS["none"], eps, SAVE_LSE, None)
                    note("lse (saved by the forward)", lse, torch.logsumexp(xd, dim=1))
                    go = torch.rand(rows, device="cuda")
                    xr = xd.clone().requires_grad_()
                    (F.cross_entropy(xr, t, reduction="none", label_smoothing=eps) * go).sum(
                        ).backward()
                    got = kernel.cross_entropy_backward(go, x, t, lse, -100, eps)
                    note(f"backward op from lse, eps {eps}", got, xr.grad)
                if "fused" in claims:
                    for reduction in ("mean", "sum"):
                        xr = xd.clone().requires_grad_()
                        F.cross_entropy(xr, t, reduction=reduction, label_smoothing=eps).backward()
                        _, grad, _ = op(x, t, -100, REDUCTIONS[reduction], eps, SAVE_GRAD, None)
                        note(f"fused gradient, {reduction}, eps {eps}", grad, xr.grad)
                        kernel.cross_entropy_scale_grad(grad, torch.tensor(2.0, device="cuda"),
                                                        None)
                        note(f"fused gradient x grad_output 2 (scale_grad), {reduction}", grad,
                             2 * xr.grad)
    for name, err in worst.items():
        verdict(label, f"fp32 {name}", err, TOLERANCE["float32"])

    if "dtypes" in claims:
        for dtype in (torch.bfloat16, torch.float16, torch.float64):
            tol, worst = TOLERANCE[str(dtype).split(".")[1]], {}
            for seed, (rows, classes) in enumerate(CHECK_SHAPES):
                x, t = inputs(rows, classes, dtype, 100 + seed, ignored=True)
                xd = x.double()
                for reduction, code in REDUCTIONS.items():
                    ref = F.cross_entropy(xd, t, reduction=reduction, label_smoothing=0.1)
                    got = op(x, t, -100, code, 0.1, SAVE_NOTHING, None)[0]
                    if ref.abs().max() > torch.finfo(dtype).max:  # a sum past fp16's 65504
                        ok = bool(torch.isinf(got).all())  # inf, as PyTorch's own fp16 sum
                        verdict(label, f"{dtype} loss, {reduction} overflows to inf",
                                0.0 if ok else float("inf"), tol)
                        continue
                    note(f"loss, {reduction}, eps 0.1", got, ref)
                xr = xd.clone().requires_grad_()
                F.cross_entropy(xr, t).backward()
                note("fused gradient, mean", op(x, t, -100, 1, 0.0, SAVE_GRAD, None)[1], xr.grad)
            for name, err in worst.items():
                verdict(label, f"{dtype} {name}", err, tol)
        return
    x, t = inputs(67, 4097, torch.float32, 0)
    if "smoothing" not in claims:
        refuses(label, "label_smoothing 0.1", lambda: op(x, t, -100, 1, 0.1, SAVE_NOTHING, None))
    if "lse" not in claims:
        refuses(label, "saving the lse", lambda: op(x, t, -100, 0, 0.0, SAVE_LSE, None))
    if "fused" not in claims:
        refuses(label, "the fused gradient", lambda: op(x, t, -100, 1, 0.0, SAVE_GRAD, None))
    refuses(label, "bf16 logits", lambda: op(x.bfloat16(), t, -100, 1, 0.0, SAVE_NOTHING, None))


def forward_op(kernel):
    """The forward op alone, mean, no target check: what the kernels cost."""
    return lambda x, t: kernel.cross_entropy(x, t, -100, 1, 0.0, 0, None)[0]


def ladder(title, measured, changes):
    """One table: each provider's time, its speedup over eager and its time over version 3's."""
    eager, current = measured["eager"], measured.get(CURRENT)
    print(f"\n{title}\n{'step':<11} {'the one change':<60} {'ms':>8} {'x eager':>8} "
          f"{'t / v3':>7}")
    for name, ms in measured.items():
        over = f"{ms / current:7.3f}" if current else "      -"
        print(f"{name:<11} {changes.get(name, ''):<60} {ms:8.4f} {eager / ms:8.2f} {over}")


def within(title, measured):
    ratio = measured[LAST] / measured[CURRENT]
    ok = ratio <= 1.03
    if not ok:
        failures.append(f"timing: {title}")
    print(f"{'PASS' if ok else 'MISS'}  last step within 3% of v3, {title}: "
          f"{ratio:.3f}x v3's time")


def timings(built):
    import torch
    import torch.nn.functional as F

    from kernels import bench

    changes = {label: change for label, _, change, _ in STEPS}
    for classes in TIME_CLASSES:
        shape = ((1 << 26) // classes, classes)
        providers = {"eager": F.cross_entropy}
        providers.update({label: forward_op(k) for label, k in built.items()})
        rows = bench.median_of_runs(bench.bench_loss_runs(providers, "cross_entropy", shape,
                                                          runs=3, reps=30))
        measured = {m.provider: m.ms for m in rows}
        ladder(f"forward, {shape[0]} x {classes} fp32 (median of 3 runs)", measured, changes)
        within(f"forward {shape[0]} x {classes} fp32", measured)

    shape = ((1 << 26) // 4096, 4096)
    providers = {"eager": F.cross_entropy, LAST: forward_op(built[LAST]),
                 CURRENT: forward_op(built[CURRENT])}
    rows = bench.median_of_runs(bench.bench_loss_runs(providers, "cross_entropy", shape, runs=3,
                                                      dtype=torch.bfloat16, reps=30))
    measured = {m.provider: m.ms for m in rows}
    ladder(f"forward, {shape[0]} x 4096 bf16 (median of 3 runs)", measured, changes)
    within("forward 16384 x 4096 bf16", measured)

    rows, classes = 32768, 4096
    gen = torch.Generator(device="cuda").manual_seed(3)
    arg_sets = []
    for _ in range(2):  # two copies of 512 MiB: the L2 never holds the next call's logits
        x = torch.randn(rows, classes, generator=gen, device="cuda").requires_grad_()
        arg_sets.append((x, torch.randint(0, classes, (rows,), generator=gen, device="cuda")))
    per_row = torch.full((rows,), 1.0 / rows, device="cuda")  # the mean's grad_output, per row
    one = torch.tensor(1.0, device="cuda")

    def eager(x, t):
        with torch.enable_grad():
            return torch.autograd.grad(F.cross_entropy(x, t), x)

    def from_lse(kernel):  # forward saving the lse, then the backward op (grad_output 1 / rows)
        def step(x, t):
            _, lse, _ = kernel.cross_entropy(x, t, -100, 1, 0.0, 1, None)
            return kernel.cross_entropy_backward(per_row, x, t, lse, -100, 0.0)
        return step

    def fused(kernel):  # forward writing the gradient, then scale_grad (returns at once: 1)
        def step(x, t):
            _, grad, _ = kernel.cross_entropy(x, t, -100, 1, 0.0, 2, None)
            kernel.cross_entropy_scale_grad(grad, one, None)
            return grad
        return step

    fns = {"eager": eager, "v8": from_lse(built["v8"])}
    fns.update({label: fused(built[label]) for label in ("v9", "v10", "v11", CURRENT)})
    with torch.no_grad():  # the ops' own outputs, no autograd graph; eager turns it on
        turns = bench.in_turns(fns, arg_sets, turns=3, reps=30)
    measured = {name: statistics.median(turns[name]) for name in fns}
    ladder(f"forward + backward, {rows} x {classes} fp32 (median of 3 turns)", measured, changes)
    within(f"forward+backward {rows} x {classes} fp32", measured)


def main():
    args = parse_args()
    from kernels.build.toolchain import require_gpus

    require_gpus(1, SCRIPT)
    import torch

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    built = build_all()
    for label, kernel in built.items():
        check_step(label, kernel, next(c for name, _, _, c in STEPS if name == label))
    if not args.skip_timing:
        timings(built)
    print(f"\n{len(failures)} failed: {failures}" if failures else "\nall PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
