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
# # Chapter 1: What the PyTorch one-liner really costs
#
# ```{admonition} Before you start
# :class: tip
#
# **You will be able to:**
#
# - list the kernels and temporary tensors that one line of PyTorch launches, with the
#   profiler;
# - count the bytes a loss must move and predict its time from the GPU's {term}`bandwidth`;
# - tell when a call is limited by its bytes and when by {term}`launch overhead`.
#
# **Assumes:** PyTorch tensors and `torch.compile` by name; no CUDA. The
# {doc}`../book/cuda_primer`
# defines the GPU words used here ({term}`HBM`, {term}`roofline`).
#
# **Words it uses** (defined in the {doc}`../book/glossary`): {term}`kernel`, {term}`thread`,
# {term}`warp`, {term}`grid`, {term}`reduction`, {term}`arithmetic intensity`,
# {term}`L2 cache`, {term}`latency`.
#
# **Reading time:** about 13 minutes. **Run time:** about 1 minute
# on a small GPU (the book's small-GPU run, {doc}`../book/status`).
# ```
#
# Every {term}`kernel` in this course competes with a line of PyTorch. Before writing any CUDA we
# look at what those lines do on the GPU, eager and compiled: the kernels PyTorch launches, the
# temporaries it allocates, the bytes that cross the memory bus, and the time. The chapter ends
# with the numbers every later chapter is measured against: the GPU's read bandwidth, the
# {term}`launch-latency <launch overhead>` floor, the throughput of PyTorch's losses at every
# size, and the accuracy of PyTorch's own float32 {term}`reduction`.
#
# The four losses are the loss problems of KernelBench {cite}`ouyang2025kernelbench`, a
# benchmark of PyTorch programs to rewrite as faster kernels, with its sizes. MSE, Smooth L1
# and Hinge take $32768 \times 32768$ float32 predictions and targets ($2^{30}$ elements,
# 4 GiB per tensor). Cross-entropy takes $32768 \times 4096$ float32 logits
# with int64 class targets.
#
# ```{admonition} GPU memory
# :class: note
# At the KernelBench sizes, eager MSE holds 16 GiB of GPU memory at once (two 4 GiB inputs and
# two temporaries of the same size). On a GPU that cannot hold it, the chapter measures the
# largest size that fits instead, and says so in the first cell ({doc}`../book/setup`). The
# outputs stored in this book come from an H100.
# ```

# %%
import inspect
import math

import torch
from IPython.display import Markdown, display

import kernels
from kernels import Chapter, bench, get_loss, results
from kernels.bench import SIZES

ch = Chapter("ch1")  # the chapter's id, GPU and read bandwidth, for its measurements

LOSS_NAMES = ("mse", "smooth_l1", "hinge", "cross_entropy")
# The KernelBench problem of each loss. The element-wise losses do not care about shape, so
# MSE and Smooth L1 use the flat 2^30 elements; Hinge keeps its 2-D shape for its broadcast.
KERNELBENCH = {"mse": (1 << 30,), "smooth_l1": (1 << 30,), "hinge": (32768, 32768),
               "cross_entropy": (32768, 4096)}


