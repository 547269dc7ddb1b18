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
# # Chapter 5: fused log-sum-exp cross-entropy
#
# ```{admonition} Before you start
# :class: tip
#
# **You will be able to:**
#
# - compute a row's {term}`log-sum-exp` stably, and in one pass with the
#   {term}`online softmax`;
# - write a fused cross-entropy that follows PyTorch's semantics exactly and writes its
#   gradient in the same pass;
# - choose how many threads a row gets from its length.
#
# **Assumes:** chapters 3 and 4 (block reduction, two passes); cross-entropy as PyTorch
# computes it.
#
# **Words it uses** (defined in the {doc}`../book/glossary`): {term}`SM`, {term}`warp`,
# {term}`block`, {term}`reduction`.
#
# **Reading time:** about 13 minutes. **Run time:** about 2 minutes
# on a small GPU (the book's small-GPU run, {doc}`../book/status`).
# ```
#
# The last loss of the course is the one every language model trains with:
# `F.cross_entropy(logits, target)`, where `logits` is a `rows x classes` matrix and `target`
# holds one int64 class index per row. For row $i$ with logits $x_{i,0}, \dots, x_{i,C-1}$ and
# target class $t_i$,
#
# $$
# \ell_i = -\log \frac{e^{x_{i,t_i}}}{\sum_j e^{x_{i,j}}} = \log\sum_j e^{x_{i,j}} - x_{i,t_i},
# \qquad
# \text{loss} = \frac{1}{N}\sum_i \ell_i .
# $$
#
# It is still a {term}`reduction`, but a reduction of reductions: every row first needs its own
# log-sum-exp. The chapter's ladder, measured at the KernelBench shape (the summary's table):
#
# | version | the one change | what it shows |
# | --- | --- | --- |
# | v1 | one {term}`block` per row, two passes: the row's maximum, then its sum of exponentials | one {term}`kernel` instead of PyTorch's two: faster than eager and `torch.compile` |
# | v2 | one pass, the *online softmax* | fast on long rows; on short rows no faster, limited by instructions |
# | v3 | threads per row by row length, the row in registers, wide loads, the gradient in the same pass | close to the read bandwidth on long rows; ahead of `torch.compile` at all row lengths but one, and in training |

# %%
import math
import warnings

import torch
import torch.nn.functional as F
from IPython.display import Markdown

import kernels
from kernels import Chapter, check, load
from kernels.cross_entropy import cross_entropy
from kernels.exercises.ch5_checks import check_ignore_index, check_label_smoothing, compare
from kernels.course.notebook import show_diff
from kernels.notebook import show_source

ch = Chapter("ch5")  # the chapter's id, GPU and read bandwidth, for its measurements

# %% [markdown]
# ## What PyTorch launches
#
# `F.cross_entropy` is `log_softmax` followed by `nll_loss`. The profiler shows the kernels it
# runs on the KernelBench shape, 32768 rows of 4096 classes in float32:

# %% tags=["gpu", "nbval-ignore-output"]
from torch.profiler import ProfilerActivity, profile

logits = torch.randn(32768, 4096, device="cuda")
target = torch.randint(0, 4096, (32768,), device="cuda")
F.cross_entropy(logits, target)  # warm-up: the first call loads libraries
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    F.cross_entropy(logits, target)
    torch.cuda.synchronize()
for event in prof.events():
    if event.device_type == torch.autograd.DeviceType.CUDA:
        print(event.name[:110])
del logits, target

# %% [markdown]
# The first kernel reads the logits and writes a matrix of log-probabilities of the same size;
# the second reads one entry per row of that matrix and averages. The intermediate matrix is
# pure traffic: a fused kernel never writes it.
#
# **Predict.** How many bytes must a fused kernel read at this shape, and how many times that
# does eager PyTorch move at least?

# %%
rows, classes = 32768, 4096
needed = kernels.get_loss("cross_entropy").min_bytes((rows, classes), element_size=4)
intermediate = rows * classes * 4
print(f"a fused kernel must read:         {needed / 2**20:7.0f} MiB (logits + int64 targets)")
print(f"log_softmax also writes:          {intermediate / 2**20:7.0f} "
      "MiB of log-probabilities")
print(f"eager moves at least {(needed + intermediate) / needed:.1f}x the bytes it must")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# A fused kernel reads each logit once, $32768 \times 4096 \times 4$ bytes, and one int64
# target per row, $32768 \times 8$ bytes: the first line. `log_softmax` writes a matrix as large
# as the logits, so eager moves about twice that (the last line), before counting the second
# kernel's reads: a fused kernel has at most half of eager's bytes to move.
# ```

# %% [markdown]
# ## A stable log-sum-exp
#
# $\log\sum_j e^{x_j}$ taken literally overflows: in float32, $e^{x}$ is infinite as soon as
# $x > 88.7$. The cure is to factor out the row's maximum $m = \max_j x_j$:
#
# $$
# \log\sum_j e^{x_j} = \log\Big(e^{m}\sum_j e^{x_j - m}\Big) = m + \log\sum_j e^{x_j - m}.
# $$
#
# Every exponent $x_j - m$ is now at most 0, so every term is in $(0, 1]$, and the largest is
# exactly 1: the sum lies between 1 and $C$ and neither overflows nor underflows to 0. On the
# CPU, with logits of magnitude $10^4$:

