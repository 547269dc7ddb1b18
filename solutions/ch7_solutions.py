# ---
# jupyter:
#   jupytext:
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% tags=["remove-cell"]
# Setup: make the course's toolkit importable (in the repository, or on Colab after cloning it).
import os, subprocess, sys
REPOSITORY = "https://github.com/loss-kernels/loss-kernels"
COLAB = "google.colab" in sys.modules
if COLAB and not os.path.isdir("/content/loss-kernels"):
    subprocess.run(["git", "clone", "--depth=1", REPOSITORY, "/content/loss-kernels"], check=True)
ROOT = next((p for p in (os.getcwd(), os.path.dirname(os.getcwd()), "/content/loss-kernels")
             if os.path.isfile(os.path.join(p, "kernels", "__init__.py"))), None)
if ROOT is None:  # a notebook opened outside the repository, or copied out of it
    raise FileNotFoundError("the course's repository is not here: clone " + REPOSITORY
                            + " and open this notebook from the clone's chapters/ or"
                            " solutions/ folder")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if COLAB:  # a GPU runtime, ninja, an nvcc that PyTorch accepts; where your files are
    from kernels.course.colab import prepare_colab
    prepare_colab(ROOT)

# %% [markdown]
# # Solutions: chapter 7
#
# The answers to the exercises of {doc}`../chapters/07_llm_cross_entropy`. Each answer, its
# explanation and its code, is folded: open it once you have tried the exercise.

# %%
# ROOT (the repository's folder) and the imports of os come from the
# notebook's first cell, which the book hides.
import torch
from IPython.display import Markdown

from kernels import Chapter, bench, load
from kernels.cross_entropy import cross_entropy
from kernels.exercises.ch7_checks import check_split_rows
from kernels.notebook import kernels_launched, show_source

SOLUTIONS = os.path.join(ROOT, "solutions", "kernels")
ch = Chapter("ch7")


# %% [markdown]
# ```{solution-start} ch7-which-path
# :class: dropdown
# ```
#
# `launch_cluster` takes a row when it has more than 4096 classes, its length is a multiple of
# 16 bytes, and it splits into at most 16 slices of at most 112 KB: `n = min(16, ceil(bytes /
# 32 KB))` blocks, each with `ceil(vectors / n)` 16-byte vectors of shared memory. Without a
# gradient it keeps only rows of one slice. The rule, row by row:
#
# | row | bytes | training step | forward alone |
# | --- | ---: | --- | --- |
# | Gemma, 256000 bf16 | 512000 | cluster of 16, 32000 B each | v3 streaming |
# | Gemma, 256000 fp32 | 1024000 | cluster of 16, 64000 B each | v3 streaming |
# | GPT-2, 50257 bf16 | 100514 | v3 streaming: not a multiple of 16 bytes | v3 streaming |
# | Llama 2, 32000 fp32 | 128000 | cluster of 4, 32000 B each | v3 streaming |
# | 3000 bf16 | 6000 | v3 registers (at most 4096 classes) | v3 registers |
#
# The rule is the launcher's:

# %%
show_source("ch7_llm_cross_entropy/v4_cluster_rows.cu", "static bool launch_cluster",
            "template <class T> static void launch_rows", fold=False)

# %% [markdown]
# What ran is visible in the profiler: the names of the kernels each call launched.

# %% tags=["gpu", "nbval-ignore-output"]
v4 = load("ch7_llm_cross_entropy/v4_cluster_rows.cu")


def kernels_run(classes, dtype, backward, rows=4):
    x = torch.randn(rows, classes, device="cuda", dtype=dtype)
    x.requires_grad_(backward)
    t = torch.randint(0, classes, (rows,), device="cuda")

    def call():
        if backward:
            cross_entropy(x, t, kernel=v4).backward()
        else:
            with torch.no_grad():
                cross_entropy(x, t, kernel=v4)
    return kernels_launched(call, r"row_\w+")


