"""Measure the chapter 7 targets (issue 16) in one run; print PASS/MISS and save the rows.

    python bench/llm_cross_entropy_targets.py        # on the GPU machine (Hopper for v4)

Side by side on the same inputs, in one process:
1. cross-entropy forward+backward (``loss.backward()``) at 8192 x 128256 bf16 and 4096 x 131072
   fp32: eager, ``torch.compile``, Liger-Kernel (when installed), chapter 5's v3 and chapter 7's
   v4; the bound is reading the logits and writing the gradient once at the measured copy
   bandwidth;
2. the forward alone, bf16, at 32768 x 16384, 16384 x 65536 and 8192 x 131072 (GB/s of logits
   and targets read);
3. the language-model head, linear + cross-entropy forward+backward, at T=8192, H=4096,
   V=128256 and T=16384, H=2048, V=151936 bf16: eager, ``torch.compile``, matmul + v4, the
   fused linear cross-entropies of other projects that are installed
   (``llm_head.other_fused_heads``) and ``kernels.ops.llm_head.linear_cross_entropy``; time and
   the peak memory beyond the inputs, the weight and their gradients. The target's ratio,
   course / compile, is the median of fifteen turns that time the two steps one after the
   other (one measurement each moved it by several percent from run to run, and the median of
   five by one to two percent, about the head's margin: bench/PERFLOG.md).
Writes book/results/llm_cross_entropy.csv (time, GB/s) and book/results/llm_head.csv (time,
memory).
"""
import argparse
import functools
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

import torch
import torch.nn.functional as F

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import bench, load, results
from kernels.measure.bench import Measurement
from kernels.ops.cross_entropy import cross_entropy
from kernels.ops.llm_head import (LLM_CE_FILE, head_inputs, linear_cross_entropy, loss_only,
                                  measure_step, other_fused_heads)

CHAPTER = "llm_cross_entropy"
V3 = "ch5_cross_entropy/v3_fused_rows.cu"

try:  # Liger-Kernel: optional, compared when present
    from liger_kernel.transformers.functional import liger_cross_entropy
except ImportError:
    liger_cross_entropy = None


def ce_providers(kernels):
    compiled = torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)
    providers = {"eager": F.cross_entropy, "compile": compiled}
    if liger_cross_entropy is not None:
        providers["liger"] = lambda x, t: loss_only(liger_cross_entropy(x, t))
    for name, kernel in kernels.items():
        providers[name] = functools.partial(cross_entropy, kernel=kernel)
    return providers


def time_ce(providers, shape, dtype, backward, reps=30):
    rows, classes = shape
    element = torch.tensor([], dtype=dtype).element_size()
    nbytes = rows * classes * element * (2 if backward else 1) + rows * 8
    gen = torch.Generator(device="cuda").manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    copies = bench.rotation_count(nbytes, props.L2_cache_size, torch.cuda.mem_get_info()[0] // 3,
                                  limit=4)
    arg_sets = [(torch.randn(shape, generator=gen, device="cuda", dtype=dtype)
                 .requires_grad_(backward),
                 torch.randint(0, classes, (rows,), generator=gen, device="cuda"))
                for _ in range(copies)]
    label = f"cross_entropy_{'fwd_bwd' if backward else 'fwd'}_{str(dtype)[6:]}"
    out = []
    for name, fn in providers.items():
        fn = bench.training_step(fn) if backward else torch.no_grad()(fn)
        out.append(Measurement(label, name, tuple(shape), nbytes,
                               bench.time_ms(fn, arg_sets, reps=reps)))
    del arg_sets
    torch.cuda.empty_cache()
    return out


# --- the LM head ------------------------------------------------------------------------------

COURSE_HEAD = "fused linear + CE (course)"
HEAD_TURNS = 15  # bench/PERFLOG.md, 2026-11-27: medians of five turns 0.989-1.011 in one run


def head_ratio_in_turns(providers: dict, inputs, turns: int = HEAD_TURNS) -> float:
    """The course's step time / torch.compile's: the median over ``turns`` of the two steps
    timed one after the other (``bench.in_turns``), so a drift of the clock falls on both."""
    steps = {name: bench.training_step(providers[name]) for name in (COURSE_HEAD, "compile")}
    ms = bench.in_turns(steps, [inputs], turns=turns, reps=8)
    return statistics.median(c / k for c, k in zip(ms[COURSE_HEAD], ms["compile"]))


def head_providers(v4):
    def eager(h, w, t):
        return F.cross_entropy(h @ w.t(), t)

    def matmul_v4(h, w, t):
        return cross_entropy(h @ w.t(), t, kernel=v4)

    return {"eager": eager, "compile": torch.compile(eager, dynamic=False),
            "matmul + v4": matmul_v4, **other_fused_heads(),
            COURSE_HEAD: linear_cross_entropy}


