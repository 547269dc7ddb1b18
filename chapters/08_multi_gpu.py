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
# # Chapter 8: the loss across GPUs
#
# ```{admonition} Before you start
# :class: tip
#
# **You will be able to:**
#
# - compute the exact mean loss over GPUs that count different numbers of tokens, with one
#   all-reduce of two numbers;
# - split a cross-entropy's vocabulary over GPUs so that only a few floats per row cross the
#   link;
# - measure what scales when the GPUs are doubled, and what does not.
#
# **Assumes:** chapter 5's online softmax. The timings need two or more GPUs of one machine;
# with one GPU the chapter shows the stored runs, and every distributed cell also runs on CPU
# processes (PyTorch's `gloo` backend: the same collectives without a GPU).
#
# **Words it uses** (defined in the {doc}`../book/glossary`): {term}`all-reduce`, {term}`NCCL`,
# {term}`log-sum-exp`, {term}`online softmax`, {term}`latency`.
#
# **Reading time:** about 12 minutes. **Run time:** about 1 minute
# on a small GPU (the book's small-GPU run, {doc}`../book/status`).
# ```
#
# When a model outgrows one GPU, so does its loss. Two things change, and both go wrong in
# practice:
#
# - **The rows are split** (data parallelism): each GPU computes the loss of its own batch.
#   The mean over the whole batch is *not* the mean of the GPUs' means whenever the GPUs count
#   different numbers of tokens, which is the rule rather than the exception: padding and
#   `ignore_index` differ from batch to batch.
# - **The vocabulary is split** (tensor parallelism): a language model's output layer is so
#   large that each GPU holds only some of the classes of every row. No GPU can compute a
#   row's {term}`log-sum-exp` alone, and none should receive the others' logits: they are gigabytes.
#
# This chapter computes both with the course's {term}`kernels <kernel>` and `torch.distributed` over {term}`NCCL`, the
# communication library PyTorch uses on NVIDIA GPUs. Per row, three floats cross the link,
# against hundreds of thousands of logits; on two H200s the loss's forward and backward run
# nearly twice as fast as on one (measured below).

# %%
# ROOT (the repository's folder) and the imports of os, subprocess come from the
# notebook's first cell, which the book hides.
import json
import re

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown

from kernels import plot, results
from kernels.course.chapter import launch_or_stored
from kernels.exercises.ch8_checks import check_one_collective
from kernels.ops import ranks
from kernels.course.notebook import show_source
from kernels.ops.vocab_parallel import cross_entropy, shard_bounds

# %% [markdown]
# ## One process per GPU
#
# A collective operation (an {term}`all-reduce`, an all-gather) is called by every *rank*, one
# process per GPU, and returns when all of them have taken part. A notebook is one process,
# so the distributed work of this chapter lives in `kernels/ops/ranks.py`: its tasks run in
# every rank, started by `torchrun` (`python -m torch.distributed.run`), which gives each process
# its rank and the address of the others. `launch` starts them, waits, and returns what rank 0
# wrote. What matters is the `torchrun` command with `--nproc-per-node`, one process per GPU; the
# rest is plumbing:

# %%
show_source("ops/ranks.py", "def launch(", "        return {**json.loads")

# %% [markdown]
# Each rank joins the process group, binds its GPU, and from then on every collective of the
# task involves all ranks:

# %%
show_source("ops/ranks.py", "class Context:", "    def say(")

# %% [markdown]
# The GPUs of this machine, and how they are linked:
#
# ```{admonition} Going deeper: NVLink multicast stays off
# :class: dropdown
# NVLink multicast (NVLS) lets the NVLink switch itself combine or copy a message for several
# GPUs. `launch` sets `MULTICAST_OFF` (`NCCL_NVLS_ENABLE=0` and two more, in
# `kernels/ops/vocab_parallel.py`) in every process, so the numbers are NCCL's ring's and
# tree's, not NVLink multicast's (NVLS). The check below reports the setting from every rank; on
# an NVSwitch machine of your own, empty `MULTICAST_OFF` to let NCCL choose NVLS and compare.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
GPUS = torch.cuda.device_count()
for i in range(GPUS):
    print(f"GPU {i}: {torch.cuda.get_device_name(i)}")
