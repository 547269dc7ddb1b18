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
# # Chapter 4: two passes, deterministic, no host round-trip
#
# ```{admonition} Before you start
# :class: tip
#
# **You will be able to:**
#
# - write a two-pass {term}`reduction` that gives the same bits on every run and never waits
#   for the host;
# - measure the error of a float32 sum of $2^{30}$ values, and make it smaller;
# - decide from measurements whether a second launch is worth removing, and read the grid
#   `torch.compile` chose.
#
# **Assumes:** chapter 3's block reduction; the primer's {term}`occupancy`,
# {term}`bytes in flight` and {term}`launch overhead`.
#
# **Words it uses** (defined in the {doc}`../book/glossary`): {term}`SM`, {term}`PTX`,
# {term}`spill`, {term}`compute capability`, {term}`grid-stride loop`, {term}`stream`,
# {term}`roofline`.
#
# **Reading time:** about 13 minutes. **Run time:** about 3 minutes
# on a small GPU (the book's small-GPU run, {doc}`../book/status`).
# ```
#
# Chapter 3's {term}`kernels <kernel>` are fast, but their {term}`blocks <block>` still meet
# through float {term}`atomics <atomic>`: the last bits of the loss change from run to run, and a
# bug report that says "the loss differs" cannot be told apart from noise. This chapter removes
# the atomics. Pass 1 writes one partial sum per block (or per tile) to scratch memory; pass 2,
# one block, adds the partials in a fixed order and writes the mean, on the GPU. The ladder:
#
# | version | the one change | what it shows |
# | --- | --- | --- |
# | v1 | one partial per block, added in a fixed order by a second launch | the same bits on every run, on one GPU |
# | v2 | fixed tiles of consecutive elements, one partial per tile | the same bits whatever the grid, so on any GPU |
# | v3 | one launch: the last block to finish adds the partials | ahead only at the smallest size |
# | v4 | Kahan's compensated sum in every lane | for the accuracy study: the result does not move |
# | v5 | the shape of `torch.compile`'s grid, tuned for small and middle sizes | the final kernel: level with or ahead of `torch.compile` at most sizes |

# %%
# ROOT (the repository's folder) and the imports of os, subprocess, sys come from the
# notebook's first cell, which the book hides.
import math
import re

import numpy as np
import torch
from IPython.display import Markdown

import kernels
from kernels import Chapter, bench, check, load, results
from kernels.notebook import show_source

ch = Chapter("ch4")  # the chapter's id, GPU and read bandwidth, for its measurements

# %% tags=["gpu", "nbval-ignore-output"]
print(f"{ch.gpu}: read bandwidth {ch.peak:.0f} GB/s")

# %% [markdown]
# ## Version 1: one partial per block
#
# Pass 1 is chapter 3's version 6, except that each block writes its sum to its own slot of the
# *workspace*, scratch memory the binding passes every launcher. Pass 2 is one block of 1024
# {term}`threads <thread>`: thread $k$ adds partials $k, k + 1024, \dots$ in float64, then a fixed
# tree adds the threads' sums. No atomics, no memset, no divide kernel. The end of pass 1, and
# pass 2:

# %%
show_source("ch4_two_pass/v1_block_partials.cu", start="const float sum = block_sum",
            end="*out = static_cast<float>")

# %%
show_source("ch4_two_pass/v1_block_partials.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v1 = load("ch4_two_pass/v1_block_partials.cu")
v1

# %% tags=["gpu"]
check(v1.mse, "mse")
check(v1.smooth_l1, "smooth_l1")
check(v1.hinge, "hinge")

# %% [markdown]
# ## No host round-trip
#
# A two-pass reduction is easy to write with the host in the middle: launch pass 1, copy the
# partials (or the sum) to the CPU with `.item()` or `.cpu()`, finish there. Each of those waits
# for the GPU to drain, and a training step that calls the loss then cannot queue its backward
# pass behind it. PyTorch can turn every synchronising call into an error, which makes a good
# test: our op runs under it, `.item()` does not.

# %% tags=["gpu"]
pred, target = torch.randn(2, 1 << 20, device="cuda")
torch.cuda.synchronize()
torch.cuda.set_sync_debug_mode("error")
try:
    loss = v1.mse(pred, target)
    print(f"v1.mse: shape {tuple(loss.shape)}, dtype {loss.dtype}, device {loss.device}, "
          "no sync")
    try:
        loss.item()
    except RuntimeError as error:
        print(f"loss.item(): RuntimeError: {str(error).splitlines()[0]}")
finally:
    torch.cuda.set_sync_debug_mode("default")

# %% [markdown]
# ## Version 2: fixed tiles, the same bits for any launch
#
# Version 1 gives the same bits on every run, on *this* GPU. Its {term}`grid` is the number of blocks
# that fit on the GPU at once, so the elements each thread adds, and therefore the roundings,
# depend on the {term}`SM` count. A T4, an A100 and an H100 can give different last bits for the same
# input. Version 2 cuts the input into tiles of consecutive elements whose size depends on $n$
# alone (`tile_size`): 512 elements, doubled until there are at most 8192 tiles, up to 8192
# elements a tile. A {term}`warp` sums a whole tile in a fixed order into one partial; the grid
# only decides which warp takes which tile. The figure draws a small input.
#
# ```{figure} ../book/images/ch4_fixed_order.svg
# :alt: Twelve tiles of 512 elements, assigned to warps by two different grids: with one block of 8 warps, warps 0 to 3 take two tiles each; with two blocks, each tile has its own warp. Both give the same twelve partials p0 to p11, which pass 2 adds in the same order in float64.
# :width: 100%
#
# Why version 2's result does not depend on the grid: the tiles (their size a function of n, `tile_size` in the kernel) and their partials are the same for any launch; only the warp that computes each one changes.
# ```
#
# The tile loop: warp $w$ of the grid takes tiles $w$, $w$ + the grid's warps, and so on, and its
# 32 lanes add each tile into one partial:

# %%
show_source("ch4_two_pass/v2_deterministic_tiles.cu", start="tile_partials(ReductionArgs a",
            end="if (lane == 0) partials[tile]")

# %%
show_source("ch4_two_pass/v2_deterministic_tiles.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v2 = load("ch4_two_pass/v2_deterministic_tiles.cu")
v2

# %% tags=["gpu"]
check(v2.mse, "mse")
check(v2.smooth_l1, "smooth_l1")
check(v2.hinge, "hinge")

# %% [markdown]
# We cannot change this GPU's SM count, but we can redo both summation orders in PyTorch on the
# CPU, in float32 like the kernels, for the grids three GPUs would launch (8 blocks of 256
# threads per SM): `v1_order` and `v2_order` below.
#
# **Predict.** The partials differ between grids in their last bits, but the mean is rounded to
# float32 at the end. For how many of 200 random inputs will version 1's float32 mean differ
# between the three grids: none, a few, or most?

# %% tags=["nbval-ignore-output"]
def v1_order(x, blocks, threads=256):
    """The float64 sum of version 1's float32 block partials for a grid of `blocks` blocks."""
    stride = blocks * threads
    padded = torch.cat([x, x.new_zeros(-x.numel() % stride)])  # zeros change no sum
    per_thread = padded.view(-1, stride).sum(0)  # each column: one thread's running sum
    return per_thread.view(blocks, threads).sum(1).double().sum().item()


def v2_order(x, tile=8192):
    """The float64 sum of version 2's float32 tile partials: no grid in it."""
    padded = torch.cat([x, x.new_zeros(-x.numel() % tile)])
    return padded.view(-1, tile).sum(1).double().sum().item()


def float32_mean(total, n):
    return float(np.float32(total / n))


GRIDS = [("T4", 40), ("A100", 108), ("H100 SXM", 132)]  # 8 blocks of 256 threads per SM
n, inputs, flips, example = 1 << 20, 200, 0, None
for seed in range(inputs):
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, generator=generator) - torch.randn(n, generator=generator)) ** 2
    v1_means = [float32_mean(v1_order(x, 8 * sms), n) for _, sms in GRIDS]
    if len(set(v1_means)) > 1:
        flips += 1
        example = example or (seed, v1_means, float32_mean(v2_order(x), n))
