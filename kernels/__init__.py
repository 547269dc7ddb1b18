"""The course's toolkit, next to the CUDA sources it builds.

- ``load``: build a kernel version from its ``.cu`` file (kernels/loader.py; the steps are
  toolchain.py, codegen.py, build_cache.py and provenance.py)
- ``check``: compare an op with PyTorch in float64 over awkward cases (kernels/correctness.py)
- ``bench``: CUDA-event timing and effective bandwidth (kernels/bench.py)
- ``results``: benchmark rows as CSV under book/results/ (kernels/results.py)
- ``Chapter``: a notebook's id, GPU and peak bandwidth; saves and reads its rows, runs its
  exercises' checks (kernels/chapter.py)
- ``plot``: the course's figure style (``plot.subplots``, ``plot.legend``) and
  ``plot_throughput``, GB/s against size with the bandwidth limit (kernels/plot.py)
- ``losses``: the losses' registry: references, inputs, byte counts, gradients (kernels/losses.py)
- ``operators``: fake kernels and autograd for every build; ``operators.build()`` gives the
  chapter 6 operators a training loop calls (kernels/operators.py)
- ``book``: the notebooks and the table of contents, for the tools and tests (kernels/book.py)
"""

import warnings

from . import bench, plot, results
from .chapter import Chapter
from .correctness import CheckFailed, check
from .loader import Kernel, KernelBuildError, load
from .losses import LOSSES, get_loss
from .plot import plot_throughput

__all__ = ["Chapter", "CheckFailed", "Kernel", "KernelBuildError", "LOSSES", "bench", "check",
           "get_loss", "load", "plot", "plot_throughput", "results"]

# Warnings PyTorch prints once per process, with the path of its installation and nothing for a
# reader to learn from (the profiler's cycles, the sync debug mode's status): every notebook
# imports the toolkit, so they never reach a stored output.
for _message in ("Warning: Profiler clears events at the end of each cycle",
                 "Synchronization debug mode is a prototype feature"):
    warnings.filterwarnings("ignore", message=_message)
