"""The set-up cell on Colab, without Colab: the runtime checks of kernels/course/colab.py and the
toolchain's version check, each case with the sentence a learner reads."""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from kernels.build import toolchain
from kernels.course import colab, notebook

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("nvcc_cuda, torch_cuda, says", [
    ("12.8", "12.8", None),
    ("12.4", "12.8", None),  # a minor difference only warns in cpp_extension
    ("12.8", "13.0", "nvcc is CUDA 12.8 but PyTorch was built with CUDA 13.0"),
    ("13.0", "12.8", "install a CUDA 12.x toolkit"),
    (None, "12.8", "no nvcc found"),
    ("12.8", None, "this PyTorch has no CUDA"),
])
def test_cuda_mismatch_says_why_a_build_would_be_refused(nvcc_cuda, torch_cuda, says):
    why = toolchain.cuda_mismatch(nvcc_cuda, torch_cuda)
    assert (why is None) if says is None else (says in why)


def test_nvcc_release_reads_the_version_line(tmp_path):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    fake.chmod(0o755)
    assert toolchain.nvcc_release(str(fake)) == "12.8"
    assert toolchain.nvcc_release(str(tmp_path / "missing")) is None


def test_prepare_colab_stops_on_a_cpu_runtime(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(colab.RuntimeNotReady, match="needs a GPU runtime"):
        colab.prepare_colab("/content/loss-kernels")


def gpu_runtime(monkeypatch, nvcc_cuda, torch_cuda="12.8"):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    monkeypatch.setattr(torch.version, "cuda", torch_cuda)
    monkeypatch.setattr(colab, "nvcc_release", lambda: nvcc_cuda)
    monkeypatch.setattr(colab.shutil, "which", lambda name: "/usr/bin/ninja")
    # setenv first: monkeypatch restores only what it recorded, and delenv of an unset variable
    # records nothing, so the value prepare_colab sets would leak into later tests
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "unset by gpu_runtime")
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")


def test_prepare_colab_leaves_no_arch_list_behind():
    before = os.environ.get("TORCH_CUDA_ARCH_LIST")
    with pytest.MonkeyPatch.context() as patch:
        gpu_runtime(patch, nvcc_cuda="12.8")
        colab.prepare_colab("/content/loss-kernels")
        assert os.environ["TORCH_CUDA_ARCH_LIST"] == "7.5"
    assert os.environ.get("TORCH_CUDA_ARCH_LIST") == before


def test_prepare_colab_stops_on_an_nvcc_of_another_major_version(monkeypatch):
    gpu_runtime(monkeypatch, nvcc_cuda="13.0")
    with pytest.raises(colab.RuntimeNotReady, match="nvcc is CUDA 13.0 but PyTorch was built with CUDA 12.8"):
        colab.prepare_colab("/content/loss-kernels")


def test_prepare_colab_builds_for_the_gpu_and_says_where_the_files_are(monkeypatch, capsys):
    gpu_runtime(monkeypatch, nvcc_cuda="12.8")
    colab.prepare_colab("/content/loss-kernels")
    said = capsys.readouterr().out
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "7.5"
    assert "Tesla T4 (sm_75)" in said and "nvcc 12.8" in said
    assert "/content/loss-kernels/kernels/exercises/" in said and "Drive" in said


def test_prepare_colab_installs_ninja_where_it_is_missing(monkeypatch):
    gpu_runtime(monkeypatch, nvcc_cuda="12.8")
    monkeypatch.setattr(colab.shutil, "which", lambda name: None)
    ran = []
    monkeypatch.setattr(colab.subprocess, "run", lambda args, check: ran.append(args))
    colab.prepare_colab("/content/loss-kernels")
    assert ran == [[sys.executable, "-m", "pip", "install", "-q", "ninja"]]


def test_the_setup_cell_on_a_colab_cpu_runtime_stops_with_one_sentence(tmp_path):
    """The cell itself, with google.colab present, no GPU, and the clone already in place."""
    clone = tmp_path / "loss-kernels"
    clone.symlink_to(ROOT)
    cell = notebook.SETUP_CELL.format(repository="https://github.com/o/r") \
        .replace("/content/loss-kernels", str(clone))
    fake_colab = "import sys, types; sys.modules['google.colab'] = types.ModuleType('google.colab')\n"
    run = subprocess.run([sys.executable, "-c", fake_colab + cell], cwd=tmp_path, text=True,
                         capture_output=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode != 0
    assert f"RuntimeNotReady: {colab.GPU_RUNTIME}" in run.stderr.strip().splitlines()[-1]
