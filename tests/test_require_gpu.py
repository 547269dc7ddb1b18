"""conftest.py's REQUIRE_GPU=1: a GPU test that would be skipped for want of a GPU fails instead
(the GPU machine's runs set it: a driver torch cannot reach must not pass with every GPU test
skipped). Run in a subprocess with no CUDA device visible, so it is the same on any machine."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(tmp_path, require):
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_one.py").write_text(
        "import pytest\n\n@pytest.mark.gpu\ndef test_on_the_gpu():\n    pass\n\n"
        "def test_on_the_cpu():\n    pass\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "REQUIRE_GPU": require}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=", "-p", "no:randomly", "test_one.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("require, rc, summary", [
    ("", 0, "1 passed, 1 skipped"),
    ("1", 1, "1 passed, 1 error"),  # failed in its setup: an error, rc 1
])
def test_require_gpu_turns_the_skip_into_a_failure(tmp_path, require, rc, summary):
    done = run(tmp_path, require)
    assert done.returncode == rc, done.stdout + done.stderr
    assert summary in done.stdout
    if require:
        assert "REQUIRE_GPU=1 and needs a CUDA GPU (none found)" in done.stdout


def test_the_gpu_runs_tests_and_nbval_stages_set_it():
    script = (ROOT / "tools" / "gpu_run.sh").read_text()
    assert "REQUIRE_GPU=1 RELIABILITY_RESULTS=" in script  # tests
    assert "REQUIRE_GPU=1 KERNELS_RESULTS_DIR=/tmp/nbval-results" in script  # nbval
