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
# # Chapter 6: from kernel to PyTorch operator
#
# ```{admonition} Before you start
# :class: tip
#
# **You will be able to:**
#
# - register a kernel as a PyTorch operator with a {term}`fake kernel` and an autograd
#   formula, and check it with `opcheck`;
# - compile a training step with `torch.compile(fullgraph=True)` and no graph break;
# - run the losses in bfloat16 and train small models with them.
#
# **Assumes:** chapters 4 and 5 (the final kernels); `loss.backward()` and autograd as a user.
#
# **Words it uses** (defined in the {doc}`../book/glossary`): {term}`CUDA graph`,
# {term}`register`, {term}`reduction`, {term}`L2 cache`.
#
# **Reading time:** about 13 minutes. **Run time:** about 2 minutes
# on a small GPU (the book's small-GPU run, {doc}`../book/status`).
# ```
#
# Chapters 4 and 5 ended with fast forward kernels, but a training loop calls a loss inside
# `loss.backward()`, inside `torch.compile`, in bfloat16, thousands of times without the host
# waiting for the GPU. This chapter makes the losses real PyTorch operators, one step at a time:
#
# | step | the one change | the result |
# | --- | --- | --- |
# | a kernel as an op | a schema and a CUDA kernel, nothing else | no gradient, no `torch.compile` |
# | a forward that writes the gradient | the backward's work done in the forward's pass | 12 bytes per element instead of 20 |
# | an operator | a fake kernel and an autograd formula | `opcheck` passes, no graph break |
# | no host wait | a bad target stops the kernel with an assertion | nothing waits |
# | bfloat16 | 2-byte inputs, float32 arithmetic | half the bytes |
# | training | four small models, PyTorch's loss against ours | the same curves |

# %%
# ROOT (the repository's folder) and the imports of os, subprocess, sys come from the
# notebook's first cell, which the book hides.
import copy
import math
import statistics
import subprocess
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import Markdown

import kernels
from kernels import Chapter, bench, load, operators, profile, results
from kernels.correctness import relative_error
from kernels.exercises.ch6_checks import check_log_cosh
from kernels.notebook import show_source

ch = Chapter("ch6")  # the chapter's id, GPU and read bandwidth, for its measurements

# Inductor suggests TF32 matmuls for speed; this chapter compares float32 results exactly.
warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")

# %% tags=["gpu", "nbval-ignore-output"]
print(f"{ch.gpu}: read bandwidth {ch.peak:.0f} GB/s")

# %% [markdown]
# ## A kernel is not yet an operator
#
# `kernels.load` registers each launcher of a kernel file as an op with `TORCH_LIBRARY`: a
# *schema* (the op's name, arguments and results) and a *CUDA kernel* for it. That is all a
# call needs. Here is the same registration from Python, for chapter 4's final MSE:

# %% tags=["gpu"]
v5 = load("ch4_two_pass/v5_block_tiles.cu")
if not hasattr(torch.ops.ch6_plain, "mse"):  # defined once per process: re-running is fine
    plain = torch.library.Library("ch6_plain", "FRAGMENT")  # kept alive: its ops live with it
    plain.define("mse(Tensor pred, Tensor target) -> Tensor")
    def plain_mse(pred, target):
        with torch.no_grad():  # v5's own op records nothing: this op is all autograd sees
            return v5.mse(pred, target)

    plain.impl("mse", plain_mse, "CUDA")

pred = torch.randn(1000, device="cuda", requires_grad=True)
target = torch.randn(1000, device="cuda")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loss = torch.ops.ch6_plain.mse(pred, target)
    loss.backward()
print(f"loss.requires_grad = {loss.requires_grad}, pred.grad = {pred.grad}")
for warning in caught:
    print("warning:", str(warning.message).split(". ")[0])

# %% [markdown]
# The op runs, and `backward()` finishes without an error, but `pred.grad` is `None`: autograd
# knows nothing about the op and treats its result as a constant, after a warning a training
# script never shows. Chapters 2 to 4 build only forward kernels, so `kernels.load` now gives
# each of their ops a backward that raises instead:

# %% tags=["gpu"]
try:
    v5.mse(pred, target).backward()
except NotImplementedError as error:
    print(f"NotImplementedError: {error}")

# %% [markdown]
# The same op under `torch.compile(fullgraph=True)` fails differently. The compiler does not run
# an op to learn the shape of its result: it traces the program with *fake tensors*, tensors
# with a shape, a dtype and a device but no memory. Our CUDA kernel cannot run on those:

# %% tags=["gpu"]
torch._dynamo.reset()
try:
    torch.compile(lambda p, t: torch.ops.ch6_plain.mse(p, t) * 2, fullgraph=True)(pred, target)
except Exception as error:
    print(f"{type(error).__name__}: {str(error).strip().splitlines()[0][:150]}")