for label, classes, dtype in (("Gemma bf16", 256000, torch.bfloat16),
                              ("Gemma fp32", 256000, torch.float32),
                              ("GPT-2 bf16", 50257, torch.bfloat16),
                              ("Llama 2 fp32", 32000, torch.float32),
                              ("3000 bf16", 3000, torch.bfloat16)):
    print(f"{label:<13} step: {', '.join(kernels_run(classes, dtype, True)):<16} "
          f"forward: {', '.join(kernels_run(classes, dtype, False))}")

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch7-chunk-model
# :class: dropdown
# ```
#
# Three products of 2 T V H flops each; per chunk of c rows, the weight's gradient read and
# written (4 V H bytes in bf16) and the chunk's logits written by the product, read and written
# by the loss, read by the two gradient products (about 5 c V x 2 bytes, the same total for
# every chunk size). Only the weight-gradient traffic grows with the number of chunks T / c:

# %% tags=["gpu", "nbval-ignore-output"]
import torch

from kernels import bench

T, H, V = 8192, 4096, 128256
# Dense bf16 tensor-core peaks from NVIDIA's datasheets, TFLOP/s without sparsity:
# NOT measured. First match wins ("H100" alone is the SXM part).
DATASHEET_BF16_TFLOPS = [("H100 PCIe", 756), ("H100 NVL", 835), ("H100", 989),
                         ("H200", 989), ("A100", 312), ("L40S", 362), ("L4", 121)]
gpu = torch.cuda.get_device_name()
datasheet = next((f for key, f in DATASHEET_BF16_TFLOPS if key in gpu), None)
hidden = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
weight = torch.randn(V, H, device="cuda", dtype=torch.bfloat16)
matmul_ms = bench.time_ms(lambda a, w: a @ w.T, [(hidden, weight)], reps=10)
TFLOPS = 2 * T * V * H / matmul_ms * 1e3  # flop/s of the head's product, measured
del hidden, weight
torch.cuda.empty_cache()
BANDWIDTH = bench.copy_bandwidth() * 1e9  # bytes/s, read plus written, measured
rate = (f", {100 * TFLOPS / 1e12 / datasheet:.0f}% of the datasheet's {datasheet}"
        if datasheet else " (no datasheet rate listed for this GPU)")
print(f"{gpu}: the logits' product (T x H by H x V) {TFLOPS / 1e12:.0f} TFLOP/s "
      f"measured{rate}; copy {BANDWIDTH / 1e9:.0f} GB/s")
products_ms = 3 * 2 * T * V * H / TFLOPS * 1e3
logits_ms = 5 * T * V * 2 / BANDWIDTH * 1e3
print(f"products alone {products_ms:.1f} ms; the logits' traffic {logits_ms:.1f} ms "
      f"({logits_ms / products_ms:.0%} of the products)")


def grad_w_ms(chunk):  # the weight's gradient, read and written once per chunk
    return T / chunk * 4 * V * H / BANDWIDTH * 1e3


within = None
for chunk in (512, 896, 1024, 2048, 4096, 8192):
    total = products_ms + logits_ms + grad_w_ms(chunk)
    over = total / products_ms - 1
    print(f"chunk {chunk:>5}: weight-gradient traffic {grad_w_ms(chunk):5.1f} ms "
          f"({grad_w_ms(chunk) / products_ms:4.0%} of the products),\n"
          f"{'':13}total {total:5.1f} ms ({over:+.0%} over the products), "
          f"scratch {chunk * V * 2 / 2**30:.2f} GiB")
    if within is None and grad_w_ms(chunk) <= 0.05 * products_ms:
        within = chunk
print("weight-gradient traffic "
      + (f"within 5% of the products from chunks of {within} rows" if within
         else "above 5% of the products at every chunk"))

# %% tags=["gpu", "nbval-ignore-output"]
from kernels import results

try:  # chapter 7's chunk sweep, where it ran on this GPU
    swept = [r for r in results.read_table("ch7_chunks") if r["gpu"] == gpu]
except FileNotFoundError:
    swept = []
for row in swept:
    model = products_ms + logits_ms + grad_w_ms(row["chunk_rows"])
    print(f"chunk {row['chunk_rows']:>5}: chapter 7 measured {row['ms']:5.1f} ms, "
          f"the model {model:5.1f} ms ({row['ms'] / model - 1:+.0%})")
