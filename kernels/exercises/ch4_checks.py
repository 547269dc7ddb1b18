"""Checks for chapter 4's exercises.

``check_kahan(kernel)``: exercise 4.1's final pass must be compensated, so its MSE passes the
usual check and a strict one, at most 2e-7 relative error at about 2^26 elements, where a plain
float accumulator over the partial sums drifts further (``kernels.check`` raises on a failing case).
"""

from __future__ import annotations

from ..measure.correctness import check

STRICT_RTOL = 2e-7
STRICT = [("2^26", (1 << 26,)), ("2^26 + 1001", ((1 << 26) + 1001,)), ("3 x 2^25", (3 << 25,))]


def check_kahan(kernel) -> int:
    """Both suites; returns the number of cases passed, as ``kernels.check`` does."""
    return check(kernel.mse, "mse") + check(kernel.mse, "mse", rtol=STRICT_RTOL, shapes=STRICT)
