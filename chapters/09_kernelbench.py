# ---
# jupyter:
#   jupytext:
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% tags=["hide-input"]
# Setup: make the course's toolkit importable (in the repository, or on Colab after cloning it).
import os, subprocess, sys
REPOSITORY = "https://github.com/loss-kernels/loss-kernels"
if "google.colab" in sys.modules and not os.path.isdir("/content/loss-kernels"):
    subprocess.run(["git", "clone", "--depth=1", REPOSITORY, "/content/loss-kernels"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ninja"], check=True)
ROOT = next(p for p in (os.getcwd(), os.path.dirname(os.getcwd()), "/content/loss-kernels")
            if os.path.isfile(os.path.join(p, "kernels", "__init__.py")))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# %% [markdown]
# # Chapter 9: capstone, the course's kernels on KernelBench
#
# [KernelBench](https://github.com/ScalingIntelligence/KernelBench) {cite}`ouyang2025kernelbench` is a
# benchmark of 250 PyTorch programs for which a language model, or a person, writes a faster
# version: a class `ModelNew` that must compute what the program's `Model` computes, and is
# timed against it. Its level 1 holds single operators, and four of them are this course's
# losses: problem 94 (MSELoss), 95 (CrossEntropyLoss), 96 (HuberLoss) and 100 (HingeLoss).
#
# This chapter enters the course's final kernels for those four problems, under KernelBench's
# own rules, and asks what the rules prove. A benchmark that scores programs by speed invites
# programs that look fast without doing the work; KernelBench's authors say so themselves
# ("if the model can reward hack, it will find ways to reward hack", in its `EVAL.md`) and test
# their evaluation against a few such cheats. We reproduce the rules in
# `kernels/kernelbench.py`, add a check for each cheat we know of, run the course's entries,
# and end with an exercise: your own `ModelNew`.

# %%
import torch
import torch.nn.functional as F
from IPython.display import Markdown

from kernels import kernelbench, results
from kernels.notebook import show_source

# %% [markdown]
# ## The four problems
#
# A KernelBench problem is one Python file: a `Model` whose `forward` is the reference, a
# `get_inputs()` that draws its inputs, and a `get_init_inputs()` for its constructor (empty
# here). The four files as of the commit we read (`423217d`, March 2026; the sizes date from
# July 2025, when every level-1 problem was scaled up to run for over a millisecond):

# %%
Markdown(kernelbench.problems_table())

# %% [markdown]
# The problems are data, so `kernels/kernelbench.py` reproduces them as data: the reference
# expression, the sizes, and the draws of `get_inputs()` in the order the files make them, from
# a generator of our own. `tests/test_kernelbench_cpu.py` checks that after the same seed our
# draws are KernelBench's, value for value.
#
# Three things in these files matter for a kernel writer.
#
# **The sizes.** Problems 94, 96 and 100 take 32768 x 32768 float32 predictions: 2^30 values,
# 4 GiB per tensor. The eager reference of problem 94 writes two more such tensors for its
# intermediates: a full run of this chapter needs about 40 GB of GPU memory.
#
# **Hinge's labels belong to columns.** Problem 100's targets have shape (32768,) and its
# predictions (32768, 32768). PyTorch broadcasts from the right, so element $[i, j]$ is paired
# with `targets[j]`: one label per *column*. A reader expects a label per row (an example per
# row), and a kernel written that way is wrong for this problem, whose meaning is the
# reference's. The course's Hinge kernel has paired a target row with the last dimension since
# chapter 3, exactly this broadcast:

# %%
predictions = torch.tensor([[0.5, 2.0], [0.5, 2.0]])
targets = torch.tensor([1.0, -1.0])  # +1 for column 0, -1 for column 1
print(kernelbench.Model100()(predictions, targets))  # (0.5 + 3.0) / 2: a label per row gives 1.25

# %% [markdown]
# **The inputs are `torch.rand`.** Every float input is uniform in $[0, 1)$, the regression
# predictions scaled by one more uniform number. So $|p - t| < 1$ always, and the Huber loss
# never leaves its quadratic part; $1 - p\,t > 0$ always, and the hinge's clamp never acts;
# the logits are below 1, and $e^{x}$ cannot overflow. A kernel that computes half the squared
# error, forgets the clamp, or skips the subtraction of the row's maximum passes KernelBench's
# trials. Checked at a small size on the CPU:

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
# **Correctness.** Five trials. Their seeds come from one generator seeded with 42; each trial
# seeds PyTorch with its own, calls `get_inputs()` on the CPU and moves the inputs to the GPU in
# float32. `Model` and `ModelNew` run on the same inputs; the output must have the reference's
# shape and pass `torch.allclose` with `atol = rtol = 1e-4` (`1e-2` in float16 and bfloat16).
# Every trial must pass.

# %%
show_source("kernelbench.py", "def trial_seeds", "    return [int(")

# %%
print(kernelbench.trial_seeds())

# %% [markdown]
# **Timing.** New inputs from seed 42; `ModelNew` is called 3 times to warm up (the reference
# 5), then timed with a pair of CUDA events per call over 100 calls, plus a first one thrown
# away. Before each call the device is synchronised and 256 MB are written to evict the inputs
# from L2 (which at 4 GiB they do not fit anyway); after it, the device is synchronised again.
# KernelBench reports the mean, and the speed-up is the reference's mean over `ModelNew`'s,
# against eager `Model` and against `torch.compile(Model)`. A speed-up over eager above 10x is
# flagged for a human to look at, not failed. Our timer does the same and also reads the host's
# clock around each call, for a check below:

# %%
show_source("kernelbench.py", "def time_trials", "    return Timing(events, walls)")

# %% [markdown]
# Two places where we depart from KernelBench, both deliberate:
#
# - KernelBench casts *every* input tensor to float32, the class indices of problem 95
#   included, and `F.cross_entropy` then refuses float targets: its reference cannot run
#   (KernelBench issue #151; pull request #152 proposes the fix). We keep integer inputs
#   integers, as that fix does.
# - KernelBench runs the reference first and `ModelNew` second, on the same tensors. We run
#   `ModelNew` first and the reference on copies taken before: nothing `ModelNew` does to its
#   inputs can change what the reference computes, and `ModelNew` cannot find the reference's
#   result in memory the allocator hands back (it has not been computed yet).
#
# ## What the rules let through, and the checks that stop it
#
# KernelBench's adversarial tests (`src/kernelbench/unit_tests/test_eval_adversarial.py`) and
# the reward-hacking reports on it and on similar leaderboards name the cheats. Each has a
# `ModelNew` in `kernelbench.cheats(problem)`, and a check:
#
# | cheat | KernelBench's rules | our check |
# | --- | --- | --- |
# | return zero, or a constant near the usual loss | fail (value) | `check_not_constant`: where the reference changed between trials, the output must change |
# | zero the inputs, return zero (KernelBench's `zero_out_kernel`) | fail (value) | `check_inputs_unchanged`: the inputs equal copies taken before the call |
# | return the right answer, then change an input | **pass** | `check_inputs_unchanged` |
# | return an output never written (`result_reuse_kernel`) | fail, if the memory held no answer | the allocator's free memory is filled with NaN before each call |
# | cache the result by the inputs' addresses or shape | fail, if addresses change | `check_recomputes`: new values in the same tensors must give the new loss |
# | run on a stream of its own (`non_default_stream_kernel`) | **pass**, very fast | `check_timed_stream`, below |
# | half the squared error for Huber, no clamp, no max | **pass** | one more trial with inputs outside KernelBench's distribution |
#
# The last check is the subtle one. CUDA events are recorded on the *current* stream, and they
# time the work queued on it between them. Work launched on another stream, which the current
# stream never waits for, runs outside the window: the events see a kernel that takes no time.
# Each timed call therefore also reads the host's clock, from before the L2 flush to after a
# device-wide `torch.cuda.synchronize()`, which waits for every stream. For an honest program
# the wall time exceeds the event time by a constant, the flush and the launch and wake-up
# latencies (about 0.1 ms on an H100), the same for `ModelNew` and for the eager reference. A
# `ModelNew` whose excess is larger, by over 50 µs and over half the time its events saw, kept
# the GPU busy after its end event:

# %%
show_source("kernelbench.py", "def check_timed_stream", "    return None")

# %% [markdown]
(`torch.profiler` could list the streams every kernel ran on, but a second stream is not a
# cheat by itself: a `ModelNew` may split its work over two streams and make the current one
# wait for both before it returns. What matters is whether the work finished inside the timed
# window, and that is what the two clocks compare, for kernels and copies alike, with nothing
# but the timing loop we run anyway.) One more guard is free: before every timed call the
# inputs' version counters are bumped, as an in-place write would, so that a result cached on
# the tensors and their version is recomputed rather than replayed.
#
# Every cheat but the stream one runs on the CPU, at a small size: KernelBench's verdict, then
# ours with the checks that failed. Two lines can differ from one run to the next: what an
# uninitialised output holds, and whether the allocator hands a cached-by-address cheat the same
# addresses again, depend on the memory the process was given (so `pytest --nbval` does not
# compare this cell's output; the test suite asserts each verdict).

# %% tags=["nbval-ignore-output"]
for pid, problem in SMALL.items():
    for name, cheat in kernelbench.cheats(pid).items():
        if cheat.gpu_only:
            continue
        r = kernelbench.evaluate(problem, cheat.model, entry=name, device="cpu")
        failed = ", ".join(check.split(" (")[0] for check, _ in r.failures)
        print(f"{pid:>3}  {name:<32} KernelBench: {'PASS' if r.kernelbench_passed else 'FAIL'}"
              f"  ours: {'PASS' if r.passed else 'FAIL'} ({failed})")

# %% [markdown]
# Each cheat fails, and the four that KernelBench's rules would accept fail only the check
# written for them. A learner's mistake gets the same treatment: the verdict line says what
# went wrong in words.

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
    print(f"{program:<14} events {timing.median:.3f} ms, wall - events {timing.hidden_ms:.3f} ms")
print(f"KernelBench's timing would report {side.speedup('eager'):.1f}x eager")
print(side.verdict)

# %% [markdown]
# ## The course's entries
#
# Each entry is a few lines around a chapter's final kernel: chapter 6's fused operators for
# MSE, Huber (Smooth L1 with $\beta = 1$ is the Huber loss with $\delta = 1$, and
# `F.smooth_l1_loss`'s default $\beta$ is 1) and Hinge, and chapter 5's fused cross-entropy,
# which takes the int64 class indices as they come. The Hinge entry passes KernelBench's (N,)
# targets to the kernel's own broadcast, which is PyTorch's; any other broadcast it expands first
# (one more pass, never a wrong answer):

# %%
show_source("kernelbench.py", "class CourseMSE", "COURSE_ENTRIES = ")

# %% [markdown]
# **What to expect.** Every one of these problems is memory-bound: the time is the bytes moved
# divided by the bandwidth. Our kernels read each input once. Eager PyTorch runs one kernel per
# operation of the expression, each reading and writing a 4 GiB intermediate:
#
# | problem | eager PyTorch's passes over memory | GB moved | ours | expected vs eager |
# | --- | --- | ---: | ---: | ---: |
# | 94 MSE | `p - t` (read 2, write 1), `** 2` (1, 1), `mean` (1) | 25.8 | 8.6 | 3x |
# | 96 Huber | `smooth_l1_loss` per element (2, 1), `mean` (1) | 17.2 | 8.6 | 2x |
# | 100 Hinge | `p * t` (1, 1), `1 - x` (1, 1), `clamp` (1, 1), `mean` (1) | 30.1 | 4.3 | 7x |
# | 95 cross-entropy | `log_softmax` (1, 1), then `nll_loss` reads one value per row | 1.07 | 0.54 | 2x |
#
# (in units of one input of 4.3 GB, 0.54 GB for the logits). `torch.compile` fuses each
# expression into one pass, like ours: there we expect about 1x, and no more. Being as fast as
# the compiler is the best a memory-bound kernel can do once the compiler reads its inputs once.
#
# The run: KernelBench's exact inputs, drawn on the CPU (about 6 s per 2^30 values), 5 trials,
# 100 timed calls of each program, our checks. Below 60 GB of GPU memory (a Colab T4, say) it
# runs each problem at half its size in each dimension instead, and says so.

# %% tags=["gpu", "nbval-ignore-output"]
from kernels import bench

GPU = torch.cuda.get_device_name()
PEAK = bench.read_bandwidth()
full_size = torch.cuda.get_device_properties(0).total_memory > 60e9
course = []
for pid, entry in kernelbench.COURSE_ENTRIES.items():
    problem = kernelbench.PROBLEMS[pid]
    if not full_size:
        problem = problem.resized(**{k: v // 2 for k, v in problem.sizes.items()})
        print(f"(problem {pid} at {problem.sizes}: this GPU has less than 60 GB)")
    result = kernelbench.evaluate(problem, entry, entry="course")
    course.append(result)
    print(result.verdict)
results.save_table(kernelbench.rows(course), "kernelbench")
print(f"{GPU}: read bandwidth {PEAK:.0f} GB/s")

# %% [markdown]
# The table, read back from `book/results/kernelbench.csv` (GB/s counts the bytes a `ModelNew`
# must read, each input once):

# %% tags=["nbval-ignore-output"]
rows = results.read_table("kernelbench")
Markdown(f"On {rows[0]['gpu']}:\n\n" + kernelbench.table(rows))

# %% [markdown]
# Measured against the byte counts above:

# %% tags=["gpu", "nbval-ignore-output"]
EXPECTED = {94: 3.0, 95: 2.0, 96: 2.0, 100: 7.0}
for r in course:
    print(f"{r.problem:>3} {r.name.split('_', 1)[1]:<17} vs eager {r.speedup('eager'):5.2f}x (bytes say {EXPECTED[r.problem]:.0f}x), "
          f"vs torch.compile {r.speedup('torch.compile'):.2f}x, {100 * r.gbps / PEAK:.0f}% of the read bandwidth"
          + (f"; note: {r.notes[0]}" if r.notes else ""))

# %% [markdown]
# The element-wise losses land where the bytes say, about 3x, 2x and 7x eager, and within about
# 5% of `torch.compile`, faster or slower: a margin that moves between runs (from 0.95x to 1.05x
# over the sessions in `bench/PERFLOG.md`), so neither side wins: the kernels, the compiler
# and the memory agree. Cross-entropy gains more than its bytes predict, against both: eager's
# `log_softmax` moves its gigabyte well below the bandwidth, and `torch.compile`'s fused kernel
# for rows of 4096 logits takes longer than ours, which keeps a row in registers and reads it
# once. How much longer changes from run to run (1.5x to 2.4x ours in `bench/PERFLOG.md`):
# the compiled program's time moves, ours stays at about 0.19 ms. Hinge's speed-up is close to the 10x at
# which KernelBench asks a human to look: an honest speed-up over eager can be large when eager
# is wasteful, which is why KernelBench also reports the speed-up over `torch.compile`.
#
# KernelBench's headline metric is $\text{fast}_p$: the fraction of problems whose `ModelNew`
# is correct and more than $p$ times faster than the baseline. For these four entries:

# %% tags=["nbval-ignore-output"]
for baseline in ("eager", "torch.compile"):
    print(f"against {baseline:<13}", "  ".join(f"fast_{p:g} = {kernelbench.fast_p(rows, p, baseline):.2f}"
                                               for p in (1, 1.5, 2, 3)))

# %% [markdown]
# ## Summary
#
# - KernelBench's rules are five correctness trials at `atol = rtol = 1e-4` and a mean of 100
#   CUDA-event timings per program, cold L2, against eager and compiled PyTorch.
# - They cannot see work on another stream, changed inputs after a right answer, or a kernel
#   that is only right on `torch.rand`'s inputs. The checks of `kernels/kernelbench.py` do:
#   wall clock against events, copies of the inputs, a trial outside the distribution, new
#   values in the same tensors, outputs that must move when the reference does.
# - The course's kernels pass all four problems and every check, at about 90-100% of the read
#   bandwidth, level with `torch.compile` (within about 5%, either way) for the element-wise
#   losses and 1.5x to 2.4x faster for cross-entropy.
#
# ## Exercises
#
# Solutions are in {doc}`../solutions/ch9_solutions`.

# %% [markdown]
# ```{exercise}
# :label: ch9-model-new
#
# Write your own `ModelNew` for problem 100 (or any of the four) and validate it. The cell
# below holds a `ModelNew` that is the reference's expression: it passes, at about 1x eager.
# Replace its `forward` with a kernel of yours, in KernelBench's style (a CUDA kernel compiled
# with `torch.utils.cpp_extension.load_inline` in the same cell), until it is correct, passes
# every check and runs level with `torch.compile`, which for this memory-bound loss is the
# bound. Mind problem 100's broadcast: `targets[j]` pairs with column `j`.
# ```
#
# ```{admonition} Hint
# :class: dropdown
#
# Read the predictions 16 bytes at a time (`float4`), several loads in flight per thread; the
# four values of a `float4` share a row, so their labels are `targets[c .. c + 3]` for
# `c = (4 i) mod 32768`. Sum in `float` per thread,
# in `double` across blocks (chapter 4), and launch on the current stream
# (`at::cuda::getCurrentCUDAStream()`): the stream check is watching.
# ```

# %% tags=["gpu", "nbval-ignore-output"]
class ModelNew(torch.nn.Module):
    # TODO(exercise 9.1): replace this expression with your kernel; keep the signature.
    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


mine = kernelbench.evaluate(100, ModelNew, entry="mine")
print(mine.verdict)

# %% [markdown]
# ```{exercise}
# :label: ch9-beat-the-checks
#
# The checks of this chapter are not complete. Write a `ModelNew` for problem 94 that passes
# every one of them (`kernelbench.evaluate(...).passed` is True) yet reports a speed-up it has
# not earned. Then propose the check that would catch it, and say what it would cost.
# ```
#
# ```{admonition} Hint
# :class: dropdown
#
# The timed calls all get the same inputs, as in KernelBench. What could a `ModelNew` remember
# between two calls, that the correctness trials and `check_recomputes` never reward?
# ```