# %%
x = torch.tensor([[1e4, 1e4 - 1.0, 0.0]])  # float32, one row of three classes
naive = torch.log(torch.exp(x).sum(dim=1))
m = x.max(dim=1, keepdim=True).values
stable = m[:, 0] + torch.log(torch.exp(x - m).sum(dim=1))
print("exp(x)                 :", torch.exp(x))
print("naive log-sum-exp      :", naive)
print("naive softmax          :", torch.exp(x) / torch.exp(x).sum(dim=1, keepdim=True))
print("stable log-sum-exp     :", stable)
print("torch.logsumexp        :", torch.logsumexp(x, dim=1))

# %% [markdown]
# Three more cases a kernel must get right. A masked class, set to $-\infty$, adds
# $e^{-\infty} = 0$ and must not turn the sum into NaN. One dominating logit makes its class's
# loss tiny and every other class's large, and both must come out right. A row of *only*
# $-\infty$ has no finite maximum: PyTorch's loss is NaN (`torch.logsumexp` alone gives
# $-\infty$).

# %%
rows = torch.tensor([[0.0, float("-inf"), 1.0],          # a masked class
                     [100.0, 0.0, 0.0],                   # one dominating logit
                     [float("-inf")] * 3])                # nothing left
m = rows.max(dim=1, keepdim=True).values
print("stable log-sum-exp :", (m[:, 0] + torch.log(torch.exp(rows - m).sum(dim=1))).tolist())
print("torch.logsumexp    :", torch.logsumexp(rows, dim=1).tolist())
print("loss, target 0     :",
      F.cross_entropy(rows, torch.tensor([0, 0, 0]), reduction="none").tolist())
print("loss, target 2     :",
      F.cross_entropy(rows, torch.tensor([2, 2, 2]), reduction="none").tolist())

# %% [markdown]
# ## Reading the row once: the online softmax
#
# The stable formula needs $m$ before it can add a single exponential: two passes over the row.
# Milakov and Gimelshein {cite}`milakov2018online` showed that one pass is enough. Keep a
# running maximum $m$ and a running sum $s = \sum e^{x_i - m}$ over the logits seen so far.
# When the next logit $x$ arrives, the new maximum is $m' = \max(m, x)$, and the sum so far,
# taken relative to $m$, is moved to $m'$ by one factor:
#
# $$
# \sum_{i} e^{x_i - m'} = e^{m - m'} \sum_i e^{x_i - m}
# \qquad\Longrightarrow\qquad
# s \leftarrow s\, e^{m - m'} + e^{x - m'}, \quad m \leftarrow m'.
# $$
#
# ```{figure} ../book/images/ch5_online_merge.svg
# :alt: A row of eight logits split in two halves. Each half gives a pair (m, s): its max and the sum of exp(x - m). The pairs merge into m = max(ma, mb) and s = sa exp(ma - m) + sb exp(mb - m); m + log s equals the log-sum-exp of the whole row.
# :width: 100%
#
# The online softmax's pairs merge exactly: the numbers are computed by `tools/diagrams.py` and checked against the direct log-sum-exp.
# ```
#
# When $x$ is not a new maximum, $m' = m$ and the factor is 1. Two partial results $(m_a, s_a)$
# and $(m_b, s_b)$ (two {term}`threads <thread>`, two {term}`warps <warp>`) merge by the same rule:
# $M = \max(m_a, m_b)$, $s = s_a e^{m_a - M} + s_b e^{m_b - M}$. The result is exact in real
# arithmetic; in floating point it rounds like the two-pass version. In plain Python:

# %%
def online_logsumexp(values):
    m, s = -math.inf, 0.0
    for x in values:
        m_new = max(m, x)
        s = s * math.exp(m - m_new) + math.exp(x - m_new)
        m = m_new
    return m + math.log(s)


row = (1e4 * torch.randn(1000, generator=torch.Generator().manual_seed(0),
                         dtype=torch.float64))
print(f"online, one pass : {online_logsumexp(row.tolist()):.6f}")
print(f"torch.logsumexp  : {torch.logsumexp(row, dim=0).item():.6f}")

# %% [markdown]
# ## Version 1: a block per row, two passes
#
# The first kernel is the formula as written: one {term}`block` of 256 threads per row computes the
# row's maximum (chapter 3's reduction with max in place of +). Then it computes the sum of
# $e^{x_j - m}$, then the row's loss. A second one-block kernel adds the rows' losses in a fixed order in float64
# (chapter 4: the same bits on every run) and divides by the number of rows not ignored.
#
# `kernels.cross_entropy.cross_entropy` is a drop-in for `F.cross_entropy` that runs a given
# kernel; `check` compares it with PyTorch in float64. Its `row_losses` also handles
# `ignore_index`, `reduction` and a bad-target flag, defined in "PyTorch's semantics, exactly":

# %%
show_source("ch5_cross_entropy/v1_two_pass_row.cu",
            "__global__ void __launch_bounds__(kThreads) row_losses",
            "// Counts the rows not ignored", fold=False)

# %%
show_source("ch5_cross_entropy/v1_two_pass_row.cu", fold=True)

# %% [markdown]
# The block-wide max and sum are chapter 3's tree and chapter 4's shared header,
# `kernels/common/reduce.cuh`, in the form that leaves the result in every thread (each
# thread needs the row's max before it sums):

# %%
show_source("common/reduce.cuh",
            "// The sum or the max over a block of kBlock threads, in every",
            "A block_max_all(A v)")

# %% tags=["gpu"]
v1 = load("ch5_cross_entropy/v1_two_pass_row.cu")


