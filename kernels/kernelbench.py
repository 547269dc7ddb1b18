"""KernelBench's four loss problems, and a validator that runs a ``ModelNew`` under its rules.

KernelBench (Ouyang et al., 2025) is a benchmark of PyTorch programs for which a language model,
or a person, writes a faster ``ModelNew``. Four of its level-1 problems are this course's losses:
94 MSELoss, 95 CrossEntropyLoss, 96 HuberLoss and 100 HingeLoss. This module holds them as data
and evaluates a ``ModelNew`` for them the way KernelBench does, plus checks against the ways a
``ModelNew`` can pass KernelBench's rules without computing the loss::

    result = evaluate(PROBLEMS[94], ModelNew)     # correctness, anti-cheat checks, timing
    print(result.verdict)                         # PASS or FAIL, and why, on one line
    print(table([result, ...]))                   # a Markdown table; rows() -> CSV

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

KernelBench's rules, as this module applies them:

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

Where this module departs from it, and why:

- Integer inputs (95's class indices) stay int64. KernelBench casts every input tensor to the
  precision, which turns the targets into float32 and makes ``F.cross_entropy`` raise (KernelBench
  issue #151, fix proposed in pull request #152); we apply that fix.
- ``ModelNew`` runs first in a trial and the reference runs on untouched copies of the inputs
  (KernelBench runs the reference first, on the same tensors): a ``ModelNew`` cannot change what
  the reference sees, nor find the reference's result in memory the allocator hands back.
- The three programs are timed in one run, on the same inputs, one after the other.

The anti-cheat checks (each a function below, each with a test in tests/test_kernelbench_cpu.py):

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
- In every timed trial the inputs' version counters are bumped first (outside the timed region,
  as an in-place write would), so that a result cached on the tensors' identity and version is
  recomputed rather than replayed.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import bench
from .correctness import poison_allocator
from .losses import get_loss

UPSTREAM = "https://github.com/ScalingIntelligence/KernelBench"
COMMIT = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"

CORRECT_TRIALS = 5  # scripts/run_and_check.py: num_correct_trials
SEED = 42  # eval_kernel_against_ref: seed_num
PERF_TRIALS = bench.REPS  # 100, as run_and_check.py's num_perf_trials ($KERNELS_BENCH_REPS)
WARMUP_NEW = 3  # time_execution_with_cuda_event's num_warmup, for ModelNew
WARMUP_REFERENCE = 5  # measure_ref_program_time's num_warmup, for Model and torch.compile(Model)
DISCARD_FIRST = 1  # time_execution_with_cuda_event: the first timed trial is dropped
FLUSH_BYTES = 256 << 20  # clear_l2_cache writes 32 x 1024 x 1024 int64 before each trial
TOLERANCES = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}  # atol = rtol
EXCESSIVE_SPEEDUP = 10.0  # eval_kernel_against_ref's excessive_speedup_threshold
HIDDEN_MS = 0.05  # check_timed_stream: the least hidden GPU time per call it reports
HIDDEN_FRACTION = 0.5  # ... and the least, as a fraction of the time the events saw


class KernelBenchError(ValueError):
    """A call of this module that cannot be evaluated: no ModelNew, an unknown problem, ..."""


# --- the problems ------------------------------------------------------------------------------

class Model94(torch.nn.Module):
    """KernelBench level 1, problem 94 (MSELoss)."""

    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


class Model95(torch.nn.Module):
    """KernelBench level 1, problem 95 (CrossEntropyLoss)."""

    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)


class Model96(torch.nn.Module):
    """KernelBench level 1, problem 96 (HuberLoss): Smooth L1 with beta = 1, which is the Huber
    loss with delta = 1."""

    def forward(self, predictions, targets):
        return torch.nn.functional.smooth_l1_loss(predictions, targets)


class Model100(torch.nn.Module):
    """KernelBench level 1, problem 100 (HingeLoss). ``targets`` has shape (batch_size,) and
    ``predictions`` (batch_size, dim) with dim == batch_size: PyTorch broadcasts ``targets``
    along the LAST dimension, so element [i, j] is paired with targets[j] (one label per column,
    not per row). That is the reference's meaning, so it is the problem's."""

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def _regression_inputs(sizes, generator, device="cpu"):
    """94 and 96: ``scale = torch.rand(())`` first, then predictions ``rand * scale`` and targets
    ``rand``, both (batch_size, dim): values in [0, 1), so |p - t| < 1 always."""
    shape = (sizes["batch_size"], sizes["dim"])
    scale = torch.rand((), generator=generator, device=device)
    return [torch.rand(shape, generator=generator, device=device) * scale,
            torch.rand(shape, generator=generator, device=device)]


def _cross_entropy_inputs(sizes, generator, device="cpu"):
    """95: logits ``rand`` (batch_size, num_classes) in [0, 1), targets ``randint`` int64."""
    rows, classes = sizes["batch_size"], sizes["num_classes"]
    return [torch.rand((rows, classes), generator=generator, device=device),
            torch.randint(0, classes, (rows,), generator=generator, device=device)]


def _hinge_inputs(sizes, generator, device="cpu"):
    """100: predictions ``rand`` (batch_size, dim) in [0, 1), targets +-1 of shape (batch_size,):
    1 - p * t lies in (0, 2), so the clamp never acts."""
    shape = (sizes["batch_size"], sizes["dim"])
    pred = torch.rand(shape, generator=generator, device=device)
    labels = torch.randint(0, 2, (sizes["batch_size"],), generator=generator, device=device)
    return [pred, labels.float() * 2 - 1]


def _regression_off(sizes, generator, device):
    shape = (sizes["batch_size"], sizes["dim"])
    return [3 * torch.randn(shape, generator=generator, device=device),
            torch.randn(shape, generator=generator, device=device)]


def _cross_entropy_off(sizes, generator, device):
    rows, classes = sizes["batch_size"], sizes["num_classes"]
    return [40 * torch.randn((rows, classes), generator=generator, device=device),
            torch.randint(0, classes, (rows,), generator=generator, device=device)]


def _hinge_off(sizes, generator, device):
    pred, labels = _hinge_inputs(sizes, generator, device)
    return [2 * torch.randn(pred.shape, generator=generator, device=device), labels]


@dataclass(frozen=True)
class Problem:
    """One KernelBench problem: its reference, its inputs, and what its inputs never exercise."""

    id: int
    name: str  # the upstream file's name, without .py
    loss: str  # the course's loss of the same expression (kernels/losses.py)
    expression: str  # Model.forward's return expression, as upstream writes it
    model: type  # the reference Model
    sizes: dict  # batch_size, and dim or num_classes
    make_inputs: Callable  # (sizes, generator, device) -> inputs, upstream's draws in its order
    inputs_text: str  # get_inputs(), for people
    off_distribution: Callable  # (sizes, generator, device) -> inputs KernelBench never draws
    off_text: str  # what the off-distribution inputs exercise that KernelBench's do not

    @property
    def url(self) -> str:
        return f"{UPSTREAM}/blob/{COMMIT}/KernelBench/level1/{self.name}.py"

    @property
    def title(self) -> str:
        return f"{self.id} {self.name.split('_', 1)[1]}"

    def get_inputs(self, seed: int | None = None, generator=None, device="cpu") -> list:
        """KernelBench's ``get_inputs()`` after ``torch.manual_seed(seed)``: the same values, drawn
        from a generator of our own (the global one is left alone). On ``device="cpu"`` (the
        default) they are KernelBench's exact inputs; on a GPU they follow the same distributions
        with other values, and cost no CPU time."""
        if generator is None:
            generator = torch.Generator(device=device).manual_seed(SEED if seed is None else seed)
        return self.make_inputs(self.sizes, generator, device)

    def get_init_inputs(self) -> list:
        return []  # none of the four problems has a constructor argument

    def input_shapes(self) -> list[tuple]:
        if self.id == 95:
            return [(self.sizes["batch_size"], self.sizes["num_classes"]), (self.sizes["batch_size"],)]
        shape = (self.sizes["batch_size"], self.sizes["dim"])
        return [shape, (self.sizes["batch_size"],) if self.id == 100 else shape]

    def min_bytes(self) -> int:
        """The fewest bytes a ModelNew must read: each input once (kernels/losses.py)."""
        return get_loss(self.loss).min_bytes(self.input_shapes()[0], 4)

    def resized(self, **sizes) -> "Problem":
        """The same problem at other sizes (tests, quick runs): ``PROBLEMS[94].resized(batch_size=
        64, dim=48)``. Problem 100 needs dim == batch_size, as upstream: its targets broadcast
        along the last dimension."""
        unknown = set(sizes) - set(self.sizes)
        if unknown:
            raise KernelBenchError(f"problem {self.id} has sizes {sorted(self.sizes)}, not {sorted(unknown)}")
        new = {**self.sizes, **sizes}
        if self.id == 100 and new["dim"] != new["batch_size"]:
            raise KernelBenchError("problem 100 needs dim == batch_size: its targets (batch_size,) "
                                   "broadcast along the predictions' last dimension")
        return dataclasses.replace(self, sizes=new)


PROBLEMS = {
    94: Problem(94, "94_MSELoss", "mse", "torch.mean((predictions - targets) ** 2)", Model94,
                {"batch_size": 32768, "dim": 32768}, _regression_inputs,
                "scale = torch.rand(()); [torch.rand(32768, 32768) * scale, torch.rand(32768, 32768)]",
                _regression_off, "predictions 3 * randn, targets randn"),
    95: Problem(95, "95_CrossEntropyLoss", "cross_entropy",
                "torch.nn.functional.cross_entropy(predictions, targets)", Model95,
                {"batch_size": 32768, "num_classes": 4096}, _cross_entropy_inputs,
                "[torch.rand(32768, 4096), torch.randint(0, 4096, (32768,))]",
                _cross_entropy_off, "logits 40 * randn: exp(logit) overflows float32 unless the "
                                    "row's max is subtracted first"),
    96: Problem(96, "96_HuberLoss", "smooth_l1", "torch.nn.functional.smooth_l1_loss(predictions, targets)",
                Model96, {"batch_size": 32768, "dim": 32768}, _regression_inputs,
                "scale = torch.rand(()); [torch.rand(32768, 32768) * scale, torch.rand(32768, 32768)]",
                _regression_off, "|p - t| > 1, Huber's linear part, which KernelBench's inputs "
                                 "never reach"),
    100: Problem(100, "100_HingeLoss", "hinge", "torch.mean(torch.clamp(1 - predictions * targets, min=0))",
                 Model100, {"batch_size": 32768, "dim": 32768}, _hinge_inputs,
                 "[torch.rand(32768, 32768), torch.randint(0, 2, (32768,)).float() * 2 - 1]",
                 _hinge_off, "predictions 2 * randn: 1 - p t < 0 where the clamp acts, which "
                             "KernelBench's inputs never reach"),
}


def get_problem(problem) -> Problem:
    """A Problem, from itself, its id (94) or its name ("94_MSELoss")."""
    if isinstance(problem, Problem):
        return problem
    for p in PROBLEMS.values():
        if problem in (p.id, p.name, str(p.id)):
            return p
    raise KernelBenchError(f"unknown problem {problem!r}: choose from "
                           + ", ".join(p.name for p in PROBLEMS.values()))


def trial_seeds(seed: int = SEED, trials: int = CORRECT_TRIALS) -> list[int]:
    """The correctness trials' seeds, as ``run_and_check_correctness`` draws them."""
    generator = torch.Generator().manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=generator)) for _ in range(trials)]


