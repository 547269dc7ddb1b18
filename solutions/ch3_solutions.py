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
# # Solutions: chapter 3
#
# The answers to the exercises of {doc}`../chapters/03_block_reduction`. Each builds the reference
# solution kernel from `solutions/kernels/` and runs the same check as the exercise.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %%
import torch

import kernels
from kernels import bench, check, load
from kernels.notebook import show_source

# %% [markdown]
# ```{solution-start} ex-ch3-smooth-l1
# :class: dropdown
# ```
#
# Only the functor changes: the reduction, the grid and the launch are the skeleton's. The
# solution is written without a branch: with $m = \min(|d|, 1)$, the loss $\frac12 m^2 + (|d| - m)$
# is $\frac12 d^2$ when $|d| < 1$ and $|d| - \frac12$ otherwise. `fminf` returns the number when one
# argument is NaN, so a NaN difference is returned explicitly first (PyTorch's loss of a NaN is
# NaN). The branch in `kernels/common/losses.cuh` is just as good: both sides are a couple of
# instructions, and the compiler turns such a branch into a select anyway.

# %%
show_source(f"{ROOT}/solutions/kernels/ch3_smooth_l1.cu", fold=False)

# %% tags=["gpu"]
solution = load(f"{ROOT}/solutions/kernels/ch3_smooth_l1.cu")
check(solution.smooth_l1, "smooth_l1")

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
# ```{solution-start} ex-ch3-hinge
# :class: dropdown
# ```
#
# PyTorch broadcasts from the right: a target of shape $(D,)$ next to predictions of shape
# $(N, D)$ is read as $(1, D)$ and repeated over the rows, so `pred[r, c]` meets `target[c]`.
# Flattened row by row, element $i$ is in column $i \bmod D$, and `target_len` is $D$: the index is
# `i % target_len`. The same formula gives `i` when target and prediction have the same shape.
# Version 6 of the chapter computes the same index without a 64-bit division per element.

# %%
show_source(f"{ROOT}/solutions/kernels/ch3_hinge_broadcast.cu", fold=False)

# %% tags=["gpu"]
solution = load(f"{ROOT}/solutions/kernels/ch3_hinge_broadcast.cu")
check(solution.hinge, "hinge")

# %% [markdown]
# ```{solution-end}
# ```