def op_of(kernel):
    def op(logits, target, **kwargs):
        return cross_entropy(logits, target, kernel=kernel, **kwargs)
    return op


check(op_of(v1), "cross_entropy", rtol=1e-5)

# %% [markdown]
# ## Version 2: one pass with the online softmax
#
# Same layout, but each thread keeps a running $(m, s)$ pair and the block merges the pairs at
# the end: every logit is read once. The diff below is that change. Version 1's two loops over
# the row become one loop that updates `m_new` and rescales `s`, and each thread's sum is
# rescaled to the row's maximum `row_m` before the block adds them.

# %%
show_diff("ch5_cross_entropy/v1_two_pass_row.cu", "ch5_cross_entropy/v2_online_softmax.cu")

# %% tags=["gpu"]
v2 = load("ch5_cross_entropy/v2_online_softmax.cu")
check(op_of(v2), "cross_entropy", rtol=1e-5)

# %% [markdown]
# ## The final version: the right amount of threads per row, wide loads, and the gradient
#
# Row length decides the layout. Each thread holds 32 values of its row in registers: eight
# 16-byte loads in float32, all in flight at once, in 32 registers, few enough that many warps
# still fit on an SM. A row gets as few threads as hold it (the figure): one up to 32
# classes, a warp up to 1024, a block of 128 threads up to 4096. Fewer threads per row keep
# every thread's loads in use, and a row within a warp reduces with shuffles only, without
# shared memory or `__syncthreads`. A row held in registers costs one read of memory. Longer
# rows stream through version 2's online softmax. It writes the gradient in
# the same pass (below). The row loop of `row_cached`, the kernel for rows held in registers
# (its template arguments: dtype, threads per row, values per load, loads per thread):
#
# ```{admonition} Going deeper: short rows, odd lengths and dtypes
# :class: dropdown
# Between one thread and a warp, 2, 4, 8 or 16 threads take a row, several rows per warp, so
# that a short row's reductions are a few shuffles. Giving every short row a whole warp was
# tried first: at 10 classes a warp then had 40 bytes
# in flight, and the kernel read at a few percent of the {term}`bandwidth` (the kernel's header
# and `bench/PERFLOG.md` have the numbers). Rows whose length is not a multiple of four are read
# one value at a time: a thread per row up to 16 classes, a warp per row up to 512. All loads are
# 16 bytes wide (four float32 or eight bfloat16 values) when the row allows it; bfloat16 and
# float16 logits are accumulated in float32, float64 logits in float64.
# ```
#
# ```{figure} ../book/images/ch5_threads_per_row.svg
# :alt: Step plot of threads per row against classes per row, both on log scales: 1 thread up to 32 classes, then 2, 4, 8, 16 and 32 threads up to 1024 classes, a block of 128 up to 4096, and 512 threads streaming beyond. Rows whose length is not a multiple of 4 get 1 thread up to 16 classes, 32 up to 512, then stream.
# :width: 100%
#
# Version 3's threads per row, computed from its launch rules (`launch_rows`) and constants: as few threads as hold the row at 32 values each.
# ```

# %%
show_source("ch5_cross_entropy/v3_fused_rows.cu",
            "        // Every load of the row is issued before any arithmetic.",
            "        const A lse = m + acc_log(s);", fold=False)

# %%
show_source("ch5_cross_entropy/v3_fused_rows.cu", fold=True)

# %% tags=["gpu"]
v3 = load("ch5_cross_entropy/v3_fused_rows.cu")
final = op_of(v3)
check(final, "cross_entropy", rtol=1e-5)

# %% [markdown]
# The fused version runs one kernel over the rows (`row_cached`) and small kernels that add
# their losses. Nothing is copied back to the host, so no call waits for the GPU.
#
# ```{admonition} Going deeper: the small kernels, and no memset
# :class: dropdown
# Beyond 16384 rows, `sum_chunks` first adds chunks of 4096 losses with many blocks, as here;
# `finish` adds their sums. No memset clears the bad-target flag first: a bad target stops the
# row kernel, so the thread that writes row 0 writes the flag's 0.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
logits = torch.randn(32768, 4096, device="cuda")
target = torch.randint(0, 4096, (32768,), device="cuda")
final(logits, target)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    final(logits, target)
    torch.cuda.synchronize()
for event in prof.events():
    if event.device_type == torch.autograd.DeviceType.CUDA:
        print(event.name[:110])
del logits, target

# %% [markdown]
# ## PyTorch's semantics, exactly
#
# A drop-in must answer what PyTorch answers, not only for the default arguments:
#
# - `target` is int64 (`torch.long`); an int32 target is an error in PyTorch and here.
# - `ignore_index` (default $-100$): rows with that target add nothing, and the mean divides by
#   the number of rows *not* ignored (with none left, the mean is NaN).
# - `reduction`: `"mean"` (a 0-d tensor), `"sum"`, or `"none"` (one loss per row).
# - `label_smoothing` $\varepsilon$: the target distribution puts $1-\varepsilon$ on the target
#   class and $\varepsilon / C$ on every class.
#
# The exercise checks (`kernels/exercises/ch5_checks.py`) test these; the final kernel passes:

# %% tags=["gpu"]
assert check_ignore_index(v3)
assert check_label_smoothing(v3)

