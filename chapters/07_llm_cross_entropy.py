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
# # Chapter 7: cross-entropy at LLM scale
#
# ```{admonition} Before you start
# :class: tip
#
# **You will be able to:**
#
# - explain, in bytes, why a language model's loss is a memory problem;
# - split one row over a {term}`thread-block cluster` with {term}`distributed shared memory`,
#   so that the logits are read once;
# - compute an output layer and its loss without storing the logits, and compare it with
#   `torch.compile` and Liger-Kernel in time and memory.
#
# **Assumes:** chapter 5's final kernel and chapter 6's operators. The cluster kernel needs a
# Hopper GPU (`sm_90`); on older GPUs the chapter runs chapter 5's path instead.
#
# **Words it uses** (defined in the {doc}`../book/glossary`): {term}`SM`, {term}`occupancy`,
# {term}`bytes in flight`, {term}`register`, {term}`compute capability`, {term}`log-sum-exp`.
#
# **Reading time:** about 13 minutes. **Run time:** about 2 minutes
# on a small GPU (the book's small-GPU run, {doc}`../book/status`).
# ```
#
# A language model's loss has few, very long rows: one per token, one class per entry of the
# vocabulary (128256 for Llama 3, 256000 for Gemma). Two things break there:
#
# - **A row no longer fits on one {term}`SM`.** 128256 bf16 logits are 256 KB; an H100 SM has 228 KB
#   of shared memory and 256 KB of {term}`registers <register>`, shared by every block on it.
#   Chapter 5's {term}`kernel` streams such a row and reads it **a second time** to write the
#   gradient.
# - **The logits dominate memory.** At 8192 tokens the bf16 logits of Llama 3 are 2 GiB and
#   their gradient 2 GiB more, for one layer that is only reduced to one number.
#
# The chapter's steps:
#
# | step | the one change | the result |
# | --- | --- | --- |
# | v3 (chapter 5) | one block streams a row, and reads it again for the gradient | the start |
# | v4 (cluster) | a row split over a cluster of blocks, held in their shared memory | the row read once |
# | fused head | the output layer and its loss, chunk by chunk | the logits never stored |

# %%
# ROOT (the repository's folder) and the imports of os come from the
# notebook's first cell, which the book hides.
import math
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import Markdown

import kernels
from kernels import Chapter, bench, load, results
from kernels.build import toolchain
from kernels.correctness import relative_error
from kernels.cross_entropy import cross_entropy
from kernels.llm_head import (head_inputs, linear_cross_entropy, measure_step,
                               measure_step_if_it_fits, other_fused_heads)
from kernels.notebook import kernels_launched, show_source

# The chapter's id, GPU and bandwidth: its rows compare with the copy bandwidth, not the read
# bandwidth, as a training step writes the gradient of the logits as it reads them.
ch = Chapter("ch7", bandwidth="copy")

# %% [markdown]
# ## Why the loss of a language model is a memory problem
#
# The logits of a batch of `tokens` rows and `vocab` classes, and their gradient, in bf16:

# %%
VOCABULARIES = {"Llama 2": 32000, "GPT-2": 50257, "Llama 3": 128256, "Qwen 2": 151936,
                "Gemma": 256000}
TOKENS = 8192
lines = ["| model | vocabulary | one row, bf16 | logits of 8192 tokens | + their gradient |",
         "| --- | ---: | ---: | ---: | ---: |"]
for model, vocab in VOCABULARIES.items():
    row_kb = vocab * 2 / 1024
    logits_gib = TOKENS * vocab * 2 / 2**30
    lines.append(f"| {model} | {vocab} | {row_kb:.0f} KB | {logits_gib:.2f} GiB | "
                 f"{2 * logits_gib:.2f} GiB |")
Markdown("\n".join(lines))

# %% [markdown]
# A training step writes the logits (the output layer's matrix product), reads them for the
# loss, writes their gradient, and reads it twice (for the gradients of the hidden states and
# of the weight). The loss itself is the smallest part of the work, and chapter 5 made it
# cheap; what this chapter removes is the traffic around it.

# %% tags=["gpu", "nbval-ignore-output"]
# Inductor suggests TF32 matmuls for speed; this chapter compares float32 results exactly.
warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")
# Liger-Kernel imports tqdm, which warns that Jupyter's progress widgets are not installed.
warnings.filterwarnings("ignore", message="IProgress not found")
CAPABILITY = torch.cuda.get_device_capability()
READ_GBPS = bench.read_bandwidth()
print(f"{ch.gpu} (compute capability {CAPABILITY[0]}.{CAPABILITY[1]}): read "
      f"{READ_GBPS:.0f} GB/s, copy (read + write) {ch.peak:.0f} GB/s")
# Version 4's clusters need kernels built for Hopper or later: for this GPU, or $KERNELS_ARCHS.
CLUSTERS = toolchain.builds_for_hopper()
BOOK_RUN = ch.published_rows()  # the book's measurements, read before this run replaces them
if not CLUSTERS:
    print(f"Built for {', '.join(toolchain.target_archs())}: no thread-block clusters, so "
          f"version 4 takes version 3's path on every row; the book's run on "
          f"{BOOK_RUN[0]['gpu']} is shown beside yours")

