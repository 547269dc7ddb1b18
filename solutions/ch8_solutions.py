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
# # Solutions: chapter 8
#
# The answers to the exercises of {doc}`../chapters/08_multi_gpu`. The reference code lives in
# `solutions/kernels/`; the cells below show it and run the exercise's check.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %%
# ROOT (the repository's folder) and the imports of os come from the
# notebook's first cell, which the book hides.
import torch
import torch.nn.functional as F
from IPython.display import Markdown

from kernels import results
from kernels.course.chapter import launch_or_stored
from kernels.exercises.ch8_checks import check_one_collective
from kernels.ops import ranks
from kernels.course.notebook import show_source

SOLUTIONS = os.path.join(ROOT, "solutions", "kernels")

# %% [markdown]
# ```{solution-start} ch8-one-collective
# :class: dropdown
# ```
#
# Every rank gathers all ranks' (rows, 4) statistics, stacks them in rank order, and computes
# the global max, the rescaled sum, the target logit and the sum of the logits itself. Every
# rank adds the same numbers in the same order, so all get the same bits.
#
# The price is volume. A ring all-gather delivers to each rank the other $R-1$ ranks' 16 bytes
# per row; a ring all-reduce of $k$ floats moves $2\frac{R-1}{R} \cdot 4k$ bytes per rank. The
# two all-reduces move 1 and 2 floats per row:

# %%
lines = ["| ranks | all-gather of 4 floats, B/row | two all-reduces (1 + 2 floats), B/row |",
         "| ---: | ---: | ---: |"]
for R in (2, 4, 8, 64):
    lines.append(f"| {R} | {(R - 1) * 16} | {2 * (R - 1) / R * 4 * 3:.1f} |")
Markdown("\n".join(lines))

# %% [markdown]
# At 2 ranks the single gather moves a third more bytes (16 against 12 per row: 128 KiB
# against 96 KiB for 8192 rows), which NVLink carries in well under a microsecond, and it saves
# the latency of one collective. So we expect it to win at 2 ranks. At 64 ranks it moves over
# 40 times as many bytes: there the two all-reduces should win, which is why Megatron-LM uses
# them. Timed on GPUs by `bench/vocab_parallel_scaling.py` (chapter 8's scaling run): the
# collectives alone, and the whole step with this solution's `row_log_sum_exp` in place of the
# chapter's:

# %%
timed = results.read_table("ch8_scaling", results.PUBLISHED_DIR / "ch8_scaling.csv")
lines = ["| GPUs | shape | two all-reduces alone, µs | one all-gather alone, µs "
         "| step, two collectives, ms | step, one, ms |",
         "| ---: | --- | ---: | ---: | ---: | ---: |"]
for r in timed:
    if r["what"] != "step" or r["gpus"] < 2 or r["loss"] != "vocab-parallel CE":
        continue
    by = {o["what"]: o["ms"] for o in timed
          if (o["gpus"], o["shape"], o["loss"]) == (r["gpus"], r["shape"], r["loss"])}
    lines.append(f"| {r['gpus']} x {r['gpu']} | {r['shape']} | "
                 f"{by['two all-reduces alone'] * 1e3:.1f} | "
                 f"{by['one all-gather alone'] * 1e3:.1f} | "
                 f"{r['ms']:.3f} | {by['step, one all-gather (exercise 8.1)']:.3f} |")
Markdown("\n".join(lines))

# %% [markdown]
# Alone, the all-gather is the faster collective on two GPUs and on four (the table's middle
# columns): one NCCL latency instead of two outweighs a third more bytes at two ranks and nearly
# three times as many at four. In the step the saving is gone (the last two columns agree to
# within a fraction of a percent): the step waits for its slowest rank, so a latency saved
# inside it need not shorten it.
#
# The check runs it on CPU processes over gloo:

# %%
show_source(os.path.join(SOLUTIONS, "ch8_one_collective.py"), fold=False)

# %%
check_one_collective(os.path.join(SOLUTIONS, "ch8_one_collective.py"))

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch8-ddp-scale
# :class: dropdown
# ```
#
# Multiply it by $R$, the number of ranks. Rank $r$'s loss has the value of the global mean
# $L = \frac{1}{N}\sum_{\text{all } i}\ell_i$ ($N$ the global count), but autograd only sees
# rank $r$'s rows, so its gradient of the weights is $g_r = \frac{1}{N}\sum_{i \in r}
# \nabla\ell_i$. The gradient of $L$ is the sum $\sum_r g_r$; DDP computes the average
# $\frac{1}{R}\sum_r g_r$. Scaling each rank's loss by $R$ makes the average the sum. (The
# reported loss value is then $R L$: log $L$, backpropagate $R L$.) The cell below checks it in
# one process: two "ranks" take half the rows each of a linear layer's batch.