def problems_table() -> str:
    """The four problems as a Markdown table (what the chapter shows)."""
    lines = ["| problem | reference `Model.forward` | inputs | least bytes read |",
             "| --- | --- | --- | ---: |"]
    for p in PROBLEMS.values():
        shapes = " and ".join("x".join(map(str, s)) for s in p.input_shapes())
        lines.append(f"| [{p.title}]({p.url}) | `{p.expression}` | {shapes} | "
                     f"{p.min_bytes() / 1e9:.2f} GB |")
    return "\n".join(lines)


# --- the learner's ModelNew ----------------------------------------------------------------------

def model_from_source(source: str, name: str = "ModelNew") -> type:
    """The class ``name`` defined by a Python source text (KernelBench's form of a solution)."""
    namespace: dict = {}
    exec(compile(source, "<ModelNew source>", "exec"), namespace)  # noqa: S102  (the learner's code)
    found = namespace.get(name)
    if found is None:
        classes = sorted(k for k, v in namespace.items() if isinstance(v, type))
        raise KernelBenchError(f"the source defines no {name}: KernelBench looks for a class named "
                               f"{name} (classes found: {', '.join(classes) or 'none'})")
    return found


def _instantiate(model_new, problem: Problem):
    """ModelNew(*get_init_inputs()), or the module itself; errors a learner can act on."""
    if model_new is None:
        raise KernelBenchError("evaluate() needs your ModelNew: a class ModelNew(torch.nn.Module) "
                               "whose forward(predictions, targets) returns the loss (got None)")
    if isinstance(model_new, str):
        model_new = model_from_source(model_new)
    if isinstance(model_new, torch.nn.Module):
        return model_new
    if not isinstance(model_new, type):
        raise KernelBenchError(f"ModelNew must be a class (a torch.nn.Module subclass), got "
                               f"{type(model_new).__name__}")
    if not issubclass(model_new, torch.nn.Module):
        raise KernelBenchError(f"ModelNew must subclass torch.nn.Module (KernelBench moves it with "
                               f".to(device)), got {model_new.__name__}({', '.join(b.__name__ for b in model_new.__bases__)})")
    return model_new(*problem.get_init_inputs())