# %% [markdown]
# An operator needs two more registrations: a **fake kernel** (`torch.library.register_fake`)
# that returns empty tensors of the right shape and dtype, and an **autograd formula**
# (`torch.library.register_autograd`) that says what the backward computes.
#
# ## The gradients, and a forward that writes them
#
# For one element with $d = p - t$, the derivatives with respect to the prediction are
#
# | loss | $\ell(p, t)$ | $\partial \ell / \partial p$ |
# | --- | --- | --- |
# | MSE | $d^2$ | $2d$ |
# | Smooth L1 ($\beta$), $\lvert d\rvert < \beta$ | $\frac{d^2}{2\beta}$ | $d / \beta$ |
# | Smooth L1 ($\beta$), $\lvert d\rvert \ge \beta$ | $\lvert d\rvert - \frac{\beta}{2}$ | $\operatorname{sign}(d)$ |
# | Hinge | $\max(0, 1 - p y)$ | $-y$ if $1 - p y \ge 0$, else $0$ |
#
# With `reduction="mean"` every derivative is divided by $n$, and the backward multiplies it by
# `grad_output`, the gradient of whatever came after the loss (1 for `loss.backward()`).
#
# ```{dropdown} Going deeper: the target's gradient, the kinks, and binary cross-entropy
# For the target the derivatives are $-\partial\ell/\partial p$ for MSE and Smooth L1, and
# $-p$ where the hinge is active. At the kinks PyTorch makes a choice and we make the same
# one: `clamp` passes the gradient where its input equals the bound, so the hinge's derivative
# at $1 - py = 0$ is $-y$; Smooth L1 with $\beta = 0$ is the L1 loss, whose derivative at
# $d = 0$ is 0.
#
# Adding a loss is cheap. Binary cross-entropy with logits
# (`F.binary_cross_entropy_with_logits` with a scalar `pos_weight` $w$), whose value is
# $(1 - y)\,x + l\,\operatorname{softplus}(-x)$ with $l = 1 + (w - 1)y$ and whose derivative is
# $(1 - y) - l\,\sigma(-x)$, came in as one {term}`functor` in `losses.cuh` and one entry of the
# registry `kernels/losses.py`. Its launcher, op, operator, checks
# and benchmark all come from that entry; `CONTRIBUTING.md` says how.
# ```
#
# Each loss is declared once, as a functor (a struct called like a function) with its value
# and its derivative. Chapters 3 and 4 used only the value:

# %%
show_source("common/losses.cuh")

# %% [markdown]
# **Bytes.** Computed apart, a training step reads $p$ and $t$ for the forward (8 bytes per
# float32 element), then reads them again and writes the gradient in the backward (12 more):
# 20 bytes. The forward already has $p$ and $t$ in {term}`registers <register>`, so it can write
# $\partial\ell/\partial p$ for `grad_output` $= 1$ at once: 8 bytes read, 4 written, 12 in all,
# and the backward has nothing left to read. Hinge's target is one row shared by every row, so
# its step moves 8 bytes per element, and a scaling pass (8 more) costs as much as its forward.
#
# **A guess of `grad_output`.** When `grad_output` is not 1 (a weighted loss, or the loss
# scaling of mixed precision), the backward must scale the stored gradient: 8 bytes more, 20
# in all. But a training loop passes the same `grad_output` step after step. So the forward
# multiplies the gradient by a guess, the `grad_output` of this loss's last backward, kept on
# the GPU. When the guess was right the backward has nothing to do: 12 bytes. A wrong guess
# costs the 8 bytes, never the result. With a loss scale of 1024, step 1 guesses 1 and pays the
# scaling pass. From step 2 the guess is 1024 and the backward does nothing. The step after
# the scale drops to 512 pays the 8 bytes once.
#
# ```{dropdown} Going deeper: how the guess is kept, and where there is none
# PyTorch's `GradScaler` changes its scale after 2000 steps or an overflow, so its guesses are
# almost always right. The guess is one float on the GPU; the backward multiplies by
# `grad_output / guess`, exactly 1 when the guess was right, and then returns at once. It reads
# `grad_output` on the GPU, so the host never waits to decide. There is no guess in float16 (a
# stale, larger guess could overflow a gradient that `grad_output` would not), under
# `torch.compile` or in CUDA graph capture (`wanted` in `kernels/ops/grad_guess.py` says why).
# Chapter 5's fused cross-entropy keeps a guess the same way.
# ```
#
# The kernel is chapter 4's version 5 (a {term}`block` of 512 {term}`threads <thread>` per
# tile, the same bits on every run), templated over the functor and the dtype, with the
# gradient written beside the sum. Values are loaded 16 bytes at a time and converted to
# float32 in registers:

# %%
show_source("common/fused_loss.cuh", "template <class Loss, class T, bool kGrad>",
            "// This thread's part")

# %% [markdown]
# In `pack_step`, `p` and `t` hold the 8 bytes read per element, `*g = grad` writes the 4 of
# the gradient, and the `width` loop adds the pack's losses pairwise. The forward multiplies by
# `guess_factor`, and the backward divides by it: a guess too small or too large to multiply by
# safely counts as 1 in both:

# %%
show_source("common/cuda_utils.cuh", "__device__ __forceinline__ float guess_factor")

# %% [markdown]
# The backward, for every loss; `if (g == 1.0f) return;` is the right guess's exit:

# %%
show_source("common/fused_loss.cuh", "// The backward of \"mean\" and \"sum\"",
            "// Elements per tile")

# %% [markdown]
# The chapter's kernel file only defines one launcher per loss, as a macro expanded for every
# element-wise loss of the registry (the build defines `KERNELS_ELEMENT_WISE_LOSSES` from
# `kernels/losses.py`). The rest is in the header `kernels/common/fused_loss.cuh` and the
# binding `kernels/bindings/fused_loss.cpp`:

# %%
show_source("ch6_operators/fused_losses.cu")

# %%
from kernels.codegen import registration, with_loss_list

print(with_loss_list("KERNELS_ELEMENT_WISE_LOSSES(FUSED_LOSS_LAUNCHER)").split("#line")[0])

# %% tags=["gpu", "nbval-ignore-output"]
fused = load("ch6_operators/fused_losses.cu")
fused

# %% [markdown]
# Each loss op returns two tensors: the loss, and the gradient for `grad_output` $= 1$ when the
# argument `want_grad` asks for it (the last, `grad_guess`, is the guess). The registration
# `kernels.load` generated; the schema strings are macros of `kernels/bindings/fused_loss.cpp`:

# %%
print(registration("fused", [("mse", "FusedLossArgs"), ("loss_scale_grad", "FusedLossArgs")]))

