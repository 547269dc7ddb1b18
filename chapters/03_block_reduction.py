# ---
# jupyter:
#   jupytext:
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% tags=["hide-input"]
# Setup: make the course's toolkit importable (in the repository, or on Colab after cloning it).
import os, subprocess, sys
REPOSITORY = "https://github.com/loss-kernels/loss-kernels"
if "google.colab" in sys.modules and not os.path.isdir("/content/loss-kernels"):
    subprocess.run(["git", "clone", "--depth=1", REPOSITORY, "/content/loss-kernels"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ninja"], check=True)
ROOT = next(p for p in (os.getcwd(), os.path.dirname(os.getcwd()), "/content/loss-kernels")
            if os.path.isfile(os.path.join(p, "kernels", "__init__.py")))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# %% [markdown]
# # Chapter 3: the block reduction in shared memory
#
# Chapter 2 ended with one atomic per block, but its blocks added their values with shuffles and
# still read memory 4 bytes at a time. This chapter builds the block reduction step by step, the
# way Mark Harris's classic CUDA reduction does {cite}`harris2007reduction`: a tree in shared
# memory, then one fix per version. Each kernel file's header says what it fixes and what is
# still slow; the table at the end says how much each step was worth on our GPU.
#
# Then the same skeleton computes every element-wise loss of the course: a new loss is a functor
# of a few lines.


# %%
import numpy as np
import torch
from IPython.display import Markdown

import kernels
from kernels import CheckFailed, KernelBuildError, bench, check, load, results
from kernels.notebook import show_source

# %% [markdown]
# One detail first. Versions 1 to 5 use one block per 256 or 512 elements: millions of blocks at
# $2^{30}$ elements. If each added its sum into one float, those atomics would queue on one
# address (chapter 2's contention): at the rate chapter 2 measured for one address, they alone
# would take about as long as a whole pass of these kernels, and would blur the differences
# between the versions. So block $b$ adds
# into slot $b \bmod 1024$, and a last small kernel adds the 1024 slots and divides by $n$:

# %%
show_source("common/block_slots.cuh")

# %% tags=["gpu", "nbval-ignore-output"]
GPU = torch.cuda.get_device_name()
PEAK = bench.read_bandwidth()
print(f"{GPU}: read bandwidth {PEAK:.0f} GB/s")

# %% [markdown]
# ## Version 1: a tree in shared memory
#
# Each block loads 256 values into shared memory, then adds them pairwise in $\log_2 256 = 8$
# rounds: after round $s$ every value at an index that is a multiple of $2s$ holds the sum of
# $2s$ values. A `__syncthreads()` between rounds makes each round see the previous one's
# results. Threads past the end of the input load 0: every thread must reach every barrier.

# %%
show_source("ch3_block_reduction/v1_interleaved_divergent.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v1 = load("ch3_block_reduction/v1_interleaved_divergent.cu")
v1

# %% tags=["gpu"]
check(v1.mse, "mse")

# %% [markdown]
# ## Version 2: no divergent warps
#
# In version 1, the threads that work in a round are spread over all warps, so every warp runs
# the round even when one of its threads works. Computing the index as `2 * s * tid` packs the
# working threads into the first warps. (On this GPU the fix does not pay: the table at the end
# shows version 2 slower than version 1. Its new access pattern has a cost of its own, the
# subject of version 3.)

# %%
show_source("ch3_block_reduction/v2_interleaved_strided.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v2 = load("ch3_block_reduction/v2_interleaved_strided.cu")
v2

# %% tags=["gpu"]
check(v2.mse, "mse")

# %% [markdown]
# ## Version 3: sequential addressing
#
# Shared memory is split into 32 banks of 4-byte words; the threads of a warp that touch
# different words of one bank wait for each other. Version 2's stride `2 * s` sends many threads
# to one bank. Adding the upper half onto the lower half instead makes a warp touch 32
# consecutive words: one per bank.

# %%
show_source("ch3_block_reduction/v3_sequential.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v3 = load("ch3_block_reduction/v3_sequential.cu")
v3

# %% tags=["gpu"]
check(v3.mse, "mse")

# %% [markdown]
# ## Version 4: the first add during the load
#
# Half of version 3's threads only load in the first round. Each thread now loads two elements
# and adds them before the tree: half as many blocks.

# %%
show_source("ch3_block_reduction/v4_first_add_during_load.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v4 = load("ch3_block_reduction/v4_first_add_during_load.cu")
v4

# %% tags=["gpu"]
check(v4.mse, "mse")

# %% [markdown]
# ## Version 5: the last warp with shuffles
#
# The last rounds run inside one warp but still pay a block-wide barrier each. Warp shuffles
# finish them in registers. (Harris's original unrolled them over `volatile` shared memory
# without barriers; since Volta's independent thread scheduling that is a race.)

# %%
show_source("ch3_block_reduction/v5_warp_shuffle_tail.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v5 = load("ch3_block_reduction/v5_warp_shuffle_tail.cu")
v5

# %% tags=["gpu"]
check(v5.mse, "mse")

# %% [markdown]
# ## Version 6: wide loads, a grid sized to the GPU, any loss
#
# The tree is no longer the problem; memory is. To reach the bandwidth a GPU needs many bytes in
# flight: each thread now issues several 16-byte loads (`float4`) before it uses any, and the
# grid is just the blocks that fit on the GPU at once, each thread walking the input with a
# grid-stride loop, so that the tree and the atomic happen once per resident block instead of
# once per 512 elements. Unaligned views and odd sizes are handled at the edges.
#
# Version 6 is also a template over the *loss*: the per-element work is a functor.

# %%
show_source("ch3_block_reduction/v6_vectorized_grid_stride.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v6 = load("ch3_block_reduction/v6_vectorized_grid_stride.cu")
v6

# %% tags=["gpu"]
check(v6.mse, "mse")

# %% [markdown]
# The check also covers unaligned views (`x[1:]` starts 4 bytes past a 16-byte boundary), which
# version 6 handles by peeling its first elements:

# %% tags=["gpu"]
pred, target = torch.randn(100_003, device="cuda"), torch.randn(100_003, device="cuda")
for offset in range(4):
    p, t = pred[offset:], target[offset:]
    got, want = v6.mse(p, t).item(), kernels.losses.mse(p.double(), t.double()).item()
    print(f"offset {offset}: {'PASS' if abs(got - want) <= 1e-5 * want else 'FAIL'}")

# %% [markdown]
# ## One skeleton, every element-wise loss
#
# The functors live in one header. Adding a loss to every kernel from here on is these few lines:

# %%
show_source("common/losses.cuh")

# %% [markdown]
# Version 6 instantiates its template for `SmoothL1Loss` and `HingeLoss` as well as `MseLoss`.
# Hinge needs care with shapes. KernelBench's Hinge loss takes predictions of shape $(N, D)$ and
# targets of shape $(N,)$, and `torch.mean(torch.clamp(1 - pred * target, min=0))` **broadcasts
# from the right**: the target is read as a row of length $D$ repeated over the $N$ rows, so
# `pred[i, j]` meets `target[j]`, not `target[i]` (and $D$ must equal $N$). On the CPU:

# %%
pred = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
target = torch.tensor([1.0, -1.0, 10.0])
print(pred * target)  # column j is multiplied by target[j]
try:
    pred * torch.tensor([1.0, -1.0])  # one label per row does not broadcast
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# The binding passes `target_len` $= D$ and the kernel pairs element $i$ of the flattened
# prediction with `target[i % target_len]`, without a 64-bit division per element (see
# `WrappedIndex` in version 6). Both new losses pass the same checks as MSE:

# %% tags=["gpu"]
check(v6.smooth_l1, "smooth_l1")
check(v6.hinge, "hinge")

# %% [markdown]
# ## Throughput against size
#
# Every version on MSE, and version 6 on all three losses, against eager PyTorch and
# `torch.compile`, from $2^{12}$ to $2^{30}$ elements. (Hinge's shapes are square-ish 2-D with a
# broadcast target: `kernels.bench.element_wise_shape`.)

# %% tags=["gpu", "nbval-ignore-output"]
import torch._dynamo

# torch.compile(dynamic=False) compiles one graph per size; allow all of them.
setattr(torch._dynamo.config, "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit")
        else "cache_size_limit", 64)
measured = []
for loss, versions in [("mse", {"v1": v1.mse, "v2": v2.mse, "v3": v3.mse, "v4": v4.mse,
                                "v5": v5.mse, "v6": v6.mse}),
                       ("smooth_l1", {"v6": v6.smooth_l1}), ("hinge", {"v6": v6.hinge})]:
    reference = kernels.get_loss(loss).reference
    providers = {"eager": reference, "torch.compile": torch.compile(reference, dynamic=False),
                 **versions}
    measured += bench.sweep(providers, loss, [bench.element_wise_shape(n, loss) for n in bench.SIZES])
results.save(results.rows_from(measured, GPU, "ch3", PEAK), "ch3")
print(f"{len(measured)} measurements saved")

# %% [markdown]
# The ladder at the largest size measured ($2^{30}$ elements, 4 GiB per input, in the published
# run), each version against the one before it (step) and against version 1 (cumulative),
# generated from the measurements:

# %% tags=["nbval-ignore-output"]
rows = results.load("ch3")
VERSIONS = ["v1", "v2", "v3", "v4", "v5", "v6"]
largest = max({r["shape"] for r in results.select(rows, loss="mse")}, key=lambda shape: shape[0])
print(f"MSE, {largest[0]:,} elements")
Markdown(results.speedup_table(rows, VERSIONS, "mse", largest, baseline="v1"))

# %% tags=["nbval-ignore-output"]
# The tree versions 1 to 3, close together, in grey: the colours are the steps that change how
# memory is read.
kernels.plot_throughput(rows, "mse", providers=["eager", "torch.compile", *VERSIONS],
                        highlight=["eager", "torch.compile", "v4", "v5", "v6"]);

# %% tags=["nbval-ignore-output"]
Markdown(results.markdown_table(rows, ["eager", "torch.compile", *VERSIONS], "mse"))

# %% [markdown]
# The step column says what each fix is worth on this GPU; compare it with Harris's 2007
# measurements {cite}`harris2007reduction`. On this GPU the ladder does not climb at every
# step: version 2 is *slower* than version 1 (a step speed-up below 1), and version 3 only wins
# that back, ending a few percent ahead of version 1. For a loss that reads two large inputs the
# tree is a small part of the work: the large gains come from the steps that change how memory
# is read, version 4's two loads per thread and version 6's wide loads and resident grid, with
# a smaller one from version 5's shuffle tail. Version 6 comes close to the read bandwidth at
# the largest size, just behind `torch.compile` there, level with it in the upper part of the
# range, and behind it at smaller sizes, where its three launches per call weigh more than
# `torch.compile`'s. At small sizes all six versions are close to
# one another: they are bound by launches (three per call), which chapter 4 reduces.
# Smooth L1 and Hinge with the same kernel:

# %% tags=["nbval-ignore-output"]
kernels.plot_throughput(rows, "smooth_l1", providers=["eager", "torch.compile", "v6"]);

# %% tags=["nbval-ignore-output"]
kernels.plot_throughput(rows, "hinge", providers=["eager", "torch.compile", "v6"]);

# %% tags=["nbval-ignore-output"]
Markdown(results.markdown_table(rows, ["eager", "torch.compile", "v6"], "smooth_l1") + "\n\n"
         + results.markdown_table(rows, ["eager", "torch.compile", "v6"], "hinge"))

# %% [markdown]
# For Smooth L1 the picture is MSE's: version 6 is ahead of `torch.compile` at the smaller
# sizes, level with it from about $2^{24}$ elements, and just behind it at $2^{30}$. For Hinge,
# `torch.compile` is ahead at most sizes, and version 6 stays a few percent behind it at
# $2^{30}$.
#
# ## Exercises

# %% [markdown]
# ````{exercise}
# :label: ex-ch3-smooth-l1
#
# `kernels/exercises/ch3_smooth_l1.cu` is the chapter's reduction skeleton in its simplest form
# (version 6 without the vector loads) with a loss functor `MySmoothL1` that still computes the
# squared error. Write Smooth L1 (`F.smooth_l1_loss`, $\beta = 1$): $\frac12 d^2$ if $|d| < 1$,
# else $|d| - \frac12$, with $d = p - t$. Try it without looking at `losses.cuh`; then try a version
# without a branch.
#
# ```{admonition} Hint
# :class: dropdown
# Only the body of `operator()` changes. Without a branch: with $m = \min(|d|, 1)$, the loss is
# $\frac12 m^2 + (|d| - m)$. Watch NaN: `fminf(NaN, 1)` is 1, but PyTorch's loss of a NaN is NaN.
# ```
# ````

# %%
show_source("exercises/ch3_smooth_l1.cu")

# %% tags=["gpu", "nbval-ignore-output"]
try:
    exercise = load("exercises/ch3_smooth_l1.cu")
    check(exercise.smooth_l1, "smooth_l1")
except (CheckFailed, KernelBuildError) as failure:
    print(failure)

# %% [markdown]
# ````{exercise}
# :label: ex-ch3-broken-reduction
#
# `kernels/exercises/ch3_broken_reduction.cu` is version 3 retyped from memory, and the check
# fails for every input of more than one element. Find the bug and fix it. Would the check also
# catch a missing `__syncthreads()`?
#
# ```{admonition} Hint
# :class: dropdown
# Run the tree by hand with 8 threads: which values does `sdata[0]` hold after the last round
# that runs? Look at the loop's condition. For the second question: a missing barrier is a race,
# whose outcome depends on the order the warps happen to run in.
# ```
# ````

# %%
show_source("exercises/ch3_broken_reduction.cu")

# %% tags=["gpu", "nbval-ignore-output"]
try:
    exercise = load("exercises/ch3_broken_reduction.cu")
    check(exercise.mse, "mse")
except (CheckFailed, KernelBuildError) as failure:
    print(failure)

# %% [markdown]
# ````{exercise}
# :label: ex-ch3-hinge
#
# `kernels/exercises/ch3_hinge_broadcast.cu` computes the Hinge loss with one label per *row* of
# the predictions, as a support-vector machine would. PyTorch does not. Make it pair every
# prediction with the target PyTorch pairs it with, for every shape the check tries.
#
# ```{admonition} Hint
# :class: dropdown
# The prediction is flattened row by row: element $i$ is row $i / D$, column $i \bmod D$, and
# `target_len` is $D$. Which of the two does broadcasting from the right use? The same formula
# must also work when target and prediction have the same shape.
# ```
# ````

# %%
show_source("exercises/ch3_hinge_broadcast.cu")

# %% tags=["gpu", "nbval-ignore-output"]
try:
    exercise = load("exercises/ch3_hinge_broadcast.cu")
    check(exercise.hinge, "hinge")
except (CheckFailed, KernelBuildError) as failure:
    print(failure)