topology = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
print(re.sub(r"\x1b\[[0-9;]*m", "", topology).split("\n\n")[0])  # without the underline codes
if GPUS < 2:
    print("One GPU: the cells below that need two show the stored runs of two NVIDIA H200\n"
          "GPUs (book/results/ch8_*.json), and say so; the CPU cells run here.")

# %% [markdown]
# Two H100 or H200 GPUs of one NVLink machine show `NV18` between them in that matrix: 18 NVLink
# links, together 450 GB/s each way by NVIDIA's figures. Compare 4.8 TB/s from each GPU's own
# memory on an H200 (3.35 TB/s on an H100). Moving logits between GPUs would cost seven to eleven
# times more than reading them (3.35 or 4.8 over 0.45); the statistics of a row cost nothing.
#
# ## The data-parallel mean
#
# Rank $r$ holds rows whose losses are $\ell_{r,i}$, of which $n_r$ count (the others are
# padding, `ignore_index`). The loss of the whole batch is
#
# $$ L = \frac{\sum_r \sum_i \ell_{r,i}}{\sum_r n_r}, \qquad\text{not}\qquad
#    \frac{1}{R}\sum_r \frac{\sum_i \ell_{r,i}}{n_r}. $$
#
# The right-hand form, each rank's `F.cross_entropy(..., reduction="mean")` averaged over the
# ranks (what averaging a data-parallel loss does by default), weighs a token of a heavily
# padded batch more than a token of a full one. The fix costs one all-reduce of two numbers per
# rank: its sum and its count, in float64 so that the sum of many ranks' partial sums loses
# nothing. NCCL's all-reduce leaves identical copies of the result on every rank (the
# documentation of `ncclAllReduce` says so), so every rank gets the same bits.

# %%
show_source("ops/vocab_parallel.py", "def global_sum_and_count", "    return pair[0], pair[1]")

# %% [markdown]
# Each rank's sum comes from the kernel of this chapter (below) in one pass over its logits.
# Here the ranks differ in padding (10 % and 70 % of the rows ignored) and in how hard their
# rows are (short, heavily padded documents are often easier), as real batches do.
#
# `launch_or_stored(name, task, processes, GPUs)` runs the task live where this machine has two
# GPUs or more and keeps it in `book/results/<name>.json`; with one GPU it prints that stored
# run and says so.
#
# **Predict first.** Is the mean of the two ranks' means off from the global mean by a rounding
# error of float32 (about $10^{-7}$ relative), or by much more? And will the two GPUs hold the
# same bits of the global mean?

# %% tags=["gpu", "nbval-ignore-output"]
mean_run = launch_or_stored("ch8_global_mean", "global_mean", GPUS, GPUS)

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# Read the lines above: the mean of means is off by far more than rounding. It is not a
# rounding error but a different loss, and its gradient trains a different model. The padding
# decides it: a token of the rank that ignores 70 % of its rows weighs about three times as
# much in the mean of means as a token of the other rank. The global mean matches the float64
# reference to float32 precision and has the same bits on both GPUs, as NCCL promises.
# ```
#
# ```{admonition} Going deeper: what "the same bits" proves
# :class: dropdown
# The global mean also has the same bits in the three calls of the run, which shows less than
# it seems. With two ranks there is one addition, and $a + b = b + a$ in floating point, so no
# order of {term}`reduction` could change the bits. Three ranks could (the CPU run below). One
# run agreeing with itself still says nothing about another machine or another NCCL version.
# NCCL does not document the order of its additions: that depends on the algorithm it picks for
# the message size and the topology, so the same bits from one run to the next is not promised.
# ```
#
# The same runs on three CPU processes over gloo (the statistics then come from PyTorch in
# float64), with a third batch:

# %% tags=["nbval-ignore-output"]
cpu_mean_run = ranks.launch("global_mean", 3, backend="gloo", rows=512, vocab=1000)
assert cpu_mean_run["same_bits"] and cpu_mean_run["global_mean_error"] < 1e-6  # nbval fails

# %% [markdown]
# ## Vocab-parallel cross-entropy
#
# A language model's last layer gives every token a logit per word of the vocabulary. At the
# sizes models train with, the logits of one step are gigabytes:

# %%
VOCABULARIES = {"Llama 2": 32000, "GPT-4o (o200k)": 200019, "Llama 3": 128256,
                "Qwen 2.5": 151936, "Gemma": 256000}
TOKENS = 8192
lines = ["| model | vocabulary | logits of 8192 tokens, bf16 | a row, bf16 |",
         "| --- | ---: | ---: | ---: |"]
