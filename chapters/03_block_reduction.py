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
# # Chapter 3: the block reduction in shared memory
#
# ```{admonition} Before you start
# :class: tip
#
# **You will be able to:**
#
# - write a tree {term}`reduction` in {term}`shared memory`, and remove its {term}`divergence`
#   and {term}`bank conflicts <bank conflict>` one version at a time;
# - use {term}`warp shuffles <warp shuffle>`, {term}`vectorised loads <vectorised load>` and a
#   {term}`grid-stride loop`, and say what each is worth;
# - compute any element-wise loss with the same kernel and a {term}`functor` of a few lines.
#
# **Assumes:** chapter 2 (a kernel, atomics, a warp's shuffles); the primer's
# {term}`occupancy` and {term}`bytes in flight`.
#
# **Words it uses** (defined in the {doc}`../book/glossary`): {term}`thread`, {term}`block`,
# {term}`atomic`, {term}`bandwidth`, {term}`SASS`.
#
# **Reading time:** about 13 minutes. **Run time:** about 2 minutes
# on a small GPU (the book's small-GPU run, {doc}`../book/status`).
# ```
#
# Chapter 2 ended with one {term}`atomic` per {term}`block`, but its blocks added their values with shuffles and
# still read memory 4 bytes at a time. This chapter builds the block reduction step by step, the
# way Mark Harris's classic CUDA reduction does {cite}`harris2007reduction`: a tree in shared
# memory, then one fix per version. Each {term}`kernel` file's header says what it fixes and what is
# still slow; the table at the end says how much each step was worth on our GPU. The ladder:
#
# | version | the one change | what it changes |
# |---|---|---|
# | 1 | a tree in shared memory | the starting point |
# | 2 | working threads packed into the first warps | fewer warps run each round |
# | 3 | sequential addressing | a warp's words fall in different banks |
# | 4 | two loads per thread, the first add during the load | half as many blocks |
# | 5 | the last warp with shuffles | no barriers in the last rounds |
# | 6 | 16-byte loads and a grid sized to the GPU | more bytes in flight, fewer blocks |
#
# Then the same skeleton computes every element-wise loss of the course: a new loss is a functor
# of a few lines.


# %%
import numpy as np
import torch
from IPython.display import Markdown

import kernels
from kernels import Chapter, bench, check, load, results
from kernels.notebook import show_diff, show_source

ch = Chapter("ch3")  # the chapter's id, GPU and read bandwidth, for its measurements

# %% [markdown]
# One detail first. Versions 1 to 5 use one block per 256 or 512 elements: millions of blocks at
# $2^{30}$ elements. If each added its sum into one float, those atomics would queue on one
# address (chapter 2's contention). At the rate chapter 2 measured for one address, they alone
# would take about as long as a whole pass of these kernels, and would blur the differences
# between the versions. So block $b$ adds into slot $b \bmod 1024$, and a last small kernel adds
# the 1024 slots and divides by $n$:

# %%
show_source("common/block_slots.cuh")

# %% tags=["gpu", "nbval-ignore-output"]
print(f"{ch.gpu}: read bandwidth {ch.peak:.0f} GB/s")

# %% [markdown]
# ## Version 1: a tree in shared memory
#
# Each block loads 256 values into shared memory, then adds them pairwise in $\log_2 256 = 8$
# rounds: after round $s$ every value at an index that is a multiple of $2s$ holds the sum of
# $2s$ values. A `__syncthreads()` between rounds makes each round see the previous one's
# results. {term}`Threads <thread>` past the end of the input load 0: every thread must reach every barrier.
#
# The figures count {term}`wavefronts <wavefront>`. Shared memory is split into 32 banks of 4-byte words. The
# threads of a warp that touch different words of one bank wait for each other (a
# {term}`bank conflict`): the access is served in as many wavefronts as the most crowded bank
# has words.
#
# ```{figure} ../book/images/ch3_tree_v1.svg
# :alt: Version 1's tree drawn for 16 values: in round s only threads whose id is a multiple of 2s add, leaving the others idle inside every warp. A table for the kernel's 256 threads gives per round the working threads, the warps that run (8 until s = 16) and one wavefront per access; a bank map shows warp 0's words at s = 1, one per bank.
# :width: 100%
#
# Version 1's tree. The working threads are spread over all warps, so every warp runs every round until few threads are left. The table and the bank map are computed for the kernel's block.
# ```

