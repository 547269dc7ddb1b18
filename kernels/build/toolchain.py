"""The CUDA toolchain a build uses: where the toolkit is, which GPU architectures, what nvcc said.

Importing this module changes nothing: :func:`point_torch_at_the_cuda_toolkit` runs when a build
starts (``kernels.load``), and :func:`arch_list` sets ``TORCH_CUDA_ARCH_LIST`` only around one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from pathlib import Path

TOOLKIT = Path("/usr/local/cuda")


def toolkit_torch_misses() -> Path | None:
    """The toolkit to point torch at, where torch would guess it wrong; else None.

    torch.utils.cpp_extension takes the toolkit from $CUDA_HOME (or $CUDA_PATH), else from the nvcc
    on PATH. Where that nvcc is a wrapper script outside the toolkit (/usr/local/bin/nvcc on our CI
    machines), torch guesses /usr/local and the link cannot find -lcudart: then /usr/local/cuda.
    """
    if "CUDA_HOME" in os.environ or "CUDA_PATH" in os.environ:
        return None
    nvcc = shutil.which("nvcc")
    beside = Path(nvcc).resolve().parent.parent if nvcc else None
    if (beside is None or not (beside / "include" / "cuda.h").exists()) \
            and (TOOLKIT / "bin" / "nvcc").exists():
        return TOOLKIT
    return None


def point_torch_at_the_cuda_toolkit() -> None:
    """Set $CUDA_HOME where torch would guess it wrong (see :func:`toolkit_torch_misses`).

    cpp_extension reads the variable once, when it is imported; if something imported it already
    (torch.compile's inductor does), its guess is corrected too, as inductor itself does.
    """
    toolkit = toolkit_torch_misses()
    if toolkit is None:
        return
    os.environ["CUDA_HOME"] = str(toolkit)
    cpp_extension = sys.modules.get("torch.utils.cpp_extension")
    if cpp_extension is not None:
        cpp_extension.CUDA_HOME = str(toolkit)


def nvcc() -> str | None:
    """The nvcc a build runs: its toolkit's ($CUDA_HOME, or the one torch misses), else PATH's."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or toolkit_torch_misses()
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def nvcc_release(path: str | None = None) -> str | None:
    """The CUDA release of an nvcc (``"12.8"``, from ``nvcc --version``), or None without one."""
    import subprocess

    path = path or nvcc()
    if path is None:
        return None
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"release (\d+\.\d+)", text)
    return found.group(1) if found else None


def cuda_mismatch(nvcc_cuda: str | None, torch_cuda: str | None) -> str | None:
    """Why PyTorch's extension builder would refuse this nvcc, in a sentence; None where it builds.

    cpp_extension compares the major versions of nvcc's CUDA and the CUDA PyTorch was built with
    and stops at a difference (a minor one only warns): Colab has paired nvcc 12.8 with torch
    cu128, but a newer torch wheel can come with CUDA 13 before the runtime's nvcc does.
    """
    if nvcc_cuda is None:
        return ("no nvcc found: install the CUDA toolkit (12.x or newer) or set CUDA_HOME to it; "
                "the kernels are compiled when a notebook runs")
    if torch_cuda is None:
        return "this PyTorch has no CUDA: install a CUDA build of PyTorch (pip install torch on Linux)"
    if nvcc_cuda.split(".")[0] != torch_cuda.split(".")[0]:
        major = torch_cuda.split(".")[0]
        return (f"nvcc is CUDA {nvcc_cuda} but PyTorch was built with CUDA {torch_cuda}, and PyTorch "
                f"builds extensions only with the same major version: install a CUDA {major}.x "
                f"toolkit (and point CUDA_HOME at it), or a PyTorch built for CUDA "
                f"{nvcc_cuda.split('.')[0]} (https://pytorch.org/get-started/locally/)")
    return None


def target_archs(archs=None) -> tuple[str, ...]:
    """The GPU architectures to compile for: given, else ``$KERNELS_ARCHS``, else the GPU
    present, else ``$TORCH_CUDA_ARCH_LIST``, else an error.

    ``KERNELS_ARCHS="7.5+PTX"`` builds every kernel as a Colab T4 would, and the driver compiles
    its PTX for the GPU present: on an H100, the code paths of GPUs before Hopper really run."""
    if archs:
        return tuple(archs)
    if os.environ.get("KERNELS_ARCHS"):
        return tuple(os.environ["KERNELS_ARCHS"].replace(";", " ").split())
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return (f"{major}.{minor}",)
    env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env:
        return tuple(env.replace(";", " ").split())
    raise RuntimeError("no GPU found: pass archs=('7.5', '9.0') to compile without running, "
                       "or set TORCH_CUDA_ARCH_LIST")


def builds_for_hopper(archs=None) -> bool:
    """Whether every architecture the kernels are built for (:func:`target_archs`) is Hopper's or
    later: only then do chapter 7's thread-block clusters exist in the build."""
    return all(float(re.match(r"\d+(\.\d+)?", arch).group()) >= 9.0  # "9.0a", "7.5+PTX"
               for arch in target_archs(archs))


@contextlib.contextmanager
def arch_list(archs):
    """Set $TORCH_CUDA_ARCH_LIST (what cpp_extension compiles for) to ``archs`` for one build."""
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(archs)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old


def readable_compiler_error(log: str, sources: dict[str, str]) -> str:
    """Keep the compiler's diagnostics and point them at the course's files, not the build copies."""
    keep = []
    for line in log.splitlines():
        for build_file, shown in sources.items():
            line = re.sub(r"\S*/" + re.escape(build_file), shown, line)
        if re.search(r"\berror\b|\bwarning\b|^\s*\^|^\s{2,}\S", line) and "ninja" not in line:
            keep.append(line)
        elif re.search(r"\(\d+\): |:\d+:\d+: ", line):
            keep.append(line)
    return "\n".join(keep[:60]) or log[-4000:]


def require_gpus(count: int, script: str) -> int:
    """The number of CUDA GPUs, where there are at least ``count``; else one line and exit 2.

    A benchmark without its GPU would end in torch's traceback ("Found no NVIDIA driver"); this
    says in one line what the script needs and what the machine has."""
    import torch

    found = torch.cuda.device_count()
    if found < count:
        print(f"{script} needs {count} CUDA GPU(s); this machine has {found}.")
        raise SystemExit(2)
    return found