for name, vocab in sorted(VOCABULARIES.items(), key=lambda item: item[1]):
    lines.append(f"| {name} | {vocab:,} | {TOKENS * vocab * 2 / 2**30:.1f} GiB "
                 f"| {vocab * 2 / 1024:.0f} KiB |")
Markdown("\n".join(lines))

# %% [markdown]
# With the output layer split by vocabulary over $R$ GPUs (Megatron-LM's tensor parallelism),
# rank $r$ computes the logits of its columns $[s_r, s_r + c_r)$ only. The loss of row $i$ needs
# the log-sum-exp over all columns. Each rank reduces its shard to a max $m_r$ and a sum
# $S_r = \sum_{j \in r} e^{x_j - m_r}$ (chapter 5's {term}`online softmax`: one read); then
#
# $$ M = \max_r m_r, \qquad \operatorname{lse} = M + \log \sum_r S_r\, e^{m_r - M}, \qquad
#    \ell = \operatorname{lse} - (1-\varepsilon)\,x_t - \frac{\varepsilon}{V}\sum_j x_j, $$
#
# where the target's logit $x_t$ comes from the one rank whose shard holds $t$ (the others add
# 0), and the sum of the logits is needed only with label smoothing $\varepsilon$. So the ranks
# exchange, per row: the max (an all-reduce with `MAX`), then the rescaled sum and the target
# logit (an all-reduce with `SUM` of two floats, three with smoothing). Each rank then writes the
# gradient of its own columns, $(\mathrm{softmax} - (1-\varepsilon)\,\mathrm{onehot} -
# \varepsilon/V)$ times the upstream gradient over the count, with no further communication.
#
# ```{figure} ../book/images/ch8_vocab_parallel.svg
# :alt: Two ranks each hold half the columns of every row. Each reduces its shard to a few floats per row (max, rescaled sum, target logit), the ranks all-reduce only those floats, and each then writes the gradient of its own columns.
# :width: 100%
#
# Per row, only the shards' statistics cross the link, never a logit: drawn by `tools/diagrams.py` from the chapter's byte counts.
# ```
#
# The kernels of one rank: `shard_stats` (one read of the shard) and `shard_grad` (one read,
# one write):

# %%
show_source("ch8_multi_gpu/vocab_shard.cu", "// Chapter 8", "#include <cuda_bf16.h>")

# %%
show_source("ch8_multi_gpu/vocab_shard.cu")

# %% [markdown]
# Between them, the communication, in PyTorch:

# %%
show_source("ops/vocab_parallel.py", "def row_log_sum_exp", "    return lse, sums[1]")

# %% [markdown]
# and the autograd function that strings the steps together: the forward saves the logits and
# each row's log-sum-exp; the backward turns the upstream gradient into one scale per row
# (zero on ignored rows) and runs `shard_grad`.

# %%
show_source("ops/vocab_parallel.py", "class _ShardedCrossEntropy",
            "        return grad, None, None")

# %% [markdown]
# ## Correct on every rank
#
# `check` builds a whole problem on every rank and gives each rank its share (of the columns,
# or of the rows). It compares the loss and the gradient of each rank's share with PyTorch's
# cross-entropy in float64 on the whole problem. The cases: irregular vocabularies (5003 classes
# split into uneven shards), ignored rows, label smoothing, the three reductions, three dtypes.
# "same bits" compares the loss of every rank bit for bit.

# %% tags=["gpu", "nbval-ignore-output"]
check_run = launch_or_stored("ch8_check", "check", GPUS, GPUS)
assert all(case["passed"] for case in check_run["cases"])

# %% [markdown]
# The errors are those of the dtype the gradient is written in (bfloat16 keeps 8 bits). On CPU
# processes, in float64, with three uneven shards:

# %% tags=["nbval-ignore-output"]
cpu_check_run = ranks.launch("check", 3, backend="gloo")
assert all(case["passed"] for case in cpu_check_run["cases"])  # nbval fails on a FAIL