if not swept:
    print(f"chapter 7's chunk sweep has not run on this GPU ({gpu}): run it first")

# %% [markdown]
# The model puts 5% over the products out of reach at any chunk size: the logits' own traffic
# (the model's second line) is already more than that, whatever the chunk. That is the real
# point: in this design every byte of the logits still goes through memory (in chunks), and
# only overlapping it with the products (a second CUDA stream, or the loss fused into the
# product's epilogue) hides it. Within the model, the weight-gradient traffic alone falls below
# 5% of the products only for chunks of thousands of rows (the model's last line), about a
# gigabyte of scratch: several times chapter 7's memory budget. The model uses the rate measured
# for the head's own product, below the datasheet's peak (its first line): a product of this
# shape does not reach the peak, so the peak would make the products look shorter and every
# traffic term relatively larger. The chapter's sweep goes the same way, larger chunks mostly
# faster (its plot of time against memory), and adds what the model leaves out: the shape of
# the products (896 rows ran slower than 768). Its measured steps, set against the model's
# totals in the lines just above (`book/results/ch7_chunks.csv`), all come out faster than
# the model in this run, by a tenth to a fifth (the percentages printed there), and the
# largest chunk's step about as fast as the model's products alone: the step's products ran
# faster than the one product timed in the first line. The model is a first-order account of
# how the time grows with the number of chunks, not a prediction to the millisecond.
#
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch7-bf16-work
# :class: dropdown
# ```
#
# Per 16-byte vector, fp32 holds 4 values and bf16 holds 8, and nearly every instruction of
# the three passes is per value: the max pass (a conversion for bf16, one FMNMX), the sum pass
# (conversion, FFMA for (x - m) log2 e, MUFU.EX2, FADD), the gradient pass (conversion, FFMA,
# MUFU.EX2, FFMA, a conversion back). Counted that way, a value costs
# about the same in both dtypes, so per byte bf16 asks for about twice the instructions of
# fp32, and twice the MUFU.EX2. The MUFU unit does 16 values per cycle per SM against 128 for
# the FMA pipes, so it looks like the first to fill. Nsight Compute, for both (the last line
# divides the instructions executed, 32 lanes each, by the number of logits):

# %% tags=["gpu", "nbval-ignore-output"]
from kernels import profile

SAME_BYTES = {"bf16": (8192, 128256), "fp32": (4096, 131072)}
PROFILE = """
import torch
from kernels import load
from kernels.cross_entropy import cross_entropy
k = load("ch7_llm_cross_entropy/v4_cluster_rows.cu")
for (rows, classes), dtype in (((8192, 128256), torch.bfloat16),
                               ((4096, 131072), torch.float32)):
    x = torch.randn(rows, classes, device="cuda", dtype=dtype).requires_grad_()
    t = torch.randint(0, classes, (rows,), device="cuda")
    cross_entropy(x, t, kernel=k).backward()
torch.cuda.synchronize()
"""
from kernels.build import toolchain

counters = None
if not toolchain.builds_for_hopper():
    print("no clusters in this build, so no row_cluster kernel to profile: "
          "the book shows the H100's")
else:
    counters = profile.ncu(PROFILE, "row_cluster", profile.ISSUE, launches=2)
if counters:
    print(counters.table(list(SAME_BYTES)))
    for column, (dtype, (rows, classes)) in enumerate(SAME_BYTES.items()):
        lanes = counters.value("warp instructions (M)", column) * 1e6 * 32
        print(f"{dtype}: {lanes / (rows * classes):.1f} lane instructions per logit")

