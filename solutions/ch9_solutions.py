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
# # Solutions: chapter 9
#
# The answers to the exercises of {doc}`../chapters/09_kernelbench`.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %%
# ROOT, the repository's folder, comes from the notebook's first cell (the book hides it).
import os

import torch

from kernels import kernelbench
from kernels.notebook import show_source

SOLUTIONS = os.path.join(ROOT, "solutions", "kernels")

# %% [markdown]
# ```{solution-start} ch9-model-new
# :class: dropdown
# ```
#
# A `ModelNew` in KernelBench's form, `solutions/kernels/ch9_model_new.py`: the CUDA source in the
# Python file, compiled with `load_inline` when it is imported. Two kernels, as in chapter 4: a
# grid of 8 blocks per SM, each thread striding over the predictions 16 bytes at a time, four
# loads in flight before it adds their terms in `float`; each block writes its sum in `double`;
# one block of 1024 threads adds the blocks' sums in a fixed order and divides by $n$. The same
# bits every run. (Several loads in flight per thread, not one: chapter 3's lesson about bytes in
# flight, again.)
#
# The broadcast: element $e$ of the predictions pairs with `targets[e % cols]`, `cols` the
# targets' length (KernelBench's 32768, the predictions' last dimension; or all of $n$ for
# targets of the predictions' shape). The four values of a `float4` lie in one row when `cols`
# is a multiple of 4, so their labels are one aligned `float4` of the targets, at a column
# that each step of the grid-stride loop advances by `(4 * stride) % cols`, with one
# subtraction instead of a 64-bit modulo per load. Any other broadcast (a label per row, of
# shape (N, 1)) the forward expands first. Both kernels run on the current stream, so the
# events time all of the work and the stream check has nothing to say.

# %%
show_source(os.path.join(SOLUTIONS, "ch9_model_new.py"), fold=False)

# %% [markdown]
# First a label per row, which the forward expands, and odd sizes, which take the scalar path;
# then KernelBench's problem 100 under the chapter's rules and checks, in a process of its own:

# %% tags=["gpu"]
ModelNew = kernelbench.model_from_source(
    open(os.path.join(SOLUTIONS, "ch9_model_new.py")).read())
g = torch.Generator(device="cuda").manual_seed(0)
for pred_shape, target_shape in (((7, 33), (33,)), ((7, 33), (7, 1)),
                                 ((64, 64), (64, 64))):
    p = torch.randn(pred_shape, generator=g, device="cuda")
    t = torch.randint(0, 2, target_shape, generator=g, device="cuda").float() * 2 - 1
    print(pred_shape, target_shape,
          torch.allclose(ModelNew()(p, t), kernelbench.Model100()(p, t)))

# %% tags=["gpu", "nbval-ignore-output"]
problem, size = kernelbench.sized_for(100, torch.cuda.mem_get_info()[0])
mine = kernelbench.evaluate_isolated(problem, os.path.join(SOLUTIONS, "ch9_model_new.py"),
                                     entry="load_inline")
print(f"({size})\n{mine.verdict}")

# %% [markdown]
# It reads the 4 GiB of predictions once, like the course's operator and `torch.compile`'s
# fused kernel, and runs within a few percent of the fused kernel (the verdict line above says
# which way in this run): at the bandwidth bound little is left to win, and what is left is the host's time
# to launch, which chapter 9's two timings separate.
#
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch9-beat-the-checks
# :class: dropdown
# ```
#
# Count the calls. The validator calls a `ModelNew` the same number of times before it times it:
# five trials, two for `check_recomputes`, one off the distribution, two coverage trials, one with
# an offset and scale: eleven. A `ModelNew` that computes honestly for eleven calls and reads
# every other row from then on (warm-up and timed calls) passes all of them. The timed calls get
# new inputs each, and each output is compared with the reference's, but those inputs come from
# KernelBench's i.i.d. distribution, on which the mean of half the rows is within the tolerance.
# Here the half is taken by `torch.compile`'s fused kernel, so that the speed-up looks earned:

# %%
class CountsCalls(torch.nn.Module):
    HONEST_CALLS = 11  # the validator's calls before the timing

    def __init__(self):
        super().__init__()
        self.reference, self.calls = kernelbench.Model94(), 0
        self.compiled = torch.compile(kernelbench.Model94())

    def forward(self, predictions, targets):
        self.calls += 1
        if self.calls <= self.HONEST_CALLS:
            return self.reference(predictions, targets)
        return self.compiled(predictions[::2], targets[::2])


# %% tags=["gpu", "nbval-ignore-output"]
counted = kernelbench.evaluate(94, CountsCalls, entry="counts calls", exact_inputs=False)
print(counted.verdict)
print(counted.notes)

# %% [markdown]
# The check that catches it puts the secret inputs where the program cannot predict them: some of
# the timed calls, chosen at random, get coverage inputs instead of KernelBench's (written outside
# the timed window, like every timed call's inputs now), and their outputs are compared with the
# float64 reference. A program that subsamples in any timed call then fails with probability
# near 1 for each such call. Its cost is outside the measurement: drawing those inputs and the
# float64 reference of each (a pass over the inputs, a few milliseconds at this size), and the
# timed calls on coverage inputs must be left out of the mean, or kept, if the program's speed
# does not depend on the values (a kernel that reads every element does not).
#
# ```{solution-end}
# ```