print(f"{inputs} random inputs of 2^20 elements: version 1's float32 mean differs between the "
      f"three grids for {flips} of them; version 2's order has no grid in it")
if example:
    seed, v1_means, v2_mean = example
    print(f"input {seed}: version 1 gives "
          + ", ".join(f"{m!r} on the {gpu}" for (gpu, _), m in zip(GRIDS, v1_means))
          + f"; version 2 {v2_mean!r}")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# A few (the count above). Rounding the mean to float32 hides a difference in the last digits
# of the sum most of the time, but not when the exact mean lies close to a rounding boundary:
# then the last bit flips. Reproducible bits need an order that does not depend on the launch,
# not luck.
# ```
#
# On the GPU, both versions give one result however often they run. We call each 100 times on
# one input of $2^{24}$ elements and count the distinct results; chapter 3's version 6, with its
# atomics, is the contrast in the cell after.

# %%
def distinct_results(op, n=1 << 24, runs=100, seed=3):
    pred, target = kernels.get_loss("mse").make_inputs(
        (n,), torch.Generator("cuda").manual_seed(seed), "cuda")
    values = torch.stack([op(pred, target) for _ in range(runs)])
    return len(set(values.tolist()))


# %% tags=["gpu"]
for name, op in [("v1", v1.mse), ("v2", v2.mse)]:
    print(f"{name}: {distinct_results(op)} distinct result(s) in 100 runs")

# %%
show_source("ch3_block_reduction/v6_vectorized_grid_stride.cu", start="// Chapter 3",
            end="#include")

# %% tags=["gpu", "nbval-ignore-output"]
ch3 = load("ch3_block_reduction/v6_vectorized_grid_stride.cu")
print(f"chapter 3 v6 (atomics): {distinct_results(ch3.mse)} distinct result(s) in 100 runs")

# %% [markdown]
# ## Version 3: one launch, the last block finishes
#
# Two launches cost two launch latencies, which dominate at small sizes. Version 3 keeps
# version 2's tiles and lets the *last* block to finish do pass 2 (`last_block_mean`, version
# 2's pass-2 kernel as a function). The end of its kernel:

# %%
show_source("ch4_two_pass/v3_last_block_finishes.cu", start="// Needed even with one block",
            end="last_block_mean(partials, tiles")

# %% [markdown]
# `__threadfence()` makes a block's partials visible to every SM before its count; thread 0 then
# counts the block done with `atomicInc`. The block that reads `gridDim.x - 1` knows all
# partials are written, fences again so that it reads them after the counts, and adds them in
# the same fixed order: which block is last changes nothing. `atomicInc` wraps the counter to 0
# on that last count, ready for the next launch. The timed entry points (`mse`, `smooth_l1`,
# `hinge`) keep the counter in the workspace and also zero it with a `cudaMemsetAsync`;
# `mse_global_counter` keeps it in a `__device__` global and relies on the wrap alone.
#
# ```{admonition} Going deeper: the memset, and plain loads
# :class: dropdown
# The memset makes the workspace counter safe whatever ran before: one kernel launch instead of
# two, but still two operations on the {term}`stream`. The global counter needs no memset, but
# two launches in flight on two streams would count into the same counter (the header). The
# file also makes a second, smaller change: from $2^{27}$ elements on, version 3 reads with
# plain loads instead of streaming ones (`kPlainLoadsFrom`), which measured faster there.
# ```