# %% [markdown]
# ## Measured on two GPUs
#
# The timing task runs forward and backward of a bf16 cross-entropy at language-model sizes:
# 8192 tokens over Gemma's 256000 words, and 16384 over Llama 3's 128256 (4.2 GB of logits
# each). It times the same kernels with the vocabulary on one GPU and split over two, the time
# of a step being the slowest rank's. On one GPU it also times chapter 5's cross-entropy and
# PyTorch's on the whole vocabulary. {term}`Bandwidths <bandwidth>` count the least a forward and backward must
# move, reading the logits and writing their gradient once, over all GPUs.
#
# **Predict first.** Split over two GPUs, each GPU reads and writes half of every row's logits.
# Per row, three floats (12 bytes) cross the link, against $256000 \times 2$ bytes of a Gemma
# row. How close to twice one GPU's speed will two GPUs come, and what share of a step will the
# all-reduces take?

# %% tags=["gpu", "nbval-ignore-output"]
one_gpu = launch_or_stored("ch8_time_one_gpu", "time", 1, GPUS)
two_gpus = launch_or_stored("ch8_time_two_gpus", "time", GPUS, GPUS)
results.save(ranks.results_rows(one_gpu, two_gpus), "ch8")
scaling = ranks.scaling(one_gpu, two_gpus)
for s in scaling:
    print(f"{s['verdict']}: {s['shape']} on {s['gpus']} GPUs: {s['speedup']:.2f}x one GPU "
          f"(efficiency {s['efficiency']:.0%}), target >= {ranks.SCALING_TARGET}x")

# %% tags=["gpu", "nbval-ignore-output"]
rows = results.read_rows("ch8")
shapes = list(dict.fromkeys(r["shape"] for r in rows))
ORDER = ["PyTorch eager, 1 GPU", "course v3 (chapter 5), 1 GPU", "vocab-parallel, 1 GPU",
         f"vocab-parallel, {two_gpus['ranks']} GPUs"]
fig, axes = plot.subplots(1, len(shapes), height=3.8, sharey=True)
axes[0].invert_yaxis()  # once: the panels share their y axis
for ax, shape in zip(axes, shapes):
    mine = {r["provider"]: r for r in results.select(rows, shape=shape)}
    names = [p for p in ORDER if p in mine]
    bars = ax.barh(range(len(names)), [mine[p]["ms"] for p in names],
                   color=[f"C{i}" for i in range(len(names))])
    ax.bar_label(bars, fmt="%.2f ms", padding=3, fontsize=10)
    ax.set_yticks(range(len(names)), [p.replace(", ", "\n") for p in names])
    # The bound: the logits read and their gradient written once, at the read bandwidth.
    bound = mine[names[0]]["bytes"] / (mine[names[0]]["peak_gbps"] * 1e9) * 1e3
    for gpus, style in ((1, ":"), (two_gpus["ranks"], "--")):
        ax.axvline(bound / gpus, color="black", linewidth=1, linestyle=style,
                   label=f"read + write once, {gpus} GPU{'s' if gpus > 1 else ''}")
    ax.set_title(f"{shape[0]} x {shape[1]} bf16")
    ax.set_xlabel("forward + backward, ms")
    ax.set_xlim(0, max(mine[p]["ms"] for p in names) * 1.3)
    ax.grid(axis="y", visible=False)
plot.legend(fig, ncols=2)
fig.suptitle(f"Cross-entropy over a split vocabulary on {rows[0]['gpu']}")
plt.show()

# %% [markdown]
# Splitting the vocabulary over two GPUs nearly halves the step: each GPU reads and writes
# half the logits. No bar reaches its line: the line counts one read of the logits and one
# write, but `shard_stats` and `shard_grad` each read them. Three bytes move for every two the
# line counts, so about two thirds of the bound is this design's ceiling (the summary table's
# percent column). Where the rest of the time goes, from `torch.profiler` on rank 0 of the same
# runs (GPU time per step, µs; on a machine with one GPU, the stored runs of two):