# %% [markdown]
# ## Fake kernels and autograd formulas
#
# `kernels/ops/operators.py` registers the two missing pieces for every op of a kernel file when
# `kernels.load` builds it. The fake kernel of a loss op computes shapes only:

# %%
show_source("ops/operators.py", "def _fake_fused_loss", "def _register_fused_losses")

# %% [markdown]
# The autograd formula has two halves. `setup_context` runs after the forward and keeps what
# the backward needs: the gradient the forward wrote (and the inputs, only if the target needs
# a gradient too), and the guess it multiplied by. `backward` multiplies that gradient by
# `grad_output / guess`, in place, and keeps `grad_output` as the next forward's guess. Both
# are built once per op by `_fused_loss_autograd`, whose arguments they use (`forward` is the
# op, `scale_grad` the file's scaling op); `grad_guess` and `get_loss` are imports:

# %%
show_source("ops/operators.py", "def _fused_loss_autograd(",
            "    return setup_context, backward")

# %% [markdown]
# `ctx.set_materialize_grads(False)` matters: the op's second output, the gradient, is never
# differentiated, and without this line autograd would write a tensor of zeros as its
# "gradient" before every backward, 4 more bytes per element.
#
# Under `torch.compile` the backward is traced too, and the saved gradient is then a
# *functional* tensor, a subclass of `torch.Tensor` that may not be written to. `scale`, which
# the backward calls, tests `type(grad)` and multiplies out of place there:

# %%
show_source("ops/grad_guess.py", "def scale(", "    return grad")

# %% [markdown]
# ```{dropdown} Going deeper: one registration per build
# Each build of a kernel file has its own namespace (its name holds a hash of its sources),
# and `kernels.load` registers once per namespace. Running a cell that builds a kernel again
# returns the cached build and registers nothing twice, which is what makes
# "only a single TORCH_LIBRARY can be used to register the namespace" impossible here.
# ```
#
# `kernels.operators.LossOps` wraps the ops in functions with PyTorch's arguments (`reduction`,
# mixed dtypes), and asks for the gradient exactly when an input requires one.

# %% tags=["gpu", "nbval-ignore-output"]
ops = operators.build()
ops.element_wise, ops.cross_entropy_kernel

# %% [markdown]
# ### Checked against float64
#
# Loss and gradients of every loss and {term}`reduction`, in float32 and bfloat16, against
# PyTorch's own expression in float64, through `loss.backward(grad_output)`, over the check
# suite's awkward shapes. The tolerance is $10^{-5}$ for float32 and the format's precision for
# bfloat16:

# %% tags=["gpu"]
def gradient_check(ops, name, dtype, reduction, rtol):
    """Worst relative error of the loss and of d/dpred over the check suite's shapes."""
    worst = 0.0
    loss_def = kernels.get_loss(name)
    for _, shape in loss_def.check_shapes:
        g = torch.Generator(device="cuda").manual_seed(1)
        pred, target = loss_def.make_inputs(shape, g, "cuda", dtype)
        pred.requires_grad_()
        loss = getattr(ops, name)(pred, target, reduction)
        p64 = pred.detach().double().requires_grad_()
        want = loss_def.reference_reduced(p64, target.double(), reduction)
        grad_output = torch.rand(want.shape, device="cuda", dtype=torch.float64) + 0.5 \
            if reduction == "none" else torch.tensor(3.0, device="cuda", dtype=torch.float64)
        loss.backward(grad_output.to(dtype))
        want.backward(grad_output)
        worst = max(worst, relative_error(loss, want),
                    relative_error(pred.grad, p64.grad))
    return worst


# %% tags=["gpu"]
for name in kernels.losses.ELEMENT_WISE:
    for dtype, rtol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        for reduction in ("mean", "sum", "none"):
            error = gradient_check(ops, name, dtype, reduction, rtol)
            print(f"{'PASS' if error <= rtol else 'FAIL'}  {name:<15} {str(dtype)[6:]:<8} "
                  f"{reduction:<4}  loss and d/dpred within {rtol:.0e} of float64")

# %% [markdown]
# ```{dropdown} Going deeper: what the GPU tests add
# `tests/gpu/test_operators.py` also checks float16, the target's gradients, NaN, empty
# inputs and arguments that must raise.
# ```
#
# ### `opcheck`
#
# `torch.library.opcheck` tests the registrations, not the math. The schema must be honest (no
# undeclared mutation, no output aliasing an input), and an autograd formula registered. The
# fake kernel must give the real one's shapes and dtypes, and AOTAutograd, the part of
# `torch.compile` that traces forward and backward, the same results as eager mode. For each
# loss op, with `reduction` 1 ("mean"), the loss's parameter 1.0 and `want_grad`:

# %% tags=["gpu"]
for name in kernels.losses.ELEMENT_WISE:
    g = torch.Generator(device="cuda").manual_seed(0)
    pred, target = kernels.get_loss(name).make_inputs((257, 1031), g, "cuda")
    pred.requires_grad_()
    report = torch.library.opcheck(ops.element_wise.ops[name].default,
                                   (pred, target, 1, 1.0, True))
    print(f"{name:<15}", ", ".join(f"{test}: {outcome}" for test, outcome in report.items()))

# %% [markdown]
# ## `torch.compile` with no graph break
#
# A training step's forward and loss, compiled whole with `fullgraph=True` (an error on any
# graph break), and explained by `torch._dynamo.explain`. The backward, including ours, is
# compiled by AOTAutograd when `loss.backward()` runs.

# %% tags=["gpu"]
torch._dynamo.reset()
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                            torch.nn.Linear(256, 64)).cuda()
x, y = torch.randn(4096, 64, device="cuda"), torch.randn(4096, 64, device="cuda")


