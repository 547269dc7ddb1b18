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
# # Chapter 2: atomicAdd, the first fused kernel
#
# ```{admonition} Before you start
# :class: tip
#
# **You will be able to:**
#
# - write a CUDA {term}`kernel`, build it and call it from PyTorch;
# - explain {term}`atomic` contention and cut it with per-thread, per-{term}`warp`
#   ({term}`warp shuffle`) and per-{term}`block` sums;
# - show that float atomics are not {term}`deterministic`, and measure by how much results
#   vary.
#
# **Assumes:** chapter 1 (the read bandwidth, the bytes MSE must move); the
# {doc}`../book/cuda_primer` ({term}`thread`, {term}`grid`, {term}`coalescing`); C pointers.
#
# **Words it uses** (defined in the {doc}`../book/glossary`): {term}`grid-stride loop`,
# {term}`register`, {term}`shared memory`, {term}`stream`, {term}`occupancy`,
# {term}`bytes in flight`, {term}`Little's law`.
#
# **Reading time:** about 13 minutes. **Run time:** about 2 minutes
# on a small GPU (the book's small-GPU run, {doc}`../book/status`).
# ```
#
# Chapter 1 measured what `torch.mean((pred - target) ** 2)` costs in eager PyTorch: three
# kernels (subtract, square, mean), each reading and writing whole tensors. A loss only has to
# read each input once. This chapter writes the first kernel that does that: every thread
# subtracts, squares and adds its share into the result, in one pass over memory.
#
# The simplest way for thousands of threads to add into one number is `atomicAdd`: a
# read-modify-write that the memory system performs indivisibly. One atomic per element is slow
# (contention), and each version cuts the number of atomics. The chapter's ladder:
#
# | version | the one change | what it buys (measured below) |
# |---|---|---|
# | 1 | one `atomicAdd` per element | correct, but every thread queues on one address |
# | 2 | a sum per thread, in a register | far faster from about a million elements up |
# | 3 | a sum per warp, with shuffles | far faster again, except at the largest size |
# | 4 | a sum per block, in shared memory | best in the middle sizes; never ahead of `torch.compile` |
#
# Along the way we meet a problem that no amount of speed fixes: float atomics do not give the
# same answer twice.

# %%
import math

import numpy as np
import torch

import kernels
from kernels import Chapter, CheckFailed, bench, check, load, results
from kernels.exercises.ch2_checks import check_warp_atomics
from kernels.notebook import show_diff, show_source

ch = Chapter("ch2")  # the chapter's id, GPU and read bandwidth, for its measurements

# %% tags=["gpu", "nbval-ignore-output"]
print(f"{ch.gpu}: read bandwidth {ch.peak:.0f} GB/s")  # ch.peak: torch.sum over 4 GiB

# %% [markdown]
# ## A first kernel, by hand
#
# Three things turn a CUDA kernel into something you can call from PyTorch: a compiler run that
# links it into Python, a timer that measures the GPU rather than the host, and a comparison with
# PyTorch's answer. PyTorch ships all three, and here they are once, with nothing of the course's
# in between. The kernel is this chapter's version 1: every thread adds its squared error into
# one float with `atomicAdd`. `torch.utils.cpp_extension.load_inline` builds it, CUDA events time
# it, and `torch.allclose` checks it.

# %% tags=["gpu", "nbval-ignore-output"]
import time

from torch.utils.cpp_extension import load_inline

kernels.build.toolchain.point_torch_at_the_cuda_toolkit()  # where torch would guess it wrong
SOURCE = r"""
#include <torch/extension.h>
__global__ void mse_kernel(const float* p, const float* t, float* sum, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { float d = p[i] - t[i]; atomicAdd(sum, d * d); }
}
torch::Tensor mse(torch::Tensor p, torch::Tensor t) {
    auto sum = torch::zeros({}, p.options());
    int64_t n = p.numel();
    mse_kernel<<<(n + 255) / 256, 256>>>(p.data_ptr<float>(), t.data_ptr<float>(),
                                         sum.data_ptr<float>(), n);
    return sum / n;
}"""
began = time.perf_counter()
DECLARATION = "torch::Tensor mse(torch::Tensor p, torch::Tensor t);"  # what Python may call
by_hand = load_inline("ch2_by_hand", cpp_sources=DECLARATION, cuda_sources=SOURCE,
                      functions=["mse"])
