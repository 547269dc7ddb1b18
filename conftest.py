"""Repository-wide pytest configuration: what runs without a GPU.

The rule, for tests and notebooks alike:

* a test marked ``@pytest.mark.gpu`` is skipped when ``torch.cuda.is_available()`` is
  False ("needs a CUDA GPU (none found)");
* under ``pytest --nbval``, a notebook code cell whose metadata tags include ``gpu`` is
  skipped when there is no GPU ("GPU cell: no CUDA GPU found"). Every other cell runs
  and its outputs are compared with the stored ones, so a cell that needs the result of
  a ``gpu`` cell must be tagged ``gpu`` too. There is no notebook-level rule.

``REQUIRE_GPU=1`` (tools/gpu_run.sh's tests stage sets it) turns both skips into failures: on
the GPU machine, a driver that torch cannot reach must not go green with every GPU test skipped.

torch is imported only if something asks whether a GPU is there.
"""

import collections
import functools
import os

import pytest

GPU_TAG = "gpu"


@functools.lru_cache(maxsize=None)
def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU")


def _is_gpu_cell(item) -> bool:
    # nbval's cell items (nbval.plugin.IPyNbCell) keep the notebook cell in `.cell`.
    cell = getattr(item, "cell", None)
    if cell is None or type(item).__name__ != "IPyNbCell":
        return False
    tags = cell.get("metadata", {}).get("tags", [])
    return isinstance(tags, list) and GPU_TAG in tags


_MISSING_GPU = pytest.StashKey[str]()


def _without_gpu(item, reason: str) -> None:
    """Skip the item, or, under REQUIRE_GPU=1, make it fail with the same reason."""
    if os.environ.get("REQUIRE_GPU") == "1":
        item.stash[_MISSING_GPU] = reason
    else:
        item.add_marker(pytest.mark.skip(reason=reason))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _is_gpu_cell(item):
            if not has_gpu():
                _without_gpu(item, "GPU cell: no CUDA GPU found")
        elif item.get_closest_marker("gpu") is not None:
            if not has_gpu():
                _without_gpu(item, "needs a CUDA GPU (none found)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    reason = item.stash.get(_MISSING_GPU, None)
    if reason is not None:
        pytest.fail(f"REQUIRE_GPU=1 and {reason}: is the driver reachable "
                    f"(torch.cuda.is_available() is False)?", pytrace=False)


def pytest_terminal_summary(terminalreporter):
    """Say why tests were skipped, one line per reason with its count (a machine without a GPU
    skips hundreds, one without Chromium the browser tests: both should be visible at a glance)."""
    reasons = collections.Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.section("why tests were skipped")
        for reason, count in reasons.most_common():
            terminalreporter.write_line(f"{count:5d}  {reason}")