# --- the checks ------------------------------------------------------------------------------

def _value(x) -> str:
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        return f"{x.item():.6g}"
    return f"a tensor of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)


def check_output(out, ref, tolerance: float) -> str | None:
    """None when ``out`` matches ``ref`` as KernelBench requires (its shape, and allclose with
    atol = rtol = ``tolerance``), plus its dtype and device; else why not."""
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if out.shape != ref.shape:
        return f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)} (as Model returns)"
    if out.dtype != ref.dtype:
        return f"output dtype {out.dtype}, expected {ref.dtype}"
    if out.device != ref.device:
        return f"output on {out.device}, expected {ref.device}"
    if not torch.isfinite(out).all():
        return f"output {_value(out)} is not finite (NaN or infinity)"
    if not torch.allclose(out, ref, atol=tolerance, rtol=tolerance):
        diff = (out.double() - ref.double()).abs().max().item()
        zeros = " (all zeros: was the result written?)" if not out.any() else ""
        return (f"output {_value(out)}{zeros}, reference {_value(ref)}: |difference| {diff:.3g} "
                f"> atol = rtol = {tolerance:g}")
    return None


def check_inputs_unchanged(inputs, originals) -> str | None:
    """None when every input still equals its copy taken before the call."""
    for k, (x, kept) in enumerate(zip(inputs, originals)):
        if isinstance(x, torch.Tensor) and not torch.equal(x, kept):
            changed = (x != kept).sum().item()
            return (f"ModelNew changed input {k} in place ({changed:,} of {x.numel():,} values): "
                    f"inputs are read-only (a changed input can fool a reference run after it)")
    return None


