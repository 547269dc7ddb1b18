"""Chapter 1's exercises: numbers the learner works out from the chapter's measurements.

Each check computes its expected value here, out of the learner's sight, and tells a wrong
answer how far off it is, never the answer itself. An answer still ``None`` is not attempted:
one line says so and nothing fails. A wrong answer prints its FAIL line and raises
:class:`~kernels.course.chapter.ExerciseFailed`, so that ``pytest --nbval`` (``make check
CHAPTER=1``) fails with it, as the other chapters' exercises do.
"""

from __future__ import annotations

import math

from ..course.chapter import ExerciseFailed
from ..losses import get_loss
from ..measure import results

ELEMENTS = 1 << 30  # the size of the byte-count exercise
CE_SHAPE = (32768, 4096)  # KernelBench's cross-entropy
CE_FLOPS_PER_LOGIT = 4
MODEL_SIZES = (1 << 20, 1 << 26)  # where the model of eager MSE is checked
MODEL_TOLERANCE = 0.2


def check_answer(what: str, got, expected: float, rtol: float = 0.01) -> bool | None:
    """PASS (True), not attempted (None, ``got`` is None), or FAIL, said and raised."""
    if got is None:
        print(f"not attempted: {what}: replace None above and rerun")
        return None
    try:
        ratio = float(got) / float(expected)
    except (TypeError, ValueError):
        why = f"FAIL: {what}: expected a number, got {got!r}"
    else:
        if math.isclose(ratio, 1.0, rel_tol=rtol):
            print(f"PASS: {what}")
            return True
        off = f"{abs(ratio - 1):.0%} too {'high' if ratio > 1 else 'low'}" if ratio > 0 \
            else "of the wrong sign" if ratio < 0 else "zero"
        why = f"FAIL: {what}: {off} (tolerance {rtol:.0%})"
    print(why)
    raise ExerciseFailed(why)


def check_smooth_l1_bytes(answer) -> None:
    """Exercise 1.1: the bytes eager Smooth L1's kernels move at 2^30 float32 elements."""
    # The element-wise kernel reads p and t and writes the losses; the mean reads the losses.
    check_answer("bytes moved by eager Smooth L1 at 2^30 elements", answer,
                 (2 + 1 + 1) * 4 * ELEMENTS)


def check_mse_model(bytes_per_element, model_ms, rows) -> None:
    """Exercise 1.2: eager MSE's bytes per element, and the model's time against the rows."""
    # pred - target: 8 read, 4 written; ** 2: 4 read, 4 written; mean: 4 read.
    check_answer("bytes eager MSE moves per element", bytes_per_element, 8 + 4 + 4 + 4 + 4, rtol=0)
    for n in MODEL_SIZES:
        measured = next(r["ms"] for r in results.select(rows, loss="mse", provider="eager")
                        if math.prod(r["shape"]) == n)
        check_answer(f"model of eager MSE at 2^{n.bit_length() - 1} elements (ms)",
                     model_ms(n), measured, rtol=MODEL_TOLERANCE)


def check_ce_roofline(intensity, roofline_ms, peak_gbps: float) -> None:
    """Exercise 1.3: cross-entropy's arithmetic intensity and roofline time at KernelBench's size."""
    must_read = get_loss("cross_entropy").min_bytes(CE_SHAPE)
    check_answer("arithmetic intensity of cross-entropy", intensity,
                 CE_FLOPS_PER_LOGIT * math.prod(CE_SHAPE) / must_read)
    check_answer("roofline time of cross-entropy (ms)", roofline_ms, must_read / peak_gbps / 1e6)