def forward_and_loss(x, y):
    return ops.smooth_l1(model(x), y) + 0.1 * ops.mse(model(x), y)


explanation = torch._dynamo.explain(forward_and_loss)(x, y)
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}")
compiled = torch.compile(forward_and_loss, fullgraph=True)
loss = compiled(x, y)
loss.backward()
grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
forward_and_loss(x, y).backward()
print("compiled gradients equal eager ones within 1e-5:",
      all(relative_error(a, b) < 1e-5
          for a, b in zip(grads, (p.grad for p in model.parameters()))))

# %% [markdown]
# The compiled graph calls our op as one node (`explanation.graphs[0]` prints it). The same
# ops also work inside a {term}`CUDA graph`, which replays a recorded sequence of kernels with no
# Python at all: nothing in the forward or the backward waits for the host.

# %% tags=["gpu"]
pred = torch.randn(1 << 20, device="cuda", requires_grad=True)
target = torch.randn(1 << 20, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm up outside the capture, as CUDA graphs require
    for _ in range(3):
        pred.grad = None
        (ops.mse(pred, target) * 4).backward()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
pred.grad = None
with torch.cuda.graph(graph):
    (ops.mse(pred, target) * 4).backward()
pred.data.normal_()  # new data in the same memory, then replay the recorded step
graph.replay()
expected = 8 * (pred - target).detach().double() / pred.numel()
print("gradient after replay within 1e-6 of 8 (p - t) / n:",
      relative_error(pred.grad, expected) < 1e-6)

# %% [markdown]
# ## Cross-entropy without the host wait
#
# Reading a flag back from the GPU after every call, to raise an `IndexError` for an
# out-of-range target, would make the host wait for the GPU, and chapter 4's lesson was that an
# op must not.
#
# ```{dropdown} Going deeper: three ways to report a bad target
#
# | how | cost per correct call | what the user sees on a bad target | works in CUDA graphs |
# | --- | --- | --- | --- |
# | read a flag after the call (chapter 5's old default) | a host wait | `IndexError` naming the row, at once | no |
# | a flag checked at a later synchronisation (`torch._assert_async`) | two more kernel launches | a device-side assertion | yes |
# | an assertion in the kernel that reads the target (PyTorch's `nll_loss`) | nothing | a device-side assertion at the next synchronisation | yes |
# ```
#
# We chose an assertion in the kernel, as PyTorch did: the row kernel stops with `assert` on a
# bad target. No call
# waits, and a bad target still becomes a Python error at the next synchronisation. As in
# PyTorch, the error is final: a device-side assertion leaves the process's CUDA context
# unusable. That is why we show it in a separate process:

# %% tags=["gpu", "nbval-ignore-output"]
script = f"""
import sys, torch
sys.path.insert(0, {ROOT!r})
from kernels import operators
ops = operators.build()
logits = torch.randn(64, 10, device="cuda")
target = torch.randint(0, 10, (64,), device="cuda")
target[17] = 12
loss = ops.cross_entropy(logits, target)  # returns at once: nothing waits
print("the call returned")
try:
    print(loss.item())
except RuntimeError as error:
    print("RuntimeError at the next synchronisation:", str(error).splitlines()[0])
"""
run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
for line in (run.stdout + run.stderr).splitlines():
    if "returned" in line or "RuntimeError" in line or "Assertion" in line:
        print(line.split("block: ")[-1][:160])

# %% [markdown]
# For debugging, `check_targets=True` checks the targets on the host first and names the row
# (chapter 5).

# %% tags=["gpu"]
logits = torch.randn(64, 10, device="cuda")
target = torch.randint(0, 10, (64,), device="cuda")
target[17] = 12
try:
    ops.cross_entropy(logits, target, check_targets=True)
except IndexError as error:
    print(f"IndexError: {error}")

# %% [markdown]
# ## What it costs: forward and backward against PyTorch
#
# A training step's loss work, `loss = f(pred, target); loss.backward()`, for eager PyTorch,
# `torch.compile` of the same expression, and our operator. Ours also runs with the loss times
# 1024 at every step ("x1024", as mixed precision's loss scaling), and times 1024 and 512 in
# turn ("x1024 or x512": every guess wrong). Effective {term}`bandwidth` counts the bytes a step must move:
# the inputs read once and the gradient written once.
#
# **Predict first.** For MSE at the largest size, if both steps ran at the bandwidth limit,
# how much faster would ours be than `torch.compile`'s, which computes the gradient in a
# backward pass of its own? And what should "x1024 or x512" cost over the plain step?
#
# ```{dropdown} Going deeper: how the steps are timed
# Each is timed as chapter 1 taught (the GPU's time, inputs out of {term}`L2 <L2 cache>`), in
# three turns with the median kept: timed one after the other, a step once measured a tenth
# slower than the same step timed beside it. The bytes a step must move are 12 per float32
# element for MSE and Smooth L1, and 8 for Hinge, whose target is one row shared by every row.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
ch.allow_recompiles()  # torch.compile(dynamic=False) compiles one graph per size and loss


def fwd_bwd_bytes(name, shape):
    n = math.prod(shape)
    return 4 * (2 * n + (shape[-1] if kernels.get_loss(name).broadcast_target else n))


L2 = torch.cuda.get_device_properties(0).L2_cache_size
measured = []
for name in ("mse", "smooth_l1", "hinge"):
    reference = lambda p, t, name=name: (  # noqa: E731
        kernels.get_loss(name).reference_reduced(p, t))
    compiled_ref = torch.compile(reference, dynamic=False)
    ours = getattr(ops, name)
    providers = {"eager": bench.training_step(reference),
                 "torch.compile": bench.training_step(compiled_ref),
                 "ours": bench.training_step(ours),
                 "ours, x1024": bench.training_step(ours, scales=(1024.0,)),
                 "ours, x1024 or x512": bench.training_step(ours, scales=(1024.0, 512.0))}
    for n in (1 << 16, 1 << 20, 1 << 24, 1 << 28):
        shape = bench.element_wise_shape(n, name)
        g = torch.Generator(device="cuda").manual_seed(0)
        copies = bench.rotation_count(fwd_bwd_bytes(name, shape), L2, bench.free_memory(),
                                      limit=16)
        arg_sets = []
        for _ in range(copies):
            p, t = kernels.get_loss(name).make_inputs(shape, g, "cuda")
            arg_sets.append((p.requires_grad_(), t))
        # in turns: a drift of the GPU's clock falls on every provider, not on the last few
        for provider, turns in bench.in_turns(providers, arg_sets, turns=3, reps=30).items():
            measured.append(bench.Measurement(f"{name}_fwd_bwd", provider, shape,
                                              fwd_bwd_bytes(name, shape),
                                              statistics.median(turns)))
        del arg_sets
        torch.cuda.empty_cache()
ch.save(measured)
print(f"{len(measured)} measurements saved")

# %% tags=["nbval-ignore-output"]
rows = ch.rows()
fig, axes = kernels.plot.subplots(1, 3, height=4, sharey=True)
for ax, name in zip(axes, ("mse", "smooth_l1", "hinge")):
    kernels.plot_throughput(rows, f"{name}_fwd_bwd", title=name, ax=ax, show_legend=False)
    ax.label_outer()  # the GB/s axis once, at the left
axes[0].set_ylabel("effective GB/s\n(bytes a step must move / time)")
fig.suptitle(f"Forward + backward: throughput against size on {rows[0]['gpu']}")
kernels.plot.legend(fig)
plt.show()

# %% tags=["nbval-ignore-output"]
PROVIDERS = ["eager", "torch.compile", "ours", "ours, x1024", "ours, x1024 or x512"]
TITLES = {"mse": "MSE", "hinge": "Hinge"}  # a title per table: their headers are the same
Markdown("\n\n".join(f"**{TITLES[name]}**, forward and backward:\n\n"
                      + results.markdown_table(rows, PROVIDERS, f"{name}_fwd_bwd")
                      for name in ("mse", "hinge")))

# %% [markdown]
# What the numbers say, read from the rows just saved:

# %% tags=["gpu", "nbval-ignore-output"]
for name in ("mse", "smooth_l1", "hinge"):
    mine = results.select(rows, loss=f"{name}_fwd_bwd")
    largest = max({r["shape"] for r in mine}, key=math.prod)
    at = {r["provider"]: r for r in mine if r["shape"] == largest}
    ms = {provider: r["ms"] for provider, r in at.items()}
    ours = ms["ours"]
    print(f"{name:<9} 2^{math.prod(largest).bit_length() - 1}: ours {ours:.3f} ms "
          f"({100 * at['ours']['gbps'] / ch.peak:.0f}% of the bandwidth bound), "
          f"{ms['torch.compile'] / ours:.2f}x torch.compile, "
          f"{ms['eager'] / ours:.1f}x eager;\n{'':<9} the plain step's time x "
          f"{ms['ours, x1024'] / ours:.2f} with x1024, "
          f"x {ms['ours, x1024 or x512'] / ours:.2f} with x1024 or x512")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
#
# At the limit, ours moves 12 bytes per element and `torch.compile`'s 20 (its backward is a
# second pass over memory), so ours would be 20 / 12 = 1.67 times faster. The lines above
# print the measured ratio before "torch.compile", and beside "ours" how close our step runs
# to the bandwidth bound. "x1024" costs next to nothing: from the
# second step on the guess is right, and the backward returns at once. "x1024 or x512" misses
# every guess and pays the scaling pass: for MSE the step moves 20 bytes instead of 12, so its
# time should grow by about 20 / 12. For Hinge it moves 16 instead of 8, twice as many:
# Hinge's forward reads only 4 bytes per element, and the scaling pass costs as much as the
# whole forward.
# ```
#
# No training loop changes its scale at every step: the last column is what a wrong guess
# costs.
#
# ```{dropdown} Going deeper: the guess's cost in more turns, and small sizes
# At small sizes every step is a few launches long, and in a training loop the host's
# autograd work decides.
# `bench/guess_cost.py` times each loss's plain and "x1024" steps in more turns, and lists the
# kernels of one step of each. At small sizes the GPU's time is the launches', and the host's
# autograd work is longer still; the timing here sleeps long enough before each step to leave
# the host out ({doc}`../book/timing`).
# ```
#
# Nsight Compute counts the bytes of one MSE training step at $2^{26}$ float32 elements, every
# kernel of it, the caches flushed before each.
#
# **Predict first.** How many bytes per element does each step read, and how many does it
# write? Count what `torch.compile`'s forward must save for its backward.

# %% tags=["gpu", "nbval-ignore-output"]
ONE_STEP = """
import torch
import torch.nn.functional as F
from kernels import operators
ops = operators.build()
pred = torch.randn(1 << 26, device="cuda", requires_grad=True)
target = torch.randn(1 << 26, device="cuda")
loss_fn = LOSS
for _ in range(3):  # build, compile, warm up
    pred.grad = None
    loss_fn(pred, target).backward()
pred.grad = None  # a new gradient, not added to the last one
torch.cuda.synchronize()
torch.cuda.profiler.start()
loss_fn(pred, target).backward()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""
BYTES = ("time (us)", "DRAM bytes read (MB)", "DRAM bytes written (MB)")
for name, loss in (("ours", "ops.mse"), ("torch.compile", "torch.compile(F.mse_loss)")):
    step = ONE_STEP.replace("LOSS", loss)
    counters = profile.ncu(step, ".", BYTES, launches=50, marked=True)  # every kernel
    if counters:
        total = {label: sum(values[label] for _, values in counters.rows)
                 for label in BYTES}
        read, written = (total[label] * 1e6 / (1 << 26) for label in BYTES[1:])
        print(f"{name:<14} {len(counters.rows)} kernels, {total['time (us)']:4.0f} us: "
              f"{read:4.1f} bytes read + {written:4.1f} written per element "
              f"= {read + written:4.1f}")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
#
# Our step reads $p$ and $t$ once (8 bytes) and writes the gradient (4): 12 in all.
# `torch.compile`'s forward reads $p$ and $t$ and saves $p - t$ for the backward (4 bytes
# written), which reads it back (4) and writes the gradient (4): 12 read and 8 written, 20 in
# all. The lines above show the counters. Their writes can come out a little under 4 and 8:
# ncu counts DRAM traffic while a kernel runs, and part of a kernel's last writes is still in
# L2 when it ends. (The backward's kernels are counted too, though autograd launches them from
# a thread of its own.)
# ```
#
# ## bfloat16: half the bytes
#
# In bfloat16 every element is 2 bytes, so at the bandwidth limit the same loss takes half the
# time. Our kernels accumulate in float32 (the check above); PyTorch's eager loss runs its
# element-wise ops in bfloat16 kernels one after another.

# %% tags=["gpu", "nbval-ignore-output"]
bf16 = []
for name in ("mse", "smooth_l1", "hinge"):
    reference = lambda p, t, name=name: (  # noqa: E731
        kernels.get_loss(name).reference_reduced(p, t))
    providers = {"eager": reference, "torch.compile": torch.compile(reference, dynamic=False),
                 "ours": getattr(ops, name)}
    for dtype in (torch.float32, torch.bfloat16):
        for m in bench.bench_loss(providers, name, bench.element_wise_shape(1 << 28, name),
                                  dtype=dtype, reps=30):
            m.loss = f"{name}_{str(dtype)[6:]}"
            bf16.append(m)
ch.save(bf16, "ch6_bf16")
for m in bf16:
    print(f"{m.loss:<18} {m.provider:<14} {m.ms:7.3f} ms  {m.gbps:5.0f} GB/s")

# %% [markdown]
# ```{dropdown} Going deeper: the chapter's targets
# `bench/operator_targets.py` measures the course's targets for this chapter at $2^{30}$
# elements in bfloat16 and prints PASS or MISS for each; `book/results/operator_targets.csv`
# holds its last run.
# ```
#
# ## A real training run
#
# The last test of an operator is to train with it. Four small models, each trained twice from
# the same initial weights on the same batches: once with PyTorch's loss, once with ours.
#
# - a regression MLP with MSE, and the same MLP with Smooth L1 on targets with outliers;
# - a linear classifier with the hinge loss on labels $\pm 1$;
# - a character-level language model with cross-entropy, trained on this book's own text.
#
# If our forward or backward were wrong anywhere, the curves would part.

# %% tags=["gpu"]
def train(model, loss_fn, batches, lr=1e-3):
    """Adam over the batches; the loss of every step and the mean step time (ms)."""
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    losses = torch.empty(len(batches), device="cuda")
    torch.cuda.synchronize()
    started = time.perf_counter()
    for i, (x, y) in enumerate(batches):
        optimiser.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimiser.step()
        losses[i] = loss.detach()  # on the GPU: nothing waits
    torch.cuda.synchronize()
    return losses.cpu(), 1e3 * (time.perf_counter() - started) / len(batches)


def make_batches(make, steps, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [make(g) for _ in range(steps)]


W_TRUE = torch.randn(16, 1, generator=torch.Generator().manual_seed(3)).cuda()
W_TRUE /= W_TRUE.norm()  # x @ W_TRUE is N(0, 1): a smooth ridge the MLP can learn


def regression(g, outliers=False):
    x = torch.randn(4096, 16, generator=g, device="cuda")
    y = torch.sin(2 * x @ W_TRUE) + 0.1 * torch.randn(4096, 1, generator=g, device="cuda")
    if outliers:  # 2% of the targets are way off: what Smooth L1 is for
        wild = torch.rand(4096, 1, generator=g, device="cuda") < 0.02
        y = torch.where(wild, 20 * torch.randn(4096, 1, generator=g, device="cuda"), y)
    return x, y


def classification(g):
    x = torch.randn(4096, 32, generator=g, device="cuda")
    y = torch.sign(x[:, :8].sum(1) + 0.5 * torch.randn(4096, generator=g, device="cuda"))
    return x, y


def mlp():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(16, 128), torch.nn.Tanh(),
                               torch.nn.Linear(128, 1)).cuda()


class Linear1(torch.nn.Module):
    """A linear classifier: one score per example, shape (batch,)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(32, 1)

    def forward(self, x):
        return self.linear(x).squeeze(1)


# %% [markdown]
# The language model reads 16 characters and predicts the next one (an embedding, a hidden
# layer, one logit per character). Its text is this book's pages and chapters.

# %% tags=["gpu", "nbval-ignore-output"]
import glob

text = "\n".join(open(path, encoding="utf-8").read()
                 for path in sorted(glob.glob(os.path.join(ROOT, "book", "*.md")))
                 + sorted(glob.glob(os.path.join(ROOT, "chapters", "*.py"))))
alphabet = sorted(set(text))
index = {c: i for i, c in enumerate(alphabet)}
codes = torch.tensor([index[c] for c in text], device="cuda")
CONTEXT = 16
print(f"{len(text)} characters of text, an alphabet of {len(alphabet)}")


def text_batch(g):
    starts = torch.randint(0, len(codes) - CONTEXT - 1, (2048,), generator=g, device="cuda")
    window = starts[:, None] + torch.arange(CONTEXT + 1, device="cuda")
    chars = codes[window]
    return chars[:, :-1], chars[:, -1]


class CharModel(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        torch.manual_seed(1)
        self.embed = torch.nn.Embedding(vocab, 32)
        self.hidden = torch.nn.Linear(CONTEXT * 32, 512)
        self.out = torch.nn.Linear(512, vocab)

    def forward(self, chars):
        return self.out(torch.relu(self.hidden(self.embed(chars).flatten(1))))


# %% tags=["gpu", "nbval-ignore-output"]
runs = {
    "MLP, MSE": (mlp, lambda g: regression(g), F.mse_loss, ops.mse, 3e-3),
    "MLP, Smooth L1 (outliers)": (mlp, lambda g: regression(g, outliers=True),
                                  F.smooth_l1_loss, ops.smooth_l1, 3e-3),
    "linear classifier, hinge": (lambda: Linear1().cuda(), classification,
                                 lambda s, y: torch.clamp(1 - s * y, min=0).mean(), ops.hinge,
                                 1e-2),
    "character LM, cross-entropy": (lambda: CharModel(len(alphabet)).cuda(), text_batch,
                                    F.cross_entropy, ops.cross_entropy, 2e-3),
}
curves, rows_out = {}, []
for label, (make_model, make, theirs, ours, lr) in runs.items():
    batches = make_batches(make, 1000, seed=7)
    model = make_model()
    twin = copy.deepcopy(model)  # the same initial weights for both runs
    torch_losses, torch_ms = train(model, theirs, batches, lr)
    our_losses, our_ms = train(twin, ours, batches, lr)
    curves[label] = (torch_losses, our_losses)
    first_steps = ((our_losses[:10] - torch_losses[:10]).abs()
                   / torch_losses[:10]).max().item()
    final_t, final_o = torch_losses[-50:].mean().item(), our_losses[-50:].mean().item()
    rows_out.append((label, first_steps, final_t, final_o, abs(final_o - final_t) / final_t,
                     torch_ms, our_ms))
print(f"{'':<27} {'':>10} {'final loss':^17} {'':>9} {'time per step':^19}".rstrip())
print(f"{'run':<27} {'steps 1-10':>10} {'PyTorch':>8} {'ours':>8} {'rel. diff':>9} "
      f"{'PyTorch':>9} {'ours':>9}")
for label, first_steps, final_t, final_o, diff, torch_ms, our_ms in rows_out:
    print(f"{label:<27} {first_steps:10.1e} {final_t:8.5f} {final_o:8.5f} {diff:9.1e} "
          f"{torch_ms:6.2f} ms {our_ms:6.2f} ms")
print("steps 1-10 within 1e-5 of PyTorch's loss in every run:",
      all(r[1] < 1e-5 for r in rows_out))
print("final losses within 1e-2 of each other in every run:",
      all(r[4] < 1e-2 for r in rows_out))

# %% tags=["gpu", "nbval-ignore-output"]
fig, axes = kernels.plot.subplots(2, 2, height=6, sharex=True)
for ax, (label, (torch_losses, our_losses)) in zip(axes.flat, curves.items()):
    ax.plot(torch_losses, label="PyTorch's loss", linewidth=3, alpha=0.5)
    ax.plot(our_losses, label="the course's operator", linewidth=1, linestyle="--",
            color="black")
    ax.set_yscale("log")
    ax.set_title(label)
    ax.set_ylabel("training loss")
for ax in axes[1]:
    ax.set_xlabel("step")
kernels.plot.legend(fig)  # one legend for the four panels, below them
plt.show()

# %% [markdown]
# The curves lie on top of each other: the two runs take the same steps up to the order of
# float32 sums (the columns "steps 1-10" and "rel. diff" of the final losses).
#
# ```{dropdown} Going deeper: why the language model's runs drift apart
# The regression and hinge runs stay within about $10^{-7}$ to the end. The language model's
# runs drift apart slowly: a thousand steps of Adam on a model with a softmax amplify
# differences in the last bits of the gradients. They would do the same between two runs of
# PyTorch with a different reduction order, and they end within the $10^{-2}$ the last line
# checks.
# ```
#
# Per step (the last two columns), our runs are slower than PyTorch's in most rows: on models
# this small a step is the host's work, and our autograd formula is Python. The host's time
# for the loss alone, forward and backward, on the language model's shape:
#
# ```{dropdown} Going deeper: why the host decides here
# In runs this short the host's timing is noisy. A step of these models is Python, autograd
# and the optimiser on the host; our loss's autograd formula is Python, called through
# `torch.library`'s wrapper.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
logits = torch.randn(2048, len(alphabet), device="cuda", requires_grad=True)
labels = torch.randint(0, len(alphabet), (2048,), device="cuda")
for label, loss_fn in (("F.cross_entropy", F.cross_entropy),
                       ("ops.cross_entropy", ops.cross_entropy)):
    def loss_step(x, t, loss_fn=loss_fn):
        x.grad = None
        loss_fn(x, t).backward()
    host_us = 1e3 * bench.launch_overhead_ms(loss_step, (logits, labels))
    print(f"{label:<18} {host_us:6.1f} µs per forward + backward "
          "(wall time, waiting for the GPU)")

# %% [markdown]
# On a real model, whose forward keeps the GPU busy for milliseconds, the host's extra time
# per call is hidden behind queued GPU work.
#
# ```{dropdown} Going deeper: where the host's time goes
# `bench/host_overhead.py` profiles it, and `bench/PERFLOG.md` keeps its numbers: about a
# third of the host's extra time per call was `torch.library`'s handling of the op's
# arguments for the autograd formula. A C++ autograd formula would remove it, at the price of
# heavier headers and slower builds.
# ```
#
# ## Summary
#
# - An operator needs more than a kernel: a backward (here written by the forward's own pass),
#   a {term}`fake kernel` and an autograd formula registered with `torch.library`.
# - With them `opcheck` passes and `torch.compile(fullgraph=True)` compiles a training step with
#   no graph break; the cross-entropy never waits for the host, even to report a bad target.
# - bfloat16 inputs halve the bytes; the kernels still accumulate in float32.
# - Trained with the course's losses, the small models follow PyTorch's curves.
# - On models this small a step is the host's work, and our Python autograd formula costs the
#   host more per call than PyTorch's.
#
# With one operator and no ladder of versions, the table is what the chapter measured at its
# largest size: a training step's loss work, and the bfloat16 forward's time over float32's.

# %% tags=["nbval-ignore-output"]
steps, forwards = ch.rows(), ch.rows("ch6_bf16")
lines = ["| loss | eager ms | torch.compile ms | ours ms | ours, % of peak | "
         "torch.compile / ours | ours, bf16 / fp32 forward |", "|---|" + "---:|" * 6]
for name in ("mse", "smooth_l1", "hinge"):
    mine = results.select(steps, loss=f"{name}_fwd_bwd")
    largest = max({r["shape"] for r in mine}, key=math.prod)
    at = {r["provider"]: r for r in mine if r["shape"] == largest}
    fwd = {r["loss"]: r["ms"] for r in forwards if r["provider"] == "ours"}
    ours = at["ours"]
    lines.append(f"| {name} | {at['eager']['ms']:.3f} | {at['torch.compile']['ms']:.3f} | "
                 f"{ours['ms']:.3f} | {100 * ours['gbps'] / ours['peak_gbps']:.0f}% | "
                 f"{at['torch.compile']['ms'] / ours['ms']:.2f}x | "
                 f"{fwd[name + '_bfloat16'] / fwd[name + '_float32']:.2f} |")
Markdown("\n".join(lines))

# %% [markdown]
# ## Exercises
#
# Solutions are in {doc}`../solutions/ch6_solutions`.

# %% [markdown]
# ```{exercise}
# :label: ch6-log-cosh
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 45 minutes
#
# Add a loss operator: log-cosh, $\ell = \log\cosh(p - t)$, a smooth cousin of Smooth L1.
# `kernels/exercises/ch6_log_cosh.cu` declares it as a functor for
# `kernels/common/fused_loss.cuh` (shown below), which turns it into the whole operator:
# forward and backward in one pass, three dtypes, three reductions; `kernels/ops/operators.py`
# registers its fake kernel and autograd formula when it is built. Write its value and its
# derivative. The check compares both with $\log\cosh(p - t)$ computed by PyTorch in float64,
# including differences of several hundred, where $\cosh$ overflows float32. **Target**: a
# training step at $2^{26}$ elements at 95% of the speed of `ops.mse` or better. Both read the
# same bytes and write the same gradient: do the `exp` and `log1p` hide behind the memory
# traffic?
# ```
#
# ```{admonition} Hint
# :class: dropdown
#
# Both are timed in GPU time with the host queued ahead (`bench.queued_ms`), because
# autograd's bookkeeping can take the host longer per step than the GPU takes to run it.
#
# $\cosh d = \frac{e^{|d|}}{2}(1 + e^{-2|d|})$. Take the logarithm of that product, and use
# `log1pf` for the small term. The derivative of $\log\cosh d$ is a function you know.
# ```

# %%
show_source("common/fused_loss.cuh")

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch6_log_cosh.cu")

# %% tags=["gpu", "nbval-ignore-output"]
if ch.exercise("exercises/ch6_log_cosh.cu", check_log_cosh):
    log_cosh = operators.LossOps(load("exercises/ch6_log_cosh.cu"))

    def trains(loss):  # a training step's share of the loss: forward, then backward
        step = bench.training_step(loss)
        return lambda pred, target: step(pred.requires_grad_(), target)

    bench.speedup_target(trains(lambda p, t: log_cosh.loss("log_cosh", p, t)), trains(ops.mse),
                         "mse", (1 << 26,), 0.95, label="log-cosh", reference_label="ops.mse",
                         gpu_time=True)

# %% [markdown]
# ```{exercise}
# :label: ch6-in-place
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 30 minutes
#
# The backward of `kernels/ops/operators.py` multiplies the saved gradient by `grad_output` in
# place in eager mode, and out of place when traced by `torch.compile`. Predict what breaks if
# it always wrote in place, then try it. Remove the `type(grad) is not torch.Tensor` branch of
# `scale` in `kernels/ops/grad_guess.py` (the backward calls it), restart the notebook, and run
# `torch.library.opcheck` on `ops.element_wise.ops["mse"].default` with a prediction that
# requires grad. Which of its tests fails, and why can a compiled graph not write into a
# tensor it saved for the backward?
# ```
#
# ```{exercise}
# :label: ch6-scale-cost
#
# **Difficulty:** ★★★ (hard) · **Time:** about 45 minutes
#
# From the bytes each step moves, predict for MSE and for Hinge the ratio of two times: a
# forward + backward whose guess of `grad_output` is wrong, and one with `loss.backward()`
# alone. (A wrong guess: the loss multiplied by 1024 and 512 in turn.) Compare with the measured table above.
# Then design a Hinge backward for which a wrong guess costs less than twice the plain step.
# (Hint: what does the backward need to know about each element, and in how many bits?)
# ```
