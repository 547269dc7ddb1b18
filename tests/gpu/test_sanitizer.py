"""Every kernel version (chapters 2-8) under compute-sanitizer: memcheck, racecheck, synccheck and
initcheck, on small irregular inputs (tests/gpu/sanitize_driver.py).

All kernels are built once in this process first (the build folder, KERNELS_BUILD_DIR, is shared
with the sanitized processes, which then load from the cache). One sanitized process per file and
tool runs all the file's ops; up to 8 run at once.
"""

import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpu_support import (CROSS_ENTROPY_CHAPTER, ELEMENT_WISE_CHAPTERS, LLM_CHAPTER,
                         MULTI_GPU_CHAPTER, OPERATORS_CHAPTER, kernel_files, record, version)

pytestmark = pytest.mark.gpu

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
FILES = kernel_files(*ELEMENT_WISE_CHAPTERS, CROSS_ENTROPY_CHAPTER, OPERATORS_CHAPTER,
                     LLM_CHAPTER, MULTI_GPU_CHAPTER)
DRIVER = Path(__file__).resolve().parent / "sanitize_driver.py"
WORKERS = 8
TIMEOUT = 600

# (version, tool) -> why that version is expected to fail that tool. None today: no kernel
# version is racy or sloppy on purpose (add one here only if its header says so).
EXPECTED_FAILURES = {}

CLEAN = {
    "racecheck": re.compile(r"RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)"
                            r"|ERROR SUMMARY: 0 errors"),
}
DEFAULT_CLEAN = re.compile(r"ERROR SUMMARY: 0 errors")


def sanitizer():
    found = shutil.which("compute-sanitizer")
    for candidate in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        path = Path(candidate) / "bin" / "compute-sanitizer"
        if not found and candidate and path.exists():
            found = str(path)
    return found


def run_one(tool, path):
    command = [sanitizer(), "--tool", tool, "--error-exitcode", "1", sys.executable, str(DRIVER),
               str(path)]
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", PYTHONUNBUFFERED="1")
    started = time.perf_counter()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=TIMEOUT)
        rc, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as error:
        rc, output = "timeout", f"timed out after {TIMEOUT} s\n{error.stdout or ''}{error.stderr or ''}"
    return rc, output, time.perf_counter() - started


@pytest.fixture(scope="session")
def sanitizer_runs(request):
    if sanitizer() is None:
        pytest.skip("compute-sanitizer not found (CUDA_HOME/bin or PATH)")
    from kernels import load

    # Only what was selected (pytest -k): every file costs a build and four sanitized runs.
    wanted = {(item.callspec.params["path"], item.callspec.params["tool"])
              for item in request.session.items
              if item.originalname == "test_sanitizer_clean" and hasattr(item, "callspec")}
    for path in sorted({path for path, _ in wanted}):  # build once, here; the sanitized
        load(path)                                     # processes load from the cache
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    futures = {(version(p), tool): pool.submit(run_one, tool, p) for p, tool in sorted(wanted)}
    yield futures
    pool.shutdown(wait=True)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("path", FILES, ids=version)
def test_sanitizer_clean(path, tool, sanitizer_runs):
    name = version(path)
    rc, output, seconds = sanitizer_runs[(name, tool)].result()
    clean = rc == 0 and bool(CLEAN.get(tool, DEFAULT_CLEAN).search(output)) \
        and "sanitize_driver:" in output
    record(name, f"sanitizer:{tool}", "clean" if clean else "errors", seconds=round(seconds, 1))
    if (name, tool) in EXPECTED_FAILURES:
        assert not clean, f"expected to fail ({EXPECTED_FAILURES[(name, tool)]}) but is clean"
        return
    assert clean, f"compute-sanitizer --tool {tool} {name}: exit {rc}\n{output[-6000:]}"
