"""Check a loss op against PyTorch computed in float64, over a fixed suite of awkward cases.

``check(kernel.mse, "mse")`` prints one line per case, for example::

    PASS  mse  not a multiple of the block    (100003,)

and raises :class:`CheckFailed` naming the case, the expected and the received value at the
first failure. The lines hold no measured number, so a notebook's stored output is the same on
every GPU (this is what ``pytest --nbval`` compares).

What the suite guards against: sizes of 1, below one block and not a multiple of the block
(tails dropped or read twice), random non-zero data (zeros hide wrong indexing), a poisoned
allocator (outputs never written), NaN (never passes), and the result's shape, dtype and device
(PyTorch returns a 0-d tensor of the input's dtype on the input's device).
"""

from __future__ import annotations

import math

from ..losses import get_loss

SEED = 2026


class CheckFailed(AssertionError):
    """A kernel gave a different answer from PyTorch's float64 reference."""


def relative_error(got, expected) -> float:
    """max |got - expected| / max(|expected|, tiny), in float64; NaN or Inf give inf."""
    import torch

    got = got.detach().double().cpu()
    expected = expected.detach().double().cpu()
    if not torch.isfinite(got).all():
        return math.inf
    scale = expected.abs().max().clamp_min(1e-30)
    return ((got - expected).abs().max() / scale).item()


def poison_allocator(device="cuda") -> None:
    """Fill the memory PyTorch's caching allocator will hand out next with NaN.

    The allocator reuses freed blocks, so an op that forgets to write (or to zero) part of its
    output finds NaN there and fails the check instead of finding a lucky zero.
    """
    import torch

    blocks = [torch.full((size,), math.nan, device=device)
              for size in (1, 128, 16_384, 262_144) for _ in range(4)]
    del blocks


def _describe_mismatch(got, expected) -> str:
    if got.shape != expected.shape:
        return f"shape {tuple(got.shape)} (PyTorch returns {tuple(expected.shape)})"
    if got.dtype != expected.dtype:
        return f"dtype {got.dtype} (PyTorch returns {expected.dtype})"
    if got.device != expected.device:
        return f"device {got.device} (PyTorch returns {expected.device})"
    return ""


def check_case(op, loss_name, label, shape, rtol, seed=SEED, dtype=None, device="cuda",
               **kwargs) -> str:
    """Run one case; return its PASS line or raise CheckFailed.

    ``device``: where the inputs are made; "cpu" lets the tests check the check with stand-in ops.
    """
    import torch

    loss = get_loss(loss_name)
    generator = torch.Generator(device=device).manual_seed(seed)
    inputs = loss.make_inputs(shape, generator, device, dtype)
    expected_like = loss.reference(*inputs, **kwargs)
    expected = loss.reference64(inputs, **kwargs)
    poison_allocator(device)
    got = op(*inputs, **kwargs)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    where = f"{loss_name}, {label} {tuple(shape)}"
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"FAIL {where}: returned {type(got).__name__}, not a tensor")
    mismatch = _describe_mismatch(got, expected_like)
    if mismatch:
        raise CheckFailed(f"FAIL {where}: returned {mismatch}")
    error = relative_error(got, expected)
    if not error <= rtol:  # NaN compares false, so it never passes
        shown = f"{got.item():.9g}" if got.numel() == 1 else f"tensor of {got.numel()}"
        want = f"{expected.item():.9g}" if expected.numel() == 1 else "(see reference)"
        raise CheckFailed(f"FAIL {where}: expected {want}, got {shown} "
                          f"(relative error {error:.2e} > {rtol:.0e})")
    return f"PASS  {loss_name:<13} {label:<32} {tuple(shape)}"


# (label, which input, value): one element of a 100003-element input replaced. PyTorch's answer
# (in float32) is the reference: NaN stays NaN, an infinity stays the same infinity. A loss
# written with fminf/fmaxf can drop a NaN (fmaxf(NaN, 0) is 0): these cases catch it.
SPECIAL_VALUES = (
    ("a NaN in pred", 0, math.nan),
    ("a NaN in target", 1, math.nan),
    ("+inf in pred", 0, math.inf),
    ("-inf in pred", 0, -math.inf),
)


def check_special_value(op, loss_name, label, which, value, seed=SEED, device="cuda") -> str:
    """One element set to NaN or an infinity; return the PASS line or raise CheckFailed."""
    import torch

    loss = get_loss(loss_name)
    generator = torch.Generator(device=device).manual_seed(seed)
    inputs = list(loss.make_inputs((100_003,), generator, device, None))
    inputs[which].view(-1)[inputs[which].numel() // 2] = value
    expected = loss.reference(*inputs)
    got = op(*inputs)
    where = f"{loss_name}, {label}"
    if torch.isnan(expected):
        ok = bool(torch.isnan(got))
    elif torch.isinf(expected):
        ok = got.item() == expected.item()
    else:
        ok = relative_error(got, loss.reference64(inputs)) <= 1e-5
    if not ok:
        raise CheckFailed(f"FAIL {where}: PyTorch gives {expected.item()}, got {got.item()}")
    return f"PASS  {loss_name:<13} {label:<32} -> {expected.item()}"


class Checked(int):
    """The number of cases a check passed: an int, so ``check(...) and rule(...)`` runs the rule.

    A notebook cell ending in ``check(...)`` shows the printed cases and no bare number: the
    object displays itself as nothing (``_ipython_display_``), so the 23 stored outputs of such
    cells stay as they are.
    """

    def _ipython_display_(self) -> None:
        pass


def check(op, loss_name, rtol=1e-5, shapes=None, seed=SEED, dtype=None,
          special_values: bool = False, device="cuda", **kwargs) -> Checked:
    """Run the loss's check suite on ``op``; print a line per case; raise at the first failure.

    ``shapes``: (label, shape) pairs, by default the loss's suite. ``special_values``: also the
    NaN and infinity cases of :data:`SPECIAL_VALUES`. Extra keyword arguments go to both the op
    and the PyTorch reference. Returns the number of cases, all passed (at least 1, so true):
    a caller can combine it, ``check(kernel.mse, "mse") and every_lane_reaches_the_shuffles(f)``.
    """
    cases = shapes if shapes is not None else get_loss(loss_name).check_shapes
    count = 0
    for label, shape in cases:
        print(check_case(op, loss_name, label, shape, rtol, seed, dtype, device, **kwargs))
        count += 1
    if special_values:
        for label, which, value in SPECIAL_VALUES:
            print(check_special_value(op, loss_name, label, which, value, seed, device))
            count += 1
    if count == 0:
        raise ValueError("check() was given no cases: an empty suite would pass anything")
    return Checked(count)
