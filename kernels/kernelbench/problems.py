"""KernelBench's four loss problems as data: the reference ``Model``, ``get_inputs()``'s draws, and
the inputs KernelBench never draws that the validator adds (off its distribution, a loss carried by
a few secret positions, a random offset and scale).

What was read upstream is listed in the package's docstring (``kernels/kernelbench/__init__.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from ..losses import get_loss
from ..measure import bench

UPSTREAM = "https://github.com/ScalingIntelligence/KernelBench"
COMMIT = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"

CORRECT_TRIALS = 5  # scripts/run_and_check.py: num_correct_trials
SEED = 42  # eval_kernel_against_ref: seed_num
TOLERANCES = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}  # atol = rtol

# The coverage trial: K secret positions carry the whole loss, 1/K each (see coverage_spikes).
SPIKES = {torch.float32: 256, torch.float16: 16, torch.bfloat16: 16}
HALF_TERM = 1e4  # the largest loss term a half-precision coverage input holds (fp16 tops at 65504)
REFERENCE_CHUNK = 1 << 24  # elements per float64 chunk of reference64: memory, not speed
# An evaluation's peak GPU memory, in multiples of the least bytes a ModelNew reads: the inputs,
# the copies a trial compares them with, and the eager reference's intermediates (MSE: p - t and
# its square, as large as the inputs).
PEAK_FACTOR = 4


class KernelBenchError(ValueError):
    """A call of this package that cannot be evaluated: no ModelNew, an unknown problem, ..."""


# --- the reference programs ---------------------------------------------------------------------

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


# --- get_inputs(), and refilling the same tensors with new draws --------------------------------

def _regression_inputs(sizes, generator, device="cpu"):
    """94 and 96: ``scale = torch.rand(())``, predictions ``rand * scale`` (scaled in place: the
    same products) and targets ``rand``, both (batch_size, dim): in [0, 1), so |p - t| < 1."""
    shape = (sizes["batch_size"], sizes["dim"])
    scale = torch.rand((), generator=generator, device=device)
    return [torch.rand(shape, generator=generator, device=device).mul_(scale),
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


def _regression_refill(inputs, generator):
    pred, target = inputs
    scale = torch.rand((), generator=generator, device=pred.device).item()
    pred.uniform_(0, 1, generator=generator).mul_(scale)
    target.uniform_(0, 1, generator=generator)


def _cross_entropy_refill(inputs, generator):
    logits, target = inputs
    logits.uniform_(0, 1, generator=generator)
    target.random_(0, logits.shape[1], generator=generator)


def _hinge_refill(inputs, generator):
    pred, labels = inputs
    pred.uniform_(0, 1, generator=generator)
    labels.random_(0, 2, generator=generator).mul_(2).sub_(1)


# --- inputs KernelBench never draws -------------------------------------------------------------

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


def _shift(generator, device, low, high):
    return (low + (high - low) * torch.rand((), generator=generator, device=device)).item()


def _regression_shifted(sizes, generator, device):
    """Predictions and targets ``a + s * randn`` with one random offset, 32 <= |a| < 64 of either
    sign, and scale s in [0.5, 2): (p - t) no longer has the inputs' magnitude, so a kernel that
    rounds the inputs to fewer bits, or expands (p - t)^2 into sums of p^2, pt and t^2, loses the
    answer. |a| stays away from 0: rounding p and t to bfloat16 adds about h^2 / 6 to the loss,
    h the spacing of bfloat16 near |a| (|a| 2^-8 to |a| 2^-7), which for |a| under about 10 is
    within the tolerance: with a in [-64, 64), 4 of 40 secret seeds let the downcast through."""
    shape = (sizes["batch_size"], sizes["dim"])
    sign = 1.0 if _shift(generator, device, 0, 1) < 0.5 else -1.0
    offset, scale = sign * _shift(generator, device, 32, 64), _shift(generator, device, 0.5, 2)
    return [offset + scale * torch.randn(shape, generator=generator, device=device),
            offset + scale * torch.randn(shape, generator=generator, device=device)]


def _cross_entropy_shifted(sizes, generator, device):
    """Logits ``a + s * randn``, a in [-1000, 1000), s in [1, 5): the loss does not depend on a,
    and only a kernel that subtracts the row's maximum sees that."""
    rows, classes = sizes["batch_size"], sizes["num_classes"]
    offset, scale = _shift(generator, device, -1000, 1000), _shift(generator, device, 1, 5)
    return [offset + scale * torch.randn((rows, classes), generator=generator, device=device),
            torch.randint(0, classes, (rows,), generator=generator, device=device)]


