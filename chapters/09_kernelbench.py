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
# # Chapter 9: capstone, the course's kernels on KernelBench
#
# ```{admonition} Before you start
# :class: tip
#
# **You will be able to:**
#
# - run a kernel under KernelBench's rules, and say what those rules prove;
# - recognise programs that pass without computing the loss (a subsample, a downcast, a
#   replayed result, work on a hidden {term}`stream`) and the check that catches each;
# - validate your own `ModelNew` in a process of its own.
#
# **Assumes:** the final kernels of chapters 3 to 6; chapter 1's timing method.
#
# **Words it uses** (defined in the {doc}`../book/glossary`): {term}`kernel`, {term}`thread`,
# {term}`L2 cache`, {term}`bandwidth`.
#
# **Reading time:** about 13 minutes. **Run time:** about 4 minutes
# on a small GPU (the book's small-GPU run, {doc}`../book/status`).
# ```
#
# [KernelBench](https://github.com/ScalingIntelligence/KernelBench) {cite}`ouyang2025kernelbench` is a
# benchmark of 250 PyTorch programs for which a language model, or a person, writes a faster
# `ModelNew` that must compute what the program's `Model` computes. Four of its level-1
# problems are this course's losses: 94 (MSELoss), 95 (CrossEntropyLoss), 96 (HuberLoss) and
# 100 (HingeLoss).
#
# This chapter enters the course's final {term}`kernels <kernel>` for them, under KernelBench's
# rules, and asks what the rules prove. A benchmark that scores programs by speed invites programs
# that look fast without doing the work ("if the model can reward hack, it will find ways to
# reward hack", KernelBench's `EVAL.md`).

# %%
import torch
import torch.nn.functional as F
from IPython.display import Markdown

from kernels import kernelbench, results
from kernels.chapter import grade
from kernels.notebook import show_source

# %% [markdown]
# ## The four problems
#
# A KernelBench problem is one Python file: a `Model` whose `forward` is the reference, a
# `get_inputs()` that draws its inputs, and a `get_init_inputs()` for its constructor (empty
# here). The four files as of the commit we read (`423217d`, March 2026):
#
# ```{admonition} Going deeper: why the sizes are this large
# :class: dropdown
# The sizes date from July 2025, when KernelBench scaled its level-1 problems up so that each
# would run for over a millisecond. Problem 95's eager reference still takes less than that on an
# H100 (the timing table below).
# ```

# %%
Markdown(kernelbench.problems_table())

# %% [markdown]
# ```{admonition} Going deeper: the four files as data
# :class: dropdown
# `kernels/kernelbench/problems.py` reproduces the four files as data: the reference expression,
# the sizes, and the draws of `get_inputs()` (`tests/test_kernelbench_cpu.py` checks that our
# draws are KernelBench's, value for value).
# ```
#
# Three things in these files matter for a kernel writer.
#
# **The sizes.** Problems 94, 96 and 100 take 32768 x 32768 float32 predictions: $2^{30}$ values,
# 4 GiB per tensor. The eager reference of problem 94 writes two more such tensors for its
# intermediates, and a trial keeps copies of the inputs. An evaluation needs about four times its
# inputs' bytes of GPU memory (`kernelbench.sized_for` halves a problem until it fits).
#
# **Hinge's labels belong to columns.** Problem 100's targets have shape (32768,) and its
# predictions (32768, 32768). PyTorch broadcasts from the right, so element $[i, j]$ is paired
# with `targets[j]`: one label per *column*. A kernel written with a label per row is wrong for
# this problem, whose meaning is the reference's. The course's Hinge kernel has paired a target
# row with the last dimension since chapter 3, exactly this broadcast:

# %%
predictions = torch.tensor([[0.5, 2.0], [0.5, 2.0]])
targets = torch.tensor([1.0, -1.0])  # +1 for column 0, -1 for column 1
# (0.5 + 3.0) / 2: a label per row gives 1.25
print(kernelbench.Model100()(predictions, targets))

