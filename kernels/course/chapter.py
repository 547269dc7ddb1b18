"""A chapter's bookkeeping in one object, so that a notebook says it once: ``ch = Chapter("ch3")``.

- ``ch.gpu``, ``ch.peak``: the GPU's name and the bandwidth the chapter's rows are compared
  with, measured once, when first asked for (creating a ``Chapter`` needs no GPU);
- ``ch.save(measured)``, ``ch.rows()``: the chapter's rows in ``<results>/ch3.csv``
  (:mod:`kernels.measure.results`, which ``$KERNELS_RESULTS_DIR`` redirects);
- ``ch.published_rows()``: the rows the book publishes, ``book/results/ch3.csv``, whatever
  ``$KERNELS_RESULTS_DIR`` says: a solutions notebook reads them, so it runs on its own;
- ``ch.exercise(source, check)``: build an exercise, check it, print one verdict;
- ``ch.allow_recompiles()``: let ``torch.compile(dynamic=False)`` compile every size of a sweep;
- ``launch_or_stored(...)``: a multi-GPU run, or on one GPU the stored one (chapter 8);
- ``grade(source, passed, case)``: the exercises' grading rule, for checkers of their own.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import sys
from pathlib import Path

from ..measure import bench, results

ROOT = Path(__file__).resolve().parents[2]


class Chapter:
    """One chapter's id, GPU and peak bandwidth, and what a notebook does with them.

    ``bandwidth`` names the peak that the chapter's rows store (``peak_gbps``) and its plots
    draw: ``"read"`` (:func:`kernels.measure.bench.read_bandwidth`), the bound of a loss, which
    only has to read; or ``"copy"`` (:func:`kernels.measure.bench.copy_bandwidth`, bytes read
    plus bytes written) for a chapter whose kernels write as many bytes as they read.
    """

    BANDWIDTHS = ("read", "copy")

    def __init__(self, id: str, bandwidth: str = "read"):
        if bandwidth not in self.BANDWIDTHS:
            raise ValueError(f"bandwidth must be one of {self.BANDWIDTHS}, not {bandwidth!r}")
        self.id = id
        self.bandwidth = bandwidth
        self._gpu = None
        self._peak = None

    def __repr__(self):
        return f"Chapter({self.id!r})"

    @property
    def gpu(self) -> str:
        """The name of the GPU this notebook runs on (the rows' ``gpu`` column)."""
        if self._gpu is None:
            import torch

            self._gpu = torch.cuda.get_device_name()
        return self._gpu

    @property
    def peak(self) -> float:
        """The bandwidth in GB/s, measured the first time it is asked for and then kept: every
        row of the notebook is compared with the same number."""
        if self._peak is None:
            measure = bench.copy_bandwidth if self.bandwidth == "copy" else bench.read_bandwidth
            self._peak = measure()
        return self._peak

    def save(self, measured, name: str | None = None) -> Path:
        """Write measurements to ``<results>/<name>.csv`` (``name``: the chapter's id by
        default), replacing the file. ``measured`` holds :class:`kernels.measure.bench.Measurement`
        objects, made into rows with this chapter's id, GPU and peak; or rows already made
        (dicts with the columns of :data:`kernels.measure.results.COLUMNS`), written as they are."""
        measured = list(measured)
        if all(isinstance(m, dict) for m in measured):
            rows = measured
        else:
            rows = results.rows_from(measured, self.gpu, self.id, self.peak)
        return results.save(rows, name or self.id)

    def rows(self, name: str | None = None) -> list[dict]:
        """The rows of ``<results>/<name>.csv``, as this notebook (or its last run) saved them."""
        return results.read_rows(name or self.id)

    def published_rows(self, name: str | None = None) -> list[dict]:
        """The rows the book publishes, ``book/results/<name>.csv``, even when
        ``$KERNELS_RESULTS_DIR`` sends this run's measurements elsewhere."""
        name = name or self.id
        return results.read_rows(name, results.PUBLISHED_DIR / f"{name}.csv")

    def exercise(self, source, check) -> bool:
        """Build an exercise's kernel file, run ``check(kernel)`` on it, print one verdict.

        ``check`` prints a line per case and either raises :class:`kernels.CheckFailed`
        (``kernels.check``) or returns False (the chapters' own checks) when a case fails; it
        returns a true value (``kernels.check``'s number of cases, True) when all pass. None is
        no verdict: ``check(...) and rule(...)`` once stopped at ``check``'s None and counted
        it a pass with the rule never run, so a check returning None raises TypeError. What
        a learner meets on the way, a compile error, a wrong answer, an error the op raises, is
        printed as a FAIL verdict that says what to look at: the cell is meant to be rerun until
        it says PASS. Returns whether it passed.

        The skeleton as shipped fails quietly (its verdict is printed, nothing raised: the
        exercise is not attempted, and the course's own run stores that verdict). A learner's
        attempt that fails raises :class:`ExerciseFailed` after its verdict, with the failing
        case in its message, so that ``pytest --nbval`` on the chapter fails with it.
        """
        from ..build.loader import KernelBuildError, load
        from ..build.skeletons import attempted
        from ..measure.correctness import CheckFailed

        shown = _shown(source)
        mine = attempted(source)
        printed = _Tee(sys.stdout)
        try:
            kernel = load(source)
        except KernelBuildError as error:
            print(error)  # the compiler's diagnostics, pointing at the course's files
            return _verdict(shown, "it does not compile: fix the first error above (its file and "
                                   "line are given), then rerun this cell", mine, str(error))
        try:
            with contextlib.redirect_stdout(printed):
                verdict = check(kernel)
            if verdict is None:
                raise TypeError(f"the check of {shown} returned None: return whether it passed")
            passed = bool(verdict)
        except CheckFailed as failure:
            print(failure)
            return _verdict(shown, "the case above gives a different answer from PyTorch's (the "
                                   "cases before it pass): fix the kernel, then rerun this cell",
                            mine, str(failure))
        except RuntimeError as error:  # from the op: a launch that cannot run, a TORCH_CHECK
            message = str(error).strip().splitlines()
            print(f"{type(error).__name__}: {message[0] if message else ''}")
            lost = "CUDA error" in str(error)
            return _verdict(shown, "the op raised the error above"
                            + (": the GPU context is lost after it, so restart the notebook's "
                               "kernel before rerunning" if lost else ": fix the kernel, then "
                               "rerun this cell"), mine, message[0] if message else "")
        if not passed:
            return _verdict(shown, "a case above FAILs: fix the first one, then rerun this cell",
                            mine, printed.first_failure())
        print(f"PASS  {shown}: every case of the check passes")
        return True

    @staticmethod
    def allow_recompiles(limit: int = 64) -> None:
        """Let ``torch.compile(dynamic=False)`` compile one graph per size of a sweep.

        Dynamo compiles a function anew for every shape it meets, and past its limit (8 graphs
        per function) it stops compiling and runs the function eagerly, without an error: the
        larger sizes of a sweep would time eager PyTorch under the name ``torch.compile``.
        The setting is ``recompile_limit`` in recent PyTorch, ``cache_size_limit`` in older.
        """
        import torch._dynamo

        config = torch._dynamo.config
        name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        setattr(config, name, limit)


def _shown(source) -> str:
    """A kernel file as a reader knows it: relative to the repository when it is inside it."""
    path = Path(source)
    if path.is_absolute() and path.is_relative_to(ROOT):
        return path.relative_to(ROOT).as_posix()
    return os.fspath(source)


class ExerciseFailed(AssertionError):
    """A learner's attempt at an exercise failed its check; the message says which case."""


class _Tee(io.TextIOBase):
    """Stdout that also keeps what was written: the first FAIL line a check prints names the case."""

    def __init__(self, out):
        self.out, self.parts = out, []

    def write(self, text):
        self.parts.append(text)
        return self.out.write(text)

    def flush(self):
        self.out.flush()

    def first_failure(self) -> str:
        return next((line.strip() for line in "".join(self.parts).splitlines()
                     if line.lstrip().startswith("FAIL")), "")


def launch_or_stored(name: str, task: str, nprocs: int, gpus: int, **options) -> dict:
    """:func:`kernels.ops.ranks.launch` of ``task`` on ``nprocs`` processes where the machine has
    ``gpus`` >= 2, the run then kept in ``book/results/<name>.json``; on a machine with one GPU,
    that stored run, its printed lines shown again under one that says where they come from
    (chapter 8's multi-GPU measurements, which one GPU cannot redo)."""
    import torch

    from ..ops.ranks import launch

    if gpus >= 2:
        run = launch(task, nprocs, **options)
        results.save_json({"gpu": torch.cuda.get_device_name(0), "gpus": gpus,
                           "date": str(datetime.date.today()), "run": run}, name)
        return run
    stored = results.read_published_json(name)
    print(f"{gpus} GPU here: the stored run of {stored['gpus']} x {stored['gpu']} "
          f"({stored['date']}),\nfrom book/results/{name}.json; on two GPUs this cell measures "
          "anew.")
    if options.get("echo", True) and stored["run"]["printed"].strip():
        print(stored["run"]["printed"].rstrip())
    return stored["run"]


def grade(source, passed: bool, case: str) -> None:
    """The grading rule of :meth:`Chapter.exercise` for an exercise checked another way (a
    Python file run by a checker of its own): a learner's failing attempt raises
    :class:`ExerciseFailed` with ``case``, the checker's verdict; the skeleton as shipped, or a
    pass, raises nothing."""
    from ..build.skeletons import attempted

    if not passed and attempted(source):
        raise ExerciseFailed(f"{_shown(source)}: {case.strip()}")


def _verdict(shown: str, why: str, attempted: bool = False, case: str = "") -> bool:
    print(f"FAIL  {shown}: {why}")
    if attempted:
        raise ExerciseFailed(f"{shown}: {case.strip() or why}") from None
    return False