# %% [markdown]
# ## Thread-block clusters and distributed shared memory
#
# Hopper ({term}`compute capability` 9.0) groups blocks into **clusters**: up to 8 blocks (16 with an opt-in). The hardware schedules them at the same time on SMs of one {term}`GPC` (a group of SMs), and they can read and
# write each other's **shared memory** (distributed shared memory, DSMEM) and wait on a
# **cluster barrier**. Version 4 gives each row a cluster of `n` blocks, `n = ceil(row bytes / 32 KB)`, at most 16. A slice of 32 KB is 128 threads with 16 copies of 16
# bytes each in flight, small enough that several blocks share an SM. Each block copies its slice of the row into its own shared memory and keeps it
# there until it has written the slice's gradient:
#
# ```{figure} ../book/images/ch7_cluster.svg
# :alt: A row of 128256 bf16 logits split into equal slices, one per block of a cluster, each block on its own SM. Each block keeps its slice in shared memory and computes its pair (max, sum of exp). After a cluster barrier every warp reads all the pairs through distributed shared memory and merges them in the same order, m = max, s = sum s_b exp(m_b - m), lse = m + log s; each block then writes its slice's gradient.
# :width: 100%
#
# Version 4's cluster for a row of Llama 3's vocabulary; the cluster size and the slice come from the kernel's `kSliceBytes` and `kMaxCluster`.
# ```
#
# In CUDA C++ the cluster is a cooperative group. `cg::this_cluster()` gives the block's rank
# in it, `cluster.map_shared_rank(ptr, r)` turns an address of this block's shared memory into
# the same address in block `r`'s, and `cluster.sync()` is the barrier. The launch names the
# cluster's size with `cudaLaunchKernelEx` and a `cudaLaunchAttributeClusterDimension`. The
# exchange, once each block has its slice's max `shift` and sum `s`: thread 0 leaves them in
# shared memory, and lane `r` of every warp reads block `r`'s pair through DSMEM.

# %%
show_source("ch7_llm_cross_entropy/v4_cluster_rows.cu", "    if (n > 1) {  // one exchange",
            "        cluster.barrier_arrive();", fold=False)

# %%
show_source("ch7_llm_cross_entropy/v4_cluster_rows.cu",
            "__global__ void __launch_bounds__(kClusterThreads)",
            "    if (n > 1) cluster.barrier_wait();", fold=True)

# %% [markdown]
# Three details matter:
#
# - **The copy into shared memory is `cp.async`**: 16 bytes from global to shared memory
#   without a register in between, all of a block's copies in flight at once.
# - **Every block computes the same {term}`log-sum-exp`, bit for bit**: each {term}`warp` adds
#   the `n` blocks' partial sums in the same order (the `warp_sum` lines above).
# - **A block must not exit while peers read its shared memory**: it *arrives* on the cluster
#   barrier after its last DSMEM read and *waits* after writing its gradient, at no cost.
#
# Everything else is chapter 5's version 3: the file includes `v3_fused_rows.cu` and sends it
# the rows `launch_cluster` (below) does not take, every row on GPUs before Hopper included:
#
# - rows of 4096 classes or fewer (one block's registers hold them);
# - rows whose length is not a multiple of 16 bytes (GPT-2's 50257 classes);
# - rows longer than 16 slices of 112 KB (16 blocks is the cap);
# - float64, and the forward alone when a row needs more than one block.
#
# ```{dropdown} Going deeper: registers or shared memory
# Holding the slice in registers (64 values per thread) takes 128 registers per thread, which
# allow 2 blocks per SM, and that kernel's forward ran well below version 3's {term}`bandwidth`
# (`bench/PERFLOG.md` has the measurements). In shared memory the Nsight Compute table below
# shows 7 blocks per SM for bf16 rows of 128256 classes and 6 for fp32 rows of 131072, whose
# slices are a full 32 KB (each block also takes the 1 KB of shared memory CUDA reserves per
# block). The forward alone over multi-block rows goes to version 3 because, with no gradient
# to write, one streaming read of the row is all it needs.
# ```

# %%
show_source("ch7_llm_cross_entropy/v4_cluster_rows.cu", "static bool launch_cluster",
            "        if (!a->grad && n > 1) return false;", fold=False)

# %% [markdown]
# ## Correct first
#
# Loss and gradient against PyTorch in float64, for each dtype, at row lengths that take
# clusters of 1 to 16 blocks, and one (262150 classes, not a multiple of 16 bytes) that falls back to streaming. A fifth of the rows are ignored, with label smoothing 0.1, `grad_output` 2.5. The column
# "kernel" is what the profiler saw run (`kernels.notebook.kernels_launched`), with the cluster's
# size from the launch rule.
#
# ```{dropdown} Going deeper: what the GPU tests add
# The GPU tests, `tests/gpu/test_llm_cross_entropy.py`, add -inf and NaN logits, rows with
# every target ignored, determinism over 20 runs and `torch.library.opcheck`.
# ```

# %% tags=["gpu"]
v4 = load("ch7_llm_cross_entropy/v4_cluster_rows.cu")
RTOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


def check_rows(classes, dtype, rows=7):
    g = torch.Generator(device="cuda").manual_seed(classes)
    logits = (3 * torch.randn(rows, classes, generator=g, device="cuda")).to(dtype)
    target = torch.randint(0, classes, (rows,), generator=g, device="cuda")
    target[::5] = -100
    x = logits.clone().requires_grad_()
    loss = cross_entropy(x, target, kernel=v4, label_smoothing=0.1)
    loss.backward(torch.tensor(2.5, device="cuda", dtype=dtype))
    x64 = logits.double().requires_grad_()
    want = F.cross_entropy(x64, target, label_smoothing=0.1)
    (2.5 * want).backward()
    return relative_error(loss.double(), want), relative_error(x.grad.double(), x64.grad)


def kernel_of_step(classes, dtype):
    x = torch.randn(2, classes, device="cuda", dtype=dtype, requires_grad=True)
    t = torch.zeros(2, dtype=torch.int64, device="cuda")
    ran = kernels_launched(lambda: cross_entropy(x, t, kernel=v4).backward(), r"row_\w+")
    if ran == ["row_cluster"]:  # n = min(16, ceil(row bytes / 32 KB)), as launch_cluster
        return f"cluster of {min(16, math.ceil(classes * dtype.itemsize / 32768))}"
    return ", ".join(ran) + " (v3)"


print(f"{'classes':>8} {'dtype':>9} {'kernel':>24} {'loss error':>11} {'grad error':>11}  "
      "verdict")
all_ok = True
for classes in (4104, 16392, 128256, 262144, 262150):
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        loss_err, grad_err = check_rows(classes, dtype)
        ok = max(loss_err, grad_err) <= RTOL[dtype]
        all_ok &= ok
        print(f"{classes:>8} {str(dtype)[6:]:>9} {kernel_of_step(classes, dtype):>24} "
              f"{loss_err:11.1e} {grad_err:11.1e}  {'PASS' if ok else 'FAIL'}")
print("every case within its dtype's tolerance:", all_ok)

