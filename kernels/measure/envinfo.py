"""What produced a set of outputs: GPU, driver, torch, CUDA and nvcc versions, the date, and how
fast the host runs PyTorch's dispatcher (hosts differ between machines with the same GPU)."""

from __future__ import annotations

import datetime
import re
import shutil
import statistics
import subprocess
import time


def _command_output(*command) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def nvcc_version() -> str:
    nvcc = shutil.which("nvcc")
    found = re.search(r"release ([\d.]+)", _command_output(nvcc, "--version")) if nvcc else None
    return found.group(1) if found else "not found"


def driver_version() -> str:
    out = _command_output("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    return out.strip().splitlines()[0] if out.strip() else "not found"


def host_op_us(calls: int = 2000, runs: int = 5) -> float:
    """µs per ``torch.add`` of two one-element CPU tensors, the median of ``runs``: the Python
    and dispatcher time that every operator call pays on the host. Where a step waits for the
    host (small inputs, the training loops of chapter 6, KernelBench's rule in chapter 9), its
    measured time moves with this; one lent machine ran at about twice another's."""
    import torch

    a, b = torch.ones(1), torch.ones(1)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            torch.add(a, b)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return round(statistics.median(times), 2)


def environment() -> dict:
    """The environment record stored in each executed notebook's metadata (tools/execute.py adds
    the host's speed, :func:`host_op_us`, measured before the notebook runs)."""
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    return {
        "gpu": gpu,
        # how many the process sees: chapter 8's runs say they had two or more
        "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "driver": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "nvcc": nvcc_version(),
        "date": datetime.date.today().isoformat(),
    }
