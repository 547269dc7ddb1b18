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
# # Solutions: chapter 5
#
# The answers to the exercises of {doc}`../chapters/05_cross_entropy`. Each reference kernel
# lives in `solutions/kernels/`; the cells below show it, build it, and run the same check as
# the exercise, which prints one PASS line per case.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %%
# ROOT (the repository's folder) and the imports of os come from the
# notebook's first cell, which the book hides.
from kernels import Chapter
from kernels.exercises.ch5_checks import (check_ignore_index, check_label_smoothing,
                                          check_online_softmax)
from kernels.notebook import show_source

SOLUTIONS = os.path.join(ROOT, "solutions", "kernels")
ch = Chapter("ch5")

# %% [markdown]
# ```{solution-start} ch5-ignore-index
# :class: dropdown
# ```
#
# An ignored row is valid input: its loss is 0 and it does not raise the bad-target flag.
# The finishing kernel counts, in the same fixed-order loop that adds the losses, the rows
# whose target is not `ignore_index`, and the mean divides by that count. With every row
# ignored the count is 0 and $0/0$ is NaN, which is what PyTorch returns. The sum and
# `reduction="none"` need nothing more: their ignored rows are already 0.

# %%
show_source(os.path.join(SOLUTIONS, "ch5_ignore_index.cu"), fold=False)

# %% tags=["gpu"]
assert ch.exercise(os.path.join(SOLUTIONS, "ch5_ignore_index.cu"), check_ignore_index)

# %% [markdown]
# The target: one comparison per row, against reads of 16 KB per row, costs nothing measurable.

# %%
show_source("ch5_cross_entropy/v1_two_pass_row.cu", start="// Chapter 5",
            end="#include")

# %% tags=["gpu", "nbval-ignore-output"]
from functools import partial

from kernels import bench, load
from kernels.cross_entropy import cross_entropy

solution = load(os.path.join(SOLUTIONS, "ch5_ignore_index.cu"))
v1 = load("ch5_cross_entropy/v1_two_pass_row.cu")
bench.speedup_target(partial(cross_entropy, kernel=solution),
                     partial(cross_entropy, kernel=v1),
                     "cross_entropy", (32768, 4096), 0.95, label="ignore_index",
                     reference_label="version 1");

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch5-online-softmax
# :class: dropdown
# ```
#
# With $m' = \max(m, x)$, every term of the old sum is rescaled by the same factor,
# $e^{x_i - m'} = e^{x_i - m} e^{m - m'}$, so
#
# $$ s' = s\, e^{m - m'} + e^{x - m'} . $$
#
# If $x \le m$ then $m' = m$, the factor is 1 and $s' = s + e^{x - m}$. If $x > m$ the old sum
# shrinks by $e^{m - x} < 1$ and the new term is $e^0 = 1$. For the first logit, $m = -\infty$
# and $s = 0$: $s' = 0 \cdot e^{-\infty} + 1 = 1$ (the kernel returns early while
# $m' = -\infty$, because $e^{-\infty - (-\infty)}$ is NaN). Without the rescale, the sum adds
# terms taken relative to different maxima. It is still right when no thread ever sees a
# larger logit after its first one: in particular when every thread gets at most one logit, so
# the check's rows of 10 classes (a 256-thread block per row) pass, and every longer row fails;
# `merge`, which was correct, does the rest.

# %%
show_source(os.path.join(SOLUTIONS, "ch5_online_softmax.cu"), fold=False)

# %% tags=["gpu"]
assert ch.exercise(os.path.join(SOLUTIONS, "ch5_online_softmax.cu"),
                   check_online_softmax)

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch5-label-smoothing
# :class: dropdown
# ```
#
# With $\log p_j = x_j - \mathrm{lse}$ and $\sum_j q_j = 1$,
#
# $$
# -\sum_j q_j \log p_j = \mathrm{lse}\sum_j q_j - \sum_j q_j x_j
# = \mathrm{lse} - (1 - \varepsilon)\, x_t - \frac{\varepsilon}{C} \sum_j x_j .
# $$
#
# The second pass already loads every logit to add its exponential; it adds the logit itself
# to a second per-thread sum, reduced over the block like the first. No third read of the row.

# %%
show_source(os.path.join(SOLUTIONS, "ch5_label_smoothing.cu"), fold=False)

# %% tags=["gpu"]
assert ch.exercise(os.path.join(SOLUTIONS, "ch5_label_smoothing.cu"),
                   check_label_smoothing)

# %% [markdown]
# ```{solution-end}
# ```