# %% tags=["gpu", "nbval-ignore-output"]
table = ["| run | shape | shard_stats | GB/s | shard_grad | GB/s | NCCL | other "
         "| all-reduces alone |",
         "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
for run in (one_gpu, two_gpus):
    comm = {r["shape"]: r["comm_ms"] for r in run["rows"]}
    for shape, kinds in run["profiles"].items():
        rows_, vocab = (int(d) for d in shape.split("x"))
        shard_bytes = rows_ * vocab * 2 / run["ranks"]  # bf16: what each GPU reads
        table.append(f"| {run['ranks']} GPU{'s' if run['ranks'] > 1 else ''} | {shape} | "
                     f"{kinds['shard_stats']:.0f} | "
                     f"{shard_bytes / kinds['shard_stats'] / 1e3:.0f} | "
                     f"{kinds['shard_grad']:.0f} | "
                     f"{2 * shard_bytes / kinds['shard_grad'] / 1e3:.0f} | "
                     f"{kinds['nccl']:.0f} | {kinds['other']:.0f} | {comm[shape] * 1e3:.0f} |")
print("read bandwidth of the slowest GPU (torch.sum of 4 GiB): "
      f"{one_gpu['peak_gbps']:.0f} GB/s")
Markdown("\n".join(table))

# %% [markdown]
# - `shard_grad` takes about twice `shard_stats`: it reads the shard and writes as many bytes;
#   `shard_stats` only reads. Each kernel alone moves its bytes close to the GPU's read bandwidth
#   (the GB/s columns); the step does not, as both read the logits.
# - The communication is tiny: three floats per row, 96 KiB per rank for 8192 rows; the two
#   all-reduces alone (the last column) take about 1 % of a step. The NCCL column is different:
#   it counts every µs an NCCL kernel ran on rank 0, and that kernel spins until the other rank
#   arrives, so it holds the wait for the slower rank too. The wait varies (the two rows differ
#   several times over), and the profile is a run of its own, so the columns
#   need not add up to the step.
# - "other" is PyTorch's small per-row work between the kernels (rescaling the sums, the loss of
#   each row, the per-row scales of the gradient): a few µs each.
#
# ```{admonition} Answer
# :class: dropdown
# Close to twice: the PASS lines of the timing cell print the speed-up and its efficiency. The
# all-reduces alone (the table's last column) are a small part of a step, because 12 bytes per
# row are nothing next to a row's half-megabyte of logits. What keeps the step from exactly half
# is what is *not* split: the all-reduces' {term}`latency`, the per-row work ("other"), and the
# wait for the slower rank. With fewer rows per GPU these cost relatively more (exercise 8.3).
# ```
#
# ```{admonition} Going deeper: why both kernels read the logits twice
# :class: dropdown
# On one GPU, this chapter's two kernels are as fast as chapter 5's version 3, and both are
# about three times as fast as PyTorch's (the first lines of the timing output). Neither reaches
# the bound of one read and one write: both read the logits twice, once for the statistics and
# once for the gradient. Version 3 does so because a row of 256000 bf16 logits does not fit on
# one {term}`SM`. Chapter 7's version 4 already removes the second read on one GPU: it keeps
# each row on chip across a cluster of SMs, and at 8192 x 128256 bf16 its forward and backward
# beat version 3 by the factor chapter 7's target cell prints. The timing task here does not
# time version 4, so its gain at these two shapes is not measured.
#
# With the vocabulary split, the second read has a reason of its own. Between a shard's
# statistics and its gradient comes the all-reduce of every rank's statistics, and a kernel
# cannot hold its shard in {term}`shared memory` across a collective that runs after it has
# finished. Keeping the shard on chip would need the exchange inside the kernel, which this
# chapter does not do.
# ```
#
# ## From one GPU to four
#
# `bench/vocab_parallel_scaling.py` runs both losses of this chapter on 1, 2 and 4 GPUs of one
# machine, each count a `torchrun` of its own, and keeps the rows in
# `book/results/ch8_scaling.csv` with the GPU count and model in each. The vocab-parallel step
# keeps its rows and splits its vocabulary: each GPU holds $1/R$ of every row. The exact mean
# keeps 4096 rows on every GPU: more GPUs, more rows (weak scaling); its step is this chapter's
# cross-entropy, forward and backward over float32 logits, with one all-reduce of (sum, count). The right panel counts what
# each rank sends on the link for one row, by the ring algorithms' formulas: an all-reduce of
# $k$ bytes sends $2\frac{R-1}{R}k$, an all-gather $(R-1)k$.

# %%
scaling_rows = results.read_table("ch8_scaling", results.PUBLISHED_DIR / "ch8_scaling.csv")
counts = sorted({r["gpus"] for r in scaling_rows})
fig, (left, right) = plot.subplots(1, 2, height=3.8)
series = dict.fromkeys((r["loss"], r["shape"]) for r in scaling_rows)
for i, (loss, shape) in enumerate(series):
    steps = [r for r in scaling_rows
             if (r["loss"], r["shape"], r["what"]) == (loss, shape, "step")]
    ms = [r["ms"] for r in steps]
    left.plot([r["gpus"] for r in steps], ms, "o-", color=f"C{i}", label=f"{loss}, {shape}")
    if loss == "vocab-parallel CE":  # ideal: the step divided by the GPU count
        left.plot(counts, [ms[0] / n for n in counts], ":", color=f"C{i}")
left.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="forward + backward, ms",
         title="time per step (dotted: one GPU's / R)")
ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10)
         if min(r["ms"] for r in scaling_rows if r["what"] == "step") / 1.5 <= t
         <= max(r["ms"] for r in scaling_rows) * 1.5]
