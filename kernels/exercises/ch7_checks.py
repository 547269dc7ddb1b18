"""Checks for chapter 7's exercise 7.4 (rows split over blocks): the cross-entropy harness of
chapter 5 (:mod:`kernels.exercises.ch5_checks`) on the shapes where splitting matters."""

from __future__ import annotations

from kernels.exercises.ch5_checks import _inputs, _op, compare


def check_split_rows(kernel) -> bool:
    """Exercise 7.4: few long rows, odd lengths (slices that end mid-vector), a row whose
    slices hold only -inf, large logits, ignored rows, and every reduction."""
    op = _op(kernel)
    ok = True
    ok &= compare(op, "short rows, odd classes", *_inputs(129, 1_001))
    for reduction in ("mean", "sum", "none"):
        ok &= compare(op, f"few long rows, {reduction}", *_inputs(7, 131_075), reduction=reduction)
    logits, target = _inputs(32, 256_000)
    ok &= compare(op, "32 rows of Gemma's 256000 classes", logits, target)
    logits[:, : 200_000] = float("-inf")  # most slices of every row hold only -inf
    ok &= compare(op, "the first 200000 classes -inf", logits, target.clamp_min(200_000))
    ok &= compare(op, "logits of magnitude 1e4", *_inputs(16, 65_536, scale=1e4))
    ok &= compare(op, "every 3rd row ignored", *_inputs(33, 50_257, ignore_every=3))
    return ok


__all__ = ["check_split_rows"]
