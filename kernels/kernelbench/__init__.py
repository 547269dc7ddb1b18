"""KernelBench's four loss problems, and a validator that runs a ``ModelNew`` under its rules and
under the checks that the public leaderboards learned to add.

KernelBench (Ouyang et al., 2025) is a benchmark of PyTorch programs for which a language model,
or a person, writes a faster ``ModelNew``. Four of its level-1 problems are this course's losses:
94 MSELoss, 95 CrossEntropyLoss, 96 HuberLoss and 100 HingeLoss. This package holds them as data
and evaluates a ``ModelNew`` for them the way KernelBench does, plus checks against the ways a
``ModelNew`` can pass KernelBench's rules without computing the loss::

    result = evaluate(PROBLEMS[94], ModelNew)     # correctness, anti-cheat checks, timing
    result = evaluate_isolated(94, "model_new.py")  # the same, the program in a child process
    result = evaluate_trusted(94, "model_new.py")   # opt-in: every reference out of its reach
    print(result.verdict)                         # PASS or FAIL, and why, on one line
    print(table([result, ...]))                   # a Markdown table; rows() -> CSV

Its modules, in the order they import each other: ``problems`` (the references and every input
the validator draws), ``timing`` (KernelBench's event timing, fresh inputs per call), ``checks``
(one function per check), ``patching`` and ``static`` (the source's patterns), ``report``
(Result, tables), ``evaluate`` (the validator), ``trusted`` (the program's own process, which
receives inputs and returns outputs), ``isolated`` (the validator in a subprocess; and, opt-in,
:func:`evaluate_trusted`: the program there and every reference here), ``cheats`` (what the checks are for) and ``entries`` (the course's
ModelNews).

Layer ``kernelbench`` of ``kernels.LAYERS``, the top one: it may import ``kernels.losses``,
``kernels.build`` and ``kernels.measure``, and, for the entries only, ``kernels.ops``; nothing
in the toolkit imports it.

What was read upstream (https://github.com/ScalingIntelligence/KernelBench, commit
423217d9fda91e0c2d67e4a43bf62f96f6d104f1 of 2026-03-05; MIT licence), and is reproduced here in
our own code, never copied:

- ``KernelBench/level1/94_MSELoss.py``, ``95_CrossEntropyLoss.py``, ``96_HuberLoss.py``,
  ``100_HingeLoss.py``: the reference ``Model``, ``get_inputs`` and ``get_init_inputs``. Their
  shapes were last changed in July 2025 (commits 76b487e "fixed problem sizes" and 6b1cea2 "use
  torch.rand as default"): 32768 x 32768 float32 for 94, 96 and 100, 32768 x 4096 for 95.
- ``src/kernelbench/eval.py``: ``eval_kernel_against_ref`` and ``run_and_check_correctness``
  (trials, seeds, tolerances, the shape check), ``_process_input_tensor`` (the dtype cast).
- ``src/kernelbench/timing.py``: ``time_execution_with_cuda_event``, ``clear_l2_cache``,
  ``get_timing_stats`` and ``measure_ref_program_time`` (eager and ``torch.compile`` baselines).
- ``scripts/run_and_check.py``: the defaults (5 correctness trials, 100 timed trials, "cuda_event").
- ``src/kernelbench/unit_tests/test_eval_adversarial.py`` and ``test_kernels/``, and ``EVAL.md``:
  the cheats KernelBench itself tests for (inputs zeroed, a result left in reused memory, work on
  a non-default stream).

KernelBench's rules, as this package applies them:

- **Correctness**: ``torch.manual_seed(42)`` then one ``torch.randint(0, 2**32 - 1, (1,))`` per
  trial gives the trials' seeds (:func:`trial_seeds`); 5 trials. Each seeds the CPU generator,
  calls ``get_inputs()`` (on the CPU), moves the inputs to the GPU in float32, runs ``Model`` and
  ``ModelNew`` on them, and requires equal shapes and ``torch.allclose(atol=rtol=1e-4)`` (1e-2
  for float16 and bfloat16). Every trial must pass.
- **Timing**: inputs from seed 42; each program warmed up (3 calls for ``ModelNew``, 5 for the
  reference), then timed with CUDA events over 100 trials plus a first one discarded, the device
  synchronised before and after each, 256 MB written before each to evict the inputs from L2;
  the mean is reported, with std, min and max. The speed-up is the reference's mean over
  ``ModelNew``'s, for eager ``Model`` and for ``torch.compile(Model)`` (inductor, default mode).
- A speed-up over eager above 10x is flagged for a human to look at, not failed.

Where this package departs from it, and why:

- Integer inputs (95's class indices) stay int64. KernelBench casts every input tensor to the
  precision, which turns the targets into float32 and makes ``F.cross_entropy`` raise (KernelBench
  issue #151, fix proposed in pull request #152); we apply that fix.
- ``ModelNew`` runs first in a trial and the reference runs on untouched copies of the inputs
  (KernelBench runs the reference first, on the same tensors): a ``ModelNew`` cannot change what
  the reference sees, nor find the reference's result in memory the allocator hands back.
- The three programs are timed in one run, on the same inputs, one after the other.

The anti-cheat checks (each a function of ``checks``, each with a test in tests/test_kernelbench_cpu.py):

- :func:`check_output`: a tensor, of the reference's shape, dtype and device, finite, within the
  tolerance; an all-zero output is named as such.
- :func:`check_inputs_unchanged`: the inputs after the call equal copies taken before it.
- :func:`check_not_constant`: where the reference's result changed from one trial to another,
  ``ModelNew``'s must change too.
- :func:`check_recomputes`: new values written into the same input tensors (same addresses,
  same shapes) give the new result: no result cached across calls.
- an extra trial with inputs outside KernelBench's distribution (``Problem.off_distribution``):
  KernelBench's inputs never reach Huber's linear part, Hinge's clamp, or logits large enough to
  overflow an exponential; a ``ModelNew`` that relies on that fails here.
- :func:`check_timed_stream`: CUDA events time the current stream only, so work launched on
  another stream escapes them. Each timed trial also measures the host's wall time from before
  the L2 flush to after a device-wide ``torch.cuda.synchronize()``, which waits for every stream;
  for honest programs wall minus event time is a constant (the flush, launch and wake-up
  latencies), the same for ``ModelNew`` and the eager reference. A ``ModelNew`` whose wall time
  exceeds its event time by more than the reference's, by over 50 µs and over half its event
  time, did work the events did not see.
- Opt-in, not yet chapter 9's path: :func:`evaluate_trusted`, the program in a child process
  that holds none of the references (:mod:`.isolated` says how); a program that replaces
  functions of PyTorch there fails the check "PyTorch unchanged", and every timed call of
  ``ModelNew`` gets inputs of its own with secret positions that carry the loss (as the
  coverage trials), its output checked against their float64 loss.
- In every timed trial the inputs' version counters are bumped first (outside the timed region,
  as an in-place write would), so that a result cached on the tensors' identity and version is
  recomputed rather than replayed.
"""