# %% [markdown]
# ## Fast: one read of the logits
#
# Forward and backward (`loss.backward()`) of the loss alone, side by side in one run: eager
# PyTorch, `torch.compile`, Liger-Kernel's cross-entropy (when installed: `pip install
# liger-kernel`), chapter 5's v3 and version 4. The bound is reading the logits and writing the
# gradient once, at the copy bandwidth printed above.
#
# **Predict first.** In a training step, version 3 reads a long row twice and writes its
# gradient once; version 4 reads it once and writes once. If both ran at the bound, how much
# faster would version 4 be at 8192 x 128256?

# %% tags=["gpu", "nbval-ignore-output"]
try:
    from liger_kernel.transformers.functional import liger_cross_entropy
except ImportError:
    liger_cross_entropy = None
v3 = load("ch5_cross_entropy/v3_fused_rows.cu")


def providers():
    found = {"eager": F.cross_entropy,
             "torch.compile": torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)}
    if liger_cross_entropy is not None:
        found["Liger-Kernel"] = lambda x, t: liger_cross_entropy(x, t)
    found["v3 (chapter 5)"] = lambda x, t: cross_entropy(x, t, kernel=v3)
    found["v4 (cluster)"] = lambda x, t: cross_entropy(x, t, kernel=v4)
    return found


def time_loss(shape, dtype, backward, reps=30):
    rows, classes = shape
    nbytes = rows * classes * dtype.itemsize * (2 if backward else 1) + rows * 8
    g = torch.Generator(device="cuda").manual_seed(0)
    args = [(torch.randn(shape, generator=g, device="cuda",
                         dtype=dtype).requires_grad_(backward),
             torch.randint(0, classes, (rows,), generator=g, device="cuda")) for _ in range(2)]
    out = []
    for name, fn in providers().items():
        def run(x, t, fn=fn):
            if backward:
                x.grad = None
                fn(x, t).backward()
            else:
                with torch.no_grad():
                    fn(x, t)
        label = f"{'fwd+bwd' if backward else 'fwd'} {str(dtype)[6:]}"
        out.append(bench.Measurement(label, name, shape, nbytes,
                                     bench.time_ms(run, args, reps=reps)))
    del args
    torch.cuda.empty_cache()
    return out


measured = []
for shape, dtype in (((8192, 128256), torch.bfloat16), ((4096, 131072), torch.float32)):
    measured += time_loss(shape, dtype, backward=True)
for shape in ((32768, 16384), (16384, 65536), (8192, 131072)):
    measured += time_loss(shape, torch.bfloat16, backward=False)
saved = ch.save(measured)

# %% tags=["gpu", "nbval-ignore-output"]
rows = ch.rows()
fig, axes = kernels.plot.subplots(1, 2, height=3.6)
for ax, (label, shape) in zip(axes, (("fwd+bwd bfloat16", (8192, 128256)),
                                     ("fwd+bwd float32", (4096, 131072)))):
    mine = results.select(rows, loss=label, shape=shape)
    names = [r["provider"] for r in mine]
    ax.barh(names, [r["ms"] for r in mine],
            color=[kernels.plot.colour(n, i) for i, n in enumerate(names)])
    bound = mine[0]["bytes"] / (mine[0]["peak_gbps"] * 1e6)
    ax.axvline(bound, color="black", linestyle=":", label="bound (read + write once)")
    ax.set_title(f"{label}, {shape[0]} x {shape[1]}")
    ax.set_xlabel("ms per step (lower is better)")
    ax.invert_yaxis()
axes[1].set_yticklabels([])
kernels.plot.legend(fig)
plt.show()

# %% tags=["gpu", "nbval-ignore-output"]
def get(label, shape, provider):
    return next(r for r in rows if r["loss"] == label and r["shape"] == shape
                and r["provider"] == provider)


names = " | ".join(providers())
right = " ---: |" * (len(providers()) + 1)  # the numbers' columns, aligned right
lines = ["Forward and backward, ms per step:", "",
         f"| work | shape | {names} | bound |", "| --- | --- |" + right]
for label, shape in (("fwd+bwd bfloat16", (8192, 128256)),
                     ("fwd+bwd float32", (4096, 131072))):
    cells = [f"{get(label, shape, p)['ms']:.2f}" for p in providers()]
    bound = get(label, shape, "eager")["bytes"] / (ch.peak * 1e6)
    lines.append(f"| {label} | {shape[0]} x {shape[1]} | " + " | ".join(cells)
                 + f" | {bound:.2f} |")
lines += ["", "Forward alone, bfloat16, GB/s of logits read:", "",
          f"| shape | {names} | bound |", "| --- |" + right]
for shape in ((32768, 16384), (16384, 65536), (8192, 131072)):
    cells = [f"{get('fwd bfloat16', shape, p)['gbps']:.0f}" for p in providers()]
    lines.append(f"| {shape[0]} x {shape[1]} | " + " | ".join(cells) + f" | {ch.peak:.0f} |")
Markdown("\n".join(lines))

# %% [markdown]
# The chapter's targets, as ratios to this GPU's own bandwidth: forward+backward within 1.15x
# of the bound in each dtype, and the bf16 forward at 97% of the read bandwidth or more (each
# PASS or MISS line names its threshold). Two things in the forward table: its bound column is
# the copy bandwidth, but a forward only reads, so it can beat that column (its bound is the
# read bandwidth printed at the top). At 65536 and 131072 classes, v3 and v4 run the same kernel:
# the forward alone over rows of several slices goes to version 3.

# %% tags=["gpu", "nbval-ignore-output"]
v4_name = "v4 (cluster)"
BOUND_FACTOR, READ_SHARE = 1.15, 0.97  # the targets, relative to this GPU's bandwidth
checks = []
for label, shape in (("fwd+bwd bfloat16", (8192, 128256)),
                     ("fwd+bwd float32", (4096, 131072))):
    goal = BOUND_FACTOR * get(label, shape, "eager")["bytes"] / (ch.peak * 1e6)
    checks.append((f"{label} {shape[0]} x {shape[1]} <= {BOUND_FACTOR}x bound = {goal:.2f} ms",
                   get(label, shape, v4_name)["ms"], goal, "max"))