# %% [markdown]
# A target outside $[0, C)$ that is not `ignore_index` is a bug in the caller. Our kernels
# never use it as an index: versions 1 and 2 give the row a NaN loss, and the final version
# stops with a device-side assertion, as PyTorch does (chapter 6 weighs the choices). While
# debugging, `check_targets=True` checks the targets on the host first and raises an
# `IndexError` naming the row; that costs a wait for the GPU, so it is off by default.

# %% tags=["gpu"]
logits = torch.randn(4, 10, device="cuda")
for bad in ([0, 1, 10, 3], [0, -5, 2, 3]):
    try:
        final(logits, torch.tensor(bad, device="cuda"), check_targets=True)
    except IndexError as error:
        print(f"targets {bad}: IndexError: {error}")
try:
    final(logits, torch.tensor([0, 1, 2, 3], device="cuda", dtype=torch.int32))
except TypeError as error:
    print(f"int32 targets: TypeError: {error}")
print("version 2, a bad target:", op_of(v2)(logits, torch.tensor([0, 1, 10, 3], device="cuda"),
                                            reduction="none").isnan().tolist())

# %% [markdown]
# What the check costs at the KernelBench shape: its wait for the GPU drains the lead the
# course's timing keeps over the GPU (`kernels.bench.time_ms`), as in a training loop.

# %% tags=["gpu", "nbval-ignore-output"]
logits = torch.randn(32768, 4096, device="cuda")
target = torch.randint(0, 4096, (32768,), device="cuda")
for flag in (False, True):
    ms = kernels.bench.time_ms(lambda l, t, flag=flag: final(l, t, check_targets=flag),
                               [(logits, target)])
    print(f"check_targets={flag!s:<5}: {ms * 1e3:6.0f} us per call")
del logits, target

# %% [markdown]
# ## Robust on hard inputs, in every dtype
#
# The CPU cells' hard cases, on the GPU and at scale, then float32, bfloat16 and float16 logits,
# each against float64 PyTorch within its dtype's tolerance (printed on each line).

# %% tags=["gpu"]
g = torch.Generator(device="cuda").manual_seed(5)
rows, classes = 1031, 4099
target = torch.randint(0, classes, (rows,), generator=g, device="cuda")
big = 1e4 * torch.randn(rows, classes, generator=g, device="cuda")
compare(final, "logits of magnitude 1e4", big, target)
masked = torch.randn(rows, classes, generator=g, device="cuda")
masked[torch.rand(rows, classes, generator=g, device="cuda") < 0.5] = float("-inf")
masked[torch.arange(rows, device="cuda"), target] = 0.0  # the target class stays finite
compare(final, "half of the classes -inf", masked, target)
dominant = torch.randn(rows, classes, generator=g, device="cuda")
dominant[:, 7] = 1e3  # the target class for a few rows, a wrong class for the others
compare(final, "one dominating logit", dominant, target, reduction="none")
for dtype, rtol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2), (torch.float16, 1e-3)):
    logits = torch.randn(rows, classes, generator=g, device="cuda").to(dtype)
    compare(final, f"{str(dtype)[6:]} logits, rtol {rtol:.0e}", logits, target, rtol=rtol)

# %% [markdown]
# ## The backward pass, fused
#
# With $p_{ij} = e^{x_{ij} - \mathrm{lse}_i}$ the softmax of row $i$,
#
# $$
# \frac{\partial \ell_i}{\partial x_{ij}} = \frac{\partial}{\partial x_{ij}}
# \Big(\log\sum_k e^{x_{ik}} - x_{i,t_i}\Big) = p_{ij} - [j = t_i],
# \qquad
# \frac{\partial\, \text{loss}}{\partial x_{ij}} = \frac{p_{ij} - [j = t_i]}{N}
# $$
#
# for the mean over $N$ rows not ignored (ignored rows get a zero gradient). Everything in it is
# known once the row's log-sum-exp is, so the final kernel writes it while the row is still in
# its registers. Training then reads the logits once and writes the gradient once, where
# PyTorch runs `log_softmax` and `nll_loss` forward, then their two backward kernels.
#
# The forward cannot know `grad_output` yet: it writes the gradient times a guess of it (the
# last backward's, 1 at first), and the backward multiplies by the real `grad_output` over that
# guess. When the guess was right, as for a constant loss scale, the backward has nothing to do.
#
# ```{admonition} Going deeper: the guess on the GPU, and how the gradient is checked
# :class: dropdown
# The guess and `grad_output` are both read on the GPU, so nothing synchronises. With label
# smoothing the one-hot becomes $(1-\varepsilon)[j=t_i] + \varepsilon/C$.
#
# `torch.autograd.gradcheck` compares the analytic gradient with finite differences in
# float64. It differentiates one graph several times, which the fused gradient (scaled in
# place by the backward) does not allow; with `fused_backward=False` the forward saves the
# rows' log-sum-exp instead and a backward kernel reads the logits again, which gradcheck can
# run as often as it likes. The fused gradient itself, the one training uses, is compared with
# PyTorch's float64 gradient directly (the last lines below).
# ```

# %% tags=["gpu"]
g = torch.Generator(device="cuda").manual_seed(3)
x = torch.randn(6, 9, generator=g, device="cuda", dtype=torch.float64, requires_grad=True)
t = torch.tensor([0, 8, -100, 4, 4, 1], device="cuda")
for reduction in ("mean", "sum", "none"):
    for smoothing in (0.0, 0.1):
        ok = torch.autograd.gradcheck(
            lambda x: final(x, t, reduction=reduction, label_smoothing=smoothing,
                            fused_backward=False), (x,))
        print(f"{'PASS' if ok else 'FAIL'}  gradcheck, float64, reduction {reduction}, "
              f"label_smoothing {smoothing}")