# %%
show_source("ch4_two_pass/v3_last_block_finishes.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v3 = load("ch4_two_pass/v3_last_block_finishes.cu")
v3

# %% tags=["gpu"]
check(v3.mse, "mse")
check(v3.mse_global_counter, "mse")
check(v3.smooth_l1, "smooth_l1")
check(v3.hinge, "hinge")

# %% tags=["gpu"]
for name, op in [("v3", v3.mse), ("v3 global counter", v3.mse_global_counter)]:
    print(f"{name}: {distinct_results(op)} distinct result(s) in 100 runs")

# %% [markdown]
# Versions 2 and 3 cap their grid at `LOSS_KERNELS_BLOCKS` blocks, a test knob read once per
# process, so each grid runs in a fresh process. The result must not change, down to one block:

# %% tags=["gpu"]
GRID_SCRIPT = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import kernels
ops = [getattr(kernels.load(path), "mse") for path in sys.argv[2:]]
pred, target = kernels.get_loss("mse").make_inputs(
    ((1 << 24) + 5,), torch.Generator("cuda").manual_seed(4), "cuda")
print(" ".join(op(pred, target).item().hex() for op in ops))
"""
files = ["ch4_two_pass/v2_deterministic_tiles.cu", "ch4_two_pass/v3_last_block_finishes.cu"]
by_grid = {}
for cap in ["default", "1", "7", "100"]:
    env = dict(os.environ)
    if cap != "default":
        env["LOSS_KERNELS_BLOCKS"] = cap
    run = subprocess.run([sys.executable, "-c", GRID_SCRIPT, ROOT, *files], env=env,
                         capture_output=True, text=True, check=True)
    by_grid[cap] = run.stdout.split()
for i, name in enumerate(["v2", "v3"]):
    for cap in ["1", "7", "100"]:
        same = by_grid[cap][i] == by_grid["default"][i]
        print(f"{name}, grid capped at {cap:>3} blocks: "
              f"{'the same bits' if same else 'DIFFERENT bits'} as the full grid")

# %% [markdown]
# ## Version 4: compensated lanes, for the accuracy study
#
# Version 4 is version 2 with one change inside each lane: Kahan's compensated summation, which
# carries the rounding error of every addition in a second float. The file also defines two
# deliberately careless variants, so that one kernel file holds the whole accuracy study. They are `mse_float_tree` (version 2's tiles, but the final pass in float32) and `mse_sequential` (no
# tiles: each lane adds its whole grid-stride share in one float).

# %%
show_source("ch4_two_pass/v4_kahan_lanes.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v4 = load("ch4_two_pass/v4_kahan_lanes.cu")
v4

# %% tags=["gpu"]
check(v4.mse, "mse")
check(v4.smooth_l1, "smooth_l1")
check(v4.hinge, "hinge")
check(v4.mse_float_tree, "mse")
check(v4.mse_sequential, "mse")

# %% [markdown]
# In exact arithmetic Kahan's correction `c = (t - sum) - y` is always 0, so a compiler that
# treated floats as real numbers would delete it. nvcc never reassociates float additions, not even with `--use_fast_math`. (That flag flushes denormals to zero and approximates division, square roots and `exp`.) The {term}`PTX` of this file, compiled both ways (no GPU needed):

# %% tags=["nbval-ignore-output"]
from kernels import profile

ADDS = re.compile(r"^\s*(add|sub)(\.ftz)?\.f32", re.MULTILINE)
for flags in ((), ("--use_fast_math",)):
    text = profile.ptx("ch4_two_pass/v4_kahan_lanes.cu", flags, function="tile_partials")
    print(f"{' '.join(flags) or 'default flags':<16}: {len(ADDS.findall(text))} float32 "
          f"add/sub instructions, {text.count('.ftz')} with .ftz (flush denormals)")

# %% [markdown]
# The two lines hold the same count of float32 additions: the flag marks some `.ftz` and removes
# none, so Kahan's correction survives fast math.
#
# ## How accurate is a float32 sum of $2^{30}$ values?
#
# Adding $n$ numbers one after another into one float, each addition rounds to the precision of the running sum. The error can grow like $n \varepsilon$ ($\varepsilon = 2^{-24}$ for float32),
# and once the sum is large enough, small addends vanish entirely. The classic demonstration, on
# the CPU: $2^{25}$ ones added sequentially in float32 stop growing at $2^{24}$, while a pairwise
# (tree) sum is exact:

# %%
ones = np.ones(1 << 25, dtype=np.float32)
print(f"sequential float32: {np.add.accumulate(ones)[-1]:.0f}")
print(f"pairwise float32:   {ones.sum():.0f}")
print(f"exact:              {1 << 25}")

# %% [markdown]
# A tree of depth $\log_2 n$ bounds the error by about $\varepsilon \log_2 n$, and rounding errors
# of random sign mostly cancel. Our kernels mix both: each thread adds a run of elements
# sequentially (a few hundred in version 2's tiles, thousands in version 1's {term}`grid-stride loop`,
# at $2^{30}$), then trees and a float64 final pass. Chapter 2's atomics add every block's
# partial into one float (chapter 2's version 4). We measure each
# against the float64 mean at $2^{30}$ elements (errors also in units of the float32 spacing at
# the result, {term}`ulp`).
#
# **Predict.** Which lands furthest from the float64 mean: chapter 2's atomics, version 1's long
# runs per thread, or version 2's tiles? And does Kahan's compensation (version 4) move the
# float32 result?

# %%
show_source("ch2_atomics/v4_block_atomics.cu", start="// Chapter 2", end="#include")

# %% tags=["gpu", "nbval-ignore-output"]
ch2 = load("ch2_atomics/v4_block_atomics.cu")
ch2

# %% tags=["gpu", "nbval-ignore-output"]
def mse_float64(pred, target, chunk=1 << 26):
    total = 0.0
    for start in range(0, pred.numel(), chunk):
        d = pred[start:start + chunk].double() - target[start:start + chunk].double()
        total += torch.dot(d, d).item()
    return total / pred.numel()


n = bench.SIZES[-1]  # 2^30 (less when a validation run limits the sizes)
pred, target = kernels.get_loss("mse").make_inputs(
    (n,), torch.Generator("cuda").manual_seed(5), "cuda")
exact = mse_float64(pred, target)
ulp = float(np.spacing(np.float32(exact)))
candidates = {"torch.mean (eager)": kernels.losses.mse,
              "ch2 v4: float atomics": ch2.mse,
              "ch3 v6: float atomics": ch3.mse,
              "v4 sequential lanes, f32 final": v4.mse_sequential,
              "v4 float32 tree, f32 final": v4.mse_float_tree,
              "v1 block partials, f64 final": v1.mse,
              "v2 tiles, f64 final": v2.mse,
              "v3 tiles, one launch": v3.mse,
              "v4 Kahan lanes, f64 final": v4.mse}
for name, op in candidates.items():
    got = op(pred, target).item()
    print(f"{name:<31} {got:.9g}  error {abs(got - exact) / exact:.1e} "
          f"({abs(got - exact) / ulp:6.1f} ulp)")
print(f"{'float64':<31} {exact:.9g}   (n = 2^{n.bit_length() - 1})")
del pred, target
torch.cuda.empty_cache()

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# Read the output from the top; every line has the same inputs. Chapter 2's version 4, whose
# block sums all meet in one float through atomics, is the furthest, several ulp away.
# Chapter 3's version 6 (atomics, but one per resident block) moves from run to run and can
# land as far. Version 4's `mse_sequential`, which keeps a lane's whole share in one float and
# adds the warps' partials in float32, is about two ulp away; `torch.mean` within an ulp. Every
# other variant lands on the same float32 value, a small fraction of an ulp away: version 1,
# versions 2 and 3 with their float64 final pass, the float32 final pass (`mse_float_tree`)
# and Kahan's lanes (version 4) alike. Kahan's compensation does not move the result: nothing
# can be closer than the float32 nearest to the float64 mean.
# ```
#
# Short sequential runs per lane are what matters: with them even a float32 final pass
# (`mse_float_tree`) lands on the float64 pass's value. The course keeps float64 for pass 2 all
# the same: it reads one float per tile, a small fraction of the input, and leaves a margin for
# longer inputs. The fixed-order versions also give these bits on every run; the atomic ones do
# not.
#
# ## Version 5: the grid `torch.compile` chose
#
# At $2^{30}$ elements versions 2 and 3 read a few percent slower than `torch.compile` (the
# tables below). When the compiler wins, read what it wrote:
# `torch._inductor.utils.run_and_get_code` returns the code Inductor generated, launches
# included.

# %% tags=["gpu", "nbval-ignore-output"]
from torch._inductor.utils import run_and_get_code

pred, target = kernels.get_loss("mse").make_inputs(
    (1 << 30,), torch.Generator("cuda").manual_seed(0), "cuda")
_, generated = run_and_get_code(
    torch.compile(kernels.get_loss("mse").reference, dynamic=False), pred, target)
for line in generated[0].splitlines():
    if ".run(" in line:
        print(line.strip())
del pred, target

# %% [markdown]
# Two Triton kernels (a Triton *program* plays a CUDA block's part): the first is launched with
# 8192 programs (`xnumel`), each reducing 131072 consecutive elements (`r0_numel`) to one
# partial; the second adds the 8192 partials.
# That is version 2's two passes with a different split of the work, and version 5 copies it.
# A tile belongs to a block of 512 threads that read it together, and the grid has one block
# per tile, so the hardware hands out tiles as SMs free up. Small inputs get one block that
# writes the mean itself.
#
# ```{dropdown} Going deeper: what the profiler showed, and the small and exact sizes
# Nsight Compute
# (`ncu --metrics launch__grid_size,launch__block_size,launch__registers_per_thread,...`; the
# numbers are in `bench/PERFLOG.md`) adds what the code does not say: 512 threads per program
# and few registers per thread, so more warps per SM than version 3, whose resident grid of
# 256-thread blocks gives every warp a fixed list of tiles; and DRAM busy for a larger share of
# the kernel's time. Hence the copy: `__launch_bounds__(512, 3)` keeps the registers at 40, three blocks per SM. Tiles start
# at 4096 elements and double until there are at most 8192 of them. Small inputs (up to
# $2^{14}$ elements) get one block of 1024 threads that writes the mean itself: at $2^{12}$
# elements the profiler showed version 3's kernel taking more than twice as long as Inductor's
# single program. Up to $2^{12}$ elements the block has 512 threads, the block size of
# Inductor's program there (the profiler's record of its launch): a few percent faster than
# 1024 threads in `tools/ab_kernel.py`'s turns, for MSE and Smooth L1. And where the input fills
# the block's loads exactly ($2^{12}$ elements for the small block, $2^{14}$ for the large one),
# a copy of the kernel without bounds checks runs. That is what Inductor's program had over
# ours: `torch.compile(dynamic=False)` compiles a program for each size, whose bounds are
# constants, so its checks fold away; the checks cost version 5 a few percent at $2^{12}$
# (`bench/one_block_probe.py`). Up to $2^{13}$ elements the 1024 threads load two vectors per
# input instead of four, so that $2^{13}$ fills the copy without checks too. Constants fold in
# one more place. Hinge's target is a row that repeats, and each load finds its place in the
# row as $4v \bmod$ the row's length: in Inductor's program the length is a constant, a power
# of two in the benchmarks, and the remainder is a mask. Ours divides by a length known only at
# run time, and the machine code (`cuobjdump -sass`) showed a dozen dependent instructions
# before the first target load. Where the length is a power of two, the launcher now picks a
# copy that masks; and where the length also divides the block's stride, every load of a thread
# meets the same target vector, which that copy reads once (Inductor's program folds its loads'
# indices into one the same way). After the ratio tables below, the chapter times version 5
# beside a `torch.compile` built for every size, which has no constants to fold.
# ```
#
# Four more changes serve the middle sizes, $2^{16}$ to $2^{24}$ elements, where a call takes
# microseconds; the ablation tables below time version 5 without each of the first three:
#
# - up to $2^{18}$ elements one *thread-block cluster*, blocks on neighbouring SMs that can
#   write each other's shared memory, adds the block sums without a second pass (column "v5,
#   two passes");
# - above that, pass 2 is queued before pass 1 ends and waits on the GPU (column "v5, ordinary
#   launch of pass 2");
# - from $2^{21}$ to $2^{26}$ elements, inputs read once are loaded evict-first (column "v5,
#   plain loads");
# - a broadcast target (Hinge) gets longer tiles.
#
# Version 5 is a rewrite, shown whole below; the folds say how each part works.
#
# ```{dropdown} Going deeper: the ablation switches
# The first three changes are switches in the file (`CLUSTERS`, `DEPENDENT_LAUNCH`,
# `STREAM_LOADS`), so `bench/v5_ablation.py` can build version 5 without one of them and time
# the four builds beside `torch.compile`. Its tables are after the measurements below.
# ```
#
# ```{dropdown} Going deeper: clusters, dependent launch, evict-first loads, longer tiles
# Without these four changes version 5 was a few percent to a sixth slower than `torch.compile` at
# the middle sizes (`bench/PERFLOG.md`). What each one does, and what it cost to get right:
#
# - **Up to $2^{18}$ elements, one cluster instead of two passes.** Hopper groups blocks into
#   *thread-block clusters*: up to 8 blocks (16 where the GPU allows a larger, non-portable size)
#   that run at the same time on neighbouring SMs and can write each other's {term}`shared memory`
#   (*{term}`distributed shared memory`*). Above $2^{14}$ elements version 5 launches a single cluster of
#   8 blocks of 1024 threads (16 blocks above $2^{17}$) that reads the whole input in one round,
#   each thread issuing its two or four loads per input before any arithmetic, as the single block
#   does. Each block adds its part, its thread 0 writes the block's sum into block 0's shared
#   memory (`cluster.map_shared_rank`), and one cluster barrier (`cluster.sync()`) takes the place
#   of pass 2: no partials in global memory, no second kernel, no counter. A block may write
#   another block's shared memory only once that block has started, so each block arrives on the
#   cluster's barrier as it starts and waits on it after its loads, by which time every block has
#   long started. The first cluster kernel wrote without that wait, and `compute-sanitizer --tool
#   racecheck` flagged it. Before Hopper, which has no clusters, the launcher keeps two passes.
#   The ablation's tables below time a build without clusters, "v5, two passes": at $2^{16}$
#   elements the cluster takes about a fifth off Hinge's call and an eighth off MSE's. At
#   $2^{18}$, where 16 blocks issue four loads per input each, Hinge still gains about a twelfth,
#   while MSE, which reads twice Hinge's bytes there (Hinge's target is one row, read once), is
#   level by events and behind by its kernels' span: this is as far as one round of loads pays.
#   The arrival at the start is *relaxed* (`barrier.cluster.arrive.relaxed`): the default arrival
#   also orders the block's earlier memory operations for the others, and at the start there are
#   none; it cost about half a microsecond a call (`bench/PERFLOG.md`).
# - **Pass 2 starts before pass 1 ends.** Between two kernels on a stream the GPU drains the
#   first grid, then launches the second: a few microseconds that matter when the whole sum takes
#   ten. Hopper ({term}`compute capability` 9.0) adds *programmatic dependent launch*: pass 2 is queued
#   with `cudaLaunchKernelEx` and the attribute `cudaLaunchAttributeProgrammaticStreamSerialization`,
#   each pass-1 block says `griddepcontrol.launch_dependents` (PTX) as it starts, and pass 2's
#   block, already resident, waits at `griddepcontrol.wait` until pass 1 has finished and its
#   partials are visible. The wait moves from the stream to the device. On older GPUs the
#   launcher asks which architecture pass 2 was built for and launches pass 2 the ordinary way.
#   Pass 2 is one block of 256 threads: with 1024 the calls took one or two tenths of a
#   microsecond longer (256 threads are fewer warps to start, and to wait for at the block's
#   barriers). Why not
#   version 3's single launch? Tried here, its last block saved what the second launch costs
#   outside the kernels and lost as much inside them, in every block's fence and count; from
#   $2^{22}$ elements on, where a thousand blocks and more count on one counter, it was slower
#   (`bench/PERFLOG.md`).
# - **Inputs read once leave {term}`L2 <L2 cache>` first.** From $2^{21}$ to $2^{26}$ elements pass 1 reads with
#   `__ldcs` (cache-streaming, evict-first), as Inductor's reductions do: the lines it will never
#   read again do not push out lines that are still wanted, such as dirty lines waiting for
#   write-back. Larger inputs read with plain loads, which measured faster there (version 3's
#   `kPlainLoadsFrom` found the same). `__ldcs` is inline assembly, which the compiler
#   schedules less freely: at three blocks per SM (40 registers per thread) this copy of
#   pass 1 kept some of its values in local memory, and Smooth L1 ran up to a tenth slower than
#   with plain loads. `nvcc -Xptxas -v` prints each kernel's registers and "bytes spill
#   stores"; the copy now asks for two blocks per SM, 64 registers, and {term}`spills <spill>` nothing.
# - **A broadcast target gets longer tiles.** Hinge's target is one row, which stays in the
#   caches, so pass 1 streams only the predictions: a tile of 4096 elements streams half the
#   bytes of a same-shape tile, and what each tile costs besides its bytes (a block to start, a
#   block sum, a partial to write) weighs twice as much. `torch.profiler`'s timestamps of each
#   kernel, every call behind the L2 clear, put Hinge's gap to `torch.compile` at
#   $2^{22}$ elements in pass 1 alone, a fifth slower than Inductor's first kernel (the
#   numbers are in `bench/PERFLOG.md`). In the evict-first range the broadcast copy now reads
#   tiles of 8192 elements in blocks of 256 threads, six per SM: pass 1 closed part of that gap
#   at $2^{22}$ and all of it at $2^{24}$. Below $2^{21}$ the tiles are few, and the longer
#   ones were slower.
# ```

# %%
show_source("ch4_two_pass/v5_block_tiles.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v5 = load("ch4_two_pass/v5_block_tiles.cu")
v5

# %% tags=["gpu"]
check(v5.mse, "mse")
check(v5.smooth_l1, "smooth_l1")
check(v5.hinge, "hinge")
print(f"v5: {distinct_results(v5.mse)} distinct result(s) in 100 runs")
by_grid = {}
for cap in ["default", "1", "7", "100"]:
    env = dict(os.environ)
    if cap != "default":
        env["LOSS_KERNELS_BLOCKS"] = cap
    run = subprocess.run([sys.executable, "-c", GRID_SCRIPT, ROOT,
                          "ch4_two_pass/v5_block_tiles.cu"],
                         env=env, capture_output=True, text=True, check=True)
    by_grid[cap] = run.stdout.split()[0]
for cap in ["1", "7", "100"]:
    print(f"v5, grid capped at {cap:>3} blocks: "
          f"{'the same bits' if by_grid[cap] == by_grid['default'] else 'DIFFERENT bits'} "
          f"as the full grid")

# %% [markdown]
# ## Choosing the final kernel from the data
#
# We time the five versions, eager PyTorch and `torch.compile` on all three losses. For MSE we
# add a second reference: `torch.sum` of each input, which reads exactly the bytes the loss reads
# with PyTorch's own reduction kernel, in two launches. It computes no loss; it shows what reading those bytes costs.
#
# **Predict.** Version 3 saves version 2's second launch. At which sizes should it be faster,
# and by how much: a launch's few microseconds against the reading time each size needs?

# %% tags=["gpu", "nbval-ignore-output"]
ch.allow_recompiles()  # torch.compile(dynamic=False) compiles one graph per size
measured = []
for loss in ("mse", "smooth_l1", "hinge"):
    reference = kernels.get_loss(loss).reference
    providers = {"eager": reference, "torch.compile": torch.compile(reference, dynamic=False)}
    if loss == "mse":
        providers["torch.sum x2"] = lambda p, t: torch.sum(p) + torch.sum(t)
        providers["v1"] = v1.mse
    providers.update({"v2": getattr(v2, loss), "v3": getattr(v3, loss),
                      "v4": getattr(v4, loss), "v5": getattr(v5, loss)})
    measured += bench.sweep(providers, loss,
                            [bench.element_wise_shape(n, loss) for n in bench.SIZES])
ch.save(measured)
print(f"{len(measured)} measurements saved")

# %% [markdown]
# Which of version 2 (two launches, warp tiles), version 3 (one launch, a counter) and version 5
# (block tiles; one launch of a cluster up to $2^{18}$ elements, two launches above) is fastest, size by size? Read it from the measurements:

# %% tags=["nbval-ignore-output"]
rows = ch.rows()
for loss in ("mse", "smooth_l1", "hinge"):
    wins = {"v2": 0, "v3": 0, "v5": 0}
    for shape in sorted({r["shape"] for r in results.select(rows, loss=loss)}, key=math.prod):
        ms = {p: results.select(rows, loss=loss, shape=shape, provider=p)[0]["ms"]
              for p in wins}
        faster = min(ms, key=ms.get)
        wins[faster] += 1
        if loss == "mse":
            print(f"mse, 2^{math.prod(shape).bit_length() - 1:<2} elements: "
                  + ", ".join(f"{p} {t:.4f} ms" for p, t in ms.items()) + f" -> {faster}")
    choice = max(wins, key=wins.get)
    print(f"{loss}: fastest at " + ", ".join(f"{n} sizes {p}" for p, n in wins.items())
          + f": the chapter's final kernel is {choice}")

# %% tags=["nbval-ignore-output"]
# Eight lines, most of them on top of each other: versions 1, 3 and 4 in grey; the final kernel
# (v5), version 2 and the references in colour.
kernels.plot_throughput(rows, "mse", providers=["eager", "torch.compile", "torch.sum x2",
                                                "v1", "v2", "v3", "v4", "v5"],
                        highlight=["eager", "torch.compile", "torch.sum x2", "v2", "v5"]);

# %% tags=["nbval-ignore-output"]
Markdown(results.markdown_table(
    rows, ["eager", "torch.compile", "torch.sum x2", "v1", "v2", "v3", "v4", "v5"], "mse"))

# %% tags=["nbval-ignore-output"]
kernels.plot_throughput(rows, "smooth_l1",
                        providers=["eager", "torch.compile", "v2", "v3", "v5"]);

# %% tags=["nbval-ignore-output"]
kernels.plot_throughput(rows, "hinge", providers=["eager", "torch.compile", "v2", "v3", "v5"]);

# %% tags=["nbval-ignore-output"]
Markdown(results.markdown_table(rows, ["eager", "torch.compile", "v2", "v3", "v5"],
                                "smooth_l1") + "\n\n"
         + results.markdown_table(rows, ["eager", "torch.compile", "v2", "v3", "v5"], "hinge"))

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# Expected: at small sizes a launch is most of the time, so one launch should win there; at
# large sizes it is microseconds against milliseconds of reading. Measured (the plots, and the
# MSE lines under the first cell): version 3 is ahead only at the smallest size, $2^{12}$
# elements, and level or behind everywhere else. The benchmark keeps the GPU busy while the host
# launches (chapter 1, `kernels.bench.time_ms`), so a second launch queued behind the first
# costs little GPU time, and version 3's timed entry points put a memset on the stream before
# their kernel anyway.
# ```
#
# Version 3's one launch gains little because the benchmark keeps the GPU busy while the host
# launches: a second launch queued behind the first costs little GPU time. The shape of the work
# made the difference. Version 5 is the fastest of the three at all or nearly
# all sizes for all three losses (the count above), so it is the chapter's final kernel. It is
# faster than eager PyTorch at every size. Against `torch.compile`, version 5's time over its
# time (below 1: version 5 is faster), from the chapter's sweep:

# %% tags=["nbval-ignore-output"]
# The chapter's own sweep, one more run: version 5's time / torch.compile's, size by size.
Markdown("\n\n".join(f"**{loss}**\n\n"
                     + results.ratio_table(rows, ["v5"], loss, "torch.compile")
                       for loss in ("mse", "smooth_l1", "hinge")))

# %% [markdown]
# Version 5 is well ahead at $2^{14}$ elements and level or a little ahead from $2^{26}$ up, for
# all three losses; at $2^{12}$ the two are level or a percent or two apart. Hinge is level from
# $2^{20}$ to $2^{24}$, while its kernels' spans (below) are ahead or level: what it loses there
# is outside the kernels. The tables below check it with other runs.
#
# ```{dropdown} Going deeper: timing calls of a few microseconds
# From $2^{16}$ to $2^{24}$ elements a call takes microseconds, and timing it needed a fix of
# its own. What ran before a call moves where its blocks run, and with it the call's time, by up
# to about a microsecond. The timing queues a random number of empty one-block launches before
# each call ({doc}`../book/timing`), so that each median is taken over many such states. The same
# kernels then agree to within a percent or two (the first lines under the tables). The second
# tables time the same calls from the start of their first kernel to the end of their last
# (`spans.call_span_ms`, from `torch.profiler`'s timestamps).
#
# Timed without that lead, the plain-loads build, which under $2^{21}$ elements runs version 5's
# very kernels (its switch acts from $2^{21}$ up), read up to a tenth away from version 5, and
# which sizes trailed `torch.compile` changed from run to run. The state that moved the time
# held through a whole measurement of a hundred calls and changed between measurements, so two
# providers timed one after the other could each be timed in a different one.
#
# The lead also guards against slow calls of `torch.compile`'s own, several times its
# neighbours' time: a compiled call's host work (Dynamo's guards, the graph's Python wrapper)
# can outrun the GPU work that the timing queues ahead of each call, and then the events time
# the host. So the lead is long, and longer still before a call whose host work needs it.
# ```
#
# ```{dropdown} Going deeper: reading the ablation's tables, and what a call holds besides its kernels
# Read together, the tables tell one story. MSE and Smooth L1 are ahead from $2^{14}$ to
# $2^{26}$ elements, by events and, for MSE, by the kernels' spans too. Hinge is ahead at
# $2^{16}$ and $2^{18}$, where the cluster runs, in all three runs, and level with
# `torch.compile` from $2^{20}$ to $2^{24}$, two percent either way.
#
# The last lines under the ablation's tables print what each call's events hold besides its
# kernels, from $2^{12}$ to $2^{20}$ elements. At $2^{16}$ and $2^{18}$ the cluster's calls hold
# up to a quarter of a microsecond more than `torch.compile`'s, and the two passes' up to half a
# microsecond more. At $2^{20}$, where pass 2 runs, version 5's calls hold about a quarter of a
# microsecond more, and the build with an ordinary launch of pass 2 about as much as
# `torch.compile`'s or less: the dependent launch costs that outside the kernels. It saves more
# inside them (the ordinary launch is slower at $2^{20}$ and $2^{22}$ elements, by both timings
# and for both losses). MSE's kernels are far enough ahead of Inductor's to pay for it; Hinge's
# gain about as much as it costs. Plain loads from $2^{21}$ up move the spans by a few percent at
# most: with the timing's clear reading its buffer, L2 holds only clean lines, and the dirty
# lines that evict-first loads used to leave alone were the old write clear's own.
#
# `bench/reduction_targets.py` times each size three times by events and keeps the median. Its
# published run, the last tables below, agrees with the chapter's sweep: version 5 level or a
# percent behind at $2^{12}$ elements, ahead of `torch.compile` at $2^{16}$ and $2^{18}$ for all
# three losses, and Hinge level, within a percent or so, from $2^{20}$ to $2^{24}$. Beside its
# targets it prints the kernels' spans up to $2^{24}$ elements, without a target.
# ```
#
# `bench/v5_ablation.py`'s run: each column after version 5's is version 5 without one change.

# %% tags=["nbval-ignore-output"]
# bench/v5_ablation.py's published run (book/results/v5_ablation.csv)
ablation = results.read_rows("v5_ablation", results.PUBLISHED_DIR / "v5_ablation.csv")
KERNELS = " (kernels)"  # the same calls timed by their kernels' span
builds = [p for p in dict.fromkeys(r["provider"] for r in ablation)
          if p != "torch.compile" and not p.endswith(KERNELS)]
Markdown("\n\n".join(f"**{loss}**, time / `torch.compile`\n\n"
                       + results.ratio_table(ablation, builds, loss, "torch.compile")
                       for loss in ("mse", "hinge")))

# %% [markdown]
# The same calls, timed from their first kernel's start to their last kernel's end:

# %% tags=["nbval-ignore-output"]
# The same builds, each call timed from its first kernel's start to its last kernel's end
# (spans.call_span_ms: torch.profiler's timestamps), without what the events add around them
spans = [dict(r, provider=r["provider"].removesuffix(KERNELS))
         for r in ablation if r["provider"].endswith(KERNELS)]
Markdown("\n\n".join(f"**{loss}**, kernels' span / `torch.compile`'s\n\n"
                       + results.ratio_table(spans, builds, loss, "torch.compile")
                       for loss in ("mse", "hinge")))

# %% [markdown]
# Below $2^{21}$ elements the plain-loads build runs version 5's very kernels: their difference
# is the run's spread.

# %% tags=["nbval-ignore-output"]
# Below 2^21 elements both builds run the same kernels: their difference is the run's spread.
for loss in ("mse", "hinge"):
    for timed, label in ((ablation, "events"), (spans, "kernels' span")):
        ms = {(r["provider"], r["shape"]): r["ms"]
              for r in timed if r["loss"] == loss and math.prod(r["shape"]) < 1 << 21}
        spread = max(abs(ms["v5, plain loads", s] / ms["v5", s] - 1)
                     for p, s in ms if p == "v5")
        print(f"{loss}, {label}: v5 and v5 with plain loads, the same kernels below 2^21 "
              f"elements, differ by up to {spread:.1%}")

# %% [markdown]
# What each call's events hold besides its kernels (events minus span), size by size:

# %% tags=["nbval-ignore-output"]
# What a call's events hold besides its kernels: events - kernels' span, µs, 2^12 ... 2^20
small = sorted({math.prod(r["shape"]) for r in ablation if math.prod(r["shape"]) < 1 << 21})
print(f"{'µs outside the kernels, elements':<38}"
      + "".join(f"{'2^' + str(n.bit_length() - 1):>6}" for n in small))
for loss in ("mse", "hinge"):
    ms = {(r["provider"], r["shape"]): r["ms"] for r in ablation if r["loss"] == loss}
    for provider in ["torch.compile", *builds]:
        outside = [1e3 * (ms[p, s] - ms[p + KERNELS, s])
                   for p, s in sorted(ms, key=lambda key: math.prod(key[1]))
                   if p == provider and math.prod(s) < 1 << 21]
        print(f"{loss:<6}{provider:<32}" + "".join(f"{us:6.2f}" for us in outside))

# %% [markdown]
# `bench/reduction_targets.py`'s run, each time the median of three:

# %% tags=["nbval-ignore-output"]
# bench/reduction_targets.py's published run (book/results/reduction_targets.csv): each time
# the median of three; its "final" is version 5, its "compile" torch.compile
NAMES = {"final": "v5", "compile": "torch.compile"}
published = results.PUBLISHED_DIR / "reduction_targets.csv"
targets = [dict(r, provider=NAMES.get(r["provider"], r["provider"]))
           for r in results.read_rows("reduction_targets", published)]
Markdown("\n\n".join(f"**{loss}**, median of three\n\n"
                       + results.ratio_table(targets, ["v5"], loss, "torch.compile")
                       for loss in ("mse", "smooth_l1", "hinge")))

# %% [markdown]
# ```{dropdown} Going deeper: the next table, against a torch.compile built for every size
# The baseline is `torch.compile(dynamic=False)`: a program for each size, with that size
# written into its code. Version 5 is one kernel for every size. Asked for one program for
# every size (`dynamic=True`), `torch.compile` gives up its constants. The next table gives both
# against the program compiled for each size (time / its time, median of five runs in turn).
# At $2^{12}$ and $2^{14}$ elements the input fills version 5's block loads exactly, and its copy
# without bounds checks runs (the fold on version 5); at 3000 and $2^{13}$ it does not.
#
# Built for every size, `torch.compile`'s program is slower than the one built for each size,
# and slower than version 5, at every size in the table. The program built for one size keeps a
# lead of a few percent or less at the smallest sizes, where its size is a constant in its code.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
generic = torch.compile(kernels.get_loss("mse").reference, dynamic=True)
print(f"{'n':>6}{'dynamic=True':>14}{'v5':>8}   (time / torch.compile, dynamic=False)")
for n in (1 << 12, 3000, 1 << 13, 1 << 14):
    ms = {m.provider: m.ms for m in bench.median_against_compile(
        {"dynamic=True": generic, "v5": v5.mse}, "mse", n, runs=5)}
    print(f"{n:>6}{ms['dynamic=True'] / ms['torch.compile']:>14.3f}"
          f"{ms['v5'] / ms['torch.compile']:>8.3f}")

# %% [markdown]
# ## Small margins, and a line that can be crossed
#
# At the largest sizes version 5, `torch.compile` and `torch.sum` are within a few percent of
# each other, and the table shows version 5 a little *above* the read {term}`bandwidth`. One run of a
# sweep is not enough to call a difference that small. We time the three again, five times in
# turn, and print each one's spread:

# %% tags=["gpu", "nbval-ignore-output"]
compiled_mse = torch.compile(kernels.losses.mse, dynamic=False)
contenders = {"v5": v5.mse, "torch.compile": compiled_mse,
              "torch.sum x2": lambda p, t: torch.sum(p) + torch.sum(t)}
for n in (1 << 28, bench.SIZES[-1]):
    samples = {name: [] for name in contenders}
    for _ in range(5):
        for m in bench.bench_loss(contenders, "mse", (n,)):
            samples[m.provider].append(m.gbps)
    for name, gbps in samples.items():
        gbps.sort()
        print(f"2^{n.bit_length() - 1} {name:<14} GB/s min {gbps[0]:5.0f}  "
              f"median {gbps[2]:5.0f}  max {gbps[-1]:5.0f}  "
              f"(median {gbps[2] / ch.peak:.1%} of the line)")

# %% [markdown]
# Where two spreads overlap, the two are level: a margin under 2% that the spread covers is
# noise, not a win.
#
# ```{admonition} Going deeper: why a kernel can measure above the line (the next table)
# :class: dropdown
# The line is not the hardware's limit: it is the rate `torch.sum` reads a 4 GiB tensor,
# measured at the start of the chapter. Nsight Compute measures how busy DRAM is while each
# kernel runs ({doc}`../book/profiling`), in the next table. Neither keeps DRAM busy all of the
# time, and version 5's pass 1 keeps it busy a little more of the time than `torch.sum`'s
# kernel: that is the whole "above 100%". The {term}`roofline`'s limit is the hardware's rate;
# the course's line is a strong, honest, measured stand-in for it, which a kernel can beat by
# the last percent or two, never by more.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
READS = '''
import torch
from kernels import load
v5 = load("ch4_two_pass/v5_block_tiles.cu")
pred, target = torch.randn(1 << 28, device="cuda"), torch.randn(1 << 28, device="cuda")
v5.mse(pred, target)
torch.sum(pred)
torch.cuda.synchronize()
'''
counters = profile.ncu(READS, "tile_partials|reduce_kernel", profile.MEMORY, launches=2)
if counters:
    print(counters.table(["v5 pass 1", "torch.sum"]))

# %% [markdown]
# ## Summary
#
# - Partial sums in scratch memory, added in a fixed order, give the same bits on every run;
#   fixed tiles (version 2) give the same bits whatever the grid, so on any GPU.
# - The op returns its result on the device and never waits for it. One launch instead of two
#   (version 3) gains little.
# - At $2^{30}$ elements chapter 2's atomics land several ulp from the float64 mean; most of this
#   chapter's variants land a small fraction of an ulp from it (the accuracy output).
# - At the largest sizes version 5, `torch.compile` and `torch.sum` are within a few percent of
#   one another; a margin that their spread covers is noise, not a win.
#
# The ladder for MSE at $2^{16}$ and $2^{30}$ elements (version 4, version 2 with compensated
# sums for the accuracy study, is left out of the chain):

# %% tags=["nbval-ignore-output"]
VERSIONS = ["v1", "v2", "v3", "v5"]
CHANGES = {"v1": "one partial per block, pass 2 in float64",
           "v2": "fixed tiles: the same bits on any grid",
           "v3": "one launch: the last block adds the partials",
           "v5": "torch.compile's grid, tuned for small and middle sizes"}
Markdown("\n\n".join(f"**MSE, 2^{n.bit_length() - 1} elements**\n\n"
                       + results.speedup_table(rows, VERSIONS, "mse", (n,), baseline="v1",
                                               changes=CHANGES)
                       for n in (1 << 16, max(math.prod(r["shape"]) for r in rows))))

# %% [markdown]
# ## Exercises
#
# Each exercise is a kernel file under `kernels/exercises/` for you to edit, and a cell that
# builds it and checks it against PyTorch, printing one PASS or FAIL line per case. The
# skeletons compile and run; they fail the check until you finish them. Solutions are in
# {doc}`../solutions/ch4_solutions`.

# %% [markdown]
# ```{exercise}
# :label: ex-ch4-kahan
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 30 minutes
#
# `kernels/exercises/ch4_kahan.cu` writes one partial per 1024 elements and adds the partials in
# pass 2 with one thread, sequentially, in float. It passes the usual check, but not a strict one
# (relative error at most $2 \times 10^{-7}$ at about $2^{26}$ elements). Keep the float
# accumulator and make the final pass compensated (Kahan summation) until the strict check passes.
# ```
#
# ```{admonition} Hint
# :class: dropdown
# Carry a second float `c`, the rounding error so far. For each partial: `y = x - c`,
# `t = sum + y`, `c = (t - sum) - y`, `sum = t`. Why does the compiler not simplify
# `(t - sum) - y` to 0? (Version 4's PTX above answers part of it.)
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch4_kahan.cu")

# %% tags=["gpu", "nbval-ignore-output"]
from kernels.exercises.ch4_checks import check_kahan  # the usual check, then a strict one

ch.exercise("exercises/ch4_kahan.cu", check_kahan);

# %% [markdown]
# ```{exercise}
# :label: ex-ch4-last-block
#
# **Difficulty:** ★★★ (hard) · **Time:** about 45 minutes
#
# `kernels/exercises/ch4_last_block.cu` finishes in one launch with a counter of finished blocks,
# a `__device__` global. The first call is right, every later one is wrong: the check passes its
# first case and fails the second. Make the counter ready for the next launch, in a different
# way from version 3. **Target**: no slower than version 3 (95% of its speed or better) at
# $2^{26}$ elements: resetting the counter must not cost a launch or a wait.
# ```
#
# ```{admonition} Hint
# :class: dropdown
# After the last block has seen the count, no other block of this launch touches the counter
# again, and the next launch on the same stream starts after this one ends.
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch4_last_block.cu")

# %% tags=["gpu", "nbval-ignore-output"]
if ch.exercise("exercises/ch4_last_block.cu", lambda kernel: check(kernel.mse, "mse")):
    bench.speedup_target(load("exercises/ch4_last_block.cu").mse, v3.mse, "mse", (1 << 26,),
                         0.95, reference_label="version 3")
