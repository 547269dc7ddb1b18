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
# # Solutions: chapter 3
#
# The answers to the exercises of {doc}`../chapters/03_block_reduction`. Each builds the reference
# solution kernel from `solutions/kernels/` and runs the same check as the exercise.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %%
# ROOT, the repository's folder, comes from the notebook's first cell (the book hides it).
import torch

import kernels
from kernels import bench, check, load
from kernels.notebook import show_source

# %% [markdown]
# ```{solution-start} ex-ch3-smooth-l1
# :class: dropdown
# ```
#
# The value needs only the functor; the target needs the loads as well (below). The reduction,
# the grid and the launch are the skeleton's. The functor is written without a branch: with $m = \min(|d|, 1)$, the loss $\frac12 m^2 + (|d| - m)$
# is $\frac12 d^2$ when $|d| < 1$ and $|d| - \frac12$ otherwise. `fminf` returns the number when one
# argument is NaN, so a NaN difference is returned explicitly first (PyTorch's loss of a NaN is
# NaN). The branch in `kernels/common/losses.cuh` is just as good: both sides are a couple of
# instructions, and the compiler turns such a branch into a select anyway.
#
# The functor alone does not reach the target on an H100 (this solution's functor in the
# skeleton's loop, timed beside version 6 in `bench/PERFLOG.md`): the skeleton's loop reads
# 4 bytes per load instruction and computes `i % target_len`, a 64-bit division, for every
# element. The
# solution gives the loop version 6's loads: where both inputs are 16-byte aligned and the
# target is not broadcast, `float4` vectors, two of each input in flight per iteration; the
# scalar loop does the rest (the last `n % 4` elements, misaligned views, Hinge-like broadcast
# targets). The last cell times the solution beside version 6 on the same inputs.

# %%
show_source(f"{ROOT}/solutions/kernels/ch3_smooth_l1.cu", fold=False)

# %% tags=["gpu"]
solution = load(f"{ROOT}/solutions/kernels/ch3_smooth_l1.cu")
check(solution.smooth_l1, "smooth_l1", special_values=True)

# %%
show_source("ch3_block_reduction/v6_vectorized_grid_stride.cu", start="// Chapter 3",
            end="#include")

# %% tags=["gpu", "nbval-ignore-output"]
v6 = load("ch3_block_reduction/v6_vectorized_grid_stride.cu")
bench.speedup_target(solution.smooth_l1, v6.smooth_l1, "smooth_l1", (1 << 28,), 0.95,
                     label="solution", reference_label="version 6");

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ex-ch3-broken-reduction
# :class: dropdown
# ```
#
# The loop condition was `s > 1`, so the last round, `s = 1`, which adds `sdata[1]` into
# `sdata[0]`, never ran: every block dropped the sum of half its values. With 8 threads: after
# `s = 4` the sums are in `sdata[0..3]`, after `s = 2` in `sdata[0..1]`, and only `s = 1` makes
# `sdata[0]` the total. The fix is `s > 0`.
#
# The check catches this bug on every input of two or more elements because it is deterministic.
# A missing `__syncthreads()` is different: it is a race, and whether a warp reads a value before
# another warp has written it depends on scheduling, so a check can pass by luck, on one GPU and
# not another. `compute-sanitizer --tool racecheck` finds such races in shared memory.

# %%
show_source(f"{ROOT}/solutions/kernels/ch3_broken_reduction.cu", fold=False)

# %% tags=["gpu"]
solution = load(f"{ROOT}/solutions/kernels/ch3_broken_reduction.cu")
check(solution.mse, "mse")

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ex-ch3-padded-tree
# :class: dropdown
# ```
#
# With `padded(w) = w + w / 32` the words of a warp in round $s$, $2s$ apart, move one bank
# further every 32 words, so the 32 accesses of a round fall in 32 different banks (the model
# below, which is `strided_rounds` with the padding). The array needs
# `padded(kThreads - 1) + 1 = kThreads + kThreads / 32` words. The order of the additions in
# a block is version 2's.

# %%
show_source(f"{ROOT}/solutions/kernels/ch3_padded_tree.cu", fold=False)

# %%
def padded_ways(threads=256, banks=32):
    """Per round s: wavefronts per access of the busiest warp, with one pad word per 32."""
    for s in (1 << k for k in range(threads.bit_length() - 1)):
        words = {}
        for tid in (t for t in range(threads) if 2 * s * t < threads):
            w = 2 * s * tid
            words.setdefault(tid // 32, []).append(w + w // 32)
        yield s, max(max(sum(1 for w in ws if w % banks == b) for b in range(banks))
                     for ws in words.values())


print("round s:          ", [s for s, _ in padded_ways()])
print("wavefronts/access:", [ways for _, ways in padded_ways()])

# %% [markdown]
# Timed against version 2 of the chapter:

# %%
show_source("ch3_block_reduction/v2_interleaved_strided.cu", start="// Chapter 3",
            end="#include")

# %% tags=["gpu", "nbval-ignore-output"]
solution = load(f"{ROOT}/solutions/kernels/ch3_padded_tree.cu")
v2 = load("ch3_block_reduction/v2_interleaved_strided.cu")
check(solution.mse, "mse")
bench.speedup_target(solution.mse, v2.mse, "mse", (1 << 24,), 1.1,
                     label="padded tree", reference_label="version 2");

# %% [markdown]
# ```{solution-end}
# ```