def gradient_error(op, x, t, **kwargs):
    x = x.detach().requires_grad_()
    (ours,) = torch.autograd.grad(op(x, t, **kwargs), x)
    x64 = x.detach().double().requires_grad_()
    (theirs,) = torch.autograd.grad(F.cross_entropy(x64, t, **kwargs), x64)
    return ((ours.double() - theirs).abs().max() / theirs.abs().max()).item()


x = torch.randn(4097, 1001, generator=g, device="cuda")
t = torch.randint(0, 1001, (4097,), generator=g, device="cuda")
t[::7] = -100
for kwargs in ({}, {"reduction": "sum"}, {"label_smoothing": 0.1}):
    error = gradient_error(final, x, t, **kwargs)
    print(f"{'PASS' if error <= 1e-5 else 'FAIL'}  float32 gradient vs PyTorch float64 "
          f"{kwargs}")

# %% [markdown]
# ## Throughput against row length
#
# One cell times each version, eager PyTorch, `torch.compile` and Liger-Kernel's Triton
# cross-entropy (if installed) on float32 logits of about $2^{27}$ elements, from 10 to 128256
# classes per row, and training at the KernelBench shape. Effective bandwidth counts the bytes
# that must be read (the logits and the int64 targets).
#
# **Predict.** Version 1 reads each row twice, version 2 once. Which is faster at 4096 classes
# per row, and which at 128256?
#
# ```{admonition} Going deeper: what the sweep measures
# :class: dropdown
# The bandwidth is compared with the GPU's read bandwidth measured in the same run. Our versions
# are timed with their default, `check_targets=False` (no wait for the GPU on each call, see
# above). In training the bytes that must move are the logits read once and the gradient written
# once. The results go to `book/results/ch5.csv`; the plot and tables below are drawn from it.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
from kernels.bench import Measurement, sweep, time_ms

