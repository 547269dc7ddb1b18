"""What produced a set of outputs: GPU, driver, torch, CUDA and nvcc versions, and the date."""

from __future__ import annotations

import datetime
import re
import shutil
import subprocess


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


def environment() -> dict:
    """The environment record stored in each executed notebook's metadata."""
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    return {
        "gpu": gpu,
        "driver": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "nvcc": nvcc_version(),
        "date": datetime.date.today().isoformat(),
    }