for shape in ((32768, 16384), (16384, 65536), (8192, 131072)):
    goal = READ_SHARE * READ_GBPS
    checks.append((f"fwd bf16 {shape[0]} x {shape[1]} >= {READ_SHARE:.0%} read = "
                   f"{goal:.0f} GB/s",
                   get("fwd bfloat16", shape, v4_name)["gbps"], goal, "min"))
for label, value, goal, kind in checks:
    ok = value <= goal if kind == "max" else value >= goal
    print(f"{'PASS' if ok else 'MISS'}  {label:<48} measured {value:.2f}")
if not CLUSTERS:  # what version 4 does with clusters, from the book's run
    for label, shape in (("fwd+bwd bfloat16", (8192, 128256)),
                         ("fwd+bwd float32", (4096, 131072))):
        book = {r["provider"]: r["ms"] for r in BOOK_RUN
                if r["loss"] == label and r["shape"] == shape}
        print(f"book's run, {label} {shape[0]} x {shape[1]}: "
              f"version 4 {book[v4_name]:.2f} ms, "
              f"version 3 {book['v3 (chapter 5)']:.2f} ms")
fb = get("fwd+bwd bfloat16", (8192, 128256), v4_name)["ms"]
for other in ("v3 (chapter 5)", "torch.compile", "Liger-Kernel"):
    if any(r["provider"] == other for r in rows):
        print(f"v4 vs {other}, fwd+bwd bf16 8192 x 128256: "
              f"{get('fwd+bwd bfloat16', (8192, 128256), other)['ms'] / fb:.2f}x faster")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
#
# At the bound, version 3 moves three row-sized streams (two reads, one write) and version 4
# two, so version 4 would be 3 / 2 = 1.5 times faster. The line "v4 vs v3 (chapter 5)" above
# gives the measured ratio. It falls short of that where version 3's second read finds part of
# the row still in L2 (its header says so). The lines after it compare with `torch.compile`
# and Liger-Kernel (a column only where it is installed).
# ```
#
# The forward+backward steps end within a few percent of the 1.15x line, on either side of it
# from run to run. The bf16 forward at 32768 x 16384 makes its target by
# the smallest margin. Where does that call's time go? PyTorch's profiler lists the kernels of
# one call and their times on the GPU:

# %% tags=["gpu", "nbval-ignore-output"]
shape = (32768, 16384)
x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
t = torch.randint(0, shape[1], (shape[0],), device="cuda")
with torch.no_grad():
    kernel_us = bench.kernel_times("v4, forward", lambda a, b: cross_entropy(a, b, kernel=v4),
                                   (x, t))
row_us = max(kernel_us.values())
logits_gb = x.numel() * x.element_size() / 1e9
row_gbps = logits_gb / row_us * 1e6
call_us = 1e3 * get("fwd bfloat16", shape, v4_name)["ms"]
print(f"\nthe row kernel alone: {row_us:.0f} us, {row_gbps:.0f} GB/s, "
      f"{row_gbps / READ_GBPS:.1%} of the read bandwidth")
print(f"the call (the table above): {call_us:.0f} us, {logits_gb / call_us * 1e6:.0f} GB/s; "
      f"outside the row kernel: {call_us - row_us:.0f} us ({1 - row_us / call_us:.1%})")
del x, t

# %% [markdown]
# The row kernel alone reads at nearly the read bandwidth printed at the top of the chapter,
# well above the forward's target. The call loses part of that margin to a fixed cost outside
# the kernel (the last line above): the final kernels that add the rows' losses in a fixed
# order (`sum_chunks`, then `finish`), and the idle time around them.
#
# ```{dropdown} Going deeper: the fixed cost, and what was tried against it
# The cost does not grow with the rows' length: `sum_chunks` runs over chunks of 4096 rows,
# then `finish` adds the chunks. They are programmatic dependent launches, as chapter 4's
# pass 2: each starts while the kernel before it runs and waits for it on the device, so its
# time in the profiler includes that wait.
#
# Two changes take part of this cost off: no memset of the bad-target flag before the
# rows, and the final sum over many blocks instead of one beyond 16384 rows (version 3's header
# says how; `bench/PERFLOG.md` has the measurements). A warp per row streaming its
# row through registers instead of shared memory, for the forward alone, gives the same kernel
# time (`bench/PERFLOG.md`). Removing the final launch, by letting the last block to finish add
# the losses, was measured for version 3 (its header) and was slower: every block then pays a
# fence and an {term}`atomic`.
# ```
#
# ```{dropdown} Going deeper: the clear of L2, part of the fixed cost
# Part of a call's fixed cost can be the measurement's own. Every timed call follows a clear of
# {term}`L2 <L2 cache>` ({doc}`../book/timing`). The course clears it by reading a buffer;
# `triton.testing.do_bench` writes one. The cell below times this call and `torch.sum` over the
# same logits both ways. Cleared by writing a 256 MB buffer, L2 is left full of modified lines,
# and the timed call writes them back to memory as its reads evict them. Cleared by reading a
# buffer, L2 holds only clean lines, which cost nothing to evict.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
t = torch.randint(0, shape[1], (shape[0],), device="cuda")


def v4_forward(a, b):
    return cross_entropy(a, b, kernel=v4)


with torch.no_grad():
    for clear in ("write", "read"):
        ours = bench.time_ms(v4_forward, [(x, t)], clear=clear)
        total = bench.time_ms(torch.sum, [(x,)], clear=clear)
        print(f"L2 cleared by a {clear:<5}: version 4 {1e3 * ours:4.0f} us "
              f"({logits_gb / ours * 1e3:4.0f} GB/s), torch.sum {1e3 * total:4.0f} us "
              f"({logits_gb / total * 1e3:4.0f} GB/s)")
del x, t

# %% [markdown]
# ```{dropdown} Going deeper: what the clear costs, and torch.sum
# The write-back costs every call the same few microseconds, whatever the call does, so
# ratios between providers barely move. Absolute bandwidths of calls that read about a gigabyte rise by a few percent when L2 is
# cleared by a read. `torch.sum` over the same logits, one kernel with no final sum of rows,
# lands a hair under the line in the output above, a little behind version 4's call.
# ```
#
# ## What Nsight Compute shows
#
# `kernels.profile.ncu` runs the kernel under Nsight Compute's counters ({doc}`../book/profiling`
# explains the tool and each number): how busy DRAM was, what limits the blocks per SM, and
# how many warps were resident. Without `ncu` on the machine, the cell says so.