# %% [markdown]
# **The inputs are `torch.rand`.** Every float input but Hinge's targets ($\pm 1$) is uniform in
# $[0, 1)$, the regression predictions `rand * scale` with `scale = torch.rand(())`. So
# $|p - t| < 1$ always, and the Huber loss never leaves its quadratic part. $1 - p\,t > 0$
# always, and the hinge's clamp never acts. The logits are below 1, and $e^{x}$ cannot overflow.
# A kernel that computes only Huber's quadratic part, forgets the clamp, or skips the subtraction
# of the row's maximum passes KernelBench's trials. Checked at a small size on the CPU:

# %%
small = {94: {"batch_size": 512, "dim": 512}, 95: {"batch_size": 512, "num_classes": 4096},
         96: {"batch_size": 512, "dim": 512}, 100: {"batch_size": 512, "dim": 512}}
SMALL = {pid: kernelbench.PROBLEMS[pid].resized(**sizes) for pid, sizes in small.items()}

p, t = SMALL[96].get_inputs(seed=0)
print(f"96: largest |p - t| = {(p - t).abs().max():.3f}, smooth_l1 == 0.5 * MSE: "
      f"{torch.allclose(F.smooth_l1_loss(p, t), 0.5 * torch.mean((p - t) ** 2))}")
p, t = SMALL[100].get_inputs(seed=0)
print(f"100: 1 - p t > 0 everywhere: {bool((1 - p * t).min() > 0)}, so the clamp never acts")
logits, _ = SMALL[95].get_inputs(seed=0)
print(f"95: every logit in [0, 1): {bool(logits.min() >= 0 and logits.max() < 1)}")

# %% [markdown]
# ## KernelBench's rules
#
# What KernelBench's evaluation does (`src/kernelbench/eval.py`, `timing.py` and the defaults
# of `scripts/run_and_check.py`), and `kernelbench.evaluate` with it:
#
# **Correctness.** Five trials, each on new inputs from `get_inputs()`. The output must have the
# reference's shape and pass `torch.allclose` with `atol = rtol = 1e-4` (`1e-2` in float16 and
# bfloat16). Every trial must pass.
#
# ```{admonition} Going deeper: the trials' seeds
# :class: dropdown
# The trials' seeds come from one generator seeded with 42. Each trial seeds PyTorch with its
# own, calls `get_inputs()` on the CPU and moves the inputs to the GPU in float32; `Model` and
# `ModelNew` run on the same inputs.
# ```

# %%
show_source("kernelbench/problems.py", "def trial_seeds", "    return [int(")

# %%
print(kernelbench.trial_seeds())

# %% [markdown]
# **Timing.** KernelBench times 100 calls of each program with a pair of CUDA events per call,
# the device synchronised and {term}`L2 <L2 cache>` flushed before each, and reports the mean.
# The speed-up is the reference's mean over `ModelNew`'s, against eager `Model` and against
# `torch.compile(Model)`. A speed-up over eager above 10x is flagged for a human to look at, not
# failed. Our timer does the same, and three things more, outside the timed window. It reads the
# host's clock around each call (for a check below), writes new values into the inputs before
# each call (`refill`), and compares each output with the reference's (`verify`):
#
# ```{admonition} Going deeper: KernelBench's timing loop, call by call
# :class: dropdown
# New inputs from seed 42; `ModelNew` is called 3 times to warm up (the reference 5), then timed
# over 100 calls, plus a first one thrown away. Before each call the device is synchronised and
# 256 MB are written to evict the inputs from L2 (which at 4 GiB they do not fit anyway); after
# it, the device is synchronised again. Our `refill` means that no call sees inputs an earlier
# call saw.
# ```

# %%
show_source("kernelbench/timing.py", "def time_trials",
            "    return Timing(events, walls, failure)")