def check_not_constant(outputs, references) -> str | None:
    """None unless ModelNew gave bit-identical outputs in two trials whose references differ."""
    for i in range(len(outputs)):
        for j in range(i + 1, len(outputs)):
            o_i, o_j, r_i, r_j = outputs[i], outputs[j], references[i], references[j]
            if not all(isinstance(t, torch.Tensor) for t in (o_i, o_j, r_i, r_j)):
                continue
            if o_i.shape == o_j.shape and torch.equal(o_i, o_j) and not torch.equal(r_i, r_j):
                return (f"trials {i + 1} and {j + 1} got the same output {_value(o_i)} although "
                        f"the reference changed ({_value(r_i)}, {_value(r_j)}): a constant, or a "
                        f"result kept from an earlier call?")
    return None


def check_recomputes(model, inputs, new_inputs, expected, tolerance: float) -> str | None:
    """Call ``model`` on ``inputs``, write ``new_inputs``' values into the same tensors (same
    addresses, same shapes), call it again: the second result must match ``expected`` (the
    reference on ``new_inputs``). Catches a result cached on the inputs' shape or address."""
    with torch.no_grad():
        model(*inputs)
        for x, y in zip(inputs, new_inputs):
            x.copy_(y)
        out = model(*inputs)
    _synchronize(inputs)
    failure = check_output(out, expected, tolerance)
    return None if failure is None else f"new values in the same tensors: {failure}"


@dataclass
class Timing:
    """Per-trial times of one program, in ms: CUDA events on the current stream, and the host's
    wall time from before the L2 flush to after a device-wide synchronisation."""

    event_ms: list
    wall_ms: list

    @property
    def mean(self) -> float:  # what KernelBench reports
        return statistics.fmean(self.event_ms)

    @property
    def median(self) -> float:
        return statistics.median(self.event_ms)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.event_ms)

    @property
    def hidden_ms(self) -> float:
        """Median of wall minus event time: latencies, plus any work the events did not see."""
        return statistics.median(w - e for w, e in zip(self.wall_ms, self.event_ms))

    def stats(self) -> dict:
        return {"mean": self.mean, "median": self.median, "std": self.std,
                "min": min(self.event_ms), "max": max(self.event_ms), "trials": len(self.event_ms)}


def check_timed_stream(new: Timing, reference: Timing, min_ms: float = HIDDEN_MS,
                       fraction: float = HIDDEN_FRACTION) -> str | None:
    """None unless ModelNew's calls kept the GPU busy after its end event: its wall time exceeds
    its event time by more than the honest reference's does, by over ``min_ms`` and over
    ``fraction`` of its event time (work on a stream the events do not time)."""
    hidden = new.hidden_ms - reference.hidden_ms
    seen = new.median
    if hidden > min_ms and hidden > fraction * seen:
        return (f"the GPU worked {hidden:.3f} ms per call after ModelNew's end event, which saw "
                f"{seen:.3f} ms: work on another CUDA stream escapes event timing (make the "
                f"current stream wait for it)")
    return None


def excessive_speedup_note(speedup: float) -> str | None:
    """KernelBench's warning (not a failure) for a speed-up over eager above 10x."""
    if speedup > EXCESSIVE_SPEEDUP:
        return (f"{speedup:.1f}x eager exceeds KernelBench's {EXCESSIVE_SPEEDUP:g}x flag: "
                f"look for a cheat before you believe it")
    return None


# --- running and timing -------------------------------------------------------------------------

def _synchronize(tensors) -> None:
    if any(isinstance(x, torch.Tensor) and x.is_cuda for x in tensors):
        torch.cuda.synchronize()


def _on_device(inputs, device, dtype):
    """KernelBench's _process_input_tensor, integers kept (issue #151): floats to ``dtype``."""
    return [x.to(device=device, dtype=dtype) if x.is_floating_point() else x.to(device)
            for x in inputs]


def _describe_error(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first[:160]}"


def _bump_versions(tensors) -> None:
    bump = getattr(torch.autograd.graph, "increment_version", None)
    if bump is not None:
        for x in tensors:
            bump(x)


def time_trials(fn, args, trials: int | None = None, warmup: int = WARMUP_NEW,
                discard_first: int = DISCARD_FIRST) -> Timing:
    """``time_execution_with_cuda_event``'s method, with wall times beside the event times.

    Each trial: bump the inputs' version counters; synchronise the device; start the wall clock;
    evict L2 by clearing a buffer (256 MB or twice L2, as ``kernels.bench.time_ms``); record the
    start event, call, record the end event; synchronise the device (every stream) and stop the
    wall clock. The flush runs on the GPU while the host records the start event and launches
    the call, so the events measure the GPU's work rather than the launch.
    """
    trials = trials or PERF_TRIALS
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = torch.empty(max(2 * l2, FLUSH_BYTES), dtype=torch.int8, device="cuda")
    tensors = [x for x in args if isinstance(x, torch.Tensor)]
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
            torch.cuda.synchronize()
        events, walls = [], []
        for trial in range(trials + discard_first):
            _bump_versions(tensors)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            began = time.perf_counter()
            flush.zero_()
            start.record()
            fn(*args)
            end.record()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - began) * 1e3
            if trial >= discard_first:
                events.append(start.elapsed_time(end))
                walls.append(wall)
    del flush
    return Timing(events, walls)