CLASSES = [10, 128, 1024, 4096, 32768, 128256]
SHAPES = [((1 << 27) // c, c) for c in CLASSES]  # 4096 classes: the KernelBench 32768 x 4096
print(f"{ch.gpu}: read bandwidth {ch.peak:.0f} GB/s")  # measured before the sweep

compiled = torch.compile(F.cross_entropy, dynamic=False)
providers = {"eager": F.cross_entropy, "torch.compile": compiled}
versions = {"v1 two-pass row": v1, "v2 online softmax": v2, "v3 fused": v3}
for name, kernel in versions.items():
    providers[name] = lambda l, t, kernel=kernel: cross_entropy(l, t, kernel=kernel,
                                                                check_targets=False)
try:  # last: Liger's kernel may overwrite its input with the gradient
    # Liger imports tqdm.auto, which warns that ipywidgets is missing: no progress bar is used.
    warnings.filterwarnings("ignore", message="IProgress not found")
    from liger_kernel.transformers.functional import liger_cross_entropy

    def liger(logits, target):
        out = liger_cross_entropy(logits, target)
        return out[0] if isinstance(out, tuple) else out

    providers["Liger-Kernel"] = liger
except ImportError:
    print("Liger-Kernel is not installed: measured without it")
measurements = sweep(providers, "cross_entropy", SHAPES)

# Forward + backward at the KernelBench shape: the gradient of the mean, as training needs it.
rows, classes = 32768, 4096
logits = torch.randn(rows, classes, device="cuda", requires_grad=True)
target = torch.randint(0, classes, (rows,), device="cuda")
train_bytes = 2 * rows * classes * 4 + rows * 8  # read logits and targets, write the gradient
compiled_train = torch.compile(F.cross_entropy, dynamic=False)
train = {"eager": F.cross_entropy, "torch.compile": compiled_train,
         "v3 fused": lambda l, t: cross_entropy(l, t, kernel=v3, check_targets=False)}
if "Liger-Kernel" in providers:
    train["Liger-Kernel"] = providers["Liger-Kernel"]
for name, fn in train.items():
    ms = time_ms(lambda l, t, fn=fn: torch.autograd.grad(fn(l, t), l), [(logits, target)])
    measurements.append(
        Measurement("cross_entropy_fwd_bwd", name, (rows, classes), train_bytes, ms))
del logits, target
ch.save(measurements)
print(f"{len(measurements)} measurements saved")

# %% [markdown]
# Every shape has about the same bytes, so the plot's x axis is the row length.

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt

results = ch.rows()
forward = kernels.results.select(results, loss="cross_entropy")
names = list(dict.fromkeys(r["provider"] for r in forward))
ax = kernels.plot_throughput(forward, "cross_entropy", names, x=lambda shape: shape[1],
                             title=f"cross-entropy forward by row length on "
                                   f"{results[0]['gpu']}")
# One tick per measured shape: its classes, and below them its rows (131072 as "131k"), short
# enough that neighbouring labels do not run into each other.
ticks = sorted({r["shape"] for r in forward}, key=lambda s: s[1])
short = lambda n: f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k" if n >= 1e4 else f"{n}"
ax.set_xticks([s[1] for s in ticks], [f"{s[1]:,}\n{short(s[0])}" for s in ticks])
ax.minorticks_off()
ax.set_xlabel("classes per row, and rows below (rows x classes ≈ 2^27 float32 logits)")
ax.set_ylabel("effective GB/s\n(logits + targets / time)")
plt.show()

# %% [markdown]
# The same numbers as a table, GB/s and the percentage of the measured read bandwidth:

# %% tags=["nbval-ignore-output"]
shapes = sorted({r["shape"] for r in forward}, key=lambda s: s[1])
lines = ["| rows x classes | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
for shape in shapes:
    cells = []
    for name in names:
        found = kernels.results.select(forward, provider=name, shape=shape)
        cells.append(f"{found[0]['gbps']:.0f} "
                     f"({100 * found[0]['gbps'] / found[0]['peak_gbps']:.0f}%)"
                     if found else "–")
    lines.append(f"| {shape[0]} x {shape[1]} | " + " | ".join(cells) + " |")
Markdown("\n".join(lines))

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# Read the columns `v1 two-pass row` and `v2 online softmax`. Up to 4096 classes version 1's
# two reads are as fast as version 2's one read, or faster; at 32768 and 128256 classes
# version 2 is far ahead. Why short rows gain nothing is the profile's question below.
# ```
#
# At the KernelBench shape, every provider against eager PyTorch (each on its own: the steps
# from version to version are in the summary's table):

# %% tags=["nbval-ignore-output"]
def against(rows, providers, loss, shape, baseline="eager"):
    """Each provider's time, GB/s and speed-up over `baseline` at one shape: no chain."""
    at = {r["provider"]: r for r in kernels.results.select(rows, loss=loss, shape=shape)}
    lines = [f"| provider | time (ms) | GB/s | % of peak | vs {baseline} |", "|---" * 5 + "|"]
    for p in (p for p in providers if p in at):
        r = at[p]
        lines.append(f"| {p} | {r['ms']:.4g} | {r['gbps']:.0f} | "
                     f"{100 * r['gbps'] / r['peak_gbps']:.0f}% | "
                     f"{at[baseline]['ms'] / r['ms']:.2f}x |")
    return "\n".join(lines)


Markdown(against(results, names, "cross_entropy", (32768, 4096)))

# %% [markdown]
# Training, forward plus backward, at the same shape (GB/s here counts the logits read once and
# the gradient written once):

# %% tags=["nbval-ignore-output"]
train_names = list(dict.fromkeys(
    r["provider"] for r in kernels.results.select(results, loss="cross_entropy_fwd_bwd")))
Markdown(against(results, train_names, "cross_entropy_fwd_bwd", (32768, 4096)))

# %% [markdown]
# Liger-Kernel's forward is slow here for a reason outside its kernel: each call waits for the
# GPU three times before launching it.
#
# ````{admonition} Going deeper: what Liger-Kernel's forward does, from its source
# :class: dropdown
# It counts the rows not ignored with `.item()` and checks the targets' range with two
# `assert`s on GPU tensors. One such wait is what `check_targets=True` adds to our kernel, and
# the lines under that cell show its cost.
#
# In `src/liger_kernel/ops/cross_entropy.py` of
# [linkedin/Liger-Kernel](https://github.com/linkedin/Liger-Kernel) (read at its main branch of
# 2026-08, after release 0.8.2; the chapter's run installed 0.8.5), `cross_entropy_forward`
# runs, before its Triton kernel:
#
# ```python
# target_mask = target != ignore_index
# n_non_ignore = target_mask.sum().item()
# assert (target * target_mask).max() < _input.shape[-1], ...
# assert (target * target_mask).min() >= 0, ...
# ```
#
# `.item()` copies a GPU value to the host, and `assert` on a 0-d GPU tensor does too: three
# waits for the GPU per call, after which the GPU idles while Python launches the rest. The
# kernel is launched with `HAS_GRADIENTS=_input.requires_grad`: with logits that require a
# gradient, as in the training table, its forward also computes the gradient and writes it
# over the logits (a second read of each row and a write), and the backward only rescales it.
# The sweep's logits do not require a gradient, so in the forward table its kernel skips that
# pass (since release 0.6.3; earlier releases always wrote the gradient).
# ````

# %% tags=["nbval-ignore-output"]
at = {r["provider"]: r for r in kernels.results.select(forward, shape=(32768, 4096))}
longest = {r["provider"]: r for r in kernels.results.select(forward, shape=shapes[-1])}
ours, theirs = at["v3 fused"], at["torch.compile"]
Markdown(
    f"On the {ours['gpu']}, at 32768 x 4096 the final kernel reads at {ours['gbps']:.0f} "
    f"GB/s, {100 * ours['gbps'] / ours['peak_gbps']:.0f}% of the measured read bandwidth: "
    f"{theirs['ms'] / ours['ms']:.2f} times as fast as `torch.compile` and "
    f"{at['eager']['ms'] / ours['ms']:.2f} times as fast as eager PyTorch. With "
    f"{shapes[-1][1]} classes per row it reaches {longest['v3 fused']['gbps']:.0f} GB/s "
    f"({100 * longest['v3 fused']['gbps'] / longest['v3 fused']['peak_gbps']:.0f}%).")

# %% [markdown]
# The final version is faster than eager PyTorch at every shape, and faster than
# `torch.compile` at every shape but 1024 classes (the GB/s table); in training it is ahead of
# both (the training table). The ratio to `torch.compile` above is taken at 4096 classes,
# where `torch.compile` dips below its neighbours in the GB/s table, so it is the largest of
# the sweep. The final version's four changes are not measured one by one
# here.
#
# ```{admonition} Going deeper: what is left at short rows and at 1024 classes
# :class: dropdown
# Short rows are the hardest: as few threads per row as hold it bring them to more than half of
# the bandwidth at 10 classes, still short of the long rows. At 1024 classes a warp per row holds eight 16-byte loads per lane; fewer threads per row with
# more loads each is the next thing to try there.
# ```
#
# Why does version 2's single pass gain nothing on short rows? Perhaps a short row is still in
# a cache when version 1 reads it again, so the second pass costs no DRAM traffic. Or version 2
# is slowed by its two `exp` per element (the rescale of the running sum), where version 1
# computes one per pass. The profiler tests both ({doc}`../book/profiling`):

# %% tags=["gpu", "nbval-ignore-output"]
from kernels import profile

TWO_VERSIONS = '''
import torch
from kernels import load
from kernels.cross_entropy import cross_entropy
v1 = load("ch5_cross_entropy/v1_two_pass_row.cu")
v2 = load("ch5_cross_entropy/v2_online_softmax.cu")
for classes in (1024, 4096):
    x = torch.randn(32768, classes, device="cuda")
    t = torch.randint(0, classes, (32768,), device="cuda")
    for kernel in (v1, v2):
        cross_entropy(x, t, kernel=kernel)
torch.cuda.synchronize()
'''
counters = profile.ncu(TWO_VERSIONS, "row_losses", ("time (us)", "DRAM bytes read (MB)",
                       "L2 hit rate (%)", "warp instructions (M)", "issue slots busy (%)",
                       "MUFU pipe, exp (%)"), launches=4)
if counters:
    print(counters.table(["v1 x1024", "v2 x1024", "v1 x4096", "v2 x4096"]))

# %% [markdown]
# Both explanations hold. Version 1 reads as many bytes from DRAM as version 2: its second pass
# is served by the caches (at 1024 classes by L1, as the L2 hit rate is low there). And
# version 2 executes many more instructions and keeps {term}`MUFU` (the special-function unit that
# computes `exp`) busy twice as long. At 1024 classes it nearly fills the issue slots (the
# cycles in which the SM starts an instruction): it is limited by instructions, not memory. The final version computes each `exp` once.
#
# **Predict.** In bfloat16 the same bytes hold twice the values. How many times float32's
# instructions does the final version execute on bfloat16 logits of the same size? The profile
# below: the same 256 MiB in float32 (32768 x 2048) and bfloat16 (32768 x 4096), and float32
# rows of 3000 classes, all held in registers. The last fills three quarters of its tile of
# 4096 values: a check on what a partial tile costs.

# %% tags=["gpu", "nbval-ignore-output"]
TWO_DTYPES = '''
import torch
from kernels import load
from kernels.cross_entropy import cross_entropy
v3 = load("ch5_cross_entropy/v3_fused_rows.cu")
for classes, dtype in ((2048, torch.float32), (4096, torch.bfloat16), (3000, torch.float32)):
    x = torch.randn(32768, classes, device="cuda", dtype=dtype)
    t = torch.randint(0, classes, (32768,), device="cuda")
    with torch.no_grad():
        cross_entropy(x, t, kernel=v3)
torch.cuda.synchronize()
'''
counters = profile.ncu(TWO_DTYPES, "row_cached", profile.ISSUE, launches=3)
if counters:
    print(counters.table(["float32 x2048", "bfloat16 x4096", "float32 x3000"]))
    per_value = [counters.value("warp instructions (M)", i) * 32e6 / (32768 * classes)
                 for i, classes in enumerate((2048, 4096, 3000))]
    bf16_over_fp32 = (counters.value("warp instructions (M)", 1)
                      / counters.value("warp instructions (M)", 0))
    print("thread instructions per logit: " + ", ".join(f"{v:.1f}" for v in per_value)
          + f"; bfloat16 / float32 for the same bytes: {bf16_over_fp32:.2f}x")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# Not twice: bfloat16 executes only somewhat more than float32 (the last line above), and fewer
# per logit. Most of a row's instructions are spent on the row, not on its values: the address
# arithmetic, the target's lookup, the reductions of the maximum and of three sums across the
# row's 128 threads, the loss. A longer row in the same tile pays them once for more values.
# ```
#
# Both dtypes keep the issue slots busy most of the time (the FMA pipe does the adds and
# multiplies). That is why the final version computes $e^{x - m}$ as one multiply and one
# `MUFU.EX2` (`ex2.approx`) instead of `expf`'s longer sequence.
#
# ```{admonition} Going deeper: partial tiles, expf, and the longest rows
# :class: dropdown
# A row of 2048 float32 values fills half of its block's 4096-value tile, a row of 3000 about
# three quarters: the loads past the row are not issued, and the kernel skips their
# exponentials rather than computing them on $-\infty$. Computing them was tried, and the
# float32 count then matched bfloat16's (`bench/PERFLOG.md` has the profiles). With `expf`,
# the bfloat16 rows ran out of instruction issue before memory bandwidth (the kernel's header
# has the numbers).
#
# The longest rows have few rows to share among the GPU's SMs: 1046 rows of 128256 classes are
# fewer than eight blocks per SM. A kernel that splits each row across several blocks (merging
# their $(m, s)$ pairs exactly as the threads of one block do) would keep more loads in flight,
# but the table shows the final version almost as fast there as at 4096 classes, so little is
# left to gain.
# ```
#
# ## Summary
#
# - Cross-entropy is a row's {term}`log-sum-exp` minus its target's logit. Subtracting the row's
#   maximum makes it stable; the {term}`online softmax` finds maximum and sum in one pass.
# - One pass pays only for long rows: up to 4096 classes version 1's second pass comes from the
#   caches, and version 2's extra `exp` leaves it limited by instructions (the profile).
# - The final version gives a row as many threads as hold it, computes each `exp` once and keeps
#   the row in registers. It beats eager PyTorch at every shape, `torch.compile` at every shape
#   but one, and both in training, forward plus backward (the tables above).
# - Count the bytes, then watch the instructions: in bfloat16 the same bytes hold twice the
#   values, and instruction issue, not bytes, comes close to the limit; hence `ex2.approx`.
#
# The ladder at the KernelBench shape, each version against the one before and against
# version 1:

# %% tags=["nbval-ignore-output"]
VERSIONS = ["v1 two-pass row", "v2 online softmax", "v3 fused"]
CHANGES = {"v1 two-pass row": "a block per row: the max, then the sum of exponentials",
           "v2 online softmax": "one pass: a running (max, sum) per thread",
           "v3 fused": "threads per row by length, row in registers, wide loads, gradient"}
Markdown(kernels.results.speedup_table(results, VERSIONS, "cross_entropy", (32768, 4096),
                                       baseline="v1 two-pass row", changes=CHANGES))

# %% [markdown]
# ## Exercises
#
# Each exercise is a kernel file under `kernels/exercises/` and a cell that checks it against
# PyTorch, one PASS or FAIL line per case. Solutions are in {doc}`../solutions/ch5_solutions`.

# %% [markdown]
# ```{exercise}
# :label: ch5-ignore-index
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 30 minutes
#
# `kernels/exercises/ch5_ignore_index.cu` computes the cross-entropy of every row whose target
# is a class, but knows nothing of `ignore_index`. It reports a target of $-100$ as out of range
# (the bad-target flag) and gives its row a loss of 0: the row adds nothing, but the mean still
# counts it. Make rows whose target equals `a.ignore_index` add nothing, and make the mean divide
# by the number of rows that are not ignored, as PyTorch does. The check also uses an
# `ignore_index` that is a real class (3), and a batch where every row is ignored.
# **Target**: ignoring rows must cost nothing measurable: 95% of version 1's speed or better at
# the KernelBench shape, 32768 x 4096 (the skeleton is version 1 without `ignore_index`).
# ```
#
# ```{admonition} Hint
# :class: dropdown
#
# Two kernels decide the result: the one that computes a row's loss and flags a bad target,
# and the one that adds the losses and divides. The second reads `a.target` too. What is
# $0 / 0$ in floating point, and what does PyTorch return for a mean over no rows?
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch5_ignore_index.cu")

# %% tags=["gpu", "nbval-ignore-output"]
if ch.exercise("exercises/ch5_ignore_index.cu", check_ignore_index):
    kernels.bench.speedup_target(op_of(load("exercises/ch5_ignore_index.cu")), op_of(v1),
                                 "cross_entropy", (32768, 4096), 0.95,
                                 reference_label="version 1")

# %% [markdown]
# ```{exercise}
# :label: ch5-online-softmax
#
# **Difficulty:** ★☆☆ (easy) · **Time:** about 20 minutes
#
# On paper: a thread has seen logits $x_1, \dots, x_k$ and keeps $m = \max_i x_i$ and
# $s = \sum_i e^{x_i - m}$. A new logit $x$ arrives. Write the new $(m', s')$ in terms of
# $m$, $s$ and $x$ only, and check your formula for $x < m$, $x > m$ and the first logit
# ($m = -\infty$, $s = 0$). Then fix `online_update` in
# `kernels/exercises/ch5_online_softmax.cu`, which forgets the rescale. Which of the check's
# cases would still pass without it, and why?
# ```
#
# ```{admonition} Hint
# :class: dropdown
#
# $e^{x_i - m'} = e^{x_i - m}\, e^{m - m'}$. The function `merge` in the same file already does
# this for two partial sums; a single logit is the partial sum $(x, 1)$.
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch5_online_softmax.cu")

# %% tags=["gpu", "nbval-ignore-output"]
from kernels.exercises.ch5_checks import check_online_softmax

ch.exercise("exercises/ch5_online_softmax.cu", check_online_softmax);

# %% [markdown]
# ```{exercise}
# :label: ch5-label-smoothing
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 40 minutes
#
# With label smoothing $\varepsilon$ the target distribution is
# $q_j = (1 - \varepsilon)[j = t] + \varepsilon / C$ and the loss of a row is
# $-\sum_j q_j \log p_j$. Show that it equals
# $\mathrm{lse} - (1 - \varepsilon)\, x_t - \frac{\varepsilon}{C}\sum_j x_j$, then add it to
# `kernels/exercises/ch5_label_smoothing.cu` (`a.label_smoothing` is $\varepsilon$) without
# reading the row a third time.
# ```
#
# ```{admonition} Hint
# :class: dropdown
#
# $\log p_j = x_j - \mathrm{lse}$ and $\sum_j q_j = 1$. The second pass over the row already
# loads every logit: add them up there, and reduce that sum over the block like the sum of
# exponentials.
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch5_label_smoothing.cu")

# %% tags=["gpu", "nbval-ignore-output"]
ch.exercise("exercises/ch5_label_smoothing.cu", check_label_smoothing);