# %% [markdown]
# ```{admonition} Going deeper: two places where we depart from KernelBench, both deliberate
# :class: dropdown
# - KernelBench casts *every* input tensor to float32, the class indices of problem 95
#   included, and `F.cross_entropy` then refuses float targets: its reference cannot run
#   (KernelBench issue #151; pull request #152 proposes the fix). We keep integer inputs
#   integers, as that fix does.
# - KernelBench runs the reference first and `ModelNew` second, on the same tensors. We run
#   `ModelNew` first and the reference on copies taken before. Nothing `ModelNew` does to its
#   inputs can change what the reference computes, and `ModelNew` cannot find the reference's
#   result in memory the allocator hands back (it has not been computed yet).
# ```
#
# ## What the rules let through, and the checks that stop it
#
# KernelBench's adversarial tests (`src/kernelbench/unit_tests/test_eval_adversarial.py`) and
# the reward-hacking reports on it and on similar leaderboards name the cheats. Each has a
# `ModelNew` in `kernelbench.cheats(problem)`, and a check:
#
# | cheat | KernelBench's rules | our check |
# | --- | --- | --- |
# | zero output, a constant near the usual loss | fail (value) | `check_not_constant`: where the reference changed between trials, the output must change |
# | zeroes its inputs (KernelBench's `zero_out_kernel`) | fail (value) | `check_inputs_unchanged`: the inputs equal copies taken before the call |
# | answers, then changes an input | **pass** | `check_inputs_unchanged` |
# | uninitialised output (`result_reuse_kernel`) | fail, if the memory held no answer | the allocator's free memory is filled with NaN before each call |
# | result cached by address (or shape) | **pass** when the allocator hands back the same addresses, fail when they change | `check_recomputes`: new values in the same tensors must give the new loss |
# | work on a side stream (`non_default_stream_kernel`) | **pass**, very fast | `check_timed_stream`, below |
# | only Huber's quadratic part, no clamp, no max subtracted | **pass** | one more trial with inputs outside KernelBench's distribution |
# | every other row (and fourth column) | **pass** at KernelBench's size | coverage trials, below |
# | reads bfloat16 | **pass** | a trial with a random offset and scale, against float64 |
# | replays when timed (computes while checked) | **pass** | new inputs before every timed call, each output checked |
# | PyTorch's own loss | **pass** | the static checks |
#
# The stream check is the subtle one. CUDA events time the work queued on the *current* stream
# between them. Work launched on another stream, which the current stream never waits for, runs
# outside the window: the events see a kernel that takes no time. Each timed call therefore also
# reads the host's clock, from before the L2 flush to after a device-wide
# `torch.cuda.synchronize()`, which waits for every stream. A `ModelNew` whose wall time exceeds
# its event time by much more than an honest program's kept the GPU busy after its end event:
#
# ```{admonition} Going deeper: the threshold, and why not the profiler
# :class: dropdown
# For an honest program the wall time exceeds the event time by a constant: the flush and the
# launch and wake-up latencies (the stream cheat's cell below prints it for eager PyTorch), the
# same for `ModelNew` and for the eager reference. The check fails a `ModelNew` whose excess is
# larger, by over 50 µs and over half the time its events saw.
#
# `torch.profiler` could list the streams every kernel ran on, but a second stream is not a
# cheat by itself: a `ModelNew` may split its work over two streams and make the current one
# wait for both before it returns. What matters is whether the work finished inside the timed
# window. The two clocks compare exactly that, for kernels and copies alike, with nothing but
# the timing loop we run anyway.
# ```

# %%
show_source("kernelbench/checks.py", "def check_timed_stream", "    return None")

# %% [markdown]
# One more guard is free: before every timed call the inputs' version counters (PyTorch's count
# of in-place writes to a tensor) are bumped, so that a result cached on the tensors and their
# version is recomputed.
#
# Every cheat but the stream and replay ones (both below) runs on the CPU, at a small size:
# KernelBench's verdict, then ours with the checks that failed.
#
# ```{admonition} Going deeper: why the failed checks vary between runs
# :class: dropdown
# What an uninitialised output holds, and whether the allocator hands a cached-by-address cheat
# the same addresses again, depend on the memory the process was given. The random half of the
# rows and the secret trials are drawn afresh each time. So `pytest --nbval` does not compare
# this cell's output; the test suite asserts each verdict.
# ```

# %% tags=["nbval-ignore-output"]
lines = ["| problem | cheat | KernelBench | ours | our checks that fail |",
         "| ---: | --- | --- | --- | --- |"]
