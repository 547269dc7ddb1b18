"""What a notebook needs from a Colab runtime, checked by its set-up cell before anything builds.

Colab in 2026 (its published runtime package lists): torch built with CUDA 12.8, nvcc 12.8 from
apt, no ninja (``load_inline`` then stops with "Ninja is required"); the free GPU is a T4, sm_75.
A runtime without a GPU, or whose nvcc is of another CUDA major version than torch's, would fail
later at the first build with a long traceback: :func:`prepare_colab` says so in one sentence
first. The runtime's disk, the learner's exercise files with it, goes when Colab recycles it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from ..build.toolchain import cuda_mismatch, nvcc_release

GPU_RUNTIME = ("this notebook needs a GPU runtime: Runtime > Change runtime type > a GPU (the free "
               "T4 will do), then run this cell again")


class RuntimeNotReady(RuntimeError):
    """The runtime cannot build or run the course's kernels; the message says what to change."""


def keep_your_files(root: str) -> str:
    """Where the exercise files are, and how to keep them past the runtime."""
    return (f"Your exercise files are in {root}/kernels/exercises/. Colab deletes them with the "
            f"runtime: download them (Files pane, right-click, Download), or mount Google Drive "
            f"(from google.colab import drive; drive.mount('/content/drive')) and copy them there.")


def prepare_colab(root: str) -> None:
    """Stop with one sentence where the runtime cannot build the kernels; else install ninja, build
    for the GPU present (``TORCH_CUDA_ARCH_LIST``, which exercise 9.1's own ``load_inline`` reads)
    and say which GPU and toolchain the notebook runs on and where the learner's files are."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeNotReady(GPU_RUNTIME)
    if shutil.which("ninja") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ninja"], check=True)
    release = nvcc_release()
    why = cuda_mismatch(release, torch.version.cuda)
    if why:
        raise RuntimeNotReady(why)
    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    print(f"{torch.cuda.get_device_name()} (sm_{major}{minor}), torch {torch.__version__}, "
          f"nvcc {release}.\n{keep_your_files(root)}")
