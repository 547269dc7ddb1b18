"""GPU suites: every test here is marked `gpu` (module-level pytestmark) and the repository's
conftest.py skips `gpu` tests when no CUDA GPU is present.

Builds: unless KERNELS_BUILD_DIR is set, kernels are built into a fresh folder for the session
(no stale cache or lock file), which the sanitizer's subprocesses share through the environment.
Set RELIABILITY_RESULTS=<file.jsonl> to collect results for tools/reliability_report.py.
"""

import os

import pytest

import gpu_support  # noqa: F401  (puts the repository on sys.path)


@pytest.fixture(scope="session", autouse=True)
def gpu_build_environment(tmp_path_factory):
    if not os.environ.get("KERNELS_BUILD_DIR"):
        os.environ["KERNELS_BUILD_DIR"] = str(tmp_path_factory.mktemp("kernel_builds"))
    yield os.environ["KERNELS_BUILD_DIR"]