print(f"built in {time.perf_counter() - began:.0f} s (a second run reuses the build)")
p, t = torch.randn(2, 2**24, device="cuda")
start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
by_hand.mse(p, t)  # the first call pays for loading the module: keep it out of the timing
start.record()
for _ in range(20):
    by_hand.mse(p, t)
stop.record()
torch.cuda.synchronize()  # elapsed_time needs both events done
ms = start.elapsed_time(stop) / 20
print(f"{ms:.3f} ms per call, {2 * p.numel() * 4 / (ms * 1e-3) / 1e9:.0f} GB/s read")
print("allclose:", torch.allclose(by_hand.mse(p, t), torch.mean((p - t) ** 2), rtol=1e-4))

# %% [markdown]
# Read the three lines before going on:
#
# - **The build took about a minute**, most of it compiling PyTorch's C++ headers
#   (`torch/extension.h`) for a ten-line kernel.
# - **The kernel is slow.** Every thread's `atomicAdd` waits its turn at the same address
#   (*Contention*, below).
# - **`allclose` says False.** One float receives $2^{24}$ additions. Once the running sum is
#   large, the small squares added to it are rounded away. A check on a small input would have
#   passed, so a check must try large ones too.
#
# The course's toolkit, which every later cell uses, does the same three things with more care:
#
# - `kernels.load` builds a plain `.cu` file without `torch/extension.h`, in seconds; it hashes
#   every source, so an edit is never served from a stale cache.
# - `kernels.bench` clears the {term}`L2 cache` between calls and takes the median of several
#   runs.
# - `kernels.check` compares with PyTorch in float64 on awkward sizes, with memory poisoned by
#   NaN.
#
# ```{dropdown} Going deeper: how a tensor reaches a course kernel (the binding)
# Every kernel file of the course is plain CUDA: no PyTorch headers, which is what keeps a build
# down to seconds. PyTorch tensors reach it through a small C struct, `ReductionArgs` in
# `kernels/common/loss_args.h`. The binding `kernels/bindings/reduction.cpp`, shared by every
# element-wise loss of the course, fills it and the kernel file's *launcher* reads it. What the
# binding does, in order:
#
# - **Checks** device, dtype and shapes with `TORCH_CHECK`, which raises a Python
#   `RuntimeError` with the message. A kernel must never see a tensor it cannot handle: a
#   float64 tensor read as float32 is garbage, a CPU pointer dereferenced on the GPU a crash.
# - **Broadcasting**: a target whose shape is a trailing part of the prediction's shape is
#   allowed, as in PyTorch (chapter 3 needs it for Hinge); the kernel gets its length.
# - **Empty input** returns NaN, as `torch.mean` of nothing does, without launching anything.
# - **Contiguous** copies of strided views, so the kernel can index `pred[i]` directly.
# - `CUDAGuard` makes the inputs' GPU the current one; the launch goes on PyTorch's current
#   **{term}`stream`**, so it is ordered with everything else PyTorch does.
# - The result is a **0-d tensor** (`at::empty({})`), the shape PyTorch's `mean` returns, and it
#   is *uninitialised*: the launcher must write it. So is the workspace, scratch memory the
#   launchers of later chapters use.
# - The launcher returns a `cudaError_t`; anything but `cudaSuccess` becomes a Python error.
#
# The two files are shown in full in {doc}`../book/checking`.
# ```

# %% [markdown]
# ## Version 1: one atomic per element
#
# One thread per element; each computes its squared error and adds it into the output with
# `atomicAdd`. The launcher zeroes the output first and divides by $n$ at the end, all on the
# {term}`stream`: no value ever goes back to the host.

