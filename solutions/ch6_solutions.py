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
# # Solutions: chapter 6
#
# The answers to the exercises of {doc}`../chapters/06_operators`. The reference kernel lives
# in `solutions/kernels/`; the cells below show it, build it, and run the exercise's check.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %%
# ROOT (the repository's folder) and the imports of os come from the
# notebook's first cell, which the book hides.
import torch

from kernels import Chapter
from kernels.exercises.ch6_checks import check_log_cosh
from kernels.notebook import show_source

SOLUTIONS = os.path.join(ROOT, "solutions", "kernels")
ch = Chapter("ch6")

# %% [markdown]
# ```{solution-start} ch6-log-cosh
# :class: dropdown
# ```
#
# With $a = |d|$, $\cosh d = \frac{e^{a}}{2}(1 + e^{-2a})$, so
#
# $$ \log\cosh d = a + \log(1 + e^{-2a}) - \log 2 . $$
#
# $e^{-2a} \le 1$: nothing overflows, and `log1pf` keeps its digits when the term is tiny
# (large $|d|$). `logf(coshf(d))` is infinite from $|d| \approx 89$ on, which the check's large
# differences catch. The derivative is $\tanh d$, between $-1$ and $1$: like Smooth L1, an
# outlier cannot pull harder than a unit gradient. Nothing else changes: the functor is the
# whole loss; the header, the binding and `kernels/operators.py` make it an operator.

# %%
show_source(os.path.join(SOLUTIONS, "ch6_log_cosh.cu"), fold=False)

# %% tags=["gpu"]
assert ch.exercise(os.path.join(SOLUTIONS, "ch6_log_cosh.cu"), check_log_cosh)

# %% [markdown]
# The target: log-cosh needs a few more instructions per element than MSE (an `exp`, a `log1p`
# and a `tanh`), far fewer than the memory traffic leaves room for.

# %% tags=["gpu", "nbval-ignore-output"]
from kernels import bench, load, operators

ops = operators.build()


def trains(loss):  # a training step's share of the loss: forward, then backward
    step = bench.training_step(loss)
    return lambda pred, target: step(pred.requires_grad_(), target)


def log_cosh_target(source, label):
    """Exercise 6.1's target for the log-cosh functor in ``source``."""
    log_cosh = operators.LossOps(load(os.path.join(SOLUTIONS, source)))
    return bench.speedup_target(trains(lambda p, t: log_cosh.loss("log_cosh", p, t)),
                                trains(ops.mse), "mse", (1 << 26,), 0.95, label=label,
                                reference_label="ops.mse", gpu_time=True)


log_cosh_target("ch6_log_cosh.cu", "log-cosh");

# %% [markdown]
# Does the target catch a slow functor? The same functor in double precision computes the same
# values (the check passes) but runs its `exp`, `log1p` and `tanh` on the double-precision units.

# %%
show_source(os.path.join(SOLUTIONS, "ch6_log_cosh_fp64.cu"))

# %% tags=["gpu", "nbval-ignore-output"]
assert ch.exercise(os.path.join(SOLUTIONS, "ch6_log_cosh_fp64.cu"), check_log_cosh)
log_cosh_target("ch6_log_cosh_fp64.cu", "log-cosh in float64");

# %% [markdown]
# It does: the float32 functor keeps pace with `ops.mse`, and the float64 one misses by far, on
# an H100, whose double-precision units run at half the float32 rate. Its time is now set by
# arithmetic, not by memory. Why the host is queued ahead: timed call by call, a step takes as
# long as the host takes to launch autograd's work whenever that is longer than the GPU's, and
# a functor slower than MSE's but faster than the host would then look as fast as MSE's.

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch6-in-place
# :class: dropdown
# ```
#
# `opcheck`'s `test_aot_dispatch_dynamic` fails. AOTAutograd traces the forward and the
# backward into two *functional* graphs, then partitions them: what the backward needs from
# the forward becomes an output of the forward graph, saved between the two. An in-place write
# into a saved tensor inside the backward is a mutation of the backward graph's input, which
# the partitioner cannot place (the error reads "Node mul was invalid, but is output"). Out of
# place, the backward is an ordinary `grad * grad_output` that the compiler can even fuse with
# what follows. Eager mode has no such constraint, and there the in-place write saves a whole
# gradient-sized allocation.
#
# The cell below shows it without a GPU: a CPU op with the same shape of autograd formula, its
# backward always writing in place.

