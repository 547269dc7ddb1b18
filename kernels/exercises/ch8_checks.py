"""Checks for chapter 8's exercises: one PASS or FAIL line per case.

``check_one_collective(path)`` runs chapter 8's check cases (``kernels.ops.ranks.CHECK_CASES``)
on CPU processes over gloo, with ``row_log_sum_exp`` taken from the file at ``path``, and compares
losses and gradients with PyTorch's cross-entropy in float64. No GPU is needed, and the lines
hold no measured number, so the stored output is the same on every machine. A learner's edited
file that fails raises :class:`~kernels.course.chapter.ExerciseFailed` after its lines (the rule
of every exercise: ``pytest --nbval`` on the chapter then fails); the file as shipped does not.
"""

from __future__ import annotations

import re

from ..course.chapter import grade
from .ch5_checks import summary


def check_one_collective(path, processes: int = 3) -> None:
    from kernels.ops.ranks import launch

    try:
        result = launch("check", processes, backend="gloo", echo=False, lse_file=str(path))
    except RuntimeError as error:
        # The error as a rank raised it, without torchrun's "[rankN]: " prefix: which rank
        # reports first changes from run to run, and the stored output must not.
        lines = [re.sub(r"^\[rank\d+\]:\s*", "", line.strip()) for line in str(error).splitlines()
                 if "Error" in line and "ChildFailedError" not in line]
        failure = f"FAIL  the ranks stopped: {lines[-1] if lines else error}"
        print(failure)
        summary(False)
        grade(path, False, failure)
        return
    ok, first_failure = True, ""
    for case in result["cases"]:
        label = (f"{case['split']} split over {processes} ranks, {case['rows']} x {case['vocab']}, "
                 f"{case['reduction']}, smoothing {case.get('smoothing', 0)}")
        verdict = "PASS" if case["passed"] else "FAIL"
        why = "" if case["passed"] else (
            "  (not the same bits on every rank)" if not case["same_bits"] else
            "  (loss or gradient differs from float64)")
        line = f"{verdict}  {label}{why}"
        print(line)
        ok &= case["passed"]
        if not (case["passed"] or first_failure):
            first_failure = line
    summary(ok)
    grade(path, ok, first_failure)