# %%
show_source("ch2_atomics/v1_atomic_per_element.cu")

# %% [markdown]
# The pieces every kernel of the course has:
#
# - **Arguments**: `ReductionArgs` (`kernels/common/loss_args.h`) is a plain struct of pointers
#   and sizes: `pred`, `target`, `n`, `target_len`, `out`, and a scratch `workspace`.
# - **Launch configuration**: `<<<blocks, kThreads, 0, stream>>>` starts `blocks` blocks of
#   256 threads each, enough blocks (`ceil_div(n, 256)`, $n / 256$ rounded up) that there is a
#   thread for every element.
# - **Indexing**: thread `threadIdx.x` of block `blockIdx.x` takes element
#   `blockIdx.x * blockDim.x + threadIdx.x`, computed in 64 bits: a 32-bit product overflows past
#   $2^{31}$ elements.
# - **Bounds**: the last block usually has threads past the end, which must do nothing.
# - **Checking the launch**: a launch that cannot run (too many threads per block, too much shared
#   memory) does not raise anything by itself; `cudaGetLastError()` returns its error, and the
#   binding turns it into an exception. A launcher that forgets this fails silently.
#
# `kernels.load` registers each launcher as a PyTorch operator with code it appends to the
# binding, printed below for a file that defines `mse_launch`.
#
# ```{dropdown} Going deeper: how load builds a file
# `kernels.load` builds the `.cu` with nvcc and the binding with the host compiler, in seconds:
# neither includes `torch/extension.h`. A second `load` of unchanged sources, even in another
# process, reuses the build. (The by-hand cell's `point_torch_at_the_cuda_toolkit()` sets
# `CUDA_HOME` where PyTorch would guess the CUDA toolkit's place wrong.)
# ```

# %%
from kernels.codegen import registration

print(registration("mylib", [("mse", "ReductionArgs")]))

# %% [markdown]
# `m.def` declares the op and its signature (`REDUCTION_SCHEMA`: two tensors in, one out);
# `m.impl` binds its CUDA implementation, the binding around `mse_launch`. The result of `load`
# is a `Kernel` whose attributes are the registered ops: `v1.mse` is
# `torch.ops.<library>.mse`, and calling it runs the binding, which calls this launcher of the
# file:

# %%
show_source("ch2_atomics/v1_atomic_per_element.cu", start='extern "C"', end="}")

# %% tags=["gpu", "nbval-ignore-output"]
v1 = load("ch2_atomics/v1_atomic_per_element.cu")
v1

# %% [markdown]
# Before any timing, correctness. `kernels.check` compares the op with PyTorch in float64 on
# awkward sizes: one element, less than a block, not a multiple of the block, 2-D
# ({doc}`../book/checking`).

# %% [markdown]
# Version 1 loses digits as $n$ grows, as `allclose` showed. We check it with a tolerance of
# $10^{-3}$ on the cases up to $10^5$ elements; the cell after it shows the large case failing.

# %% tags=["gpu"]
small = [(label, shape) for label, shape in kernels.get_loss("mse").check_shapes
         if math.prod(shape) <= 10**5]
check(v1.mse, "mse", rtol=1e-3, shapes=small)

# %% tags=["gpu", "nbval-ignore-output"]
try:
    check(v1.mse, "mse", rtol=1e-3)
except CheckFailed as failure:
    print(failure)

# %% [markdown]
# Bad inputs get a clear error from the binding instead of a wrong answer. (PyTorch's dispatcher
# refuses a CPU tensor first: the op is registered for CUDA only.)

