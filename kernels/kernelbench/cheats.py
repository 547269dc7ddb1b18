"""The cheats the validator is for: ModelNews that try to pass without computing the loss, one
per trick that KernelBench's adversarial tests, its issues and the public leaderboards describe,
each with the check that catches it (the chapter shows them; the tests run every one).

Some are written in PyTorch for brevity where a real cheat would be a CUDA kernel; those whose
trick is in how they read the input (a subsample) do it in a function outside the class, as a
kernel's source would be: the static checks read Python only, and the dynamic checks must catch
them on their own.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import torch

from .problems import get_problem

# The calls evaluate() makes before it times a ModelNew: 5 trials, 2 for check_recomputes, 1 off
# KernelBench's distribution, 2 coverage trials, 1 with an offset and scale.
CHECKING_CALLS = 11

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

    class RegularSubsample(torch.nn.Module):
        """Every other row (and, for an element-wise loss, every fourth column): a quarter or half
        of the bytes. On KernelBench's i.i.d. inputs the mean of a regular subsample is within
        1e-4 of the mean of all."""

        def forward(self, predictions, targets):
            return subsample_loss(reference(), predictions, targets, random=False)

    class RandomSubsample(torch.nn.Module):
        """Half of the rows, drawn afresh at every call."""

        def forward(self, predictions, targets):
            return subsample_loss(reference(), predictions, targets, random=True)

    class TheLibrarysLoss(torch.nn.Module):
        """The reference's own expression, PyTorch's kernels: right, and no kernel of one's own."""

        def forward(self, predictions, targets):
            return torch.nn.functional.mse_loss(predictions, targets)

    class RoundsToBfloat16(torch.nn.Module):
        """Reads the inputs as bfloat16, half the bytes: rounding errors that average out on
        KernelBench's inputs."""

        def forward(self, predictions, targets):
            return downcast_loss(reference(), predictions, targets)

    class ReplaysWhenTimed(torch.nn.Module):
        """Computes for as many calls as the checks before the timing make, then returns its last
        answer: KernelBench times 100 calls on the same inputs, where a replay is right."""

        def __init__(self):
            super().__init__()
            self.reference, self.calls, self.last = reference(), 0, None

        def forward(self, predictions, targets):
            self.calls += 1
            if self.last is None or self.calls <= CHECKING_CALLS:
                self.last = self.reference(predictions, targets)
            return self.last

    found["every other row (and fourth column)"] = Cheat(RegularSubsample, "coverage", None)
    found["a random half of the rows"] = Cheat(RandomSubsample, "coverage", None)
    found["replays when timed"] = Cheat(ReplaysWhenTimed, "fresh inputs", True, gpu_only=True)
    if problem.id == 94:
        found["PyTorch's own loss"] = Cheat(TheLibrarysLoss, "static", True)
        found["reads bfloat16"] = Cheat(RoundsToBfloat16, "offset and scale", True)
    return found


