"""Measure the chapter 5 targets (issue 5) in one run and save the rows (not a timed test).

    python bench/cross_entropy_targets.py        # on the GPU machine

Times, side by side on the same inputs: eager ``F.cross_entropy``, ``torch.compile`` of it
(dynamic=False), Liger-Kernel's fused cross-entropy when it is installed, and the chapter's
versions, for the forward at 32768 x 4096 fp32 and 4096 x 131072 fp32/bf16, for rows of 32 to
256 fp32 classes against torch.compile (median of three runs), and for forward+backward at
32768 x 4096 fp32. Prints each target with PASS/MISS, then what ``check_targets=True`` (a
debugging switch that waits for the GPU on each call) costs, with no target, and writes
book/results/cross_entropy_targets.csv (columns of kernels.measure.results.COLUMNS).

Bandwidth counts the bytes that must move: logits + int64 targets for the forward, plus the
gradient written for forward+backward.
"""
import argparse
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

import torch
import torch.nn.functional as F

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import bench, load, results
from kernels.measure.bench import Measurement
from kernels.measure.correctness import relative_error
from kernels.ops.cross_entropy import cross_entropy
from kernels.losses import get_loss

CHAPTER = "cross_entropy_targets"
V1, V2, V3 = ("ch5_cross_entropy/v1_two_pass_row.cu", "ch5_cross_entropy/v2_online_softmax.cu",
              "ch5_cross_entropy/v3_fused_rows.cu")
CHECKED = "v3 cross_entropy(check_targets=True)"
FEW_CLASSES = ((1048576, 32), (524288, 64), (262144, 128), (131072, 256))  # 128 MiB of fp32 each
UNCHECKED = "v3 cross_entropy() [default, no host wait]"
FB_CHECKED, FB_DEFAULT = "v3 fused, check_targets=True", "v3 fused [default]"

try:  # Liger-Kernel: optional, compared when present
    from liger_kernel.transformers.functional import liger_cross_entropy
except ImportError:
    liger_cross_entropy = None


def raw_op(kernel):
    """The forward op alone (mean, no target check): what the kernels cost."""
    return lambda x, t: kernel.cross_entropy(x, t, -100, 1, 0.0, 0)[0]


def forward_providers(dtype, versions):
    compiled = torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)
    providers = {"eager": F.cross_entropy, "compile": compiled}
    if liger_cross_entropy is not None:
        providers["liger"] = lambda x, t: liger_cross_entropy(x, t)
    for name, kernel in versions.items():
        providers[name] = raw_op(kernel)
    providers[UNCHECKED] = functools.partial(cross_entropy, kernel=versions["v3"])
    providers[CHECKED] = functools.partial(cross_entropy, kernel=versions["v3"],
                                           check_targets=True)
    return providers