# %% tags=["gpu"]
cuda = dict(device="cuda")
bad_inputs = {
    "float64": (torch.randn(1000, dtype=torch.float64, **cuda),
                torch.randn(1000, dtype=torch.float64, **cuda)),
    "shapes that do not broadcast": (torch.randn(1000, **cuda), torch.randn(999, **cuda)),
    "a CPU tensor": (torch.randn(1000), torch.randn(1000)),
}
for what, args in bad_inputs.items():
    try:
        v1.mse(*args)
        print(f"{what}: no error")
    except RuntimeError as error:
        # The first sentence: the dispatcher's refusal goes on to list every backend it knows.
        message = str(error).splitlines()[0].replace(v1.name, "<library>")
        print(f"{what}: {message.split('. ')[0]}")

# %% [markdown]
# ## Contention
#
# All $n$ atomics of version 1 go to one address. Atomics on global memory are performed by the
# L2 cache, and the L2 serves the atomics to one address one after another; the thousands of
# threads in flight only queue up. If that is the limit, the time grows in proportion to $n$
# and the rate of atomics is a constant of the hardware. We time version 1 up to $2^{24}$
# elements only: at $2^{30}$ one call would take over a second.
#
# **Predict first.** Each size below is 16 times the one before. If one address serialises the
# atomics, what happens to the time per call, and to the atomics completed per nanosecond?

# %% tags=["gpu", "nbval-ignore-output"]
for n in (1 << 16, 1 << 20, 1 << 24):
    [m] = bench.bench_loss({"v1": v1.mse}, "mse", (n,), reps=10)
    print(f"n = 2^{n.bit_length() - 1}: {m.ms:8.3f} ms, {n / m.ms / 1e6:6.2f} atomics per ns, "
          f"{m.gbps:7.1f} GB/s")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
#
# The time grows about in proportion to $n$, and the rate of atomics (the middle column) hardly
# moves once the GPU is full. The GB/s column is a tiny share of the read bandwidth printed at the
# top of the chapter.
# ```
#
# Version 1 is limited by how fast one address can be updated, not by memory {term}`bandwidth`.
# The cure is fewer atomics.
#
# ```{figure} ../book/images/ch2_atomics_queue.svg
# :alt: Top: threads send their atomicAdd to one output address in L2, where they wait in a single queue. Bottom: a log-scale bar chart of the atomics on that address for 2^24 elements: one per element in version 1, one per thread, per warp and per block of an H100-sized resident grid in versions 2 to 4.
# :width: 100%
#
# Atomics on one address are served one after another. Versions 2-4 cut their number: one per thread, per warp, per block. The counts are computed by `tools/diagrams.py` from the kernels' block size.
# ```
#
# ## Version 2: accumulate in a register first
#
# Launch only as many threads as fit on the GPU at once, and let each walk the input with a
# *{term}`grid-stride loop`*. Thread $k$ of $T$ adds elements $k, k+T, k+2T, \dots$ into a private
# {term}`register` and does one atomic at the end. Consecutive threads still read consecutive
# elements, so the loads of a warp stay coalesced.
#
# ```{figure} ../book/images/ch2_coalesced.svg
# :alt: Two panels. Left: the 32 lanes of a warp read 32 consecutive floats, one 128-byte line of four 32-byte sectors, all bytes used. Right: lane k reads float 8k, so each lane touches its own sector: 32 sectors, 1024 bytes moved for 128 used.
# :width: 100%
#
# A warp's load. Consecutive lanes on consecutive floats move one 128-byte line; lanes 32 bytes apart move eight times the bytes they use. Drawn by `tools/diagrams.py`.
# ```

# %%
show_diff("ch2_atomics/v1_atomic_per_element.cu", "ch2_atomics/v2_thread_accumulate.cu")

# %% [markdown]
# The diff above, below the new header: the kernel's body becomes a loop whose step is the whole
# grid (`stride`), `acc` collects the squares, and the one `atomicAdd` moves after the loop.
# `__launch_bounds__(kThreads)` promises the compiler the block size, so it can plan registers
# for it. The launcher asks once how many blocks fit on the GPU at once (`resident_blocks`:
# blocks per SM times SMs) and launches no more.

# %% tags=["gpu", "nbval-ignore-output"]
v2 = load("ch2_atomics/v2_thread_accumulate.cu")
v2