for pid, problem in SMALL.items():
    for name, cheat in kernelbench.cheats(pid).items():
        if cheat.gpu_only:
            continue
        r = kernelbench.evaluate(problem, cheat.model, entry=name, device="cpu")
        failed = ", ".join(check.split(" (")[0] for check, _ in r.failures)
        lines.append(f"| {pid} | {name} | {'PASS' if r.kernelbench_passed else 'FAIL'} | "
                     f"{'PASS' if r.passed else 'FAIL'} | {failed} |")
Markdown("\n".join(lines))

# %% [markdown]
# Each cheat fails, and the ones that KernelBench's rules accept fail the check written for
# them (some, at this small size, others too). The subsample of every other row fails
# KernelBench's trials here only because 512 x 512 is small: a mean of so few values is noisier
# than the tolerance (the next section asks about KernelBench's size). A learner's mistake gets
# the same treatment: the verdict line says what went wrong in words.

# %%
print(kernelbench.evaluate(SMALL[100], kernelbench.cheats(100)["no clamp"].model,
                           entry="no clamp", device="cpu").verdict)

# %% [markdown]
# The stream cheat needs a GPU. At 8192 x 8192 (a sixteenth of KernelBench's size), the eager
# reference run on a stream of its own: the events see a fraction of the work, the wall clock
# all of it.

# %% tags=["gpu", "nbval-ignore-output"]
sixteenth = kernelbench.PROBLEMS[94].resized(batch_size=8192, dim=8192)
side = kernelbench.evaluate(sixteenth, kernelbench.cheats(94)["work on a side stream"].model,
                            entry="side stream", exact_inputs=False)
for program, timing in side.timings.items():
    print(f"{program:<14} events {timing.median:.3f} ms, "
          f"wall - events {timing.hidden_ms:.3f} ms")
print(f"KernelBench's timing would report {side.speedup('eager'):.1f}x eager")
print(side.verdict)

# %% [markdown]
# ## What the leaderboards learned
#
# KernelBench's trials draw every input from one i.i.d. distribution, and that is a weakness of
# its own.
#
# **Predict first.** A `ModelNew` averages every other row and every fourth column of the inputs:
# an eighth of the bytes, $2^{27}$ of the $2^{30}$ values. Does its result stay within
# KernelBench's tolerance (`atol = rtol = 1e-4`) of the mean of all of them?
#
# The public leaderboards met the same trick and more (GPU MODE's, whose known cheat sums part of
# the input and rescales; result replay; library fallbacks). Their answers are the last four
# checks of our validator, `kernelbench.evaluate`: coverage trials, a random offset and scale,
# new inputs for every timed call, static checks.
#
# **Coverage trials.** Inputs on which every element matters: from a seed drawn afresh for each
# evaluation, $K$ secret positions (256 in float32) carry the loss, each about $1/K$ of it. A
# program that skips a fraction $f$ of the input, regularly or at random, misses each position
# with probability $f$. It passes a trial with probability $(1 - f)^K$: for every other row,
# $2^{-256}$. The inputs, for problem 100:
#
# ```{admonition} Going deeper: the two coverage trials, and the tolerance
# :class: dropdown
# In the first trial every other term is exactly 0 (predictions equal to the targets bit for
# bit, hinge margins all met, cross-entropy targets far ahead of the rest of their row). In the
# second the positions hide among KernelBench's own draws, so that sampling a few values cannot
# tell the trial from an ordinary one.
#
# The comparison is relative, against the loss in float64. Missing one position moves the result
# by about $1/K$, 39 times the tolerance. An honest float32 kernel, adding $K$ large terms and
# exact zeros (or KernelBench's terms) in any order, is off by a few units in the last place,
# far inside it.
# ```

# %%
show_source("kernelbench/problems.py", "def _hinge_coverage", "    return [pred, labels]")

# %% [markdown]
# The subsample at KernelBench's size, on the GPU (inputs drawn there, no timing):

# %% tags=["gpu", "nbval-ignore-output"]
for pid in (94, 96, 100):
    sub = kernelbench.evaluate(
        pid, kernelbench.cheats(pid)["every other row (and fourth column)"].model,
        entry="subsample", exact_inputs=False, measure=False)
    print(f"{pid:>3}  KernelBench: {'PASS' if sub.kernelbench_passed else 'FAIL'}   ours: "
          f"{'PASS' if sub.passed else 'FAIL'} "
          f"({', '.join(c.split(' (')[0] for c, _ in sub.failures)})")
