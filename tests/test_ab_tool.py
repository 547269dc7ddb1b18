"""tools/ab_kernel.py prepare: a kernel file as it was at a commit, with what it includes."""

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ab_kernel", ROOT / "tools" / "ab_kernel.py")
ab_kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab_kernel)


def at_head(file: str) -> str:
    return subprocess.run(["git", "show", f"HEAD:kernels/{file}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


def test_prepare_copies_the_file_and_the_version_it_includes():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history here")
    v4, v3 = "ch7_llm_cross_entropy/v4_cluster_rows.cu", "ch5_cross_entropy/v3_fused_rows.cu"
    ab_kernel.prepare("HEAD", v4)
    assert ab_kernel.old_copy("HEAD", v4).read_text() == at_head(v4)
    assert ab_kernel.old_copy("HEAD", v3).read_text() == at_head(v3)
    shutil.rmtree(ROOT / "_build" / "ab" / "HEAD")