# %% tags=["gpu"]
check(v2.mse, "mse", rtol=1e-4)  # a few hundred thousand float atomics: ~1e-5 lost

# %% [markdown]
# ## Version 3: one atomic per warp
#
# The 32 threads of a warp, its {term}`lanes <lane>` (`threadIdx.x % 32`), can exchange
# registers directly. `__shfl_down_sync(0xffffffffu, v, offset)` gives lane $k$ the `v` of lane
# $k + \text{offset}$; the mask's 32 set bits say that all 32 lanes take part. Five such steps
# add the warp's 32 sums into lane 0, which alone issues the atomic.
#
# ```{figure} ../book/images/ch2_shuffle.svg
# :alt: Two diagrams of 32 lanes over five shuffle steps with offsets 16, 8, 4, 2, 1. Top, __shfl_down_sync: lane k adds lane k + offset, the lanes that still matter halve each step, and lane 0 ends with the sum of all 32. Bottom, __shfl_xor_sync: lane k adds lane k xor offset, a butterfly, and every lane ends with the sum.
# :width: 100%
#
# Five shuffles add a warp's 32 values. `__shfl_down_sync` (this version) leaves the sum in lane 0; the {term}`butterfly` `__shfl_xor_sync` (chapter 3's version 6) leaves it in every lane. Each number is how many lanes' values a lane holds.
# ```

# %%
show_diff("ch2_atomics/v2_thread_accumulate.cu", "ch2_atomics/v3_warp_atomics.cu")

# %% [markdown]
# The diff: a new function `warp_sum` with the five shuffles, and the atomic moves behind
# `if (threadIdx.x % 32 == 0)`. The loop is unchanged.

# %% tags=["gpu", "nbval-ignore-output"]
v3 = load("ch2_atomics/v3_warp_atomics.cu")
v3

# %% tags=["gpu"]
check(v3.mse, "mse")

# %% [markdown]
# ## Version 4: one atomic per block
#
# The warps of a block meet in {term}`shared memory`: each warp's lane 0 writes its sum, a
# `__syncthreads()` barrier waits for all of them, and the first warp adds the eight values with
# shuffles again. One atomic per block remains.

# %%
show_diff("ch2_atomics/v3_warp_atomics.cu", "ch2_atomics/v4_block_atomics.cu")

# %% [markdown]
# The diff: the shared array `warp_sums`, the barrier, and a second `warp_sum` in the first
# warp; only thread 0 of the block calls `atomicAdd`.

# %% tags=["gpu", "nbval-ignore-output"]
v4 = load("ch2_atomics/v4_block_atomics.cu")
v4

# %% tags=["gpu"]
check(v4.mse, "mse")

# %% [markdown]
# ## The same input, different answers
#
# Float addition is not associative: $(a + b) + c$ and $a + (b + c)$ can differ in the last bit.
# With atomics the order of the additions is whatever order the hardware serves them in, which
# changes from run to run. We call each version 20 times on the same input and count the distinct
# results, at $2^{24}$ and (except version 1) at $2^{30}$ elements, and compare with the exact
# mean computed in float64. `torch.mean` is there for comparison: its reduction has a fixed order.

# %% tags=["gpu"]
def mse_float64(pred, target, chunk=1 << 26):
    """The exact MSE (float64), a chunk at a time so that 2^30 elements fit in memory."""
    total = 0.0
    for start in range(0, pred.numel(), chunk):
        d = pred[start:start + chunk].double() - target[start:start + chunk].double()
        total += torch.dot(d, d).item()
    return total / pred.numel()