left.set_yticks(ticks, [f"{t:g}" for t in ticks])
ce = [r for r in scaling_rows if r["shape"] == "8192x256000"]
mean = [r for r in scaling_rows if r["loss"] == "exact global mean" and r["what"] == "step"]
for label, rows_, style in (("two all-reduces (1 + 2 floats)",
                             [r for r in ce if r["what"] == "step"], "o-"),
                            ("one all-gather (4 floats, ex. 8.1)",
                             [r for r in ce if r["what"] == "one all-gather alone"], "s--"),
                            ("global mean: (sum, count) / 4096 rows", mean, "^-")):
    rows_ = [r for r in rows_ if r["gpus"] > 1]  # one GPU sends nothing
    right.plot([r["gpus"] for r in rows_], [r["link_bytes_per_row"] for r in rows_], style,
               label=label)
right.axhline(256000 * 2, color="black", linewidth=1)
right.annotate("a row of 256000 bf16 logits", (counts[0], 256000 * 2), xytext=(4, -4),
               textcoords="offset points", va="top", fontsize=10)
right.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="bytes sent per rank per row",
          title="what crosses the link")
for ax, anchor in ((left, (1, 1)), (right, (1, 0.86))):  # right: below the row's line
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.minorticks_off()
    ax.legend(fontsize=9, loc="upper right", bbox_to_anchor=anchor)
fig.suptitle(f"Chapter 8's losses on 1 to {counts[-1]} x {scaling_rows[0]['gpu']}")
plt.show()

# %%
table = ["| GPUs | loss | shape | step, ms | speedup | two all-reduces alone, µs "
         "| one all-gather alone, µs |", "| ---: | --- | --- | ---: | ---: | ---: | ---: |"]
for (loss, shape) in dict.fromkeys((r["loss"], r["shape"]) for r in scaling_rows):
    mine = [r for r in scaling_rows if (r["loss"], r["shape"]) == (loss, shape)]
    one = next(r["ms"] for r in mine if r["gpus"] == 1 and r["what"] == "step")
    for n in counts:
        by = {r["what"]: r["ms"] for r in mine if r["gpus"] == n}
        comm = by.get("two all-reduces alone", by.get("one all-reduce alone", 0.0))
        gather = by.get("one all-gather alone")
        gather = "" if gather is None else f"{gather * 1e3:.1f}"
        table.append(f"| {n} | {loss} | {shape} | {by['step']:.3f} | {one / by['step']:.2f}x "
                     f"| {comm * 1e3:.1f} | {gather} |")
Markdown("\n".join(table))

# %% [markdown]
# The runs of this section come from one machine of four GPUs (the figure's title names them);
# the table above is the same run.
#
# - **What splits, scales.** The two kernels read and write $1/R$ of the logits on each GPU, so
#   the step shrinks nearly as $1/R$. On two GPUs it meets the script's target of 90 % of $R$;
#   on four it falls a little short of it (the speedup column).
# - **What does not split, stays.** Compare the four-GPU step with one GPU's step divided by
#   four (the dotted line): the difference is not the kernels'. Every rank does the per-row work
#   of every row (the profiler's "other" column: the rows are not split). The all-reduces alone
#   take longer on four GPUs than on two, although their bytes per row grow by only half (right
#   panel): latency, not bytes, sets their cost. That fixed part is a larger share of a step the
#   more GPUs share the vocabulary; an eight-GPU run would measure how much (this course has
#   none).
# - **The exact mean costs nothing at any count.** With 4096 rows on every GPU, its step is flat
#   from one GPU to four. The all-reduce of two float64 numbers (its own row of the table) is a
#   small part of it, whatever the number of rows.
#
# ## Summary
#
# - A loss over split rows needs the global sum and the global count: one all-reduce of two
#   float64 numbers gives every rank the exact mean, with the same bits. The mean of the ranks'
#   means is a different, wrong loss whenever ranks count different numbers of tokens.
# - A loss over a split vocabulary needs, per row, the max and the rescaled sum of
#   exponentials of every shard, and the target's logit from the shard that owns it. Three
#   floats per row cross the link, and each rank writes the gradient of its own shard.
# - Measured on two H200s: nearly twice the throughput of the same kernels on one GPU (the
#   PASS lines above). The two all-reduces alone take about 1 % of a step; inside a step,
#   waiting for the slower rank can make them take several times longer (the NCCL column).
# - On four GPUs the step is not quite a quarter of one GPU's: the per-row work and the
#   collectives' latency do not split, and they set how far the vocabulary can be spread.
#
# What the chapter measured on two GPUs, read back from `book/results/ch8.csv` (forward and
# backward in bf16; GB/s counts one read of the logits and one write of their gradient):

