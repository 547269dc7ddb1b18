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
# # Solutions: chapter 2
#
# The answers to the exercises of {doc}`../chapters/02_atomics`. Each builds the reference
# solution kernel from `solutions/kernels/` and runs the same check as the exercise.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %%
# ROOT, the repository's folder, comes from the notebook's first cell (the book hides it).
import torch

import kernels
from kernels import bench, check, load
from kernels.exercises.ch2_checks import (every_lane_reaches_the_shuffles,
                                          lanes_leaving_before_a_shuffle)
from kernels.notebook import show_source

# %% [markdown]
# ```{solution-start} ex-ch2-warp-atomics
# :class: dropdown
# ```
#
# Five `__shfl_down_sync` steps (offsets 16, 8, 4, 2, 1) leave the warp's sum in lane 0, which
# alone calls `atomicAdd`. The trap is the early `return`: with the full mask `0xffffffff`, every
# lane of the warp must execute the shuffle, and in the last warp of the grid the lanes past the
# end of the input had already left, so the result was undefined. Those threads now stay and
# contribute 0. Undefined is not the same as wrong on every GPU: on the H100 the version with
# the early `return` passed every case of `check` and compute-sanitizer's synccheck reported
# no error (`bench/PERFLOG.md`, session 7). No run can catch it there, so the exercise's check
# reads the source; the rule is what keeps the kernel correct on the next GPU or compiler. One
# element per thread remains, so this is still far from the bandwidth, but the contended address
# sees 32 times fewer atomics than in version 1 (timed below).

# %%
show_source(f"{ROOT}/solutions/kernels/ch2_warp_atomics.cu", fold=False)

# %% tags=["gpu"]
solution = load(f"{ROOT}/solutions/kernels/ch2_warp_atomics.cu")
check(solution.mse, "mse")

# %% [markdown]
# The source check passes this kernel, and fails the same kernel with the skeleton's early
# `return` kept (no GPU needed):

# %%
SOLUTION = f"{ROOT}/solutions/kernels/ch2_warp_atomics.cu"
every_lane_reaches_the_shuffles(SOLUTION)
text = open(SOLUTION).read()
guard = "float v = i < a.n ? loss(a.pred[i], a.target[i % a.target_len]) : 0.0f;"
assert guard in text  # the solution guards its load instead of returning
trap = text.replace(guard, "if (i >= a.n) return;\n    "
                           "float v = loss(a.pred[i], a.target[i % a.target_len]);")
print("early-return version, kernels flagged:", lanes_leaving_before_a_shuffle(trap))

# %% [markdown]
# Timed against version 1 of the chapter at $2^{24}$ elements:

# %%
show_source("ch2_atomics/v1_atomic_per_element.cu", start="// Chapter 2",
            end="#include")

# %% tags=["gpu", "nbval-ignore-output"]
v1 = load("ch2_atomics/v1_atomic_per_element.cu")
bench.speedup_target(solution.mse, v1.mse, "mse", (1 << 24,), 20,
                     label="warp-aggregated", reference_label="version 1", reps=10);

# %% [markdown]
# Nearly the full 32, and not quite: the atomics were almost all of version 1's time, not all
# of it. Every thread still loads its two elements and, now, shuffles five times; and the contended address
# still sees $2^{24} / 32 = 524288$ atomics, at the rate chapter 2 measured for one address.

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ex-ch2-race
# :class: dropdown
# ```
#
# The race is `block_sum += sum`. On shared memory, `+=` is a load, an add and a store: the 32
# lanes of a warp load the same old value, each adds its own sum, and all store; one store wins
# and 31 sums are lost, and the warps of the block interleave the same way. Which store wins
# varies, hence a different wrong answer from run to run.
#
# The smallest fix is `atomicAdd(&block_sum, sum)`: shared-memory atomics are fast, but 256 of
# them per block on one word still serialise. The faster fix, below, first adds the warp's 32
# sums with shuffles, so that one shared-memory atomic per warp (8 per block) remains.

# %%
show_source(f"{ROOT}/solutions/kernels/ch2_race.cu", fold=False)

# %% tags=["gpu"]
solution = load(f"{ROOT}/solutions/kernels/ch2_race.cu")
check(solution.mse, "mse")

# %% [markdown]
# The target, and the two fixes side by side (the exercise's question to discuss): at $2^{28}$ elements each thread adds its sum to
# shared memory once, at the end of a long loop, so both fixes run at the same speed; at
# $2^{16}$ elements a thread has one element, and the 256 shared-memory atomics per block of
# the smallest fix take turns on one word: at that size they make it more than twice as slow
# as the faster fix (the last cell's lines).

# %%
show_source(f"{ROOT}/solutions/kernels/ch2_race_shared_atomic.cu", start="__global__",
            end="__global__", fold=False)

# %% tags=["gpu", "nbval-ignore-output"]
smallest = load(f"{ROOT}/solutions/kernels/ch2_race_shared_atomic.cu")
check(smallest.mse, "mse")
bench.bandwidth_target(solution.mse, "mse", (1 << 28,), 0.85, bench.read_bandwidth(),
                       label="faster fix")
for n in (1 << 16, 1 << 28):
    for m in bench.bench_loss({"atomic per thread": smallest.mse,
                               "shuffles first": solution.mse},
                              "mse", (n,)):
        print(f"2^{n.bit_length() - 1}  {m.provider:<18} {m.ms * 1e3:9.1f} us  "
              f"{m.gbps:7.0f} GB/s")

# %% [markdown]
# ```{solution-end}
# ```