# %% tags=["nbval-ignore-output"]
torch.manual_seed(0)
layer = torch.nn.Linear(16, 50, dtype=torch.float64)
x = torch.randn(40, 16, dtype=torch.float64)
target = torch.randint(0, 50, (40,))
target[:15] = -100  # rank 0's half is mostly padding: the ranks count 5 and 20 rows
R, count = 2, int((target != -100).sum())


def grad_of(loss):
    return torch.autograd.grad(loss, layer.weight)[0]


whole = grad_of(F.cross_entropy(layer(x), target))  # the gradient of the global mean
# each rank: R x its share of the global mean
per_rank = [grad_of(R * F.cross_entropy(layer(x[half]), target[half],
                                        reduction="sum") / count)
            for half in (slice(0, 20), slice(20, 40))]
ddp = sum(per_rank) / R  # what DDP's all-reduce of the gradients computes
print(f"largest difference from the global mean's gradient: "
      f"{(ddp - whole).abs().max():.1e} "
      f"(without the factor R: {(ddp / R - whole).abs().max():.1e})")

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch8-where-scaling-stops
# :class: dropdown
# ```
#
# Write the one-GPU step as $T_1 = a\,n + f_1$ ($n$ rows; $a$ the two kernels' time per row,
# $f_1$ the fixed work) and the two-GPU step as $T_2 = a\,n/2 + f_2$, where $f_2$ adds the
# all-reduces and the wait for the slower rank. The speedup $T_1/T_2$ reaches 1.8 when
# $a\,n + f_1 = 0.9\,a\,n + 1.8 f_2$, that is at $n^* = (1.8 f_2 - f_1) / (0.1\,a)$ rows. The
# cell below measures both steps at several row counts (vocabulary 128256, bf16) on the same
# GPUs (on one GPU it shows the stored run of two, and says so), fits $a$, $f_1$ and $f_2$ to
# them (least squares), and compares the model's $n^*$ with the measured speedups:

# %% tags=["gpu", "nbval-ignore-output"]
sizes = [[rows, 128256] for rows in (1024, 2048, 4096, 8192, 16384)]
# one GPU: the stored runs of two (book/results/*.json)
GPUS = torch.cuda.device_count()
one = launch_or_stored("ch8_solution_time_one_gpu", "time", 1, GPUS, sizes=sizes,
                       echo=False)
two = launch_or_stored("ch8_solution_time_two_gpus", "time", GPUS, GPUS, sizes=sizes,
                       echo=False)
scaling = ranks.scaling(one, two)
n = torch.tensor([float(s["shape"].split("x")[0]) for s in scaling],
                 dtype=torch.float64)
t1 = torch.tensor([s["one_gpu_ms"] * 1e3 for s in scaling], dtype=torch.float64)  # µs
t2 = torch.tensor([s["ms"] * 1e3 for s in scaling], dtype=torch.float64)
(a, f1), (a2, f2) = (torch.linalg.lstsq(torch.stack([n / d, torch.ones_like(n)], 1),
                                        t[:, None]).solution.squeeze(1)
                     for d, t in ((1, t1), (2, t2)))
print(f"fit: a = {a:.3f} µs per row (on 2 GPUs: {a2:.3f} per row of the whole vocabulary),\n"
      f"     f1 = {f1:.0f} µs, f2 = {f2:.0f} µs; model: 1.8x from "
      f"n* = {(1.8 * f2 - f1) / (0.1 * a):.0f} rows")
for s in scaling:
    print(f"{s['shape']:>13}: {s['one_gpu_ms'] * 1e3:7.0f} µs on 1 GPU, "
          f"{s['ms'] * 1e3:6.0f} µs on {s['gpus']}: "
          f"{s['speedup']:.2f}x  {s['verdict']}")

# %% [markdown]
# Where the fit disagrees with the measured rows, trust the rows: least squares weighs every
# point alike, and steps of a few hundred µs (the small sizes) are as long as the launches of
# their small PyTorch operations, so how fast each process's host keeps up with its GPU can
# move them. Compare the model's $n^*$ with the first row that reaches the target.
#
# What to change first: the fixed cost on two GPUs. The per-row PyTorch work between the
# kernels (rescaling the sums, each row's loss, the scales of the gradient) is a handful of
# small launches, each a few µs; folding it into the kernels (`shard_grad` can compute its own
# row scale; a small kernel can finish the loss after the all-reduce) removes the "other"
# column of the chapter's profiler table: about half of $f_1$, and a smaller part of $f_2$,
# which also holds the all-reduces and the wait for the slower rank (the NCCL column). One
# collective instead of two (exercise 8.1) saves one NCCL latency. Beyond that,
# overlap: start the next micro-batch's logits while this one's all-reduce is in flight.

# %% [markdown]
# ```{solution-end}
# ```