# --- the result ----------------------------------------------------------------------------------

@dataclass
class Result:
    """What :func:`evaluate` found for one ModelNew on one problem."""

    problem: int
    name: str
    entry: str
    kernelbench_passed: bool = False  # KernelBench's own correctness rules
    failures: list = field(default_factory=list)  # (check, why), in the order found
    trials_passed: int = 0
    trials: int = 0
    max_abs_diff: float = math.nan
    timings: dict = field(default_factory=dict)  # "ModelNew", "eager", "torch.compile" -> Timing
    notes: list = field(default_factory=list)
    bytes: int = 0
    gpu: str = ""

    @property
    def passed(self) -> bool:
        return self.kernelbench_passed and not self.failures

    @property
    def reason(self) -> str:
        if not self.failures:
            return ""
        check, why = self.failures[0]
        others = [c.split(" (")[0] for c, _ in self.failures[1:]]
        return f"{check}: {why}" + (f" [also failed: {', '.join(others)}]" if others else "")

    def ms(self, program: str = "ModelNew") -> float:
        timing = self.timings.get(program)
        return timing.mean if timing else math.nan

    def speedup(self, baseline: str) -> float:
        return self.ms(baseline) / self.ms() if baseline in self.timings and self.timings.get("ModelNew") else math.nan

    @property
    def gbps(self) -> float:
        return bench.gbps(self.bytes, self.ms()) if self.timings.get("ModelNew") else math.nan

    @property
    def verdict(self) -> str:
        """One line for a learner: PASS or FAIL, the problem, the entry, and why or how fast."""
        head = f"{'PASS' if self.passed else 'FAIL'}  {self.problem:>3} {self.name.split('_', 1)[1]:<17} {self.entry}: "
        if not self.passed:
            tail = "" if not self.kernelbench_passed else " (KernelBench's own rules: PASS)"
            return head + self.reason + tail
        text = f"{self.trials_passed}/{self.trials} trials and every check passed"
        if self.timings.get("ModelNew"):
            text += f", {self.ms():.3f} ms"
            for baseline in ("eager", "torch.compile"):
                if baseline in self.timings:
                    text += f", {self.speedup(baseline):.2f}x {baseline}"
        return head + text

    def row(self) -> dict:
        """This result as a CSV row (kernels.results.save_table)."""
        def number(x):
            return "" if isinstance(x, float) and math.isnan(x) else f"{x:.6g}"

        return {"gpu": self.gpu, "problem": self.problem, "name": self.name, "entry": self.entry,
                "verdict": "PASS" if self.passed else "FAIL",
                "kernelbench": "PASS" if self.kernelbench_passed else "FAIL",
                "reason": self.reason, "trials": f"{self.trials_passed}/{self.trials}",
                "ms": number(self.ms()), "eager_ms": number(self.ms("eager")),
                "compile_ms": number(self.ms("torch.compile")),
                "speedup_eager": number(self.speedup("eager")),
                "speedup_compile": number(self.speedup("torch.compile")),
                "gbps": number(self.gbps), "max_abs_diff": number(self.max_abs_diff),
                "notes": "; ".join(self.notes)}


def fast_p(results, p: float, baseline: str = "eager") -> float:
    """KernelBench's fast_p: the fraction of problems whose ModelNew is correct and more than
    ``p`` times faster than ``baseline`` ("eager" or "torch.compile"); Results or CSV rows."""
    column = {"eager": "speedup_eager", "torch.compile": "speedup_compile"}[baseline]
    found = [r.row() if isinstance(r, Result) else r for r in results]
    fast = [r for r in found if r["kernelbench"] == "PASS" and r[column] not in ("", None)
            and float(r[column]) > p]
    return len(fast) / len(found) if found else math.nan


def rows(results) -> list[dict]:
    return [r.row() for r in results]