print(sub.verdict)

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# Yes: the KernelBench column above says PASS. The mean of $m$ i.i.d. values differs from the
# distribution's mean by about $\sigma / \sqrt{m}$, and $1 / \sqrt{2^{27}}$ is below $10^{-4}$;
# the terms of these losses have $\sigma$ below 1 on `torch.rand`'s inputs. So the subsample
# passes KernelBench's trials for problems 94, 96 and 100. Ours fail it: the checks named in
# parentheses, the coverage trials in each.
# ```
#
# **A random offset and scale.** One more trial, inputs $a + s \cdot$ `randn` with a random
# offset $a$ and scale $s$, compared with the loss in float64 at KernelBench's tolerance. Where
# $p - t$ is small next to $p$, reading the inputs at lower precision (the bfloat16 cheat above)
# loses the answer, and so does expanding $(p - t)^2$ into $p^2$, $pt$ and $t^2$.
#
# **New inputs for every timed call.** KernelBench times 100 calls on the same inputs. A
# `ModelNew` may compute while it is checked and replay its last answer from then on: the checks
# call it a fixed number of times before the timing, and a program can count. Our timer
# writes new values into the inputs before every call and checks every output, outside the
# timed window: the replayed answer is wrong for the new inputs. At a sixteenth of KernelBench's
# size:

# %% tags=["gpu", "nbval-ignore-output"]
replay = kernelbench.evaluate(sixteenth, kernelbench.cheats(94)["replays when timed"].model,
                              entry="replays when timed", exact_inputs=False)
print(replay.verdict)

# %% [markdown]
# **Static checks.** Before anything runs, the `ModelNew`'s Python source is read for what an
# honest kernel has no use for (`kernels/kernelbench/static.py`, after KernelBench's
# `kernel_static_checker.py`). Allocating, viewing and calling one's own extension are never
# flagged. Each finding names its line:
#
# ```{admonition} Going deeper: what the static checks look for
# :class: dropdown
# PyTorch's own losses and reductions applied to the inputs, rounding them to half precision,
# catching exceptions to fall back, threads, assignments to a module's attributes (a patched
# timer), imports that reach into the validator. A CUDA stream is a warning, since the stream
# check decides.
# ```

# %%
suspicious = '''import time
import torch
import torch.nn.functional as F

class ModelNew(torch.nn.Module):
    def forward(self, predictions, targets):
        try:
            out = my_kernel.mse(predictions.bfloat16(), targets.bfloat16())
        except RuntimeError:
            out = F.mse_loss(predictions, targets)
        time.perf_counter = lambda: 0.0
        return out
'''
for finding in kernelbench.check_source(suspicious):
    print(f"{finding.severity}: {finding}")

# %% [markdown]
# They read Python only: a kernel's CUDA source is beyond them, which is why the dynamic checks,
# not these, decide.
#
# **Isolation.** A `ModelNew` that crashes its process, hangs, or triggers a device-side assert
# (after which every CUDA call of the process fails) must give a FAIL with a reason, not a dead
# notebook. `kernelbench.evaluate_isolated` runs the same evaluation in a child process with a
# time limit. Two programs that would take this notebook down with them, at the small size on
# the CPU:
#
# ```{admonition} Going deeper: why a program's output cannot pass for a verdict
# :class: dropdown
# The child reads its job, with a nonce, before it loads the program, and the parent reads only
# the line that starts with the nonce. Nothing the program prints passes for a verdict.
# ```

# %% tags=["nbval-ignore-output"]
for spec, limit in (("kernels.kernelbench.cheats:Crash", 300),
                    ("kernels.kernelbench.cheats:Hang", 20)):
    print(kernelbench.evaluate_isolated(SMALL[94], spec, entry=spec.split(":")[1],
                                        device="cpu", measure=False, time_limit=limit).verdict)