def subsample_loss(model, predictions, targets, random: bool):
    """The loss over a subsample, standing in for a kernel whose loop skips: every other row and,
    for MSE and Huber, every fourth column; or a random half of the rows. (Hinge's columns each
    have their own label, and a quarter of them would not hold the labels' balance.)"""
    rows = predictions.shape[0]
    if random:
        keep = torch.randperm(rows, device=predictions.device)[: max(1, rows // 2)]
        pick = lambda x: x[keep]  # noqa: E731
    else:
        pick = lambda x: x[::2]  # noqa: E731
    if targets.dtype == torch.int64:  # problem 95: a row's loss needs all of its logits
        return model(pick(predictions), pick(targets))
    if targets.dim() < predictions.dim():  # problem 100: a label per column
        return model(pick(predictions), targets)
    columns = slice(None) if random else slice(None, None, 4)
    return model(pick(predictions)[:, columns], pick(targets)[:, columns])


def downcast_loss(model, predictions, targets):
    """The loss of the inputs rounded to bfloat16, computed in float32."""
    rounded = [x.bfloat16().float() if x.is_floating_point() else x for x in (predictions, targets)]
    return model(*rounded)


# --- programs that only an isolated run survives ------------------------------------------------

class Crash(torch.nn.Module):
    """Kills its process (a segmentation fault in a kernel's host code does the same)."""

    def forward(self, predictions, targets):
        os.abort()


class Hang(torch.nn.Module):
    """Never returns (a kernel spinning on a flag no one sets does the same)."""

    def forward(self, predictions, targets):
        while True:
            time.sleep(1)


class DeviceAssert(torch.nn.Module):
    """A device-side assert: the CUDA context is lost, and every later CUDA call fails."""

    def forward(self, predictions, targets):
        torch._assert_async(torch.zeros((), dtype=torch.bool, device=predictions.device))
        return predictions.new_zeros(())


ISOLATED_ONLY = {"crashes": (Crash, "crashed"), "hangs": (Hang, "time limit"),
                 "device-side assert": (DeviceAssert, "runs")}


# --- for the trusted validator only (evaluate_trusted): never in cheats(), which chapter 9 and ---
# --- its tests iterate over with the older validator ---------------------------------------------

@dataclass(frozen=True)
class TrustedCheat(Cheat):
    """A cheat for :func:`~.isolated.evaluate_trusted`, with how its child finds it."""

    spec: str = ""  # cheat:<problem>:<name>, which trusted_cheats(problem)[name] resolves


def trusted_cheats(problem) -> dict[str, TrustedCheat]:
    """:func:`cheats` and the ones only the trusted validator is meant to catch, each with the
    spec its child loads it by (the programs that patch PyTorch are :data:`TRUSTED_ONLY`)."""
    problem = get_problem(problem)
    reference = problem.model

    class HonestUntilTimed(torch.nn.Module):
        """Exercise 9.2's answer: honest for the calls the checks make, then every other row,
        fresh each call: KernelBench's i.i.d. timed inputs hide a subsample, secret spikes don't."""

        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, predictions, targets):
            self.calls += 1
            if self.calls <= CHECKING_CALLS:
                return reference()(predictions, targets)
            return subsample_loss(reference(), predictions, targets, random=False)

    found = dict(cheats(problem))
    found["honest until timed"] = Cheat(HonestUntilTimed, "fresh inputs", None, gpu_only=True)
    return {name: TrustedCheat(c.model, c.check, c.kernelbench_accepts, c.gpu_only,
                               f"cheat:{problem.id}:{name}") for name, c in found.items()}
# --- programs that reach into PyTorch: only a validator whose references run elsewhere survives -

_MEAN = torch.mean  # the library's own, as this module found it
SLOW_PASSES = 4  # the slowed mean's extra passes over its input


def _replace_in_torch(name, new):
    """What a program's import can do unseen by a rule that looks for ``torch.x = ...``."""
    vars(torch)[name] = new


def _slow_mean(x, *args, **kwargs):
    for _ in range(SLOW_PASSES):
        x = x + 0  # a pass that reads and writes the input and changes nothing
    return _MEAN(x, *args, **kwargs)


def _every_other_mean(x, *args, **kwargs):
    return _MEAN(x.reshape(-1)[::2], *args, **kwargs)


class SlowsTheReference(torch.nn.Module):
    """Replaces ``torch.mean``, which problem 94's reference calls, by a slower one that gives the
    same value; its own loss is honest. Where the reference is timed in the program's process
    (KernelBench), the speed-up over eager is the reference's slow-down."""

    def __init__(self):
        super().__init__()
        _replace_in_torch("mean", _slow_mean)

    def forward(self, predictions, targets):
        return honest_mse(predictions, targets)


class ChangesTheReference(torch.nn.Module):
    """Replaces ``torch.mean`` by the mean of every other element, and reads every other element
    itself: where a reference runs in the program's process, it agrees with the program."""

    def __init__(self):
        super().__init__()
        _replace_in_torch("mean", _every_other_mean)

    def forward(self, predictions, targets):
        return _every_other_mean((predictions - targets) ** 2)


def honest_mse(predictions, targets):
    d = (predictions - targets).reshape(-1)
    return d.dot(d) / d.numel()


TRUSTED_ONLY = {"slows the reference": (SlowsTheReference, "PyTorch unchanged"),
                "changes the reference's answer": (ChangesTheReference, "coverage")}


@contextlib.contextmanager
def restoring_torch():
    """Run a program in this process (to show what KernelBench would see), then put back every
    function of torch, torch.nn.functional and torch.Tensor that it replaced."""
    import torch.nn.functional as F

    spaces = (torch, F, torch.Tensor)
    kept = [dict(vars(space)) for space in spaces]
    try:
        yield
    finally:
        for space, before in zip(spaces, kept):
            for name, value in before.items():
                if vars(space).get(name) is not value:
                    setattr(space, name, value)