def main(with_head=True):
    require_gpus(1, "bench/llm_cross_entropy_targets.py")
    gpu = torch.cuda.get_device_name()
    v3, v4 = load(V3), load(LLM_CE_FILE)
    copy = bench.copy_bandwidth()
    peak = bench.read_bandwidth()
    print(f"{gpu}: read {peak:.0f} GB/s, copy {copy:.0f} GB/s (4 GiB); Liger "
          f"{'present' if liger_cross_entropy else 'not installed: skipped'}")
    kernels = {"v3 (chapter 5)": v3, "v4 cluster (chapter 7)": v4}

    measured = []
    for shape, dtype in (((8192, 128256), torch.bfloat16), ((4096, 131072), torch.float32)):
        measured += time_ce(ce_providers(kernels), shape, dtype, backward=True)
    for shape in ((32768, 16384), (16384, 65536), (8192, 131072)):
        measured += time_ce(ce_providers(kernels), shape, torch.bfloat16, backward=False)

    print(f"\n{'work':<26} {'shape':<13} {'provider':<26} {'ms':>8} {'GB/s':>7} {'%copy':>6}")
    for m in measured:
        print(f"{m.loss:<26} {results.shape_text(m.shape):<13} {m.provider:<26} {m.ms:8.4f} "
              f"{m.gbps:7.0f} {100 * m.gbps / copy:5.1f}%")
    results.save(results.rows_from(measured, gpu, CHAPTER, peak), CHAPTER)

    head_rows, head, in_turns = [], {}, {}
    for tokens, hidden, vocab in ((8192, 4096, 128256), (16384, 2048, 151936))[:2 * with_head]:
        print(f"\nLM head T={tokens} H={hidden} V={vocab} bf16, forward+backward")
        providers = head_providers(v4)
        for name, fn in providers.items():
            try:
                ms, extra = measure_step(fn, *head_inputs(tokens, hidden, vocab))
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                print(f"  {name:<28} out of memory")
                continue
            head[(tokens, name)] = (ms, extra)
            head_rows.append({"gpu": gpu, "tokens": tokens, "hidden": hidden, "vocab": vocab,
                              "provider": name, "ms": round(ms, 3),
                              "extra_gib": round(extra, 3)})
            print(f"  {name:<28} {ms:8.2f} ms  {extra:6.2f} GiB beyond inputs, weight, grads")
        if (tokens, COURSE_HEAD) in head and (tokens, "compile") in head:
            in_turns[tokens] = head_ratio_in_turns(providers, head_inputs(tokens, hidden, vocab))
            print(f"  course / compile, median of {HEAD_TURNS} turns: {in_turns[tokens]:.3f}")
    if with_head:
        results.save_table(head_rows, "llm_head")

    def get(label, shape, provider):
        return next(m for m in measured
                    if m.loss == label and m.shape == shape and m.provider == provider)

    ours = "v4 cluster (chapter 7)"
    targets = [
        ("CE fwd+bwd 8192x128256 bf16 <= 1.59 ms",
         get("cross_entropy_fwd_bwd_bfloat16", (8192, 128256), ours).ms, 1.59, "max"),
        ("CE fwd+bwd 4096x131072 fp32 <= 1.62 ms",
         get("cross_entropy_fwd_bwd_float32", (4096, 131072), ours).ms, 1.62, "max"),
    ]
    for shape in ((32768, 16384), (16384, 65536), (8192, 131072)):
        targets.append((f"CE fwd {shape[0]}x{shape[1]} bf16 >= 3000 GB/s",
                        get("cross_entropy_fwd_bfloat16", shape, ours).gbps, 3000, "min"))
    for tokens in (8192, 16384):
        course = head.get((tokens, COURSE_HEAD))
        if tokens in in_turns:
            targets.append((f"LM head T={tokens}: course / compile <= 1.00 (in turns)",
                            in_turns[tokens], 1.0, "max"))
        if course:
            targets.append((f"LM head T={tokens}: extra memory <= 0.25 GiB", course[1], 0.25,
                            "max"))
    print()
    missed = 0
    for label, value, goal, kind in targets:
        ok = value <= goal if kind == "max" else value >= goal
        missed += not ok
        print(f"{'PASS' if ok else 'MISS'}  {label:<52} measured {value:.3f}")
    return 1 if missed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-head", action="store_true", help="skip the language-model head")
    sys.exit(main(with_head=not parser.parse_args().no_head))