# %%
import torch.library

if not hasattr(torch.ops.ch6_demo, "square_error"):  # defined once per process
    demo = torch.library.Library("ch6_demo", "FRAGMENT")
    demo.define("square_error(Tensor pred, Tensor target) -> (Tensor, Tensor)")
    # The loss and its gradient for grad_output = 1, as our fused kernels return them.
    demo.impl("square_error",
              lambda p, t: (((p - t) ** 2).mean(), (2 * (p - t) / p.numel())), "CPU")
    torch.library.register_fake("ch6_demo::square_error",
                                lambda p, t: (p.new_empty(()), p.new_empty(p.shape)))

    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(output[1])

    def backward_always_in_place(ctx, grad_loss, _):
        (grad,) = ctx.saved_tensors
        grad.mul_(grad_loss)  # what the exercise asks to try
        return grad, None

    torch.library.register_autograd(
        "ch6_demo::square_error", backward_always_in_place, setup_context=setup_context)

pred = torch.randn(8, 4, requires_grad=True)
target = torch.randn(8, 4)
import re

try:
    torch.library.opcheck(torch.ops.ch6_demo.square_error.default, (pred, target))
    print("opcheck passed")
except Exception as error:
    print("opcheck fails:", ", ".join(re.findall(r"(test_\w+) failed", str(error))))

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch6-scale-cost
# :class: dropdown
# ```
#
# Per float32 element, `loss.backward()` alone moves the forward's bytes: MSE reads $p$ and $t$
# and writes the gradient (12 bytes); Hinge reads $p$ (its target is one shared row) and writes
# the gradient (8 bytes). When the guess of `grad_output` is wrong, the backward also reads and
# writes the gradient once more (8 bytes). Predicted ratios: MSE $20/12 = 1.67$, Hinge
# $16/8 = 2.0$. The cell below reads the measured ratios ("x1024 or x512", every guess wrong)
# from the chapter's published results, beside the constant scale ("x1024"), whose guess is
# right: predicted 1.0, and measured close to it for both losses.
#
# A cheaper Hinge backward: all it needs to know about an element is whether the hinge was
# active, $1 - p y \ge 0$, one bit; $y$ comes from the shared row and $1/n$ and `grad_output` are
# scalars. The forward writes a bit mask ($n/8$ bytes) instead of the gradient, and the backward
# reads the mask and writes $-y \cdot \text{mask} \cdot \text{grad_output} / n$. Bytes per
# element: $4 + \frac18$ for the forward, $\frac18 + 4$ for the backward, $8.25$ whatever
# `grad_output` is: a step whose scale changes costs about the same as the plain one (ratio
# about 1.0, against 2.0), for $\frac14$ byte more than a right guess, and with no guess at
# all. MSE cannot do this: its gradient $2(p - t)/n$ depends on both inputs, not on one bit.

# %% tags=["nbval-ignore-output"]
import math

from kernels import results

rows = ch.published_rows()  # what the book publishes: book/results/ch6.csv
for name, predicted in (("mse", 20 / 12), ("hinge", 16 / 8)):
    mine = results.select(rows, loss=f"{name}_fwd_bwd")
    largest = max({r["shape"] for r in mine}, key=math.prod)
    at = {r["provider"]: r["ms"] for r in mine if r["shape"] == largest}
    wrong = at["ours, x1024 or x512"] / at["ours"]
    right = at["ours, x1024"] / at["ours"]
    print(f"{name} at {largest}:")
    print(f"  a wrong guess: predicted {predicted:.2f}, measured {wrong:.2f}")
    print(f"  a right guess: predicted 1.00, measured {right:.2f}")

# %% [markdown]
# ```{solution-end}
# ```