# %% tags=["gpu", "nbval-ignore-output"]
from kernels import profile

PROFILE = """
import torch
from kernels import load
from kernels.cross_entropy import cross_entropy
k = load("ch7_llm_cross_entropy/v4_cluster_rows.cu")
for (rows, classes), dtype in (((8192, 128256), torch.bfloat16),
                               ((4096, 131072), torch.float32)):
    x = torch.randn(rows, classes, device="cuda", dtype=dtype).requires_grad_()
    t = torch.randint(0, classes, (rows,), device="cuda")
    cross_entropy(x, t, kernel=k).backward()
torch.cuda.synchronize()
"""
if not CLUSTERS:
    print("no clusters in this build, so no row_cluster kernel to profile: the book shows "
          "the H100's")
else:
    counters = profile.ncu(PROFILE, "row_cluster", (
        "time (us)", "DRAM throughput (% of peak)", "registers per thread",
        "blocks per SM, by registers", "blocks per SM, by shared memory",
        "theoretical occupancy (%)", "achieved occupancy (%)", "issue slots busy (%)"),
        launches=2)
    if counters:
        print(counters.table(["bf16 8192 x 128256", "fp32 4096 x 131072"]))

# %% [markdown]
# The two steps move the same bytes and take about the same time. Shared memory limits the
# blocks per SM (32 KB of slice each), not registers. Occupancy is low in warps, but the
# {term}`bytes in flight` keep DRAM busy most of the time.
#
# ```{dropdown} Going deeper: the block size, and the persistent cluster that lost
# The block size matters: 256 threads per block cost bf16 12% against 128 (the kernel's header
# has the sweep). A block's life is three
# phases, its copies in flight, computation around a cluster barrier, then its stores; during
# the middle one its SM's share of memory traffic stops, and more, smaller blocks per SM
# leave fewer such gaps. The fix that predicts itself, a *persistent* cluster that loops over
# rows and copies row i+1's slice while it computes row i, was measured too
# (`bench/PERFLOG.md`) and was **slower**: two slices per block leave 3 blocks per SM. So was
# its cousin for the forward alone at 32768 x 16384, where a row is one block's slice: a
# resident {term}`grid` whose blocks each hold three rows in shared memory, copying the next two while
# they compute one. A prediction that a measurement contradicts is the most useful kind.
# ```
#
# Exercise 7.3 asks what bf16's twice as many values per byte cost in instructions.
#
# ## A fused linear + cross-entropy
#
# The output layer computes `logits = hidden @ W.T` for `tokens` rows of `H` hidden values and a
# weight `W` of `V x H`. Its loss needs, per row, only the log-sum-exp and the target's logit;
# its backward needs `dlogits = softmax - one_hot` (scaled), then `grad_hidden = dlogits @ W`
# and `grad_W = dlogits.T @ hidden`. `kernels/ops/llm_head.py` takes the rows in chunks, and for
# each chunk, in the forward:
#
# 1. `logits = hidden[chunk] @ W.T` with cuBLAS, into one scratch buffer reused by every chunk;
# 2. version 4 reads those logits once and writes `dlogits` **over them**
#    (`cross_entropy_into_logits`: every block reads its slice before it writes there), already
#    multiplied by 1 / (tokens counted) for the mean;
# 3. `grad_W += dlogits.T @ hidden[chunk]` and `grad_hidden[chunk] = dlogits @ W`.
#
# The gradients are ready when the forward returns; `backward()` multiplies them by its
# `grad_output` in place, on the GPU, and does nothing when it is 1. The memory it adds is one
# chunk of logits: `chunk_rows` is the largest multiple of 128 rows whose logits fit in
# 251 MiB (1024 rows for Llama 3's vocabulary, 768 for Qwen 2's). That keeps the whole step
# within the 0.25 GiB target checked below.
#
# ```{dropdown} Going deeper: the mean's factor, and float16
# The factor 1 / (tokens counted) is computed and read on the GPU (`grad_factor`), so the
# products of step 3 need no scaling after them. In float16, where `dlogits` / count could
# fall below the smallest number, the gradients are scaled after their products instead.
# ```
#
# ```{figure} ../book/images/ch7_lm_head_chunks.svg
# :alt: 8192 tokens in 8 chunks of 1024 rows. For each chunk: its logits go into one scratch buffer, the kernel writes dlogits over them, then two matrix products update grad_W and grad_hidden. A bar chart compares the memory of all the logits at once with one chunk's.
# :width: 100%
#
# The fused head's chunks for Llama 3's head (V = 128256, bf16, 8192 tokens): the chunk size comes from `llm_head.default_chunk_rows`.
# ```

# %%
show_source("ops/llm_head.py", "def _linear_cross_entropy(", "    return (total * scale)")

# %% [markdown]
# Correct first: loss and both gradients against float64, with three chunks (the last one
# short), ignored tokens, label smoothing and `grad_output` 3. It is set next to PyTorch's own path in
# the same dtype (the tolerance is that path's error, or the dtype's, whichever is larger).

# %% tags=["gpu"]
def head_errors(dtype, tokens=300, hidden=256, vocab=16392):
    h, w, t = head_inputs(tokens, hidden, vocab, dtype, seed=1)
    t[::7] = -100
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (3 * F.cross_entropy(h64 @ w64.t(), t, label_smoothing=0.1)).backward()
    want = F.cross_entropy(h64 @ w64.t(), t, label_smoothing=0.1).detach()
    ours = linear_cross_entropy(h, w, t, label_smoothing=0.1, chunk_rows=128)
    (3 * ours).backward()
    mine = [relative_error(ours.double(), want), relative_error(h.grad.double(), h64.grad),
            relative_error(w.grad.double(), w64.grad)]
    h.grad = w.grad = None
    theirs = F.cross_entropy(h @ w.t(), t, label_smoothing=0.1)
    (3 * theirs).backward()
    torch_err = [relative_error(theirs.double(), want),
                 relative_error(h.grad.double(), h64.grad),
                 relative_error(w.grad.double(), w64.grad)]
    return mine, torch_err