# %% [markdown]
# ## The course's entries
#
# Each entry is a few lines around a chapter's final kernel: chapter 6's fused operators for
# MSE, Huber (Smooth L1 with $\beta = 1$) and Hinge, and chapter 5's fused cross-entropy, which
# takes the int64 class indices as they come. The Hinge entry passes KernelBench's (N,) targets
# to the kernel's own broadcast, which is PyTorch's:

# %%
show_source("kernelbench/entries.py", "class CourseEntry", "COURSE_ENTRIES = ")

# %% [markdown]
# **Predict first.** Every one of these problems is memory-bound: the time is the bytes moved
# divided by the {term}`bandwidth`. Our kernels read each input once. Eager PyTorch runs one kernel
# per operation of the expression, each reading and writing a 4 GiB intermediate. What speed-up
# over eager do you expect for each problem, and over `torch.compile`, which fuses each expression
# into one pass like ours? The table works out the first:
#
# | problem | eager PyTorch's passes over memory | GB moved | ours | expected vs eager |
# | --- | --- | ---: | ---: | ---: |
# | 94 MSE | `p - t` (read 2, write 1), `** 2` (1, 1), `mean` (1) | 25.8 | 8.6 | 3x |
# | 96 Huber | `smooth_l1_loss` per element (2, 1), `mean` (1) | 17.2 | 8.6 | 2x |
# | 100 Hinge | `p * t` (1, 1), `1 - x` (1, 1), `clamp` (1, 1), `mean` (1) | 30.1 | 4.3 | 7x |
# | 95 cross-entropy | `log_softmax` (1, 1), then `nll_loss` reads one value per row | 1.07 | 0.54 | 2x |
#
# (in units of one input of 4.3 GB, 0.54 GB for the logits). The run: KernelBench's exact
# inputs, 5 trials, every check, 100 timed calls of each program, each entry in a process of its
# own.
#
# ```{admonition} Going deeper: drawing the exact inputs, and smaller GPUs
# :class: dropdown
# KernelBench's inputs are drawn on the CPU, several seconds per $2^{30}$ values; several draws
# run at once, in threads, where the host's memory holds them (`kernelbench.ExactDraws`). Where
# the GPU's free memory cannot hold an evaluation at KernelBench's size (a Colab T4, say), the
# problem runs at half its size in each dimension, or less, and the output says so.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
from kernels import bench

GPU = torch.cuda.get_device_name()
PEAK = bench.read_bandwidth()
course = []
for pid, entry in kernelbench.COURSE_ENTRIES.items():
    problem, size = kernelbench.sized_for(pid, torch.cuda.mem_get_info()[0])
    result = kernelbench.evaluate_isolated(problem, entry, entry="course")
    course.append(result)
    print(f"({size})\n{result.verdict}")
results.save_table(kernelbench.rows(course), "kernelbench")
print(f"{GPU}: read bandwidth {PEAK:.0f} GB/s")

# %% [markdown]
# The table, read back from `book/results/kernelbench.csv` (GB/s counts the bytes a `ModelNew`
# must read, each input once):

# %% tags=["nbval-ignore-output"]
rows = results.read_table("kernelbench")
Markdown(f"On {rows[0]['gpu']}:\n\n" + kernelbench.table(rows))

# %% [markdown]
# KernelBench's number is the mean of calls that each start on an idle GPU: the device is
# synchronised before every call. Then the GPU runs the L2 flush while the host launches the
# call; if the launch takes longer than the flush, the GPU waits, and the difference is timed.
# The same programs timed with the host queued ahead (`bench.queued_ms`) measure the GPU's work
# alone. Both, from the same run:
#
# ```{admonition} Going deeper: what the host does, and how the GPU is timed alone
# :class: dropdown
# The host's work is Python and PyTorch's dispatch, and for `torch.compile` its guards and
# wrapper. `bench.queued_ms` has a sleep kernel hold the GPU while the host launches twenty
# calls, so that the GPU never waits for the host.
# ```

# %% tags=["nbval-ignore-output"]
lines = ["| problem | program | KernelBench's rule, ms | GPU only, ms |",
         "| --- | --- | ---: | ---: |"]