# %% tags=["nbval-ignore-output"]
summary_rows = results.read_rows("ch8", results.PUBLISHED_DIR / "ch8.csv")
lines = ["| shape | provider | time (ms) | GB/s | % of its GPUs' read bandwidth "
         "| vs PyTorch eager |", "| --- | --- | ---: | ---: | ---: | ---: |"]
for shape in dict.fromkeys(r["shape"] for r in summary_rows):
    mine = {r["provider"]: r for r in results.select(summary_rows, shape=shape)}
    eager = next(r["ms"] for p, r in mine.items() if p.startswith("PyTorch eager"))
    # slowest first, as in the bar plot; the bandwidth of R GPUs is R times one GPU's
    for provider, r in sorted(mine.items(), key=lambda item: -item[1]["ms"]):
        gpus = int(re.search(r"(\d+) GPU", provider).group(1))
        lines.append(f"| {shape[0]} x {shape[1]} | {provider} | {r['ms']:.3f} | "
                     f"{r['gbps']:.0f} | {100 * r['gbps'] / (gpus * r['peak_gbps']):.0f}% | "
                     f"{eager / r['ms']:.2f}x |")
Markdown("\n".join(lines))

# %% [markdown]
# ## Exercises
#
# Solutions are in {doc}`../solutions/ch8_solutions`.

# %% [markdown]
# ```{exercise}
# :label: ch8-one-collective
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 40 minutes
#
# The forward makes two collective calls per step: the max, then the sums. Each pays NCCL's
# latency, and the second cannot start before the first has returned. Write
# `row_log_sum_exp` (the one of `kernels/ops/vocab_parallel.py`, shown above) with **one**
# collective: gather every rank's four statistics per row (`dist.all_gather`), then combine them
# on every rank. Write it in `kernels/exercises/ch8_one_collective.py` (shown below). The check
# runs the chapter's cases on three CPU processes over gloo (no GPU needed). The right panel of
# the scaling figure shows the bytes per row at 2 and 4 ranks: work them out for 64, then predict
# which of the two ways is faster at 2 ranks and at 64, and why.
# ```

# %% tags=["nbval-ignore-output"]
show_source("exercises/ch8_one_collective.py")

# %%
check_one_collective(os.path.join(ROOT, "kernels", "exercises", "ch8_one_collective.py"))

# %% [markdown]
# ```{exercise}
# :label: ch8-ddp-scale
#
# **Difficulty:** ★☆☆ (easy) · **Time:** about 20 minutes
#
# With `torch.nn.parallel.DistributedDataParallel`, each rank calls `backward()` on its own
# loss, and DDP then *averages* the ranks' gradients of the weights. If each rank's loss is the
# global mean of this chapter (the same value on every rank), by what must it be multiplied so
# that the averaged gradient is the gradient of the global mean? Derive it, then check it
# without a GPU: simulate two ranks by splitting a batch's rows in one process.
# ```
#
# ```{exercise}
# :label: ch8-where-scaling-stops
#
# **Difficulty:** ★★☆ (moderate) · **Time:** about 30 minutes
#
# From the table of the profiler above, model a step's time on $R$ GPUs as the split work
# (the two kernels, divided by $R$) plus what is not split (the all-reduces and the per-row
# work). At how many rows per GPU (vocabulary 128256, bf16) would two GPUs no longer reach
# 1.8x? What would you change first to push that point down?
# ```