print(f"{'dtype':<9} {'':>10} {'loss':>9} {'grad h':>9} {'grad W':>9}")
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    mine, theirs = head_errors(dtype)
    print(f"{str(dtype)[6:]:<9} {'fused':>10} " + " ".join(f"{e:9.1e}" for e in mine))
    print(f"{'':<9} {'PyTorch':>10} " + " ".join(f"{e:9.1e}" for e in theirs))
# Why PyTorch's float16 loss can be inf here: label smoothing adds the mean of log_softmax over
# the classes, and PyTorch first sums them into a float16: 16392 values near -10 make about
# -160000, past float16's largest magnitude, 65504.
h16, w16, _ = head_inputs(4, 256, 16392, torch.float16, seed=1)
print("PyTorch, float16: sum of log_softmax over 16392 classes:",
      F.log_softmax(h16 @ w16.t(), dim=-1).sum(-1).tolist())

# %% [markdown]
# Then time and memory in bf16, forward and backward, at T=8192, H=4096, V=128256 (Llama 3
# 8B's head) and T=16384, H=2048, V=151936 (Qwen 2's). The providers are eager PyTorch
# (`F.cross_entropy(h @ W.T, t)`), the same under `torch.compile`, the matrix product then
# version 4, and ours. Other projects' fused heads join them where installed: Liger-Kernel's,
# Apple's Cut Cross-Entropy and PyTorch's `F.linear_cross_entropy`. "Extra" is the peak memory of a step beyond the inputs, the
# weight and their gradients. A head that runs out of GPU memory is shown as such.
#
# **Predict first.** At T=8192, how much memory beyond the inputs should the fused head need,
# and `torch.compile`'s head, which keeps the logits of the whole batch (the table at the top of
# the chapter)? Which of the two should be faster?
#
# ```{dropdown} Going deeper: how the heads are measured
# The other projects' heads come from `llm_head.other_fused_heads`; PyTorch's has been there
# since version 2.13. Cut Cross-Entropy's default filter skips
# gradient entries too small to matter in bf16. "Extra" comes from
# `torch.cuda.max_memory_allocated`; on a smaller GPU, running out of memory is the
# measurement. Each head is measured three times in turns and its fastest turn kept, so that a
# GPU clock that drifts over the cell (under a long run of matrix products it does) favours
# none of them.
# ```

# %% tags=["gpu"]
def eager_head(h, w, t):
    return F.cross_entropy(h @ w.t(), t)


HEADS = {"eager": eager_head, "torch.compile": torch.compile(eager_head, dynamic=False),
         "matmul + v4": lambda h, w, t: cross_entropy(h @ w.t(), t, kernel=v4),
         "fused (course)": linear_cross_entropy, **other_fused_heads()}
HEAD_SHAPES = ((8192, 4096, 128256), (16384, 2048, 151936))

head_rows = []
for tokens, hidden, vocab in HEAD_SHAPES:
    turns = {name: [] for name in HEADS}
    for _ in range(3):  # in turns: a GPU clock that drifts over the run favours no head
        for name, fn in HEADS.items():
            step = measure_step_if_it_fits(fn, *head_inputs(tokens, hidden, vocab))
            turns[name].append(step)  # None: out of memory
            torch.cuda.empty_cache()
    for name, steps in turns.items():
        fitted = [step for step in steps if step]
        ms = round(min(ms for ms, _ in fitted), 3) if fitted else ""
        gib = round(max(gib for _, gib in fitted), 3) if fitted else ""
        head_rows.append({"gpu": ch.gpu, "tokens": tokens, "hidden": hidden, "vocab": vocab,
                          "provider": name, "ms": ms, "extra_gib": gib})
saved = results.save_table(head_rows, "ch7_head")

# %% tags=["gpu", "nbval-ignore-output"]
head_rows = results.read_table("ch7_head")
head = {(r["tokens"], r["provider"]): r for r in head_rows}


def fits(tokens, provider):
    return head[tokens, provider]["ms"] != ""


lines = [" and ".join(f"T={t} H={h} V={v}" for t, h, v in HEAD_SHAPES)
         + ", bf16, forward and backward:", "",
         "| head |" + "".join(f" T={t} ms | extra GiB |" for t, _, _ in HEAD_SHAPES),
         "| --- |" + " ---: |" * 2 * len(HEAD_SHAPES)]
for name in HEADS:
    cells = [f" {head[t, name]['ms']:.1f} | {head[t, name]['extra_gib']:.2f} |"
             if fits(t, name) else " out of memory | |" for t, _, _ in HEAD_SHAPES]
    lines.append(f"| {name} |" + "".join(cells))
Markdown("\n".join(lines))

# %% tags=["gpu", "nbval-ignore-output"]
def verdict(met, target, measured):
    print(f"{'PASS' if met else 'MISS'}  {target:<45} measured {measured}")


for tokens, _, _ in HEAD_SHAPES:
    ours = head[tokens, "fused (course)"]
    if fits(tokens, "torch.compile"):
        ratio = ours["ms"] / head[tokens, "torch.compile"]["ms"]
        verdict(ratio <= 1, f"T={tokens}: fused / torch.compile time <= 1.00", f"{ratio:.3f}")
    else:
        print(f"PASS  T={tokens}: torch.compile's head runs out of memory here; ours does not")
    verdict(ours["extra_gib"] <= 0.25, f"T={tokens}: extra memory <= 0.25 GiB",
            f"{ours['extra_gib']:.3f}")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