def spread(ops, n, runs=20):
    """Call each op `runs` times on one input; print distinct results, range and error."""
    pred, target = kernels.get_loss("mse").make_inputs(
        (n,), torch.Generator("cuda").manual_seed(1), "cuda")
    exact = mse_float64(pred, target)
    for name, op in ops.items():
        values = np.array([op(pred, target).item() for _ in range(runs)], dtype=np.float32)
        ulp = np.spacing(np.float32(exact))
        error = np.abs(values.astype(np.float64) - exact).max() / exact
        print(f"2^{n.bit_length() - 1:<3} {name:<11} {len(set(values.tolist())):>2} distinct "
              f"of {runs}, range {(values.max() - values.min()) / ulp:5.0f} ulp, "
              f"max error vs float64 {error:.1e}")
    del pred, target
    torch.cuda.empty_cache()


# %% tags=["gpu", "nbval-ignore-output"]
spread({"v1": v1.mse, "v2": v2.mse, "v3": v3.mse, "v4": v4.mse,
        "torch.mean": kernels.losses.mse}, 1 << 24)
spread({"v2": v2.mse, "v3": v3.mse, "v4": v4.mse, "torch.mean": kernels.losses.mse},
       bench.SIZES[-1])  # 2^30, less when a validation run limits the sizes

# %% [markdown]
# Read the output above: the atomic versions give several different results for the same input,
# `torch.mean` always the same one. The range is in {term}`ulps <ulp>`, the gap between two
# neighbouring floats at the result's size. The error against float64 grows with the number of
# additions that go through one float accumulator, so version 1 is by far the worst. None of the
# atomic versions matches `torch.mean`'s error at either size. Chapter 4 makes the sum
# deterministic and more accurate; first, chapter 3 makes it fast.
#
# ## Throughput against size
#
# We time every version from $2^{12}$ to $2^{30}$ elements against eager PyTorch and
# `torch.compile`, which fuses the three eager kernels into one reduction (version 1 up to
# $2^{24}$).
#
# **Predict first.** Version 2 cuts the atomics from one per element to one per resident thread,
# version 3 by 32 times more, version 4 by 8 times more. Which step do you expect to be worth
# most at $2^{24}$ elements? At $2^{30}$, where each thread loops over thousands of elements, do
# the versions still differ much, and does any reach `torch.compile`?

# %% tags=["gpu", "nbval-ignore-output"]
ch.allow_recompiles()  # torch.compile(dynamic=False) compiles one graph per size
compiled_mse = torch.compile(kernels.losses.mse, dynamic=False)
shapes = [bench.element_wise_shape(n, "mse") for n in bench.SIZES]
measured = bench.sweep({"eager": kernels.losses.mse, "torch.compile": compiled_mse,
                        "v2": v2.mse, "v3": v3.mse, "v4": v4.mse}, "mse", shapes)
measured += bench.sweep({"v1": v1.mse}, "mse", [s for s in shapes if math.prod(s) <= 1 << 24],
                        reps=10)
ch.save(measured)
print(f"{len(measured)} measurements saved")

# %% tags=["nbval-ignore-output"]
rows = ch.rows()
# Version 1, far below the others, in grey: five lines in colour are as many as the eye
# follows.
kernels.plot_throughput(rows, "mse",
                        providers=["eager", "torch.compile", "v1", "v2", "v3", "v4"],
                        highlight=["eager", "torch.compile", "v2", "v3", "v4"]);

# %% tags=["nbval-ignore-output"]
from IPython.display import Markdown

Markdown(results.markdown_table(rows, ["eager", "torch.compile", "v1", "v2", "v3", "v4"],
                                "mse"))

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
#
# Read the table. Version 2 is far faster than version 1 from about a million elements up
# (below that the two are level): the first step is the largest. Version 3 is far faster than
# version 2 except at the largest size, where its lead shrinks. From version 3 to version 4 the
# gain depends on the size. Version 4 is ahead in the middle of the range; the two are close at
# the smallest sizes and level at the largest ones, where the atomics no longer matter.
#
# At the two largest sizes both stay several percent below `torch.compile`, which reaches the
# read bandwidth. `torch.compile` is ahead of every version at every size; version 4 comes
# closest from $2^{24}$ to $2^{26}$ elements, within a few percent of it.
# ```
#
# Up to 262,144 elements versions 1 and 2 are level: an H100 holds at most 132 x 2048 threads
# (SMs x threads per SM), so there version 2 also launches about one thread, and one atomic, per
# element. Each version issues fewer atomics, and each is faster, until the atomics no longer
# matter.
# What remains between the best version and the bandwidth line is, we claim, how the loads are
# made (4 bytes at a time) and, at small sizes, the three launches per call. The first part of
# that claim can be checked.
#
# ## What the profiler says
#
# Nsight Compute reads the GPU's own counters while a kernel runs ({doc}`../book/profiling`
# explains the tool and each number). We profile versions 2 to 4 and `torch.sum` at $2^{28}$
# elements. It says how busy DRAM was, how many warps were resident, and how long a warp waited
# between two instructions, most of it for a global load (*stalled on memory*).

