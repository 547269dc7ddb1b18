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
# # Solutions: chapter 4
#
# The answers to the exercises of {doc}`../chapters/04_two_pass`. Each builds the reference
# solution kernel from `solutions/kernels/` and runs the same check as the exercise.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %%
# ROOT, the repository's folder, comes from the notebook's first cell (the book hides it).
import torch

import kernels
from kernels import bench, check, load
from kernels.exercises.ch4_checks import check_kahan
from kernels.notebook import show_source

# %% [markdown]
# ```{solution-start} ex-ch4-kahan
# :class: dropdown
# ```
#
# Kahan summation carries the rounding error of the running sum in a second float `c`. For each
# partial $x$: `y = x - c` (the addend, corrected), `t = sum + y` (rounded), `c = (t - sum) - y`
# (exactly what that rounding added), `sum = t`. The error of the whole sum then no longer grows
# with the number of addends: it stays about one float rounding, close to what a float64
# accumulator gives (the strict check below passes), while every operation is still float32.
# The compiler keeps `(t - sum) - y` as written: nvcc does not reassociate float additions,
# not even with `--use_fast_math` (chapter 4 counts the PTX's adds in both builds). A compiler
# that did, as `-ffast-math` allows GCC and Clang on a CPU, could reduce `c` to 0 and silently
# undo the compensation.

# %%
show_source(f"{ROOT}/solutions/kernels/ch4_kahan.cu", fold=False)

# %% tags=["gpu"]
check_kahan(load(f"{ROOT}/solutions/kernels/ch4_kahan.cu"))

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ex-ch4-last-block
# :class: dropdown
# ```
#
# When a block sees that it was the last one to count itself done, every other block of the
# launch has already incremented the counter and none will touch it again, so the last block
# can simply store 0 into it: `g_blocks_done = 0;`. The next launch on the same stream starts
# only after this one has finished, so it finds 0. Version 3 of the chapter gets the same effect
# with `atomicInc(counter, gridDim.x - 1)`, which wraps to 0 by itself on the last increment.
#
# Either way the counter belongs to the module, not to the launch: two launches running at the
# same time on two streams would mix their counts. A counter in the workspace, zeroed with
# `cudaMemsetAsync` before every launch of more than one block (version 3's `mse`), is always
# safe, at the price of one more operation on the stream.

# %%
show_source(f"{ROOT}/solutions/kernels/ch4_last_block.cu", fold=False)

# %% tags=["gpu"]
solution = load(f"{ROOT}/solutions/kernels/ch4_last_block.cu")
check(solution.mse, "mse")
check(solution.mse, "mse")  # a second round: the counter is ready again

# %% [markdown]
# ```{solution-end}
# ```