# %%
show_source("ch3_block_reduction/v1_interleaved_divergent.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v1 = load("ch3_block_reduction/v1_interleaved_divergent.cu")
v1

# %% tags=["gpu"]
check(v1.mse, "mse")

# %% [markdown]
# The file has chapter 2's shape: `ReductionArgs`, the launcher and its `cudaStream_t` are in
# chapter 2's fold on the binding; `__launch_bounds__(kThreads)` tells the compiler the block's
# size, so that it can budget registers.
#
# Is `tid % (2 * s)` expensive? The GPU has no integer divide instruction: a `%` by a number
# known only at run time becomes a dozen instructions starting with a conversion to float
# (`I2F.U32.RP`). But the loop has a fixed trip count, so the compiler unrolls it, and in each
# copy `2 * s` is a constant power of two: the `%` becomes a bit mask (`LOP3.LUT`). The machine
# code the GPU runs ({doc}`../book/profiling`) shows which happened:

# %% tags=["gpu", "nbval-ignore-output"]
from kernels import profile

[(name, instructions)] = profile.sass(v1, "interleaved_divergent").items()
divisions = profile.count_opcodes(instructions, r"I2F\.U32\.RP")
masks = profile.count_opcodes(instructions, r"LOP3")
print(f"integer divisions (I2F.U32.RP): {divisions}, logic ops (LOP3.LUT): {masks}")
print(profile.excerpt(instructions, r"BAR", 10))  # the first rounds: test, load, add, store

# %% [markdown]
# Each round is a `LOP3.LUT` on `tid` (the mask `2s - 1`), predicated shared loads, an add and a
# store, then the barrier. The one division left is `i % target_len`, which pairs an element with
# its target when the target is broadcast: it runs once per element, not once per round. The
# `%` of the tree is free; what costs is the divergence.
#
# ## Version 2: no divergent warps
#
# In version 1, the threads that work in a round are spread over all warps, so every warp runs
# the round even when one of its threads works. Computing the index as `2 * s * tid` packs the
# working threads into the first warps.
#
# ```{figure} ../book/images/ch3_tree_v2.svg
# :alt: Version 2's tree drawn for 16 values: thread tid adds at index 2 s tid, so the working threads are the first ones and whole warps go idle. The table for 256 threads shows the warps that run dropping to 1 from s = 4, but 2 to 8 wavefronts per access; the bank map shows warp 0's words at s = 4 falling 8 to a bank.
# :width: 100%
#
# Version 2's tree. The working threads are packed into the first warps, but their words are 2s apart: the table (the chapter's `strided_rounds`, below) counts the bank conflicts.
# ```

# %%
show_diff("ch3_block_reduction/v1_interleaved_divergent.cu",
          "ch3_block_reduction/v2_interleaved_strided.cu")

# %% [markdown]
# The diff above: the round's test `tid % (2 * s) == 0` becomes `index < kThreads` with
# `index = 2 * s * tid`, and the thread adds at `index` instead of at its own `tid`.

# %% tags=["gpu", "nbval-ignore-output"]
v2 = load("ch3_block_reduction/v2_interleaved_strided.cu")
v2

# %% tags=["gpu"]
check(v2.mse, "mse")

# %% [markdown]
# ## Version 3: sequential addressing
#
# In round $s$ of version 2, thread `tid`
# touches word `2 * s * tid`, so the warp's addresses are $2s$ words apart and $2s$ of them
# share a bank, as long as 32 threads are still working. Counting it for the 256 threads of a
# block:

# %%
def strided_rounds(threads=256, banks=32):
    """Per round s of version 2: working warps, and words per bank for the busiest bank."""
    for s in (1 << k for k in range(threads.bit_length() - 1)):
        working = [tid for tid in range(threads) if 2 * s * tid < threads]
        warps = {}
        for tid in working:
            warps.setdefault(tid // 32, []).append(2 * s * tid)
        ways = max(max(sum(1 for w in words if w % banks == b) for b in range(banks))
                   for words in warps.values())
        yield s, len(working), len(warps), ways


print(" s   threads working   warps   wavefronts per access (1 = no conflict)")
for s, working, warps, ways in strided_rounds():
    print(f"{s:3}   {working:15}   {warps:5}   {ways}")

# %% [markdown]
# Conflicts from the first round (2-way), 8-way at $s$ = 4, 8 and 16, fewer once fewer than 8
# threads are left (the table). Adding the upper half onto the lower half instead makes a warp touch 32
# consecutive words: one per bank.
#
# ```{figure} ../book/images/ch3_tree_v3.svg
# :alt: Version 3's tree drawn for 16 values: in round s threads 0 to s - 1 add sdata[tid + s] onto sdata[tid], the working threads first and their words consecutive. The table for 256 threads shows one wavefront per access in every round; the bank map shows warp 0's 32 words in 32 different banks.
# :width: 100%
#
# Version 3's tree: sequential addressing. The working threads are the first ones and their words are consecutive, one per bank.
# ```

# %%
show_diff("ch3_block_reduction/v2_interleaved_strided.cu",
          "ch3_block_reduction/v3_sequential.cu")

# %% [markdown]
# The diff: the loop now counts `s` down from half the block, and thread `tid` adds
# `sdata[tid + s]` onto `sdata[tid]`. The rest of the kernel is unchanged.

# %% tags=["gpu", "nbval-ignore-output"]
v3 = load("ch3_block_reduction/v3_sequential.cu")
v3

# %% tags=["gpu"]
check(v3.mse, "mse")

# %% [markdown]
# Nsight Compute counts the wavefronts and the conflicts of both versions on $2^{24}$ elements
# (65536 blocks). Its requests are the load instructions the warps issue, also by warps whose
# threads all sit the round out; what costs is the wavefronts:

# %% tags=["gpu", "nbval-ignore-output"]
TWO_TREES = '''
import torch
from kernels import load
v2 = load("ch3_block_reduction/v2_interleaved_strided.cu")
v3 = load("ch3_block_reduction/v3_sequential.cu")
pred, target = torch.randn(1 << 24, device="cuda"), torch.randn(1 << 24, device="cuda")
v2.mse(pred, target)
v3.mse(pred, target)
torch.cuda.synchronize()
'''
banks = profile.ncu(TWO_TREES, "interleaved_strided|sequential",
                    profile.BANKS + ("time (us)",), launches=2)
if banks:
    print(banks.table(["v2", "v3"]))
    blocks = (1 << 24) // 256
    for column, name in enumerate(("v2", "v3")):
        print(f"{name}: {banks.value('shared load wavefronts', column) / blocks:.1f} "
              f"load wavefronts and "
              f"{banks.value('shared bank conflicts (loads)', column) / blocks:.1f} "
              f"load conflicts per block")

# %%
# strided_rounds' count per block: two loads per working warp per round, each served in the
# round's wavefronts, and thread 0's read of the sum. Version 3 has as many working warps per
# round, and one wavefront per load.
v2_count = sum(2 * warps * ways for _, _, warps, ways in strided_rounds()) + 1
v3_count = sum(2 * warps for _, _, warps, _ in strided_rounds()) + 1
print(f"counted load wavefronts per block: v2 {v2_count}, v3 {v3_count}")

# %% [markdown]
# The count matches version 3's measurement and is within a tenth of version 2's (the two
# outputs above). Version 3's half conflict per block is negligible: the banks are no longer
# the problem.

# %% [markdown]
# ## Version 4: the first add during the load
#
# Half of version 3's threads only load in the first round. Each thread now loads two elements
# and adds them before the tree: half as many blocks.

# %%
show_diff("ch3_block_reduction/v3_sequential.cu",
          "ch3_block_reduction/v4_first_add_during_load.cu")

# %% [markdown]
# The diff: a function `squared_error` returns 0 past the end, each thread stores the sum of two
# of them a block apart, and the launcher starts one block per `2 * kThreads` elements.

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
# without barriers; since Volta (2017) the threads of a warp are not guaranteed to move in
# step, so that is a race.)

# %%
show_diff("ch3_block_reduction/v4_first_add_during_load.cu",
          "ch3_block_reduction/v5_warp_shuffle_tail.cu")

# %% [markdown]
# The diff: the tree in shared memory stops at `s > 32`, and the first warp adds the last 64
# values with one add and five shuffles, as in chapter 2.

# %% tags=["gpu", "nbval-ignore-output"]
v5 = load("ch3_block_reduction/v5_warp_shuffle_tail.cu")
v5

# %% tags=["gpu"]
check(v5.mse, "mse")

# %% [markdown]
# ## Version 6: wide loads, a grid sized to the GPU, any loss
#
# The tree is no longer the problem; memory is. To reach the {term}`bandwidth` a GPU needs many
# bytes in flight. Each thread now issues several 16-byte loads (`float4`) before it uses any.
# The grid is just the blocks that fit on the GPU at once, each thread walking the input with a
# grid-stride loop. And the kernel is a template over the *loss*: the per-element work is a
# functor, `Loss`. The main loop:

# %%
show_source("ch3_block_reduction/v6_vectorized_grid_stride.cu",
            start="const float4* pred = reinterpret_cast", end="loss(p[u].w")

# %% [markdown]
# `reinterpret_cast<const float4*>` reads the float arrays as 16-byte vectors. Each iteration
# loads `kUnroll` vectors of each input, a grid's stride apart, before adding any: `__ldcs`
# loads without keeping the data in cache (it is read once), `__ldg` through the read-only
# cache (a broadcast target is read again). `WrappedIndex` keeps a broadcast target's index
# modulo its length by adding and comparing, not dividing; `loss(p, t)` calls the functor.
#
# The block's sum is no longer a tree in shared memory: each warp adds its 32 values with
# shuffles (`__shfl_xor_sync`, chapter 2), writes one sum to `warp_sums`, and the first warp
# adds those:

# %%
show_source("ch3_block_reduction/v6_vectorized_grid_stride.cu",
            start="float block_sum", end="return v;")

# %% [markdown]
# The grid has at most `resident_blocks(kernel, kThreads)` blocks, the CUDA runtime's count of
# blocks that fit on an SM at once times the SMs, so this sum and the atomic happen once per
# resident block instead of once per 512 elements.
#
# ```{figure} ../book/images/ch3_grid_stride.svg
# :alt: A grid of four resident blocks of 256 threads walks memory in rows: each row is one pass of the whole grid, one float4 per thread of each block; four rows, four loads in flight per thread, make one loop iteration, and the next iteration starts four strides further.
# :width: 100%
#
# Version 6's grid-stride loop, drawn for a grid of 4 blocks and `kUnroll` = 4: an iteration asks for `kUnroll` 16-byte loads per thread, a grid's stride apart, and the whole grid moves on together. How many the compiler keeps in flight, the machine code below shows.
# ```
#
# **Predict first.** The loop is written with `kUnroll = 4` float4 loads per input per
# iteration, but the compiler decides what is issued together. How many bytes per thread do you
# expect in flight? The cell after the check prints the machine code of the main loop, from its
# first 16-byte load. The whole file, with the edges (unaligned views, odd sizes) and the
# launcher, is in the fold:

# %%
show_source("ch3_block_reduction/v6_vectorized_grid_stride.cu")

# %% tags=["gpu", "nbval-ignore-output"]
v6 = load("ch3_block_reduction/v6_vectorized_grid_stride.cu")
v6

# %% tags=["gpu"]
check(v6.mse, "mse")

# %% tags=["gpu", "nbval-ignore-output"]
[(name, loop)] = profile.sass(v6, r"MseLossLb1ELb0E").items()  # MSE, float4 path, own target
print(profile.excerpt(loop, r"LDG\.E(\.\w+)*\.128", 12))

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
#
# Four 16-byte loads (`LDG.E...128`; `.EF`, evict first, is `__ldcs`'s hint), two per input,
# before the arithmetic on the first two: 64 bytes per thread in flight, not the `kUnroll` x 2
# x 16 = 128 the source suggests. The compiler reuses the registers of one unrolled iteration
# for the next, and picks the depth; the unrolling only gives it room. 64 bytes is five times
# the primer's estimate of about 12 bytes per thread that an H100 needs at full occupancy.
# ```
#
# The check also covers unaligned views (`x[1:]` starts 4 bytes past a 16-byte boundary), which
# version 6 handles by doing its first 1 to 3 elements one at a time ("peeling" them) until the
# pointer is 16-byte aligned:

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
show_source("common/losses.cuh", start="struct MseLoss", end="};")

# %% [markdown]
# `operator()` is the loss of one element; `grad`, its derivative, serves the backward pass
# (chapter 6). The whole header, with Smooth L1 and Hinge:

# %%
show_source("common/losses.cuh")

# %% [markdown]
# Version 6 instantiates its template for `SmoothL1Loss` and `HingeLoss` as well as `MseLoss`.
# Hinge needs care with shapes. KernelBench's Hinge loss takes predictions of shape $(N, D)$ and
# targets of shape $(N,)$. `torch.mean(torch.clamp(1 - pred * target, min=0))` **broadcasts
# from the right**: the target is read as a row of length $D$ repeated over the $N$ rows. So
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
#
# **Predict first.** Versions 2, 3 and 5 change the tree; versions 4 and 6 change how memory is
# read. At $2^{30}$ elements, which steps do you expect to be worth most? And is version 2, which
# removes divergence, faster than version 1?

# %% tags=["gpu", "nbval-ignore-output"]
ch.allow_recompiles()  # torch.compile(dynamic=False) compiles one graph per size
measured = []
for loss, versions in [("mse", {"v1": v1.mse, "v2": v2.mse, "v3": v3.mse, "v4": v4.mse,
                                "v5": v5.mse, "v6": v6.mse}),
                       ("smooth_l1", {"v6": v6.smooth_l1}), ("hinge", {"v6": v6.hinge})]:
    reference = kernels.get_loss(loss).reference
    providers = {"eager": reference, "torch.compile": torch.compile(reference, dynamic=False),
                 **versions}
    measured += bench.sweep(providers, loss,
                            [bench.element_wise_shape(n, loss) for n in bench.SIZES])
ch.save(measured)
print(f"{len(measured)} measurements saved")

# %% tags=["nbval-ignore-output"]
rows = ch.rows()  # book/results/ch3.csv
VERSIONS = ["v1", "v2", "v3", "v4", "v5", "v6"]
# The tree versions 1 to 3, close together, in grey: the colours are the steps that change how
# memory is read.
kernels.plot_throughput(rows, "mse", providers=["eager", "torch.compile", *VERSIONS],
                        highlight=["eager", "torch.compile", "v4", "v5", "v6"]);

# %% tags=["nbval-ignore-output"]
Markdown(results.markdown_table(rows, ["eager", "torch.compile", *VERSIONS], "mse"))

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
#
# Read the last row of the table, and the step column of the ladder table in the summary. On
# this GPU the ladder does not climb at every step: version 2 is *slower* than version 1, and
# version 3 only wins that back, ending slightly ahead of version 1. For a loss that reads two
# large inputs the tree is a small part of the work. The gains that last come from the steps
# that change how memory is read: version 4's two loads per thread and version 6's wide loads
# and resident grid, with a smaller one from version 5's shuffle tail. Version 3's step, as large
# as these, mostly wins back what version 2 lost. Compare with Harris's 2007 measurements
# {cite}`harris2007reduction`, where every step paid.
# ```
#
# Version 6 comes close to the read bandwidth at the largest sizes. It is just behind
# `torch.compile`, within a few percent, from $2^{24}$ elements up; below that it is further
# behind, where its three launches per call weigh more than `torch.compile`'s. At small sizes the
# six versions are within a sixth of one another: they are bound by launches (three per call),
# which chapter 4 reduces.
#
# Smooth L1 and Hinge with the same kernel:

# %% tags=["nbval-ignore-output"]
kernels.plot_throughput(rows, "smooth_l1", providers=["eager", "torch.compile", "v6"]);

# %% tags=["nbval-ignore-output"]
kernels.plot_throughput(rows, "hinge", providers=["eager", "torch.compile", "v6"]);

# %% tags=["nbval-ignore-output"]
Markdown(results.markdown_table(rows, ["eager", "torch.compile", "v6"], "smooth_l1") + "\n\n"
         + results.markdown_table(rows, ["eager", "torch.compile", "v6"], "hinge"))

# %% [markdown]
# For both losses `torch.compile` leads at the small sizes, where version 6's three launches per
# call weigh most, and version 6 is just behind it from $2^{24}$ elements up (the two tables).
#
# ## Summary
#
# - A block adds its values as a tree in shared memory; versions 2 to 6 each fix one thing:
#   {term}`divergence`, {term}`bank conflicts <bank conflict>`, idle threads in the first round,
#   barriers in the last warp, narrow loads.
# - Not every step pays on this GPU: version 2 is slower than version 1, and version 3 wins that
#   back. The gains that last change how memory is read: two loads per thread (version 4), wide
#   loads and a grid sized to the GPU (version 6).
# - Version 6 comes close to the read bandwidth at the largest sizes, within a few percent of
#   `torch.compile` from $2^{24}$ elements up; at small sizes its launches set the time.
# - A loss is a functor: the same kernel computes Smooth L1 and Hinge, with Hinge's broadcast
#   from the right, and passes the same checks.
#
# The ladder at the largest size measured, each version against the one before (step) and
# against version 1 (cumulative):

# %% tags=["nbval-ignore-output"]
CHANGES = {"v1": "a tree in shared memory", "v2": "working threads in the first warps",
           "v3": "sequential addressing", "v4": "the first add during the load",
           "v5": "the last warp with shuffles", "v6": "16-byte loads, a resident grid"}
largest = max({r["shape"] for r in results.select(rows, loss="mse")},
              key=lambda shape: shape[0])
print(f"MSE, {largest[0]:,} elements")
Markdown(results.speedup_table(rows, VERSIONS, "mse", largest, baseline="v1", changes=CHANGES))

# %% [markdown]
# ## Exercises
#
# Each exercise is a kernel file under `kernels/exercises/` for you to edit, and a cell that
# builds it and checks it against PyTorch, printing one PASS or FAIL line per case. The
# skeletons compile and run; they fail the check until you finish them. Solutions are in
# {doc}`../solutions/ch3_solutions`.

# %% [markdown]
# ```{exercise}
# :label: ex-ch3-smooth-l1
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 45 minutes
#
# `kernels/exercises/ch3_smooth_l1.cu` is the chapter's reduction skeleton in its simplest form
# (version 6 without the vector loads) with a loss functor `MySmoothL1` that still computes the
# squared error. The exercise has two parts. First the value: write Smooth L1
# (`F.smooth_l1_loss`, $\beta = 1$): $\frac12 d^2$ if $|d| < 1$, else $|d| - \frac12$, with
# $d = p - t$. Try it without looking at `losses.cuh`; then try a version without a branch. The
# check adds NaN and infinite inputs to the usual cases: PyTorch's loss of a NaN is NaN, and
# yours must be too. Then the speed. **Target**: 95% of version 6's speed on Smooth L1 at
# $2^{28}$ elements, timed side by side on your GPU. On an H100 the right functor in the
# skeleton's scalar loop misses it, so this part changes the loop too: give it version 6's loads
# (the main loop shown in version 6's section).
# ```
#
# ```{admonition} Hint
# :class: dropdown
# The value is the body of `operator()` alone. Without a branch: with $m = \min(|d|, 1)$, the loss
# is $\frac12 m^2 + (|d| - m)$. Watch NaN: `fminf(NaN, 1)` is 1, but PyTorch's loss of a NaN is
# NaN. The speed is in the loop: where both inputs are 16-byte aligned and the target is not
# broadcast, version 6 reads `float4` vectors, two of each input in flight per iteration, and
# keeps the scalar loop for the rest (the last `n % 4` elements, misaligned views, a broadcast
# target).
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch3_smooth_l1.cu")

# %% tags=["gpu", "nbval-ignore-output"]
if ch.exercise("exercises/ch3_smooth_l1.cu",
               lambda kernel: check(kernel.smooth_l1, "smooth_l1", special_values=True)):
    bench.speedup_target(load("exercises/ch3_smooth_l1.cu").smooth_l1, v6.smooth_l1,
                         "smooth_l1", (1 << 28,), 0.95, reference_label="version 6")

# %% [markdown]
# ```{exercise}
# :label: ex-ch3-broken-reduction
#
# **Difficulty:** ★☆☆ (easy) · **Time:** about 20 minutes
#
# `kernels/exercises/ch3_broken_reduction.cu` is version 3 retyped from memory, and the check
# fails for every input of more than one element. Find the bug and fix it. Would the check also
# catch a missing `__syncthreads()`?
# ```
#
# ```{admonition} Hint
# :class: dropdown
# Run the tree by hand with 8 threads: which values does `sdata[0]` hold after the last round
# that runs? Look at the loop's condition. For the second question: a missing barrier is a race,
# whose outcome depends on the order the warps happen to run in.
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch3_broken_reduction.cu")

# %% tags=["gpu", "nbval-ignore-output"]
ch.exercise("exercises/ch3_broken_reduction.cu", lambda kernel: check(kernel.mse, "mse"));

# %% [markdown]
# ```{exercise}
# :label: ex-ch3-padded-tree
#
# **Difficulty:** ★★★ (hard) · **Time:** about 60 minutes
#
# Version 3 removed version 2's bank conflicts by changing the order of the additions. The
# other classic cure keeps the order and moves the data: `kernels/exercises/ch3_padded_tree.cu`
# is version 2 without its tree, and with a function `padded(w)` that says where word `w` of
# the tree is stored. Write version 2's rounds through `padded`, then make it leave one unused
# word after every 32, and give the array the room that takes. Before you run it, predict the
# wavefronts per access with the padding: in `strided_rounds` above, pass each word `w` through
# `padded(w)` before `w % banks`. **Target**:
# 1.1 times as fast as version 2 at $2^{24}$ elements.
# ```
#
# ```{admonition} Hint
# :class: dropdown
# In round $s$ the warp's words are $2s$ apart: $32 / 2s$ consecutive threads fill the 32
# banks once, and the next thread's word is 32 further, in the bank of the first. With one
# extra word per 32 it lands one bank further. The largest padded index is
# `padded(kThreads - 1)`.
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch3_padded_tree.cu")

# %% tags=["gpu", "nbval-ignore-output"]
if ch.exercise("exercises/ch3_padded_tree.cu", lambda kernel: check(kernel.mse, "mse")):
    bench.speedup_target(load("exercises/ch3_padded_tree.cu").mse, v2.mse, "mse", (1 << 24,),
                         1.1, reference_label="version 2")