# %% [markdown]
# The count holds: per value the two dtypes cost about the same (the last lines; the per-value
# count above was low, as the shared-memory loads, the loop, the address arithmetic and the
# block reductions come on top), so per byte bf16 executes about twice the instructions of
# fp32, and keeps the MUFU unit about twice as busy. But no pipe is full: MUFU runs under half its
# peak (the MUFU line above), the FMA pipes lower, and the SM issues well under the four
# instructions per cycle it could. The extra instructions lengthen each block's computing phase
# between its copies and its stores; with 6 or 7 small blocks per SM (128 threads, about 32 KB of
# shared memory each: chapter 7's Nsight Compute table) other blocks keep copying meanwhile, and
# DRAM stays about as busy for bf16 as for fp32. With 256-thread blocks, the kernel's first form,
# the gaps showed: the bf16 step was clearly slower than with today's 128-thread blocks, and than
# the fp32 step (the kernel's header and `bench/PERFLOG.md` have the times). Fewer instructions
# per value still help bf16: the gradient pass first tested every value against the target, a
# fifth of its instructions in bf16 (`bench/PERFLOG.md`); it now writes its vectors without the
# test and stores the target's value once more afterwards, which made the bf16 step a little
# faster (`bench/PERFLOG.md` has the before and after; chapter 7's target table the current time).
# Next would be packed bf16x2 conversions, or the exponentials of the sum pass kept for the
# gradient pass.
#
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch7-split-rows
# :class: dropdown
# ```
#
# `merge` rescales both sums to the larger maximum, $s = s_a e^{m_a - m} + s_b e^{m_b - m}$,
# which is exercise 5.2's rule with a whole partial sum in place of one logit (the same
# function also merges each thread's chunks, so the check fails everywhere until it is right).
# `slices_wanted` asks CUDA's occupancy API how many `slice_stats` blocks one SM runs at once
# on this GPU (its threads, registers and shared memory decide; `resident_blocks` of
# `cuda_utils.cuh` asks once, as chapter 3's grids do), and cuts each row into enough
# slices for every SM to run that many: $n = \lceil b \cdot \text{SMs} / r \rceil$ for $b$
# blocks per SM and $r$ rows. A constant would be wrong somewhere: an H100's SM holds 2048
# threads, an RTX 4090's 1536. `slices_per_row` then caps $n$ so that a slice is at least one
# round of the block's loads and the pairs fit in the workspace. The finishing kernel also
# writes the bad-target flag, so no memset is launched
# before it.

# %%
SPLIT = os.path.join(SOLUTIONS, "ch7_split_rows.cu")
show_source(SPLIT, "struct MaxSum", "// Block b reads", fold=False)
show_source(SPLIT, "// Enough slices", "// One block: each thread", fold=False)

# %% tags=["gpu"]
assert ch.exercise(SPLIT, check_split_rows)

# %% tags=["gpu", "nbval-ignore-output"]
split = load(SPLIT)
v4 = load("ch7_llm_cross_entropy/v4_cluster_rows.cu")


def forward(kernel):
    def op(logits, target):
        return cross_entropy(logits, target, kernel=kernel, check_targets=False)
    return op


bench.speedup_target(forward(split), forward(v4), "cross_entropy", (32, 256000),
                     1.3, label="split", reference_label="v4");

# %% [markdown]
# Where does splitting stop paying? The same two kernels from 8 to 1024 rows of 256000 classes:

# %% tags=["gpu", "nbval-ignore-output"]
for rows in (8, 32, 128, 512, 1024):
    mine, theirs = bench.bench_loss({"split": forward(split), "v4": forward(v4)},
                                    "cross_entropy", (rows, 256000))
    print(f"{rows:>5} rows: split {mine.gbps:5.0f} GB/s, version 4 "
          f"{theirs.gbps:5.0f} GB/s: {theirs.ms / mine.ms:.2f}x")

# %% [markdown]
# Splitting pays while the rows are far fewer than the SMs (8 and 32 rows here): version 4's
# forward then leaves SMs idle. From about 128 rows on nearly every SM has a row, and the split's
# second launch and its pairs make it slower instead, by up to about a tenth: a launcher would
# split only few rows. Even
# split, 32 rows stay far from the read bandwidth: at full speed their 32 MB would take only a
# few kernel launches' worth of time, so a kernel's start and the second launch weigh on the
# whole (chapter 1's launch overhead).
#
# ```{solution-end}
# ```