# %% tags=["gpu", "nbval-ignore-output"]
from kernels import profile

AT_2_28 = '''
import torch
from kernels import load
versions = [load(f"ch2_atomics/{name}.cu") for name in
            ("v2_thread_accumulate", "v3_warp_atomics", "v4_block_atomics")]
pred, target = torch.randn(1 << 28, device="cuda"), torch.randn(1 << 28, device="cuda")
for version in versions:
    version.mse(pred, target)
torch.sum(pred)
torch.cuda.synchronize()
'''
counters = profile.ncu(AT_2_28, "thread_accumulate|warp_atomics|block_atomics|reduce_kernel",
                       profile.LATENCY, launches=4)
if counters:
    print(counters.table(["v2", "v3", "v4", "torch.sum"]))

# %% [markdown]
# Two readings. Version 2 keeps DRAM busy for a far smaller share of its time, yet makes the
# same loads. Its time ends with one atomic per thread on one address, with no load in flight,
# and DRAM throughput averages over the whole kernel. Versions 3 and 4 fill almost every warp
# slot ({term}`occupancy`) and their warps wait mostly on memory; still DRAM is less busy than
# under `torch.sum`. Memory stays busy only with *bandwidth x {term}`latency`*
# {term}`bytes in flight` ({term}`Little's law`); the width of each load is one lever. The
# machine code shows version 4's loads:

# %% tags=["gpu", "nbval-ignore-output"]
[(name, instructions)] = profile.sass(v4, "block_atomics").items()
print("loads in block_atomics:",
      {width: profile.count_opcodes(instructions, pattern)
       for width, pattern in (("4-byte", r"LDG\.E(\.(?!64|128)\w+)*$"),
                              ("16-byte", r"LDG\.E(\.\w+)*\.128"))})
print(profile.excerpt(instructions, r"LDG", 6))

# %% [markdown]
# Every global load of version 4 is a 4-byte `LDG.E`, none 16 bytes wide (the first line). The
# excerpt comes from the branch for a broadcast target (`i % target_len`), which MSE skips; its
# loop makes the same loads. Chapter 3 ends with 16-byte loads.
#
# ## Summary
#
# - One {term}`atomic` per element is limited by how fast one address can be updated, not by
#   memory: the rate of atomics hardly moves once the GPU is full (the contention table).
# - The cure is fewer atomics: a register per thread with a {term}`grid-stride loop`, then a
#   {term}`warp shuffle`, then the block's {term}`shared memory`.
# - Float atomics add in whatever order the hardware serves them: the same input gives several
#   different results, and no atomic version matches `torch.mean`'s error. Chapter 4 fixes both.
# - `torch.compile` stays ahead of every version. The profiler shows DRAM less busy than under
#   `torch.sum`, and every load 4 bytes wide: too few {term}`bytes in flight`. Chapter 3 widens
#   the loads.
#
# The ladder at $2^{24}$ elements, the largest size version 1 is timed at, each version against
# the one before (step) and against version 1:

# %% tags=["nbval-ignore-output"]
CHANGES = {"v1": "one atomic per element", "v2": "a sum per thread (grid-stride loop)",
           "v3": "a sum per warp (shuffles)", "v4": "a sum per block (shared memory)"}