for r in rows:
    for program, timed, queued in (("ModelNew", "ms", "gpu_only_ms"),
                                   ("eager", "eager_ms", "eager_gpu_only_ms"),
                                   ("torch.compile", "compile_ms", "compile_gpu_only_ms")):
        lines.append(f"| {r['problem']} | {program} | {float(r[timed]):.3f} | "
                     f"{float(r[queued]):.3f} |")
Markdown("\n".join(lines))

# %% [markdown]
# Measured against the byte counts above:

# %% tags=["gpu", "nbval-ignore-output"]
EXPECTED = {94: 3.0, 95: 2.0, 96: 2.0, 100: 7.0}


def standing(ratio):  # the course's kernel against the compiler, from a ratio of their times
    return "ahead" if ratio > 1.03 else "behind" if ratio < 0.97 else "level"


for r in course:
    rule = r.speedup("torch.compile")
    alone = r.gpu_only_ms("torch.compile") / r.gpu_only_ms()
    print(f"{r.problem:>3} {r.name.split('_', 1)[1]:<17} vs eager {r.speedup('eager'):5.2f}x "
          f"(bytes say {EXPECTED[r.problem]:.0f}x), "
          f"{100 * r.gbps / PEAK:.0f}% of the read bandwidth"
          + (f"; note: {r.notes[0]}" if r.notes else ""))
    print(f"{'':4}vs torch.compile {rule:.2f}x under KernelBench's rule ({standing(rule)}), "
          f"{alone:.2f}x on the GPU alone ({standing(alone)})")

# %% [markdown]
# Against `torch.compile`, cross-entropy is ahead in both timings: the compiler's kernel for
# rows of 4096 logits takes longer than ours, which keeps a row in registers and reads it once.
# Problem 95's share of the read bandwidth is the lowest: its call is short, so the host's launch
# (the two columns' difference) weighs more.
#
# ```{admonition} Answer
# :class: dropdown
# Against eager, each loss lands near what its bytes say (the "bytes say" figure on each line),
# or above it for cross-entropy: eager's `log_softmax` writes and reads its gigabyte, ours reads
# the logits once. Hinge's speed-up is the largest, the only one anywhere close to the 10x at
# which KernelBench asks a human to look. An honest speed-up over eager can be large when eager
# is wasteful, which is why KernelBench also reports the speed-up over `torch.compile`.
#
# Against `torch.compile`, which fuses each expression into one pass like ours, we expect about
# 1x for the element-wise losses, and no more: once the compiler reads the inputs once, being as
# fast is the best a memory-bound kernel can do. On the GPU alone the course's three kernels and
# the compiler's are level (the second line of each problem; level means within 3%).
# ```
#
# Under KernelBench's rule the element-wise standings can differ from the GPU-alone ones. The
# difference between the table's two columns, the host's time to launch a program beyond the L2
# flush, counts as well. It is smallest for eager. The course's operators pass through PyTorch's
# dispatcher and their autograd registration in Python before their kernel launches, the
# compiled programs through their guards. Where the margin is a few percent, either way, the
# honest reading is a tie between two kernels that each read their inputs once, not a winner.
#
# ```{admonition} Going deeper: why the rule's standings move between runs
# :class: dropdown
# The host's share ranges, for the course's operators and the compiled programs, from about a
# twentieth to about a quarter of a millisecond (the two columns of the table above). It moves
# from one run to the next by about as much as the programs differ, so the rule's standings of
# the three element-wise problems change between runs: other runs of the same cell have put MSE
# level or behind, and Huber level (`bench/PERFLOG.md` keeps them). Timed on the host with the GPU
# kept busy, one call of a course operator takes about as long as the L2 flush itself, most of it
# in the op's own call: dispatch, allocations, two launches (`bench/PERFLOG.md` has the profile).
# ```
#
# KernelBench's headline metric is $\text{fast}_p$: the fraction of problems whose `ModelNew`
# is correct and more than $p$ times faster than the baseline. For these four entries:

# %% tags=["nbval-ignore-output"]
for baseline in ("eager", "torch.compile"):
    print(f"against {baseline:<13}",
          "  ".join(f"fast_{p:g} = {kernelbench.fast_p(rows, p, baseline):.2f}"
                    for p in (1, 1.5, 2, 3)))