def table(results) -> str:
    """A Markdown table of results (Result objects, or rows read back with
    ``kernels.results.read_table``), with the reason of every failure under it."""
    def cell(value, fmt):
        if value in ("", None) or (isinstance(value, float) and math.isnan(value)):
            return "–"
        return fmt.format(float(value))

    lines = ["| problem | entry | verdict | ModelNew ms | eager ms | torch.compile ms "
             "| vs eager | vs compile | GB/s |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    reasons = []
    for r in results:
        r = r.row() if isinstance(r, Result) else r
        verdict = r["verdict"] if r["verdict"] == "PASS" else f"FAIL ({len(reasons) + 1})"
        if r["verdict"] != "PASS":
            reasons.append(f"({len(reasons) + 1}) {r['problem']}, {r['entry']}: {r['reason']}")
        lines.append(f"| {r['problem']} {str(r['name']).split('_', 1)[-1]} | {r['entry']} | {verdict} "
                     f"| {cell(r['ms'], '{:.3f}')} | {cell(r['eager_ms'], '{:.3f}')} "
                     f"| {cell(r['compile_ms'], '{:.3f}')} | {cell(r['speedup_eager'], '{:.2f}x')} "
                     f"| {cell(r['speedup_compile'], '{:.2f}x')} | {cell(r['gbps'], '{:.0f}')} |")
    return "\n".join(lines + ([""] + reasons if reasons else []))


# --- the validator -------------------------------------------------------------------------------

def _trial(model, reference, inputs):
    """One correctness trial: (output, reference output, [(check, why), ...]). ModelNew first, on
    the inputs; the reference on copies taken before; then the inputs compared with the copies.
    The tolerance is KernelBench's for the reference's dtype."""
    originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    poison_allocator(inputs[0].device)  # memory nobody wrote reads NaN, never a lucky value
    try:
        with torch.no_grad():
            out = model(*inputs)
        _synchronize(inputs)
    except Exception as error:  # the learner's code: report it, never crash the notebook
        return None, None, [("runs", f"ModelNew raised {_describe_error(error)}")]
    with torch.no_grad():
        ref = reference(*originals)
    failures = []
    failure = check_output(out, ref, TOLERANCES.get(ref.dtype, TOLERANCES[torch.float32]))
    if failure is not None:
        failures.append(("correct", failure))
    failure = check_inputs_unchanged(inputs, originals)
    if failure is not None:
        failures.append(("inputs unchanged", failure))
    return out, ref, failures


def _comparable(out, ref) -> bool:
    return isinstance(out, torch.Tensor) and isinstance(ref, torch.Tensor) and \
        out.shape == ref.shape and out.dtype == ref.dtype and out.device == ref.device


def evaluate(problem, model_new, entry: str = "ModelNew", trials: int = CORRECT_TRIALS,
             perf_trials: int | None = None, seed: int = SEED, device="cuda",
             exact_inputs: bool = True, measure: bool | None = None,
             precision=torch.float32, verbose: bool = False) -> Result:
    """Run ``model_new`` (a ModelNew class, an instance, or a source text defining ModelNew) on a
    problem under KernelBench's rules and this module's checks (see the module's docstring).

    ``exact_inputs``: draw the inputs on the CPU, KernelBench's exact values (seconds of CPU time
    per 2^30 values), else on ``device`` from the same distributions. ``measure``: time ModelNew,
    eager Model and torch.compile(Model) (by default on a CUDA device); as in KernelBench, only
    a ModelNew that passed the correctness trials is timed. Errors of the learner's code become
    a FAIL result with the reason; only a call that cannot be evaluated at all (no ModelNew, an
    unknown problem) raises :class:`KernelBenchError`.
    """
    problem = get_problem(problem)
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    measure = device.type == "cuda" if measure is None else measure
    if measure and device.type != "cuda":
        raise KernelBenchError("timing needs a CUDA device (pass measure=False on the CPU)")
    if precision not in TOLERANCES:
        raise KernelBenchError(f"precision must be one of {list(TOLERANCES)}, got {precision}")
    result = Result(problem.id, problem.name, entry, bytes=problem.min_bytes(),
                    gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    failures: dict = {}  # check -> (the first reason, the trials it failed in)

    def fail(check, why, trial=None):
        first, where = failures.get(check, (why, []))
        failures[check] = (first, where + ([trial] if trial else []))

    def say(text):
        if verbose:
            print(f"[{problem.name}, {entry}] {text}", flush=True)

    try:
        model = _instantiate(model_new, problem).to(device=device, dtype=precision)
    except KernelBenchError:
        raise  # the call itself is wrong: no ModelNew, not a class, ...
    except Exception as error:  # KernelBench's "compiled: False"
        fail("builds", f"ModelNew() raised {_describe_error(error)} (call ModelNew() yourself "
                       f"for the whole error)")
        model = None
    reference = problem.model().to(device=device, dtype=precision)

    def inputs_for(seed_):
        if exact_inputs:
            return _on_device(problem.get_inputs(seed_), device, precision)
        generator = torch.Generator(device=device).manual_seed(seed_)
        return _on_device(problem.make_inputs(problem.sizes, generator, device), device, precision)

    if not failures:
        # The last trial's inputs go straight to _beyond, which frees them before its last step.
        _beyond(model, reference, problem,
                _correctness(model, reference, inputs_for, trial_seeds(seed, trials), result, fail, say),
                device, precision, seed, fail, say)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result.failures = [(check + (f" (trial{'s' * (len(where) > 1)} {', '.join(map(str, where))})"
                                 if where else ""), why) for check, (why, where) in failures.items()]
    if measure and result.kernelbench_passed and not failures.get("runs"):
        _measure(problem, model, reference, inputs_for(seed), result, perf_trials, say)
    return result


def _correctness(model, reference, inputs_for, seeds, result, fail, say):
    """KernelBench's trials (plus the input and constant checks); the last trial's inputs, or
    None when ModelNew could not run."""
    outputs, references, inputs = [], [], None
    result.trials = len(seeds)
    for k, trial_seed in enumerate(seeds, 1):
        inputs = None  # the previous trial's tensors are freed before the next are made
        inputs = inputs_for(trial_seed)
        out, ref, failures = _trial(model, reference, inputs)
        if _comparable(out, ref):
            diff = (out.double() - ref.double()).abs().max().item()
            result.max_abs_diff = diff if math.isnan(result.max_abs_diff) else max(result.max_abs_diff, diff)
        say(f"trial {k}: " + ("; ".join(why for _, why in failures) or "pass"))
        for check, why in failures:
            fail(check, why, k)
        if any(check == "runs" for check, _ in failures):
            return None  # it raised: nothing more to learn from further calls
        if not any(check == "correct" for check, _ in failures):
            result.trials_passed += 1  # KernelBench's rule: the output, whatever the inputs
        outputs.append(out.detach().clone() if isinstance(out, torch.Tensor) else out)
        references.append(ref)
    result.kernelbench_passed = result.trials_passed == result.trials
    failure = check_not_constant(outputs, references)
    if failure:
        fail("not constant", failure)
    return inputs


def _beyond(model, reference, problem, last, device, precision, seed, fail, say) -> None:
    """:func:`check_recomputes` on the last trial's tensors (new values from KernelBench's
    distribution), then the trial with inputs outside it. Nothing when ModelNew could not run
    (``last`` is None)."""
    if last is None:
        return
    generator = torch.Generator(device=device).manual_seed(seed + 2)
    new = _on_device(problem.make_inputs(problem.sizes, generator, device), device, precision)
    with torch.no_grad():
        expected = reference(*new)
    try:
        failure = check_recomputes(model, last, new, expected, TOLERANCES[precision])
    except Exception as error:
        failure = f"ModelNew raised {_describe_error(error)}"
    if failure:
        fail("recomputes", failure)
    del new, expected, last
    generator = torch.Generator(device=device).manual_seed(seed + 1)
    off = _on_device(problem.off_distribution(problem.sizes, generator, device), device, precision)
    _, _, failures = _trial(model, reference, off)
    say("off-distribution trial: " + ("; ".join(why for _, why in failures) or "pass"))
    for check, why in failures:
        fail("beyond KernelBench's inputs" if check == "correct" else check,
             f"{problem.off_text}: {why}")


def _measure(problem, model, reference, inputs, result, perf_trials, say) -> None:
    """Time ModelNew, eager Model and torch.compile(Model) on the same inputs, then check that
    ModelNew's work was on the timed stream and flag an excessive speed-up (KernelBench's 10x)."""
    try:
        result.timings["ModelNew"] = time_trials(model, inputs, perf_trials, WARMUP_NEW)
    except Exception as error:
        result.failures.append(("times", f"ModelNew raised {_describe_error(error)} while timed"))
        return
    say(f"ModelNew {result.ms():.3f} ms")
    result.timings["eager"] = time_trials(reference, inputs, perf_trials, WARMUP_REFERENCE)
    say(f"eager {result.ms('eager'):.3f} ms")
    torch._dynamo.reset()  # as measure_ref_program_time: a fresh compile of this Model
    compiled = torch.compile(reference)
    result.timings["torch.compile"] = time_trials(compiled, inputs, perf_trials, WARMUP_REFERENCE)
    say(f"torch.compile {result.ms('torch.compile'):.3f} ms")
    failure = check_timed_stream(result.timings["ModelNew"], result.timings["eager"])
    if failure:
        result.failures.append(("timed stream", failure))
    note = excessive_speedup_note(result.speedup("eager"))
    if note:
        result.notes.append(note)
    del compiled, inputs
    torch.cuda.empty_cache()


# --- cheats: what the checks are for ---------------------------------------------------------

@dataclass(frozen=True)
class Cheat:
    """A ModelNew that tries to pass without computing the loss honestly."""

    model: type
    check: str  # the check that catches it (Result.failures names it)
    kernelbench_accepts: bool | None  # whether KernelBench's own rules pass it (None: it depends)
    gpu_only: bool = False


def cheats(problem) -> dict[str, Cheat]:
    """The cheats KernelBench's adversarial tests and issues describe, and the shortcuts its
    inputs allow, as ModelNews for ``problem`` (for the chapter and the tests)."""
    problem = get_problem(problem)
    reference = problem.model

    class ZeroOutput(torch.nn.Module):
        def forward(self, *inputs):
            return torch.zeros((), dtype=inputs[0].dtype, device=inputs[0].device)

    class Constant(torch.nn.Module):
        """The loss's typical value for KernelBench's inputs, whatever the inputs."""

        def forward(self, *inputs):
            value = {94: 0.2, 95: 8.36, 96: 0.1, 100: 1.0}[problem.id]
            return torch.tensor(value, dtype=inputs[0].dtype, device=inputs[0].device)

    class ZeroesInputs(torch.nn.Module):
        """KernelBench's zero_out_kernel: zero the inputs, return 0 (what the reference would
        return if it ran after this on the same tensors)."""

        def forward(self, *inputs):
            for x in inputs:
                x.zero_()
            return torch.zeros((), dtype=inputs[0].dtype, device=inputs[0].device)

    class AnswerThenChangesInput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.reference = reference()

        def forward(self, *inputs):
            out = self.reference(*inputs)
            inputs[0].mul_(0.5)
            return out

    class Uninitialised(torch.nn.Module):
        """KernelBench's result_reuse_kernel: an output allocated and never written, which may
        hold whatever the allocator's memory held (a reference's freed result, say)."""

        def forward(self, *inputs):
            return torch.empty((), dtype=inputs[0].dtype, device=inputs[0].device)

    class CachedByAddress(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.reference, self.cache = reference(), {}

        def forward(self, *inputs):
            key = tuple(x.data_ptr() for x in inputs)
            if key not in self.cache:
                self.cache[key] = self.reference(*inputs)
            return self.cache[key]

    class SideStream(torch.nn.Module):
        """KernelBench's non_default_stream_kernel: the work on a stream of its own, which the
        current stream never waits for."""

        def __init__(self):
            super().__init__()
            self.reference, self.stream = reference(), torch.cuda.Stream()

        def forward(self, *inputs):
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                return self.reference(*inputs)

    found = {
        "zero output": Cheat(ZeroOutput, "correct", False),
        "a constant": Cheat(Constant, "not constant", None),
        "zeroes its inputs": Cheat(ZeroesInputs, "inputs unchanged", False),
        "answers, then changes an input": Cheat(AnswerThenChangesInput, "inputs unchanged", True),
        "uninitialised output": Cheat(Uninitialised, "correct", False),
        "result cached by address": Cheat(CachedByAddress, "recomputes", None),
        "work on a side stream": Cheat(SideStream, "timed stream", True, gpu_only=True),
    }

    class HalfSquaredError(torch.nn.Module):
        """Huber's quadratic part only: |p - t| < 1 for KernelBench's inputs."""

        def forward(self, predictions, targets):
            return 0.5 * torch.mean((predictions - targets) ** 2)

    class NoClamp(torch.nn.Module):
        """The hinge without its clamp: 1 - p t > 0 for KernelBench's inputs."""

        def forward(self, predictions, targets):
            return torch.mean(1 - predictions * targets)

    class NoMaxSubtracted(torch.nn.Module):
        """log(sum(exp(x))) without the max first: exp never overflows for logits in [0, 1)."""

        def forward(self, predictions, targets):
            lse = torch.log(torch.exp(predictions).sum(1))
            return torch.mean(lse - predictions.gather(1, targets[:, None])[:, 0])

    shortcut = {96: ("only Huber's quadratic part", HalfSquaredError),
                100: ("no clamp", NoClamp), 95: ("no max subtracted", NoMaxSubtracted)}
    if problem.id in shortcut:
        name, model = shortcut[problem.id]
        found[name] = Cheat(model, "beyond KernelBench's inputs", True)
    return found


# --- the course's entries ----------------------------------------------------------------------

_OPS = None


def course_ops():
    """The course's final operators, built once per process (kernels.operators.build())."""
    global _OPS
    if _OPS is None:
        from . import operators

        _OPS = operators.build()
    return _OPS


class CourseMSE(torch.nn.Module):
    """Problem 94 with chapter 6's fused MSE (kernels/ch6_operators/fused_losses.cu)."""

    def __init__(self):
        super().__init__()
        self.ops = course_ops()

    def forward(self, predictions, targets):
        return self.ops.mse(predictions, targets)


class CourseCrossEntropy(torch.nn.Module):
    """Problem 95 with chapter 5's fused cross-entropy (kernels/ch5_cross_entropy/v3_fused_rows.cu)."""

    def __init__(self):
        super().__init__()
        self.ops = course_ops()

    def forward(self, predictions, targets):
        return self.ops.cross_entropy(predictions, targets)


class CourseHuber(torch.nn.Module):
    """Problem 96 with chapter 6's fused Smooth L1: beta = 1, the Huber loss with delta = 1."""

    def __init__(self):
        super().__init__()
        self.ops = course_ops()

    def forward(self, predictions, targets):
        return self.ops.smooth_l1(predictions, targets, beta=1.0)


class CourseHinge(torch.nn.Module):
    """Problem 100 with chapter 6's fused Hinge.

    The course's op takes a target of the predictions' shape, or one row of their last dimension
    (``targets[j]`` pairs with column j): exactly PyTorch's broadcast of KernelBench's (N,)
    targets against (N, N) predictions. Any other broadcastable target (say (N, 1), a label per
    row) is expanded to the predictions' shape first: one more pass, never a wrong answer.
    """

    def __init__(self):
        super().__init__()
        self.ops = course_ops()

    def forward(self, predictions, targets):
        if torch.broadcast_shapes(predictions.shape, targets.shape) != predictions.shape:
            predictions = predictions.expand(torch.broadcast_shapes(predictions.shape, targets.shape))
        row = targets.dim() >= 1 and all(s == 1 for s in targets.shape[:-1]) \
            and targets.shape[-1] == predictions.shape[-1]
        if targets.shape != predictions.shape and not row:
            targets = targets.expand(predictions.shape)
        return self.ops.hinge(predictions.contiguous(), targets.contiguous())


COURSE_ENTRIES = {94: CourseMSE, 95: CourseCrossEntropy, 96: CourseHuber, 100: CourseHinge}