def bench_forward_backward(providers, shape, dtype=torch.float32, reps=50):
    rows, classes = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    element = torch.tensor([], dtype=dtype).element_size()
    nbytes = 2 * rows * classes * element + rows * 8  # read logits, write grad, read targets
    props = torch.cuda.get_device_properties(0)
    copies = bench.rotation_count(nbytes, props.L2_cache_size, torch.cuda.mem_get_info()[0] // 3)
    arg_sets = []
    for _ in range(copies):
        x = torch.randn(shape, generator=gen, device="cuda", dtype=dtype).requires_grad_()
        arg_sets.append((x, torch.randint(0, classes, (rows,), generator=gen, device="cuda")))
    out = [Measurement("cross_entropy_fwd_bwd", name, tuple(shape), nbytes,
                       bench.time_ms(fn, arg_sets, reps=reps)) for name, fn in providers.items()]
    del arg_sets
    torch.cuda.empty_cache()
    return out


def accuracy(kernel):
    """Relative errors against float64 at the target shapes: loss and gradient."""
    lines = []
    for shape, dtype in (((32768, 4096), torch.float32), ((4096, 131072), torch.float32),
                         ((4096, 131072), torch.bfloat16)):
        gen = torch.Generator(device="cuda").manual_seed(1)
        x, t = get_loss("cross_entropy").make_inputs(shape, gen, "cuda", dtype)
        ref = F.cross_entropy(x.double(), t)
        ours = relative_error(cross_entropy(x, t, kernel=kernel), ref)
        torch_err = relative_error(F.cross_entropy(x, t), ref)
        lines.append((f"loss {shape} {dtype}", ours, torch_err))
        if dtype == torch.float32 and shape[1] == 4096:
            xg = x.clone().requires_grad_()
            cross_entropy(xg, t, kernel=kernel).backward()
            xr = x.double().requires_grad_()
            F.cross_entropy(xr, t).backward()
            xe = x.clone().requires_grad_()
            F.cross_entropy(xe, t).backward()
            lines.append((f"gradient {shape} {dtype}", relative_error(xg.grad, xr.grad),
                          relative_error(xe.grad, xr.grad)))
            del xg, xr, xe
        del x, t, ref
        torch.cuda.empty_cache()
    return lines


def get_row(rows, provider):
    return next(m for m in rows if m.provider == provider)


def checked_costs(forwards: dict, fwd_bwd) -> list[str]:
    """What ``check_targets=True`` costs against the default, per call, for each forward
    (``{label: measurements}``) and for forward+backward: no target, as it is a debugging switch
    that waits for the GPU to check the targets on the host (chapter 5 times it too)."""
    pairs = [(label, get_row(rows, CHECKED), get_row(rows, UNCHECKED))
             for label, rows in forwards.items()]
    pairs.append(("fwd+bwd 32768x4096 fp32", get_row(fwd_bwd, FB_CHECKED),
                  get_row(fwd_bwd, FB_DEFAULT)))
    return [f"cost   {label}, check_targets=True (no target): {checked.ms * 1e3:.0f} us a call "
            f"against {default.ms * 1e3:.0f} (+{(checked.ms - default.ms) * 1e3:.0f}), "
            f"{checked.gbps:.0f} GB/s" for label, checked, default in pairs]


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    require_gpus(1, "bench/cross_entropy_targets.py")
    gpu = torch.cuda.get_device_name()
    versions = {"v1": load(V1), "v2": load(V2), "v3": load(V3)}
    for name, k in versions.items():
        print(f"{name}: {k}")
    peak = bench.read_bandwidth()
    print(f"{gpu}: read bandwidth (torch.sum, 4 GiB) {peak:.0f} GB/s; "
          f"Liger {'present' if liger_cross_entropy else 'not installed: skipped'}")
    measured = []

    fwd = bench.bench_loss(forward_providers(torch.float32, versions), "cross_entropy",
                           (32768, 4096), reps=100)
    measured += fwd
    big32 = bench.bench_loss(forward_providers(torch.float32, versions), "cross_entropy",
                             (4096, 131072), reps=30)
    measured += big32
    bf16_versions = {"v3": versions["v3"]}
    big16 = bench.bench_loss(forward_providers(torch.bfloat16, bf16_versions), "cross_entropy",
                             (4096, 131072), dtype=torch.bfloat16, reps=30)
    for m in big16:
        m.loss = "cross_entropy_bf16"
    measured += big16

    v3 = versions["v3"]
    compiled = torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)
    few = {shape: bench.bench_loss_median({"compile": compiled, "v3": raw_op(v3)}, "cross_entropy",
                                          shape) for shape in FEW_CLASSES}
    measured += [m for rows in few.values() for m in rows]
    fb_providers = {
        "eager": bench.training_step(F.cross_entropy),
        "compile": bench.training_step(compiled),
        FB_CHECKED: bench.training_step(functools.partial(
            cross_entropy, kernel=v3, check_targets=True)),
        FB_DEFAULT: bench.training_step(functools.partial(cross_entropy, kernel=v3)),
        "v3 fused, grad_output 2 (scaling pass)": bench.training_step(
            functools.partial(cross_entropy, kernel=v3), torch.tensor(2.0, device="cuda")),
        "v3 lse + backward kernel": bench.training_step(functools.partial(
            cross_entropy, kernel=v3, fused_backward=False)),
    }
    if liger_cross_entropy is not None:
        fb_providers["liger"] = bench.training_step(lambda x, t: liger_cross_entropy(x, t))
    fb = bench_forward_backward(fb_providers, (32768, 4096))
    measured += fb
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(32768, 4096, generator=gen, device="cuda").requires_grad_()
    t = torch.randint(0, 4096, (32768,), generator=gen, device="cuda")
    queued = {name: bench.queued_ms(fb_providers[name], (x, t))
              for name in ("eager", "compile", FB_DEFAULT, FB_CHECKED)}
    del x, t

    print(f"\n{'loss':<22} {'shape':<12} {'provider':<48} {'ms':>8} {'GB/s':>7} {'%peak':>6}")
    for m in measured:
        print(f"{m.loss:<22} {results.shape_text(m.shape):<12} {m.provider:<48} {m.ms:8.4f} "
              f"{m.gbps:7.0f} {100 * m.gbps / peak:5.1f}%")

    targets = []
    # Two modes for the forward: the op alone (what the kernels cost) and the wrapper as called
    # (nothing waits; a bad target stops the kernel). check_targets=True is a debugging switch
    # that waits for the GPU on every call: its cost is printed below, with no target.
    for mode, name in (("op alone", "v3"), ("default", UNCHECKED)):
        targets += [
            (f"fwd 32768x4096 fp32 GB/s >= 2800 [{mode}]", get_row(fwd, name).gbps, 2800),
            (f"fwd 32768x4096 fp32 vs compile >= 1.45x [{mode}]",
             get_row(fwd, "compile").ms / get_row(fwd, name).ms, 1.45),
            (f"fwd 32768x4096 fp32 vs eager >= 2.4x [{mode}]",
             get_row(fwd, "eager").ms / get_row(fwd, name).ms, 2.4),
            (f"fwd 4096x131072 fp32 GB/s >= 2800 [{mode}]", get_row(big32, name).gbps, 2800),
            (f"fwd 4096x131072 bf16 GB/s >= 2600 [{mode}]", get_row(big16, name).gbps, 2600),
        ]
    for (rows, classes), (comp, ours) in few.items():
        targets.append((f"fwd {rows}x{classes} fp32 vs compile >= 1.00x [op alone, median of 3]",
                        comp.ms / ours.ms, 1.0))
    targets += [
        ("fwd+bwd 32768x4096 fp32 vs eager >= 2.5x [default]",
         get_row(fb, "eager").ms / get_row(fb, FB_DEFAULT).ms, 2.5),
        ("fwd+bwd 32768x4096 fp32 vs eager >= 2.5x [GPU time, host queued ahead, default]",
         queued["eager"] / queued[FB_DEFAULT], 2.5),
    ]
    print("\nfwd+bwd 32768x4096 fp32, GPU time per step with the host queued ahead (ms): "
          + ", ".join(f"{name} {ms:.4f}" for name, ms in queued.items()))
    print()
    for label, value, goal in targets:
        print(f"{'PASS' if value >= goal else 'MISS'}  {label:<66} measured {value:.3f}")
    for line in checked_costs({"fwd 32768x4096 fp32": fwd, "fwd 4096x131072 fp32": big32,
                               "fwd 4096x131072 bf16": big16}, fb):
        print(line)
    for label, ours, torch_err in accuracy(v3):
        goal = 1e-5 if "bfloat16" not in label else 1e-2
        print(f"{'PASS' if ours <= goal else 'MISS'}  rel. error vs float64, {label:<36} "
              f"{ours:.2e} (PyTorch's own: {torch_err:.2e})")

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(32768, 4096, generator=gen, device="cuda")
    t = torch.randint(0, 4096, (32768,), generator=gen, device="cuda")
    print("\nwhere the time goes, 32768 x 4096 fp32 forward (profiler, kernel durations):")
    bench.kernel_times("v3", raw_op(v3), (x, t))
    xg = x.clone().requires_grad_()
    bench.kernel_times("v3 fwd+bwd",
                       bench.training_step(functools.partial(cross_entropy, kernel=v3)), (xg, t))
    del x, t, xg

    path = results.save(results.rows_from(measured, gpu, "ch5", peak), CHAPTER)
    print(f"\nsaved {len(measured)} rows to {path}")


if __name__ == "__main__":
    sys.exit(main())