def _hinge_shifted(sizes, generator, device):
    """Predictions ``a + s * randn``, a in [-2, 2), s in [0.5, 3): the clamp acts on a share of
    the elements that depends on a and s."""
    pred, labels = _hinge_inputs(sizes, generator, device)
    offset, scale = _shift(generator, device, -2, 2), _shift(generator, device, 0.5, 3)
    return [offset + scale * torch.randn(pred.shape, generator=generator, device=device), labels]


def coverage_spikes(count: int, spikes: int, generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``spikes`` random positions below ``count`` (a repeat is possible and harmless) and a
    weight in [1, 1.5) for each: the positions that carry a coverage input's loss."""
    where = torch.randint(0, count, (spikes,), generator=generator, device=device)
    weight = 1 + 0.5 * torch.rand(spikes, generator=generator, device=device)
    return where, weight


def _term_size(n: int, spikes: int, dtype) -> float:
    """Each spike's loss term: the loss comes to about 1 in float32; in half precision the term
    stays below HALF_TERM, so that the reference Model computes it without overflow."""
    size = n / spikes
    return min(size, HALF_TERM) if dtype in (torch.float16, torch.bfloat16) else size


def _regression_coverage(sizes, generator, device, dtype, spikes, hidden, square):
    """Predictions equal to the targets, bit for bit, so that every term is exactly 0 (or, when
    ``hidden``, KernelBench's own draws), plus ``spikes`` secret positions whose terms are each
    about 1/spikes of a loss of about 1."""
    if hidden:
        pred, target = [x.to(dtype) for x in _regression_inputs(sizes, generator, device)]
    else:
        target = torch.rand((sizes["batch_size"], sizes["dim"]), generator=generator, device=device).to(dtype)
        pred = target.clone()
    where, weight = coverage_spikes(target.numel(), spikes, generator, device)
    term = _term_size(target.numel(), spikes, dtype) * weight
    error = term.sqrt() if square else term + 0.5  # (p - t)^2 = term, or Huber's |p - t| - 1/2
    pred.view(-1)[where] = (target.view(-1)[where].float() + error).to(dtype)
    return [pred, target]


def _mse_coverage(sizes, generator, device, dtype, spikes, hidden):
    return _regression_coverage(sizes, generator, device, dtype, spikes, hidden, square=True)


def _huber_coverage(sizes, generator, device, dtype, spikes, hidden):
    return _regression_coverage(sizes, generator, device, dtype, spikes, hidden, square=False)


def _hinge_coverage(sizes, generator, device, dtype, spikes, hidden):
    """``p[i, j] = y[j] (1 + u)``, so that 1 - p y <= 0 and the clamp gives exactly 0 (or, when
    ``hidden``, KernelBench's own draws), except at ``spikes`` secret elements where
    ``p = -y[j] T`` and the term is 1 + T."""
    pred, labels = [x.to(dtype) for x in _hinge_inputs(sizes, generator, device)]
    if not hidden:
        pred = (labels * (1 + torch.rand(pred.shape, generator=generator, device=device))).to(dtype)
    where, weight = coverage_spikes(pred.numel(), spikes, generator, device)
    term = _term_size(pred.numel(), spikes, dtype) * weight
    pred.view(-1)[where] = (-labels[where % pred.shape[1]].float() * term).to(dtype)
    return [pred, labels]


def _cross_entropy_coverage(sizes, generator, device, dtype, spikes, hidden):
    """Every row's target logit 60, the others in [0, 1): each row's loss below 1e-22 (or, when
    ``hidden``, KernelBench's own draws, about ln(classes)); in ``spikes`` secret rows (at most
    half), one other logit at a secret column is 90 (1000 when hidden) times a weight in [1, 1.5):
    those unequal losses carry the mean (with 90 + u, half of them matched it to 1e-4)."""
    logits, target = _cross_entropy_inputs(sizes, generator, device)
    rows, classes = logits.shape
    if not hidden:
        logits[torch.arange(rows, device=device), target] = 60.0
    spike_rows = torch.randperm(rows, generator=generator, device=device)[:min(spikes, rows // 2 or 1)]
    shift = torch.randint(1, max(classes, 2), (len(spike_rows),), generator=generator, device=device)
    columns = (target[spike_rows] + shift) % classes  # never the target's column (classes > 1)
    weight = 1 + 0.5 * torch.rand(len(spike_rows), generator=generator, device=device)
    logits[spike_rows, columns] = (1000.0 if hidden else 90.0) * weight
    return [logits.to(dtype), target]


def _rows_of(inputs, start, stop, targets_per_row: bool):
    pred, target = inputs
    return [pred[start:stop], target[start:stop] if targets_per_row else target]


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
    refill: Callable  # (inputs, generator): new draws of make_inputs' distributions, in place
    coverage: Callable  # (sizes, generator, device, dtype, spikes, hidden) -> a loss carried by spikes
    shifted: Callable  # (sizes, generator, device) -> inputs with a random offset and scale
    targets_per_row: bool = True  # False for 100, whose targets belong to columns

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

    def reference64(self, inputs) -> float:
        """The reference loss computed in float64 from these (float32 or lower) inputs, a block of
        rows at a time so that no float64 copy of a whole input is made. Every problem is a mean
        over rows (of elements, or of rows' losses), so the blocks' means add up, weighted."""
        rows = inputs[0].shape[0]
        step = max(1, REFERENCE_CHUNK // max(1, inputs[0][0].numel()))
        model, total = self.model(), 0.0
        with torch.no_grad():
            for start in range(0, rows, step):
                block = _rows_of(inputs, start, min(rows, start + step), self.targets_per_row)
                block = [x.double() if x.is_floating_point() else x for x in block]
                total += model(*block).item() * block[0].shape[0]
        return total / rows

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


_REGRESSION_TEXT = "scale = torch.rand(()); [torch.rand(32768, 32768) * scale, torch.rand(32768, 32768)]"

PROBLEMS = {
    94: Problem(94, "94_MSELoss", "mse", "torch.mean((predictions - targets) ** 2)", Model94,
                {"batch_size": 32768, "dim": 32768}, _regression_inputs, _REGRESSION_TEXT,
                _regression_off, "predictions 3 * randn, targets randn",
                _regression_refill, _mse_coverage, _regression_shifted),
    95: Problem(95, "95_CrossEntropyLoss", "cross_entropy",
                "torch.nn.functional.cross_entropy(predictions, targets)", Model95,
                {"batch_size": 32768, "num_classes": 4096}, _cross_entropy_inputs,
                "[torch.rand(32768, 4096), torch.randint(0, 4096, (32768,))]",
                _cross_entropy_off, "logits 40 * randn: exp(logit) overflows float32 unless the "
                                    "row's max is subtracted first",
                _cross_entropy_refill, _cross_entropy_coverage, _cross_entropy_shifted),
    96: Problem(96, "96_HuberLoss", "smooth_l1", "torch.nn.functional.smooth_l1_loss(predictions, targets)",
                Model96, {"batch_size": 32768, "dim": 32768}, _regression_inputs, _REGRESSION_TEXT,
                _regression_off, "|p - t| > 1, Huber's linear part, which KernelBench's inputs "
                                 "never reach",
                _regression_refill, _huber_coverage, _regression_shifted),
    100: Problem(100, "100_HingeLoss", "hinge", "torch.mean(torch.clamp(1 - predictions * targets, min=0))",
                 Model100, {"batch_size": 32768, "dim": 32768}, _hinge_inputs,
                 "[torch.rand(32768, 32768), torch.randint(0, 2, (32768,)).float() * 2 - 1]",
                 _hinge_off, "predictions 2 * randn: 1 - p t < 0 where the clamp acts, which "
                             "KernelBench's inputs never reach",
                 _hinge_refill, _hinge_coverage, _hinge_shifted, targets_per_row=False),
}


def sized_for(problem, free_bytes: int) -> tuple[Problem, str]:
    """The problem at its size if an evaluation fits in ``free_bytes`` of GPU memory, else halved in
    each dimension until it does; and a sentence that says which, for the output.

    With a GPU present, ``free_bytes`` counts no more than this process may allocate
    (:func:`kernels.measure.bench.free_memory`): a cap set with
    ``torch.cuda.set_per_process_memory_fraction``, which ``torch.cuda.mem_get_info`` does not
    see, counts too."""
    if torch.cuda.is_available():
        free_bytes = min(free_bytes, bench.free_memory())
    problem = get_problem(problem)
    fitted = problem
    while PEAK_FACTOR * fitted.min_bytes() > free_bytes and min(fitted.sizes.values()) > 256:
        fitted = fitted.resized(**{k: v // 2 for k, v in fitted.sizes.items()})
    if fitted is problem:
        return problem, f"problem {problem.id} at KernelBench's size"
    sizes = " x ".join(str(v) for v in fitted.sizes.values())
    return fitted, (f"problem {problem.id} at {sizes}: KernelBench's size needs about "
                    f"{PEAK_FACTOR * problem.min_bytes() / 2**30:.0f} GiB, this GPU has "
                    f"{free_bytes / 2**30:.0f} GiB free")


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