from .cheats import (ISOLATED_ONLY, TRUSTED_ONLY, Cheat, TrustedCheat, cheats, restoring_torch,
                     trusted_cheats)
from .checks import (EXCESSIVE_SPEEDUP, HIDDEN_FRACTION, HIDDEN_MS, check_against_float64,
                     check_inputs_unchanged, check_not_constant, check_output, check_recomputes,
                     check_timed_stream, excessive_speedup_note)
from .draws import ExactDraws
from .entries import COURSE_ENTRIES, CourseCrossEntropy, CourseHinge, CourseHuber, CourseMSE, course_ops
from .evaluate import COVERAGE_TRIALS, evaluate, model_from_source
from .isolated import evaluate_isolated, evaluate_trusted
from .problems import (COMMIT, CORRECT_TRIALS, PROBLEMS, SEED, SPIKES, TOLERANCES, UPSTREAM,
                       KernelBenchError, Model94, Model95, Model96, Model100, Problem, get_problem,
                       problems_table, sized_for, trial_seeds)
from .report import Result, fast_p, rows, table
from .static import Finding, check_model, check_source
from .timing import (DISCARD_FIRST, FLUSH_BYTES, PERF_TRIALS, WARMUP_NEW, WARMUP_REFERENCE, Timing,
                     time_trials)