#
# The fused head holds one chunk of logits, within the scratch budget above; `torch.compile`
# holds the batch's logits and more (the column "extra GiB" of the table). On time the
# prediction is harder: the fused head runs the same three matrix products in chunks, and
# in the table it comes out a little slower than `torch.compile` (the MISS lines above).
# Liger-Kernel's and Cut Cross-Entropy's heads, where installed, need even less memory and
# take longer than ours.
# ```
#
# "matmul + v4", the fastest row, buys its time with memory: it stores the whole batch's
# logits (its "extra GiB"). What costs more than `torch.compile` is the weight's gradient (V x H, 1 GiB in bf16 here). Its
# product runs over one chunk's rows instead of all of them, so its output, as large as the
# weight, is read and written once per chunk instead of written once.
#
# ```{dropdown} Going deeper: a profile of one step
# Where the time goes, from a profile of one step of each (`bench/lm_head_profile.py`, its
# numbers in `bench/PERFLOG.md`): the products that make the logits and the hidden states'
# gradient run chunk by chunk about as fast as `torch.compile`'s single products over all
# rows, and version 4 takes about half the time of compile's two softmax kernels. What costs
# more is the weight's gradient (V x H, 1 GiB in bf16 here): `addmm` reads and writes it once
# per chunk. Multiplying all of it by 1 / (tokens counted) for the mean, in a loop at the end,
# would read and write it one more time (the script's `--variants` times that loop against the
# op). Instead version 4 multiplies the gradient it writes over the logits by that factor, read on
# the GPU through the pointer that carries chapter 5's guess of `grad_output`, so neither
# product needs a pass after it. What remains over `torch.compile` is the weight's gradient:
# its product runs over one chunk's rows instead of all of them, and its output, as large as
# the weight, is read and written once per chunk instead of written once.
# ```
#
# Larger chunks cut that cost at a cost in memory. The trade-off of the chunk size, measured (the time of a step against the
# memory it adds):

# %% tags=["gpu"]
sweep = []
h, w, t = head_inputs(8192, 4096, 128256)
for chunk in (512, 768, 896, 1024, 2048, 4096):
    ms, extra = measure_step(lambda a, b, c: linear_cross_entropy(a, b, c, chunk_rows=chunk),
                             h, w, t)
    sweep.append({"gpu": ch.gpu, "chunk_rows": chunk, "ms": round(ms, 3),
                  "extra_gib": round(extra, 3)})
del h, w, t
torch.cuda.empty_cache()
saved = results.save_table(sweep, "ch7_chunks")

# %% tags=["gpu"]
sweep = results.read_table("ch7_chunks")
fig, ax = kernels.plot.subplots(height=3.6)
ax.plot([r["extra_gib"] for r in sweep], [r["ms"] for r in sweep], marker="o",
        label="fused (course), chunk rows marked")
for i, r in enumerate(sweep):  # labels above and below in turn: neighbours do not overlap
    ax.annotate(str(r["chunk_rows"]), (r["extra_gib"], r["ms"]), textcoords="offset points",
                xytext=(4, 6 if i % 2 == 0 else -14), fontsize=9)
if fits(8192, "torch.compile"):
    compiled = head[8192, "torch.compile"]
    ax.plot([compiled["extra_gib"]], [compiled["ms"]], marker="s", linestyle="none",
            color=kernels.plot.colour("torch.compile", 1), label="torch.compile")
ax.axvline(0.25, color="black", linestyle=":", label="0.25 GiB budget")
ax.set_xlabel("GiB of memory beyond inputs, weight and gradients")
ax.set_ylabel("ms per step")
ax.set_title("LM head T=8192 H=4096 V=128256 bf16")
kernels.plot.legend(ax)
plt.show()

# %% [markdown]
# The time is not monotone in the chunk: 896 rows comes out slower than 768, a row count that
# suits cuBLAS's tiles worse. 1024 is the largest chunk inside the budget.
#
# ## Training with the fused head
#
# Chapter 6's character-level language model, with its output layer replaced by a bias-free
# weight whose loss is computed by `linear_cross_entropy`. It is trained twice from the same weights
# on the same batches: once with `F.cross_entropy(hidden @ W.T, t)`, once with the fused head.

# %% tags=["gpu", "nbval-ignore-output"]
import glob

text = "\n".join(open(path, encoding="utf-8").read()
                 for path in sorted(glob.glob(os.path.join(ROOT, "book", "*.md")))
                 + sorted(glob.glob(os.path.join(ROOT, "chapters", "*.py"))))
alphabet = sorted(set(text))
codes = torch.tensor([alphabet.index(c) for c in text], device="cuda")
CONTEXT = 16
print(f"{len(text)} characters of text, an alphabet of {len(alphabet)}")


class CharBody(torch.nn.Module):
    """Chapter 6's model without its output layer: the hidden states and a head weight."""

    def __init__(self, vocab):
        super().__init__()
        torch.manual_seed(1)
        self.embed = torch.nn.Embedding(vocab, 32)
        self.hidden = torch.nn.Linear(CONTEXT * 32, 512)
        self.head = torch.nn.Parameter(torch.randn(vocab, 512) / 512**0.5)

    def forward(self, chars):
        return torch.relu(self.hidden(self.embed(chars).flatten(1)))


def batch(g):
    starts = torch.randint(0, len(codes) - CONTEXT - 1, (2048,), generator=g, device="cuda")
    chars = codes[starts[:, None] + torch.arange(CONTEXT + 1, device="cuda")]
    return chars[:, :-1], chars[:, -1]


def train(head_loss, steps=1000):
    model = CharBody(len(alphabet)).cuda()
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-3)
    g = torch.Generator(device="cuda").manual_seed(7)
    losses = torch.empty(steps, device="cuda")
    for i in range(steps):
        x, y = batch(g)
        optimiser.zero_grad(set_to_none=True)
        loss = head_loss(model(x), model.head, y)
        loss.backward()
        optimiser.step()
        losses[i] = loss.detach()
    return losses.cpu()


theirs = train(lambda h, w, t: F.cross_entropy(h @ w.t(), t))
ours = train(linear_cross_entropy)
first = ((ours[:10] - theirs[:10]).abs() / theirs[:10]).max().item()
final_t, final_o = theirs[-50:].mean().item(), ours[-50:].mean().item()
print(f"steps 1-10: largest relative difference {first:.1e}")
print(f"final loss (mean of the last 50 steps): PyTorch {final_t:.4f}, "
      f"fused head {final_o:.4f}")
print("steps 1-10 within 1e-5:", first < 1e-5, "| final losses within 1e-2:",
      abs(final_o - final_t) / final_t < 1e-2)