def measured_shape(name):
    """Where the GPU cells measure a loss: KernelBench's shape where this GPU's memory holds it
    with eager PyTorch's temporaries (the sweep, kernels.bench.SIZES, stops where they fit),
    else the largest size of the sweep."""
    shape = KERNELBENCH[name]
    if math.prod(shape) <= max(SIZES):
        return shape
    if name == "cross_entropy":
        return (max(SIZES) // shape[1], shape[1])
    return bench.element_wise_shape(max(SIZES), name)


MEASURED = {name: measured_shape(name) for name in LOSS_NAMES}
for name in LOSS_NAMES:
    if MEASURED[name] != KERNELBENCH[name]:
        print(f"{name}: measured at {' x '.join(map(str, MEASURED[name]))}, the largest size "
              "this GPU holds, instead of KernelBench's "
              f"{' x '.join(map(str, KERNELBENCH[name]))}")

# %% [markdown]
# ## The four losses
#
# The course's toolkit keeps each loss's PyTorch definition in one place,
# `kernels/losses.py`; the checks use it as the float64 reference and the benchmarks as the
# eager baseline. These are the lines we are going to take apart:

# %%
display(Markdown("```python\n" + "\n".join(
    inspect.getsource(get_loss(name).reference) for name in LOSS_NAMES) + "```"))

# %% [markdown]
# Each loss must read its inputs at least once. That minimum, `min_bytes`, is what the
# course divides by the time to get the **effective bandwidth** (see
# {doc}`../book/timing`). Sizes are in GiB ($2^{30}$ bytes), bandwidths in GB/s ($10^9$ bytes
# per second), as GPU datasheets give them:

# %%
lines = ["| loss | KernelBench shape | must read | bytes |", "|---|---|---|---|"]
what = {"mse": "p and t", "smooth_l1": "p and t", "hinge": "p, and y once",
        "cross_entropy": "logits, int64 targets"}
for name in LOSS_NAMES:
    shape = KERNELBENCH[name]
    nbytes = get_loss(name).min_bytes(shape)
    lines.append(f"| {name} | {' x '.join(map(str, shape))} | {what[name]} | "
                 f"{nbytes:,} ({nbytes / 2**30:.3f} GiB) |")
Markdown("\n".join(lines))

# %% [markdown]
# ### Hinge broadcasts from the right
#
# KernelBench's Hinge loss passes predictions of shape $(N, N)$ and targets of shape $(N,)$.
# PyTorch aligns shapes at their **last** dimension, so `y` is stretched along the rows:
# element `[i, j]` is paired with `y[j]`, not `y[i]`. That is almost certainly not what the
# author of the problem meant (a per-sample label would be `y[:, None]`), but it is what the
# reference computes, so it is what our kernels must compute. A small example on the CPU:

# %%
p = torch.tensor([[0.5, -2.0, 1.5],
                  [3.0, 0.25, -1.0],
                  [-0.5, 1.0, 2.0]])
y = torch.tensor([1.0, -1.0, 1.0])
print("p * y =\n", p * y, "\n(column j is multiplied by y[j])")
by_hand = torch.tensor([[max(0.0, 1 - p[i, j].item() * y[j].item()) for j in range(3)]
                        for i in range(3)]).mean()
print("PyTorch:", get_loss("hinge").reference(p, y).item())
print("by hand, element [i, j] uses y[j]:", by_hand.item())
print("per-row labels y[:, None] would give:",
      torch.clamp(1 - p * y[:, None], min=0).mean().item())

# %% [markdown]
# ## What PyTorch dispatches: temporaries and bytes
#
# In eager mode every operator in the expression runs on its own: it reads its inputs from
# GPU memory and writes its whole result back, and the next operator reads that result
# again. A `TorchDispatchMode` lists the ATen operators PyTorch runs, here on `meta` tensors
# (shapes without data, no GPU), with the bytes of each one's inputs (read) and outputs
# (written).

# %%
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class Traffic(TorchDispatchMode):
    """Records every ATen operator a function runs, with the bytes it reads and writes."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        op = func.overloadpacket.__name__
        reads = sum(t.nbytes for t in ins)
        if op == "nll_loss_forward":  # reads the targets and ONE log-probability per row
            log_probs, target = ins[:2]
            reads = target.nbytes + target.numel() * log_probs.element_size()
        self.ops.append({"op": op, "shape": tuple(outs[0].shape), "reads": reads,
                         "writes": sum(t.nbytes for t in outs)})
        return out


def trace(name, shape):
    loss = get_loss(name)
    inputs = loss.make_inputs(shape, None, "meta")
    with Traffic() as traffic:
        loss.reference(*inputs)
    return traffic.ops


traces = {name: trace(name, KERNELBENCH[name]) for name in LOSS_NAMES}

# %%
GiB = 2**30
lines = ["| loss | ATen op | result (a temporary unless 0-d) | reads (GiB) | writes (GiB) |",
         "|---|---|---|---|---|"]
for name, ops in traces.items():
    for op in ops:
        lines.append(f"| {name} | `{op['op']}` | {tuple(op['shape'])} | "
                     f"{op['reads'] / GiB:.3f} | {op['writes'] / GiB:.3f} |")
Markdown("\n".join(lines))

# %% [markdown]
# Three of the four losses show their temporaries plainly. MSE writes `p - t` and its square,
# each as large as an input; Hinge writes three full-size temporaries. Cross-entropy writes the
# whole `log_softmax` matrix and then reads one entry per row of it. Smooth L1 is
# a single ATen operator, `smooth_l1_loss`, so this trace cannot see what it does inside:
# the profiler below can, and exercise {ref}`ch1-smooth-l1-bytes` asks you to count it.
#
# For MSE the count is worth doing by hand. With $n = 2^{30}$ elements of 4 bytes:

# %%
n = 1 << 30
steps = [  # (operation, kernel, elements read, elements written), in units of n
    ("`d = p - t`", "sub", 2, 1),
    ("`d ** 2`", "pow", 1, 1),
    ("`torch.mean(...)`", "mean", 1, 0),
]
lines = ["| step | reads | writes | bytes moved |", "|---|---|---|---|"]
for what_, kernel, r, w in steps:
    lines.append(f"| {what_} ({kernel}) | {r}n | {w}n | {(r + w) * n * 4 / GiB:.0f} GiB |")
reads = sum(r for *_, r, _ in steps)
writes = sum(w for *_, w in steps)
eager_bytes = (reads + writes) * n * 4
must_bytes = get_loss("mse").min_bytes((n,))
lines.append(f"| **eager total** | {reads}n | {writes}n | {eager_bytes / GiB:.0f} GiB |")
lines.append(f"| **must read** (p and t once) | 2n | 0 | {must_bytes / GiB:.0f} GiB |")
display(Markdown("\n".join(lines)))
traced = sum(op["reads"] + op["writes"] for op in traces["mse"])
# the trace agrees (up to the 0-d result)
assert abs(traced - eager_bytes) <= 16, (traced, eager_bytes)
print(f"eager MSE moves {eager_bytes / must_bytes:.1f}x the bytes it must read")

# %% [markdown]
# **Predict first.** A memory-bound kernel's time is proportional to the bytes it moves. From
# the table, how much longer should eager MSE take than a fused version that reads `p` and `t`
# once and keeps `(p - t) ** 2` in registers? And Hinge? *Bytes predict the time* checks it.
#
# ## What the GPU runs: the profiler
#
# The ATen operators are not yet kernels: one operator may launch several kernels, or a
# memset, and `torch.compile` replaces the whole expression by kernels it generates.
# `torch.profiler` records each kernel the GPU ran and its GPU time, here for one call of each
# loss at the KernelBench size, eager and compiled (after an unprofiled call that warms up and
# compiles).

# %% tags=["gpu", "nbval-ignore-output"]
import re

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

compiled = {name: torch.compile(get_loss(name).reference, dynamic=False)
            for name in LOSS_NAMES}


def short(kernel_name, width=78):
    """A kernel's name without namespaces and arguments, cut to `width` characters."""
    name = re.sub(r"\b(void |at::native::|at::detail::|at::cuda::"
                  r"|\(anonymous namespace\)::)", "", kernel_name).split("(")[0]
    return name if len(name) <= width else name[:width - 3] + "..."


def gpu_kernels(fn, inputs):
    """Profile one call of fn: the profiler and the (name, microseconds) of each GPU
    activity."""
    fn(*inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*inputs)
        torch.cuda.synchronize()
    return prof, [(e.name, e.time_range.elapsed_us()) for e in prof.events()
                  if e.device_type == DeviceType.CUDA]


generator = torch.Generator(device="cuda").manual_seed(0)
launched = {}
for name in LOSS_NAMES:
    inputs = get_loss(name).make_inputs(MEASURED[name], generator, "cuda")
    for provider, fn in (("eager", get_loss(name).reference),
                         ("torch.compile", compiled[name])):
        prof, launched[name, provider] = gpu_kernels(fn, inputs)
        if (name, provider) == ("mse", "eager"):
            # torch.profiler's own table, prof.key_averages().table(), has ten columns of 14
            # characters: too wide for a page. The same averages, in the columns that matter.
            print(f"torch.profiler's averages, eager MSE at "
                  f"2^{MEASURED[name][0].bit_length() - 1} elements "
                  "(self time, ms):")
            print(f"{'event':<52} {'calls':>5} {'CPU':>7} {'GPU':>7}")
            for e in sorted(prof.key_averages(), key=lambda e: (-e.self_device_time_total,
                                                                -e.self_cpu_time_total))[:8]:
                print(f"{short(e.key, 52):<52} {e.count:>5} "
                      f"{e.self_cpu_time_total / 1e3:7.3f} "
                      f"{e.self_device_time_total / 1e3:7.3f}")
    del inputs
    torch.cuda.empty_cache()

for (name, provider), found in launched.items():
    total = sum(us for _, us in found)
    print(f"\n{name}, {provider}: {len(found)} GPU activities, {total / 1e3:.3f} ms in all")
    for kernel_name, us in found:
        print(f"  {us / 1e3:8.3f} ms  {short(kernel_name)}")

# %% [markdown]
# Eager MSE runs one kernel per operator: an element-wise subtract (PyTorch implements
# `p - t` as an add with `alpha=-1`, hence `CUDAFunctor_add`), an element-wise power and a
# mean reduction. Each is listed twice: at $2^{30}$ elements ATen's kernels, which use 32-bit
# offsets, launch once per half of the tensor (a reduction after a `Memset`). Add the pairs,
# and the times follow the bytes: the subtract, which moves 12 GiB, takes
# longest; the power (8 GiB) and the mean (4 GiB) less in proportion.
#
# The compiled losses run kernels whose names start with `triton_` and list the operators they
# fused (`mean`, `pow`, `sub` for MSE). Inductor, the compiler behind `torch.compile`, generated
# Triton kernels that read each input once and never write the temporaries.
#
# ```{admonition} Going deeper: more in the profiler's lines
# :class: dropdown
# - **Hinge's slow multiply.** Hinge's broadcasting multiply runs a generic `elementwise_kernel`
#   instead of the vectorised one, and is clearly slower for the same bytes. Compare its two
#   launches with those of the `add` that follows it, which also reads one full-size tensor and
#   writes another.
# - **Lines without a name.** Eager cross-entropy's two kernels, `log_softmax`'s and
#   `nll_loss`'s, live in an anonymous namespace, where the shortening above cuts their names to
#   nothing (its `\b` cannot match before the parenthesis). MSE's power kernel and Hinge's clamp
#   are cut at the same place.
# - **Inductor splits a large sum.** A big kernel reads everything and writes partial sums, and
#   a tiny one adds those: the second line of each compiled element-wise loss. Compiled
#   cross-entropy runs three kernels. Its first, `prepare_softmax_online`, makes one pass over
#   each row computing its maximum and its sum of exponentials together: the online softmax
#   {cite}`milakov2018online` that chapter 5 builds by hand.
# - To read the generated code, run with the environment variable `TORCH_LOGS=output_code`.
# ```
#
# ## Measuring the GPU
#
# Three numbers about the GPU itself, measured in the same process as everything else:
#
# - the **read bandwidth**: `torch.sum` over a 4 GiB float32 tensor, the course's "speed of
#   light" for a loss, which only has to read;
# - the **copy bandwidth**: a 4 GiB device-to-device copy, counting bytes read plus bytes
#   written, the rate for a kernel that also writes;
# - the **launch floor**: an addition of two 1-element tensors, the least work a kernel can
#   do, as GPU time and as the time Python waits from the call to the result.
#
# ```{admonition} Going deeper: how each is measured
# :class: dropdown
# `kernels.bench.read_bandwidth` and `kernels.bench.copy_bandwidth` time the sum and the copy.
# For the launch floor, `kernels.bench.time_ms` gives the add's GPU time (CUDA events, with the
# GPU kept busy while Python launches it). `kernels.bench.launch_overhead_ms` gives the time
# Python waits from the call to the result (launch, run, synchronise): what a loop pays per
# kernel when it waits for every result.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
peak = ch.peak  # kernels.bench.read_bandwidth, measured once for the whole chapter
copy = bench.copy_bandwidth()
one = torch.ones(1, device="cuda")
add_gpu_ms = bench.time_ms(torch.add, [(one, one)])
add_host_ms = bench.launch_overhead_ms(torch.add, (one, one))
# Stored with the sweep, as rows of "loss" memory and launch (ms back from GB/s for the
# first two).
gpu_rows = [
    bench.Measurement("memory", "read (torch.sum)", (1 << 30,), 1 << 32,
                      (1 << 32) / peak / 1e6),
    bench.Measurement("memory", "copy (read + write)", (1 << 30,), 1 << 33,
                      (1 << 33) / copy / 1e6),
    bench.Measurement("launch", "1-element add, GPU time", (1,), 8, add_gpu_ms),
    bench.Measurement("launch", "1-element add, call to result", (1,), 8, add_host_ms),
]
print(f"{ch.gpu}: read {peak:.0f} GB/s, copy {copy:.0f} GB/s")
print(f"1-element add: {add_gpu_ms * 1e3:.1f} us of GPU time, "
      f"{add_host_ms * 1e3:.1f} us from call to result")

# %% [markdown]
# ## Eager and compiled, at every size
#
# Now the sweep: each loss from $2^{12}$ to $2^{30}$ elements (`kernels.bench.SIZES`, a step
# of 4x), timed by `kernels.bench.bench_loss`. Everything lands in `book/results/ch1.csv`, which
# the rest of the chapter reads.
#
# ```{admonition} Going deeper: how the sweep is timed
# :class: dropdown
# `bench_loss` uses CUDA events and takes the median of 100 calls. It rotates the inputs so that
# small sizes are read from memory and not from {term}`L2 <L2 cache>`. Because `dynamic=False`
# compiles once per shape, `torch.compile` is measured at every other size (which includes the
# KernelBench size) to keep the compile time down. Cross-entropy keeps 4096 classes and varies
# the rows (from 1 to $2^{18}$, plus KernelBench's 32768); compiled at the rows of every other
# size and at 32768.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
import time

started = time.perf_counter()
COMPILE_SIZES = SIZES[1::2]
CLASSES = 4096
measured = []
for name in ("mse", "smooth_l1", "hinge"):
    kernelbench = math.prod(MEASURED[name])  # always measured, even between SIZES
    for n in sorted(set(SIZES) | {kernelbench}):
        providers = {"eager": get_loss(name).reference}
        if n in COMPILE_SIZES or n == kernelbench:
            providers["torch.compile"] = compiled[name]
        measured += bench.bench_loss(providers, name, bench.element_wise_shape(n, name))
CE_ROWS = MEASURED["cross_entropy"][0]
for rows_ in sorted({n // CLASSES for n in SIZES} | {CE_ROWS}):
    providers = {"eager": get_loss("cross_entropy").reference}
    if rows_ * CLASSES in COMPILE_SIZES or rows_ == CE_ROWS:
        providers["torch.compile"] = compiled["cross_entropy"]
    measured += bench.bench_loss(providers, "cross_entropy", (rows_, CLASSES))
path = ch.save(gpu_rows + measured)
print(f"{len(measured)} measurements in {time.perf_counter() - started:.0f} s -> {path.name}")

# %% [markdown]
# From here on the cells read the CSV file, and run without a GPU.

# %% tags=["nbval-ignore-output"]
rows = ch.rows()
peak = rows[0]["peak_gbps"]
memory = {r["provider"]: r for r in results.select(rows, loss="memory")}
launch = {r["provider"]: r for r in results.select(rows, loss="launch")}


def at(loss, provider, shape):
    """The measured row of one loss, provider and shape."""
    return results.select(rows, loss=loss, provider=provider, shape=tuple(shape))[0]


print(f"measured on {rows[0]['gpu']}")
print(f"read bandwidth (torch.sum, 4 GiB): {peak:.0f} GB/s")
print("copy bandwidth (4 GiB, read + write): "
      f"{memory['copy (read + write)']['gbps']:.0f} GB/s")

# %% [markdown]
# ### Bytes predict the time
#
# At the KernelBench sizes, here is every loss's eager and compiled time, next to the bytes
# eager mode moves according to the trace above: the answer to the prediction.

# %% tags=["nbval-ignore-output"]
lines = ["| loss | eager (ms) | torch.compile (ms) | time eager / compile | "
         "bytes eager moves / must read |", "|---|---|---|---|---|"]
ratios = {}
for name in LOSS_NAMES:
    eager, comp = at(name, "eager", MEASURED[name]), at(name, "torch.compile", MEASURED[name])
    moved = (sum(op["reads"] + op["writes"] for op in traces[name])  # at KernelBench's size
             / get_loss(name).min_bytes(KERNELBENCH[name]))
    ratios[name] = (eager["ms"] / comp["ms"], moved)
    bytes_cell = "exercise 1.1" if name == "smooth_l1" else f"{moved:.2f}x"
    lines.append(f"| {name} | {eager['ms']:.3f} | {comp['ms']:.3f} | "
                 f"{eager['ms'] / comp['ms']:.2f}x | {bytes_cell} |")
display(Markdown("\n".join(lines)))
time_ratio, byte_ratio = ratios["mse"]
print(f"eager MSE moves {byte_ratio:.1f}x the bytes and takes {time_ratio:.1f}x the time of "
      "torch.compile")
ce = at("cross_entropy", "torch.compile", MEASURED["cross_entropy"])
print(f"compiled cross-entropy at {' x '.join(map(str, ce['shape']))} reaches "
      f"{100 * ce['gbps'] / peak:.0f}% of the read bandwidth")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# Eager MSE moves three times the bytes it must ($2n$ read plus $n$ written by the subtract, $n$
# and $n$ by the power, $n$ read by the mean, against $2n$), Hinge seven times. Compare the
# table's last two columns: for MSE and Hinge the time ratio follows the byte ratio, because
# both versions run at the bandwidth. Hinge's eager version is a little slower than its bytes
# predict (its broadcasting multiply, in the profiler's fold above).
# ```
#
# "Bytes moved" is a model, not a law. Where the compiled kernel does not itself reach the read
# bandwidth, the ratio of times is smaller than the ratio of bytes: so for cross-entropy (the
# line under the table gives its share), which chapter 5 brings much closer.
#
# ## The roofline: why FLOPs do not matter
#
# A kernel needs at least the time to move its bytes, $B / W$, and the time to do its
# arithmetic, $F / P$, where $W$ is the memory bandwidth and $P$ the arithmetic rate
# {cite}`williams2009roofline`. Which one wins depends on the **{term}`arithmetic intensity`**
# $I = F / B$, the flops per byte moved: a kernel is memory-bound when $I$ is below the
# **ridge point** $P / W$. MSE does 3 flops (subtract, multiply, add) per 8 bytes read,
# $I = 0.375$ flop/byte. Hinge does 4 (multiply, subtract, max, add) per 4 bytes; cross-entropy
# about 4 per logit (a max, a subtract, an exp, an add); Smooth L1 about 5 per 8 bytes.
#
# The ridge point needs the GPU's float32 rate. We do not measure it here: the number below
# is **NVIDIA's datasheet figure** for non-tensor-core FP32, divided by the read bandwidth we
# measured.

# %% tags=["nbval-ignore-output"]
# FP32 (non-tensor-core) peak TFLOP/s from NVIDIA's datasheets: NOT measured. First match wins.
DATASHEET_FP32_TFLOPS = [("H100 PCIe", 51.0), ("H100 NVL", 60.0), ("H100", 67.0),
                         ("H200", 67.0), ("A100", 19.5), ("L40S", 91.6), ("L4", 30.3),
                         ("A10G", 31.2), ("T4", 8.1), ("V100", 15.7)]
tflops = next((f for key, f in DATASHEET_FP32_TFLOPS if key in rows[0]["gpu"]), None)
FLOPS_PER_ELEMENT = {"mse": 3, "smooth_l1": 5, "hinge": 4, "cross_entropy": 4}
if tflops is None:
    print(f"no datasheet FP32 rate listed for {rows[0]['gpu']}: "
          "add it to DATASHEET_FP32_TFLOPS")
else:
    ridge = tflops * 1e12 / (peak * 1e9)
    print(f"datasheet FP32 rate {tflops:.0f} TFLOP/s / measured {peak:.0f} GB/s: "
          f"ridge point {ridge:.1f} flop/byte")
    lines = ["| loss | flop per byte | time for the bytes (ms) | time for the flops (ms) | "
             "torch.compile (ms) |", "|---|---|---|---|---|"]
    for name in LOSS_NAMES:
        shape = MEASURED[name]
        flops = FLOPS_PER_ELEMENT[name] * math.prod(shape)
        nbytes = get_loss(name).min_bytes(shape)
        lines.append(f"| {name} | {flops / nbytes:.3f} | {nbytes / peak / 1e6:.3f} | "
                     f"{flops / tflops / 1e9:.4f} | "
                     f"{at(name, 'torch.compile', shape)['ms']:.3f} |")
    display(Markdown("\n".join(lines)))

# %% [markdown]
# Every loss sits far left of the ridge: its arithmetic would take a small fraction of the
# time its bytes take, and the GPU's arithmetic units idle while they wait for memory. So
# the bytes are what to count first. The best a loss kernel can do is read each input once at
# the read bandwidth, which is what the compiled element-wise losses already come close to. The
# plot below is the welcome page's bound drawn per flop instead of per byte, with each loss's
# compiled version at its KernelBench size.
#
# ```{admonition} Going deeper: instructions, not flops
# :class: dropdown
# The bytes are not the only limit. The roofline counts flops, but the GPU *issues
# instructions* (loads, address arithmetic, conversions, `exp` on a special-function unit that
# runs at a fraction of the FMA rate), one per cycle per {term}`warp` scheduler. A kernel can run
# out of instruction issue long before its flops fill the roof. Chapter 5 measures with the
# profiler how close its cross-entropy kernel comes to that limit, in float32 and in bfloat16
# (which brings twice the values per byte).
# ```

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt

from kernels import plot

if tflops is not None:
    fig, ax = plot.subplots()
    # the roof bends at the ridge
    intensity = sorted([2.0 ** k for k in range(-4, 9)] + [ridge])
    ax.loglog(intensity, [min(tflops * 1e3, i * peak) for i in intensity], color="black")
    # The roof's two parts and the ridge point are labelled where they are; the legend, on the
    # right, names the losses.
    ax.annotate(f"datasheet FP32\n{tflops:.0f} TFLOP/s", (intensity[-1], tflops * 1e3),
                xytext=(0, -6), textcoords="offset points", ha="right", va="top")
    ax.annotate(f"I x measured read bandwidth ({peak:.0f} GB/s)",
                (intensity[2], intensity[2] * peak), xytext=(8, -4),
                textcoords="offset points", va="top")
    ax.axvline(ridge, color="gray", linestyle=":")
    ax.annotate(f"ridge point\n{ridge:.0f} flop/byte", (ridge, intensity[0] * peak),
                xytext=(6, 0), textcoords="offset points", color="dimgray")
    for name in LOSS_NAMES:
        shape = MEASURED[name]
        flops = FLOPS_PER_ELEMENT[name] * math.prod(shape)
        comp = at(name, "torch.compile", shape)
        ax.plot(flops / comp["bytes"], flops / comp["ms"] / 1e6, "o", markersize=8, label=name)
    ax.set_xlabel("arithmetic intensity I (flop per byte that must be read)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"The four losses (torch.compile) on the roofline of {rows[0]['gpu']}")
    plot.legend(ax)
    plt.show()

# %% [markdown]
# ## Throughput against size
#
# The chapter's main plot: effective bandwidth (bytes that must be read / time) of eager and
# compiled PyTorch for each loss across sizes, with the measured read bandwidth as the dotted
# line. Compiled points are every other size, to save compile time (`dynamic=False` compiles
# once per shape).

# %% tags=["nbval-ignore-output"]
fig, axes = plot.subplots(2, 2, height=7, sharex=True, sharey=True)
for name, ax in zip(LOSS_NAMES, axes.flat):
    kernels.plot_throughput(
        rows, name, providers=["eager", "torch.compile"], ax=ax,
        title=name + (" (4096 classes)" if name == "cross_entropy" else ""), show_legend=False)
    ax.label_outer()  # the axis labels once, at the left and at the bottom
fig.suptitle(f"PyTorch's losses on {rows[0]['gpu']}")
plot.legend(fig)
plt.show()

# %% tags=["nbval-ignore-output"]
for name in LOSS_NAMES:
    display(Markdown(f"**{name}**\n\n"
                     + results.markdown_table(rows, ["eager", "torch.compile"], name)))

# %% [markdown]
# On the right of each plot, the large sizes. Compiled MSE, Smooth L1 and Hinge run at the read
# bandwidth (the percent or so above it in the tables is measurement spread, not a kernel past
# the bound). Their eager versions run near the fraction their extra bytes allow (a third for
# MSE, a seventh for Hinge). Cross-entropy stays further below what its bytes allow, eager and
# compiled alike. On the left, every curve collapses: at a few thousand elements no loss gets
# anywhere near the bandwidth, whatever it does. That is the launch floor.
#
# ## The launch-latency floor
#
# A kernel launch costs time however little the kernel does. Below some size the loss's time
# is that fixed cost, and its effective bandwidth grows in proportion to the size; above it,
# the time grows with the bytes and the bandwidth levels off.
#
# **Predict first.** At 4096 elements each input of eager MSE is $4096 \times 4$ bytes,
# nothing for a GPU that reads gigabytes per millisecond, but MSE launches three kernels. How
# long will it take, as a multiple of the 1-element add: about one, about three, or more?

# %% tags=["nbval-ignore-output"]
gpu_us = launch["1-element add, GPU time"]["ms"] * 1e3
host_us = launch["1-element add, call to result"]["ms"] * 1e3
print(f"1-element add: {gpu_us:.1f} us of GPU time; "
      f"{host_us:.1f} us from the Python call to the result")


def by_size(loss, provider):
    return sorted(results.select(rows, loss=loss, provider=provider),
                  key=lambda r: math.prod(r["shape"]))


def crossover(loss, provider, fraction=0.5, of_peak=False):
    """The first measured size at which a provider reaches `fraction` of its own best
    throughput (or, with of_peak=True, of the read bandwidth); None if it never does."""
    mine = by_size(loss, provider)
    limit = fraction * (mine[0]["peak_gbps"] if of_peak else max(r["gbps"] for r in mine))
    return next((r for r in mine if r["gbps"] >= limit), None)


def elements(row):
    return f"{math.prod(row['shape']):,}" if row else "never"


lines = ["| loss | provider | time at the smallest size (us) | x the 1-element add | "
         "half its best from (elements) | half the read bandwidth from (elements) |",
         "|---|---|---|---|---|---|"]
for name in LOSS_NAMES:
    for provider in ("eager", "torch.compile"):
        smallest = by_size(name, provider)[0]
        lines.append(f"| {name} | {provider} | {smallest['ms'] * 1e3:.1f} "
                     f"({math.prod(smallest['shape']):,} elements) | "
                     f"{smallest['ms'] * 1e3 / gpu_us:.1f} | "
                     f"{elements(crossover(name, provider))} | "
                     f"{elements(crossover(name, provider, of_peak=True))} |")
display(Markdown("\n".join(lines)))
smallest = by_size("mse", "eager")[0]
print(f"eager MSE at {math.prod(smallest['shape']):,} elements takes "
      f"{smallest['ms'] * 1e3:.1f} us, "
      f"{smallest['ms'] * 1e3 / gpu_us:.1f}x the 1-element add: it launches "
      f"{len(traces['mse'])} kernels")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# A small multiple, below the number of kernels: read the "x the 1-element add" column and the
# line printed under the table. The time is the launches', not the bytes'.
# ```
#
# At the smallest sizes every loss takes a small multiple of the empty kernel's GPU time, and its
# time grows far more slowly than the size. Launches back to back overlap part of their fixed
# cost: three cost less than three empty adds. The GPU is not busy with the data but with
# launching kernels, each on a {term}`grid` too small to fill the GPU. Eager mode launches a
# kernel per operator; `torch.compile` launches fewer for the element-wise losses, but not for
# cross-entropy (three kernels against eager's two in the profiler output above). Below the
# crossing, making a kernel faster changes little; what counts there is the number of launches
# and the work done per call.
#
# ```{admonition} Going deeper: GPU time, host time, and where each loss crosses
# :class: dropdown
# The table calls a loss *bandwidth-bound* from the first measured size at which it reaches half
# of its own best throughput (the plateau on the right of its curve). Half of the read bandwidth
# is the stricter test: eager losses, which move several times the bytes they must, may never
# pass it.
#
# `kernels.bench.time_ms` keeps the GPU queued ahead of the host (a buffer clear and a short
# sleep before each call), so these are GPU times. The host's own work per call comes on top in
# a real loop: the 1-element add took several times its GPU time from call to result (the line
# above the table). For `torch.compile` the host's work includes Dynamo's checks that the
# inputs still match the compiled shapes, and Inductor's wrapper.
#
# Eager and compiled MSE and Smooth L1 reach half of their best at the same measured size (the
# table). Compiled Hinge needs larger inputs for that than eager mode does. For compiled
# cross-entropy the table cannot tell, as it is not measured at the size where eager crosses.
# The compiled curves are measured at every other size, so their crossing points are known only
# to within a factor of 16.
# ```
#
# ## Accuracy: the bar PyTorch sets
#
# A loss over $2^{30}$ float32 values is a sum of $2^{30}$ terms, and float32 has 24 bits of
# mantissa. How accurate is PyTorch's own float32 reduction? We compare `torch.mean` on a
# float32 tensor with the float64 mean of the same values.

# %% tags=["gpu", "nbval-ignore-output"]
generator = torch.Generator(device="cuda").manual_seed(0)
x = torch.rand(1 << 30, device="cuda", generator=generator)
mean32 = torch.mean(x).item()
mean64 = torch.mean(x.double()).item()
error = abs(mean32 - mean64) / abs(mean64)
print(f"torch.mean, float32, 2^30 elements: {mean32!r}; float64: {mean64!r}")
print(f"relative error {error:.2e}, {error / 2**-24:.2f}x float32's unit roundoff 2^-24")
del x
torch.cuda.empty_cache()

# %% [markdown]
# PyTorch's reduction is a tree: each {term}`thread` adds a strided slice, then threads and blocks
# combine their partial sums, so no partial sum grows much larger than the terms added to it.
# The naive alternative, one running float32 sum from the first element to the last, is much
# worse: once the running sum is large, each small term loses most of its bits when added.
# `numpy.cumsum` in float32 is exactly that sequential sum, and each of its outputs is the sum
# so far, so one call gives the error at every prefix length. (`torch.cumsum` will not do:
# on the CPU it accumulates in float64, and on the GPU it is a parallel scan.)

# %% tags=["nbval-ignore-output"]
import numpy as np

values = torch.rand(1 << 24, generator=torch.Generator().manual_seed(0)).numpy()
sequential = np.cumsum(values, dtype=np.float32)
exact = np.cumsum(values, dtype=np.float64)
lines = ["| elements | sequential float32 sum: relative error "
         "| torch.sum on the CPU (float32): relative error |",
         "|---|---|---|"]
for k in (12, 16, 20, 24):
    m = 1 << k
    tree = torch.from_numpy(values[:m]).sum().item()
    lines.append(f"| 2^{k} | {abs(sequential[m - 1] - exact[m - 1]) / exact[m - 1]:.1e} | "
                 f"{abs(tree - exact[m - 1]) / exact[m - 1]:.1e} |")
display(Markdown("\n".join(lines)))
worst = max(abs(sequential[(1 << k) - 1] - exact[(1 << k) - 1]) / exact[(1 << k) - 1]
            for k in (16, 20, 24))
print(f"from 2^16 terms on, the sequential sum's error reaches up to {worst / 2**-24:.0f}x "
      "float32's unit roundoff")

# %% [markdown]
# The sequential sum loses digits as soon as the running sum dwarfs the terms. Its error grows
# to many times float32's unit roundoff ($2^{-24} \approx 6 \times 10^{-8}$), not steadily,
# as rounding errors partly cancel. That of `torch.sum` on the CPU (the table's last column)
# stays near or below it. PyTorch's GPU
# reduction over $2^{30}$ elements, measured above, sets the bar for the rest of the course:
# our float32 kernels must agree with the float64 reference at least as well as PyTorch's own
# reduction does, at every size. Chapter 4 returns to how the order of the additions decides
# it.
#
# ## Summary
#
# - Eager PyTorch runs one kernel per operator and writes every temporary to memory: MSE moves
#   three times the bytes it must, Hinge seven times, and its time follows the bytes.
# - `torch.compile` fuses each element-wise loss into generated kernels that read each input
#   once, and runs close to the read bandwidth at large sizes. That is the baseline our CUDA
#   kernels must match; for cross-entropy it leaves room, which chapter 5 takes.
# - Losses are far below the ridge point of the roofline: count the bytes first.
# - Small inputs are latency-bound: the time is set by the launches and the host's work per
#   call, not by the bytes.
# - PyTorch's float32 reduction keeps the error of a $2^{30}$-element mean small; a sequential
#   float32 sum does not. Our kernels must do at least as well.
#
# What the chapter measured, at the sizes of KernelBench (or the largest this GPU held), read
# back from `book/results/ch1.csv`:

# %% tags=["nbval-ignore-output"]
lines = ["| loss | shape | eager (ms) | eager GB/s (% of read) | torch.compile (ms) | "
         "torch.compile GB/s (% of read) | compile vs eager |",
         "|---|---|---|---|---|---|---|"]
for name in LOSS_NAMES:
    eager, comp = at(name, "eager", MEASURED[name]), at(name, "torch.compile", MEASURED[name])
    shape = " x ".join(f"{d:,}" for d in MEASURED[name])
    lines.append(f"| {name} | {shape} | {eager['ms']:.3f} | "
                 f"{eager['gbps']:.0f} ({100 * eager['gbps'] / peak:.0f}%) | "
                 f"{comp['ms']:.3f} | {comp['gbps']:.0f} ({100 * comp['gbps'] / peak:.0f}%) | "
                 f"{eager['ms'] / comp['ms']:.2f}x |")
display(Markdown("\n".join(lines)))
print(f"read bandwidth {peak:.0f} GB/s, "
      f"copy {memory['copy (read + write)']['gbps']:.0f} GB/s; 1-element add "
      f"{gpu_us:.1f} us of GPU time, {host_us:.1f} us from call to result")

# %% [markdown]
# ## Exercises
#
# The checks below compare your answers with numbers computed from this chapter's
# measurements (`book/results/ch1.csv`, or your own run's). They print PASS, FAIL with how far
# off the answer is (not the answer), or "not attempted" while it is still `None`. A FAIL also
# raises an error, so that `make check CHAPTER=1` fails on it. Solutions are in
# {doc}`../solutions/ch1_solutions`.

# %%
from kernels.exercises.ch1_checks import (check_ce_roofline, check_mse_model,
                                          check_smooth_l1_bytes)

# %% [markdown]
# ```{exercise} The bytes of eager Smooth L1
# :label: ch1-smooth-l1-bytes
#
# **Difficulty:** ★☆☆ (easy) · **Time:** about 20 minutes
#
# The trace above sees Smooth L1 as one operator, `smooth_l1_loss`, but the profiler output
# lists what the GPU ran for it. From the kernels it launches, and what each one must read and
# write, predict how many bytes eager Smooth L1 moves at $2^{30}$ elements (float32). (At
# this size every ATen kernel is launched twice, once per half of the tensor: count the
# distinct kernels.) Then
# predict its time from your byte count and the measured read bandwidth, and compare with the
# measured eager time.
# ```
#
# ```{admonition} Hint
# :class: dropdown
# Count the kernels of `smooth_l1, eager` in the profiler output. An element-wise kernel with
# two inputs and one output reads $2n$ and writes $n$ elements; a reduction reads $n$ and
# writes one number. Is there a temporary, like MSE's `d ** 2`?
# ```

# %%
smooth_l1_bytes = None  # TODO: bytes moved by eager Smooth L1 at 2^30 float32 elements

# %% tags=["nbval-ignore-output"]
check_smooth_l1_bytes(smooth_l1_bytes)

# %% [markdown]
# ```{exercise} A model of eager MSE's time
# :label: ch1-launch-crossover
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 30 minutes
#
# Build a two-term model of eager MSE's time from this chapter's measurements. The first term
# is a fixed cost, the time measured at the smallest size (the launches of its kernels, which
# move almost no bytes). The second is the bytes its kernels move, at the measured read
# bandwidth `peak` (GB/s). Count those bytes per element from the kernels the profiler listed
# above, and write the model as a function of the number of elements. Check its predictions
# against the measured times at $2^{20}$ and $2^{26}$ elements (within 20%). Then compare it
# with every measured size: where is it worst, and what does the GPU do there that the model
# leaves out?
# ```
#
# ```{admonition} Hint
# :class: dropdown
# Eager MSE is three kernels: `pred - target` reads two tensors and writes one, `** 2` reads
# one and writes one, `mean` reads one. `by_size("mse", "eager")` gives the measured rows in
# order of size, the first one the smallest.
# ```

# %%
# TODO: bytes eager MSE's kernels move per element (float32)
eager_mse_bytes_per_element = None


def eager_mse_model_ms(n):
    """TODO: predicted time (ms) of eager MSE on n float32 elements."""
    return None


# %% tags=["nbval-ignore-output"]
check_mse_model(eager_mse_bytes_per_element, eager_mse_model_ms, rows)

# %% [markdown]
# ```{exercise} The roofline of cross-entropy
# :label: ch1-ce-roofline
#
# **Difficulty:** ★☆☆ (easy) · **Time:** about 15 minutes
#
# Take cross-entropy at KernelBench's size ($32768 \times 4096$ float32 logits, int64
# targets), counting 4 flops per logit and only the bytes that must be read. Compute the
# arithmetic intensity (flop per byte) and the roofline time in milliseconds (the bytes over
# the measured read bandwidth). What fraction of that limit do eager PyTorch and
# `torch.compile` reach?
# ```
#
# ```{admonition} Hint
# :class: dropdown
# The bytes: every logit once (4 bytes) and every target once (8 bytes, int64), which is
# `get_loss("cross_entropy").min_bytes((32768, 4096))`. The bandwidth is `peak` in GB/s:
# $10^9$ bytes per second.
# ```

# %%
ce_intensity = None  # TODO: flop per byte
ce_roofline_ms = None  # TODO: milliseconds at the measured read bandwidth

# %% tags=["nbval-ignore-output"]
check_ce_roofline(ce_intensity, ce_roofline_ms, peak)
