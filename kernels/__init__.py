"""The course's toolkit, next to the CUDA sources it builds.

The notebooks import what they use from here:

- ``load``: build a kernel version from its ``.cu`` file (kernels/build/loader.py; the steps are
  the build package's other modules: toolchain, codegen, build_cache, provenance)
- ``check``: compare an op with PyTorch in float64 over awkward cases
  (kernels/measure/correctness.py)
- ``bench``: CUDA-event timing and effective bandwidth (kernels/measure/bench.py)
- ``results``: benchmark rows as CSV under book/results/ (kernels/measure/results.py)
- ``Chapter``: a notebook's id, GPU and peak bandwidth; saves and reads its rows, runs its
  exercises' checks (kernels/course/chapter.py)
- ``plot``: the course's figure style (``plot.subplots``, ``plot.legend``) and
  ``plot_throughput``, GB/s against size with the bandwidth limit (kernels/measure/plot.py)
- ``losses``: the losses' registry: references, inputs, byte counts, gradients (kernels/losses.py)
- ``operators``: fake kernels and autograd for every build; ``operators.build()`` gives the
  chapter 6 operators a training loop calls (kernels/ops/operators.py)

The toolkit is layered (:data:`LAYERS`, lowest first): ``losses`` (the registry), ``build``
(``load``), ``measure``, ``ops``, ``course``, ``exercises``, ``kernelbench``. A module imports
from its own layer and the layers below, never above, and no import goes round in a circle
(tests/test_layout.py). Each package's docstring says what it holds.

The modules were once all in this folder, and the notebooks, whose outputs come from a GPU run,
still import them by those names (``from kernels.bench import time_ms``): :data:`MOVED` maps
each old name to its module, which ``import kernels.<old name>`` then returns itself (the same
object, so a monkeypatch of one is a monkeypatch of the other). New code uses the new names.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# The layers, lowest first: a module of kernels/<layer>/ (or kernels/<layer>.py) imports from its
# own layer and those before it. This package's face, the file you are reading, stands above them
# all. tests/test_layout.py reads this tuple.
LAYERS = ("losses", "build", "measure", "ops", "course", "exercises", "kernelbench")

# Old name (kernels.<old>) -> the module's place now (kernels.<new>). Only the notebooks use the
# old names; tests/test_layout.py checks that every one they use still imports.
MOVED = {
    "toolchain": "build.toolchain",
    "codegen": "build.codegen",
    "build_cache": "build.build_cache",
    "provenance": "build.provenance",
    "loader": "build.loader",
    "bench": "measure.bench",
    "correctness": "measure.correctness",
    "results": "measure.results",
    "plot": "measure.plot",
    "profile": "measure.profile",
    "envinfo": "measure.envinfo",
    "operators": "ops.operators",
    "cross_entropy": "ops.cross_entropy",
    "llm_head": "ops.llm_head",
    "vocab_parallel": "ops.vocab_parallel",
    "ranks": "ops.ranks",
    "chapter": "course.chapter",
    "notebook": "course.notebook",
    "book": "course.book",
}


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``kernels.<old>`` of :data:`MOVED` as the module ``kernels.<new>`` itself.

    The import system puts a fresh module in ``sys.modules`` before running the loader; the loader
    replaces it there with the moved module, which the import system then returns (and sets as
    the attribute of this package). The moved module keeps its own name and spec.
    """

    def find_spec(self, name, path=None, target=None):
        package, _, old = name.partition(".")
        if package == __name__ and old in MOVED:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return None  # the default module: exec_module replaces it

    def exec_module(self, module):
        old = module.__name__.partition(".")[2]
        sys.modules[module.__name__] = importlib.import_module(f"{__name__}.{MOVED[old]}")


if not any(isinstance(finder, _OldNames) for finder in sys.meta_path):
    sys.meta_path.insert(0, _OldNames())

from . import ops  # noqa: E402  (installs the build's hook: fake kernels and autograd per build)
from .build.loader import Kernel, KernelBuildError, load  # noqa: E402
from .course.chapter import Chapter  # noqa: E402
from .losses import LOSSES, get_loss  # noqa: E402
from .measure import bench, plot, results  # noqa: E402
from .measure.correctness import CheckFailed, check  # noqa: E402
from .measure.plot import plot_throughput  # noqa: E402

__all__ = ["Chapter", "CheckFailed", "Kernel", "KernelBuildError", "LAYERS", "LOSSES", "MOVED",
           "bench", "check", "get_loss", "load", "plot", "plot_throughput", "results"]

# Warnings PyTorch prints once per process, with the path of its installation and nothing for a
# reader to learn from (the profiler's cycles, the sync debug mode's status): every notebook
# imports the toolkit, so they never reach a stored output.
for _message in ("Warning: Profiler clears events at the end of each cycle",
                 "Synchronization debug mode is a prototype feature"):
    warnings.filterwarnings("ignore", message=_message)