# The largest size measured for version 1, which is timed only up to 2^24 elements.
shape = max({r["shape"] for r in results.select(rows, loss="mse", provider="v1")},
            key=lambda s: s[0])
print(f"MSE, {shape[0]:,} elements")
Markdown(results.speedup_table(rows, list(CHANGES), "mse", shape, baseline="v1",
                               changes=CHANGES))

# %% [markdown]
# ## Exercises
#
# Each exercise is a kernel file under `kernels/exercises/` for you to edit, and a cell that
# builds it and checks it against PyTorch, printing one PASS or FAIL line per case. The
# skeletons compile and run; they fail the check until you finish them. Solutions are in
# {doc}`../solutions/ch2_solutions`.

# %% [markdown]
# ```{exercise}
# :label: ex-ch2-warp-atomics
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 30 minutes
#
# Give version 1 warp-aggregated atomics: keep one element per thread and no loop, but let the
# 32 lanes of a warp add their values with `__shfl_down_sync` so that only lane 0 calls
# `atomicAdd`. Edit `kernels/exercises/ch2_warp_atomics.cu` (its `TODO`) and run the check below
# until it passes. **Target**: 32 times fewer atomics on the contended address should make it
# much faster than version 1: the cell times both at $2^{24}$ elements and asks for 20 times.
# Predict first: why not the full 32? (The solutions measure it.) The rule: a shuffle with the
# full mask `0xffffffff` must be reached by all 32 lanes of the warp.
# ```
#
# ```{admonition} Hint
# :class: dropdown
# Five shuffle steps, offsets 16, 8, 4, 2, 1, as in version 3. And look at the `return` at the
# top of the kernel: the lanes past the end of the input leave before the shuffles. Let them
# stay and contribute 0 instead.
#
# Two names in the skeleton are new: `MseLoss` is the loss as a {term}`functor`, from
# `kernels/common/losses.cuh`, and `a->workspace` is the binding's scratch memory, which holds
# the running total here until `divide_by_n` writes the mean into `a->out`.
# ```
#
# Breaking this rule is undefined, not necessarily wrong: on the book's GPU the early `return`
# still gave the right sums. So the check also reads your source for a `return` before a
# full-mask shuffle (`kernels/exercises/ch2_checks.py`).

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch2_warp_atomics.cu")

# %% tags=["gpu", "nbval-ignore-output"]
if ch.exercise("exercises/ch2_warp_atomics.cu",
               check_warp_atomics("exercises/ch2_warp_atomics.cu")):
    bench.speedup_target(load("exercises/ch2_warp_atomics.cu").mse, v1.mse, "mse", (1 << 24,),
                         20, reference_label="version 1", reps=10)

# %% [markdown]
# ```{exercise}
# :label: ex-ch2-race
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 45 minutes
#
# `kernels/exercises/ch2_race.cu` sums per thread, then per block in a shared-memory float, then
# one atomic per block. The check fails, and not always with the same wrong value. Find the
# race and fix it. The check below verifies your fix and its speed. **Target**: 85% of the read
# bandwidth at $2^{28}$ elements, which any correct fix reaches: each thread adds to the block's
# sum once, after a long loop. *To discuss:* the race has more than one fix. Which would you
# expect to be faster at $2^{16}$ elements, where each thread has one element, and why? The
# solutions time two fixes side by side at both sizes.
# ```
#
# ```{admonition} Hint
# :class: dropdown
# Which line do several threads execute on the same address at the same time? `x += y` is a
# load, an add and a store. Shared memory has atomics too; and a warp can add its values
# before touching shared memory at all.
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch2_race.cu")

# %% tags=["gpu", "nbval-ignore-output"]
if ch.exercise("exercises/ch2_race.cu", lambda kernel: check(kernel.mse, "mse")):
    bench.bandwidth_target(load("exercises/ch2_race.cu").mse, "mse", (1 << 28,), 0.85, ch.peak)
