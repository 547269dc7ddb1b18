"""The validator's checks: each takes what a trial produced and returns None, or why it failed, in
words a learner can act on. :mod:`.evaluate` runs them; tests/test_kernelbench_cpu.py gives each
the cheat it is for.
"""

from __future__ import annotations

import torch

from .timing import Timing

EXCESSIVE_SPEEDUP = 10.0  # eval_kernel_against_ref's excessive_speedup_threshold
HIDDEN_MS = 0.05  # check_timed_stream: the least hidden GPU time per call it reports
HIDDEN_FRACTION = 0.5  # ... and the least, as a fraction of the time the events saw


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
    synchronize(inputs)
    failure = check_output(out, expected, tolerance)
    return None if failure is None else f"new values in the same tensors: {failure}"


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


def check_against_float64(out, expected: float, tolerance: float, relative_only: bool = False) -> str | None:
    """None when the scalar ``out`` is within ``tolerance`` of ``expected``, the reference loss
    computed in float64 (Problem.reference64): ``atol = rtol = tolerance`` as KernelBench's
    allclose, or relative only (the coverage trial, whose loss is far from 0 by construction)."""
    if not isinstance(out, torch.Tensor) or out.numel() != 1:
        return f"returned {_value(out)}, not one value"
    got = out.double().item()
    if got != got or got in (float("inf"), float("-inf")):
        return f"output {got} is not finite"
    bound = tolerance * abs(expected) + (0.0 if relative_only else tolerance)
    if abs(got - expected) > bound:
        return (f"output {got:.7g}, float64 reference {expected:.7g}: |difference| "
                f"{abs(got - expected):.3g} > {bound:.3g}")
    return None


def synchronize(tensors) -> None:
    if any(isinstance(x, torch.Tensor) and x.is_cuda for x in tensors):
        torch.cuda.synchronize()
