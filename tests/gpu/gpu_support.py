"""Shared by the GPU test suites: kernel discovery, tolerances' helpers and reliability records.

Importable from the tests in this folder (pytest puts the folder on sys.path) and from
sanitize_driver.py, which runs as a script.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernels.build.build_cache import Sources  # noqa: E402  (the repository is on sys.path now)

KERNELS = ROOT / "kernels"
ELEMENT_WISE_CHAPTERS = ("ch2_atomics", "ch3_block_reduction", "ch4_two_pass")
CROSS_ENTROPY_CHAPTER = "ch5_cross_entropy"
OPERATORS_CHAPTER = "ch6_operators"
LLM_CHAPTER = "ch7_llm_cross_entropy"
MULTI_GPU_CHAPTER = "ch8_multi_gpu"
# Loss scales one training step after another, for the tests of the loss-scaling guess
# (kernels/ops/grad_guess.py): a first miss, a hit, a smaller scale, 0 (never used as a
# factor), a hit again, a scale beyond the guess's range, and back to 1.
GUESS_SCALES = (1024.0, 1024.0, 0.5, 0.0, 3.0, 3.0, 2.0**40, 1.0)


def kernel_files(*chapters) -> list[Path]:
    return [p for c in chapters for p in sorted((KERNELS / c).glob("*.cu"))]


def ops_of(path: Path) -> list[str]:
    return [op for op, _ in Sources.read(Path(path).resolve()).launchers]


def version(path: Path) -> str:
    """A kernel version's name in reports: its path relative to kernels/ (or to the repo)."""
    path = Path(path).resolve()
    try:
        return path.relative_to(KERNELS).as_posix()
    except ValueError:
        return path.relative_to(ROOT).as_posix()


def loss_of(op: str):
    """The loss an element-wise op computes: the longest loss name the op's name starts with."""
    from kernels.losses import LOSSES

    names = [name for name in LOSSES if op == name or op.startswith(name + "_")]
    return max(names, key=len) if names else None


def element_wise_cases(chapters=ELEMENT_WISE_CHAPTERS):
    """(file, op) for every op of every kernel file of these chapters, with a readable id."""
    return [(f, op) for f in kernel_files(*chapters) for op in ops_of(f)]


def case_id(case) -> str:
    path, op = case
    return f"{version(path)}::{op}"


_record_lock = threading.Lock()


def kernel_names(run) -> list[str]:
    """The names of the CUDA kernels that run() launches, in the order they started
    (torch.profiler's records)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [e.name for e in sorted(prof.events(), key=lambda e: e.time_range.start)
            if e.device_type == torch.autograd.DeviceType.CUDA]


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else ""


def record(version_name: str, case: str, outcome: str, max_rel_error=None, **extra) -> None:
    """Append one result to $RELIABILITY_RESULTS (JSON lines) for tools/reliability_report.py."""
    target = os.environ.get("RELIABILITY_RESULTS")
    if not target:
        return
    entry = {"version": version_name, "case": case, "outcome": outcome, "gpu": _gpu_name()}
    if max_rel_error is not None:
        entry["max_rel_error"] = (max_rel_error if math.isfinite(max_rel_error)
                                  else str(max_rel_error))
    entry.update(extra)
    with _record_lock, open(target, "a") as handle:
        handle.write(json.dumps(entry) + "\n")