# %% [markdown]
# ## Summary
#
# - KernelBench's rules are five correctness trials at `atol = rtol = 1e-4` and a mean of 100
#   CUDA-event timings per program, cold L2, against eager and compiled PyTorch.
# - They cannot see work on another stream, changed inputs after a right answer, a kernel only
#   right on `torch.rand`'s inputs, a subsample, a downcast, or a replayed result.
# - The checks of `kernels/kernelbench/` catch each: wall clock against events, copies of the
#   inputs, trials outside the distribution and at secret positions, new inputs for every timed
#   call. The source is read for library calls; the program runs in a process of its own.
# - The course's kernels pass all four problems and every check. The table of the course's
#   entries above is the chapter's result; the one after it adds the GPU-alone times.
# - Against eager the speed-ups follow the bytes; against `torch.compile`, which also reads each
#   input once, only cross-entropy is clearly ahead.

# %% tags=["nbval-ignore-output"]
summary = results.read_table("kernelbench")
lines = ["| problem | every check | vs eager | vs torch.compile | GB/s |",
         "| --- | --- | ---: | ---: | ---: |"]
for r in summary:
    lines.append(f"| {r['name']} | {r['verdict']} | {r['speedup_eager']:.2f}x "
                 f"| {r['speedup_compile']:.2f}x | {r['gbps']:.0f} |")
Markdown(f"On {summary[0]['gpu']}:\n\n" + "\n".join(lines))

# %% [markdown]
# ## Exercises
#
# Solutions are in {doc}`../solutions/ch9_solutions`.

# %% [markdown]
# ```{exercise}
# :label: ch9-model-new
#
# **Difficulty:** ★★★ (hard) · **Time:** about 90 minutes
#
# Write your own `ModelNew` for problem 100 in `kernels/exercises/ch9_model_new.py`, a file in
# KernelBench's form, and validate it with the cell below (in a process of its own).
# As given, the file computes the reference's expression with PyTorch: the static checks reject
# it. Replace its `forward` with a CUDA kernel of yours, compiled with
# `torch.utils.cpp_extension.load_inline` in the same file. Chapter 2's section "A first kernel,
# by hand" ({doc}`02_atomics`) builds one: a C++ function passes the tensors' data pointers to
# the kernel. Yours must also launch on `at::cuda::getCurrentCUDAStream()` (the solution shows a
# whole file). It must pass every check and run level with `torch.compile`, the bound for this
# memory-bound loss. Mind problem 100's broadcast: `targets[j]` pairs with column `j`.
# ```
#
# ```{admonition} Hint
# :class: dropdown
#
# Read the predictions 16 bytes at a time (`float4`), several loads in flight per {term}`thread`; the
# four values of a `float4` share a row, so their labels are `targets[c .. c + 3]` for
# `c = (4 i) mod 32768`. Sum in `float` per thread,
# in `double` across blocks (chapter 4), and launch on the current stream
# (`at::cuda::getCurrentCUDAStream()`): the stream check is watching.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
problem, size = kernelbench.sized_for(100, torch.cuda.mem_get_info()[0])
mine = kernelbench.evaluate_isolated(problem, "kernels/exercises/ch9_model_new.py",
                                     entry="mine")
print(f"({size})\n{mine.verdict}")
grade("exercises/ch9_model_new.py", mine.passed, mine.verdict)  # an attempt that fails raises

# %% [markdown]
# ```{exercise}
# :label: ch9-beat-the-checks
#
# **Difficulty:** ★★★ (hard) · **Time:** about 60 minutes
#
# The checks of this chapter are still not complete. Write a `ModelNew` for problem 94 that
# passes every one of them (`kernelbench.evaluate(...).passed` is True) at KernelBench's size,
# yet reports a speed-up it has not earned: one that reads fewer bytes than the loss needs.
# Then propose the check that would catch it, and say what it would cost.
# ```
#
# ```{admonition} Hint
# :class: dropdown
#
# Every check above runs in a fixed order, and the timed calls come last. On which inputs does
# a subsample still pass, and how would a `ModelNew` know that it is being timed?
# ```