# %% tags=["gpu", "nbval-ignore-output"]
fig, ax = kernels.plot.subplots(height=3.4)
ax.plot(theirs, label="F.cross_entropy(h @ W.T, t)", linewidth=3, alpha=0.5)
ax.plot(ours, label="linear_cross_entropy(h, W, t)", linewidth=1, linestyle="--",
        color="black")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("training loss")
kernels.plot.legend(ax)
plt.show()

# %% [markdown]
# The two curves lie on each other: the fused head trains the model as PyTorch's loss does.
#
# ## Summary
#
# - A language model's loss has few, very long rows, and its logits dominate memory.
# - Version 4 splits a row over a {term}`thread-block cluster` that exchanges its partial sums
#   through {term}`distributed shared memory`, so that forward and backward read the logits
#   once. It needs Hopper; other GPUs take chapter 5's path.
# - A fused linear + cross-entropy computes the output layer and its loss chunk by chunk and never
#   stores the logits: it needs a small fraction of the memory of eager PyTorch and
#   `torch.compile` (the memory table).
# - It is faster than eager PyTorch and a little slower than `torch.compile` (the MISS lines):
#   the weight's gradient is read and written once per chunk.
# - Trained with the fused head, the language model follows PyTorch's curve.
#
# The ladder of the loss alone, forward and backward, from the rows this chapter saved (the
# step and the cumulative speed-up are against chapter 5's version 3):

# %% tags=["nbval-ignore-output"]
VERSIONS = ["v3 (chapter 5)", "v4 (cluster)"]
CHANGES = {"v3 (chapter 5)": "one block streams a row, twice",
           "v4 (cluster)": "a cluster holds the row in shared memory"}
summary_rows = ch.rows()
Markdown("\n\n".join(
    f"{label}, {shape[0]} x {shape[1]}:\n\n" + results.speedup_table(
        summary_rows, VERSIONS, label, shape, baseline="v3 (chapter 5)", changes=CHANGES)
    for label, shape in (("fwd+bwd bfloat16", (8192, 128256)),
                         ("fwd+bwd float32", (4096, 131072)))))

# %% [markdown]
# ## Exercises
#
# Solutions are in {doc}`../solutions/ch7_solutions`.

# %% [markdown]
# ```{exercise}
# :label: ch7-which-path
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 30 minutes · **On paper:** no check, the answer is in the solutions
#
# For each of these rows, say which kernel of version 4 runs it on an H100 for a training step (forward and backward), with how many blocks per row and how many bytes of shared memory per block. Then answer again for the forward alone. The rows are Gemma's 256000 classes in bf16 and in fp32, GPT-2's 50257
# in bf16, Llama 2's 32000 in fp32, and 3000 classes in bf16. Then check your answers against
# `launch_cluster` above.
# ```
#
# ```{exercise}
# :label: ch7-chunk-model
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 30 minutes · **On paper:** no check, the answer is in the solutions
#
# Model the fused head's step time as three matrix products (2 x tokens x V x H flops each, at the GPU's dense bf16 tensor-core rate: 989 TFLOPS on an H100 SXM by NVIDIA's
# datasheet). Add, per chunk, one read and one write of the weight's
# gradient (V x H bf16) and one read and write of the chunk's logits. Which chunk size does the
# model predict is needed to be within 5% of the products alone at T=8192, H=4096, V=128256?
# How much memory does it take, and how does it compare with the sweep above?
# ```
#
# ```{exercise}
# :label: ch7-bf16-work
#
# **Difficulty:** ★★★ (hard) · **Time:** about 60 minutes · **On paper:** no check, the answer is in the solutions
#
# Forward and backward at 8192 x 128256 bf16 and at 4096 x 131072 fp32 move the same bytes,
# and version 4 takes about the same time for both. Count, per 16-byte vector, the
# instructions each pass of the kernel runs for each dtype (conversions, max, exp as one FFMA
# and one MUFU.EX2, adds, the gradient's multiply and conversion back). Predict the ratio
# of instructions bf16 / fp32 and which pipe is the busiest for bf16. How close to its limit is
# that pipe? Then check with Nsight Compute (`kernels.profile`, the `ISSUE` counters; the
# section "The metrics the chapters read" of {doc}`../book/profiling` names each).
# ```
#
# ```{exercise}
# :label: ch7-split-rows
#
# **Difficulty:** ★★★ (hard) · **Time:** about 90 minutes
#
# Clusters serve training, where the row must stay on chip for the gradient. The forward alone
# over a few long rows (the last position of 32 sequences, when a model samples its next
# token) goes to version 3's streaming kernel, one block per row. Then 32 rows keep 32 of the H100's
# 132 SMs reading. `kernels/exercises/ch7_split_rows.cu` splits each row into slices instead,
# one block per slice, each writing its slice's $(m, s)$ pair; a second kernel merges a row's
# pairs and finishes the loss. Two things are left to you: the check fails until you find the
# step that is wrong, and `slices_wanted` cuts each row into one slice, which is version 3's
# grid again. Choose the number of slices from the GPU you run on, not from the H100's numbers.
# **Target**: 1.3 times version 4's forward speed at 32 x 256000 float32 logits.
# ```
#
# ```{admonition} Hint
# :class: dropdown
#
# The check fails even for rows that are not split: `merge` also combines each thread's
# chunks. Write down what $s_a$ and $s_b$ are sums of. For the slices: how many blocks of
# `slice_stats` can the whole GPU run at once? `cudaOccupancyMaxActiveBlocksPerMultiprocessor`
# answers for one SM.
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch7_split_rows.cu")

# %% tags=["gpu", "nbval-ignore-output"]
from kernels.exercises.ch7_checks import check_split_rows

if ch.exercise("exercises/ch7_split_rows.cu", check_split_rows):
    bench.speedup_target(
        lambda logits, target: cross_entropy(logits, target,
                                             kernel=load("exercises/ch7_split_rows.cu"),
                                             check_targets=False),
        lambda logits, target: cross_entropy(logits, target, kernel=v4, check_targets=False),
        "cross_entropy", (32, 256000), 1.3, reference_label="version 4")
