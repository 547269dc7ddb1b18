"""``load``: build a kernel version from its single ``.cu`` file with ``load_inline``.

``load("ch4_two_pass/v2_deterministic_tiles.cu")`` compiles the file together with the binding
its launchers need (``kernels/bindings``), registers one PyTorch op per launcher it defines
(``extern "C" cudaError_t mse_launch(const ReductionArgs*, ...)`` becomes ``.mse``), and returns
a :class:`Kernel` whose attributes are those ops. The steps are the other modules' jobs: the
sources and the build's cached name (build_cache), the registration C++ (codegen), the toolkit
and the architectures (toolchain), the notebooks' record of what was built (provenance).

The build knows nothing of autograd: what a new build needs beyond its ops (fake kernels and
autograd formulas, chapter 6) is added by the hooks of :data:`ON_BUILD`, which the ops layer
installs when it is imported (``kernels/ops/__init__.py``; ``import kernels`` imports it).

Why it is fast: the ``.cu`` files include only CUDA headers and the binding includes only the
few ATen headers it uses (no ``torch/extension.h``, no pybind11), and ops are registered with
``TORCH_LIBRARY``: a cold build takes seconds, not a minute; an unchanged one is not rebuilt.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from . import pch, provenance, toolchain
from .build_cache import COMMON_DIR, KERNELS_DIR, Sources, build_lock, build_root, source_path
from .codegen import loss_list, registration


class KernelBuildError(RuntimeError):
    """The compiler rejected a kernel file; the message keeps only the compiler's diagnostics."""


@dataclass
class Kernel:
    """A built kernel version: one attribute per op, e.g. ``kernel.mse(pred, target)``."""

    source: str  # relative to kernels/ (course kernels) or to the repository (solutions)
    name: str  # the unique build and library name
    struct: str = ""  # the launchers' argument struct, which names the binding
    ops: dict = field(default_factory=dict)
    build_seconds: float = 0.0
    cached: bool = False

    def __getattr__(self, op):
        ops = self.__dict__.get("ops", {})
        if op in ops:
            return ops[op]
        raise AttributeError(f"{self.source} defines no op {op!r}; it has {sorted(ops)}")

    def __repr__(self):
        how = "cached" if self.cached else f"built in {self.build_seconds:.1f} s"
        return f"<Kernel {self.source}: {', '.join(sorted(self.ops))} ({how})>"


# Called as hook(kernel, struct) once per build, before load() returns it: the ops layer appends
# the registration of each op's fake kernel and autograd formula (kernels/ops/__init__.py).
ON_BUILD: list[Callable[[Kernel, str], None]] = []

_LOADED: dict[str, Kernel] = {}
# (file, archs, loss list) -> (kernel, the mtime of every file it was built from): a repeated
# load() of unchanged files returns after a few stat calls. Reading and hashing the sources
# took 0.5-2 ms, more than a whole kernel at small sizes, so load() inside a timed lambda
# made the timing measure the host.
_FRESH: dict[tuple, tuple[Kernel, dict]] = {}


def _mtimes(files) -> dict | None:
    try:
        stats = {f: os.stat(f) for f in files}
    except OSError:  # a file was removed: read everything again
        return None
    return {f: (st.st_mtime_ns, st.st_size) for f, st in stats.items()}


def load(source: str | os.PathLike, archs=None, verbose: bool = False) -> Kernel:
    """Build (or fetch from the cache) one kernel file and return its ops.

    ``archs`` are compute capabilities such as ``("7.5", "9.0")``; by default the GPU present.
    Raises :class:`KernelBuildError` with the compiler's messages if the file does not compile.
    """
    toolchain.point_torch_at_the_cuda_toolkit()  # before cpp_extension reads $CUDA_HOME
    import torch
    from torch.utils.cpp_extension import load_inline

    archs = toolchain.target_archs(archs)
    # A relative path may name a file below the working directory (source_path), so it is part
    # of the key; resolving the path costs more than the stat calls that follow.
    where = "" if os.path.isabs(source) else os.getcwd()
    key = (os.fspath(source), where, archs, tuple(loss_list()))
    if key in _FRESH:
        kernel, stamps = _FRESH[key]
        if stamps and _mtimes(stamps) == stamps:
            return kernel
    path = source_path(source)
    sources = Sources.read(path)  # every file read once, here
    name = sources.build_name(archs)
    # Shown relative to kernels/ (course kernels) or to the repository (solutions/kernels/...);
    # a file elsewhere (a learner's copy, a test's temporary file) by its own path.
    inside = path.is_relative_to(KERNELS_DIR)
    shown = next((path.relative_to(base).as_posix() for base in (KERNELS_DIR, KERNELS_DIR.parent)
                  if path.is_relative_to(base)), path.as_posix())
    provenance.record(sources)
    if name in _LOADED:
        _FRESH[key] = (_LOADED[name], _mtimes(sources.files()))
        return _LOADED[name]

    directory = build_root() / name
    cached = (directory / f"{name}.so").exists()
    started = time.perf_counter()
    with build_lock(directory), toolchain.arch_list(archs):
        try:
            load_inline(
                name=name,
                cpp_sources=[sources.binding_text, *sources.extra_bindings.values(),
                             registration(name, sources.launchers)],
                cuda_sources=[sources.cuda_text],
                extra_include_paths=[str(COMMON_DIR)],
                # The binding only checks tensors and calls the launcher: optimising it saves
                # nothing measurable per call but costs seconds of every build; its PyTorch
                # headers come precompiled (kernels/build/pch.py).
                extra_cflags=[*pch.OPT, *pch.cflags()],
                extra_cuda_cflags=["-O3", "-lineinfo"],
                build_directory=str(directory),
                is_python_module=False,
                no_implicit_headers=True,
                verbose=verbose,
            )
        except RuntimeError as error:
            files = {"cuda.cu": f"kernels/{shown}" if inside else shown,
                     "main.cpp": f"kernels/bindings/{sources.binding.name}"}
            raise KernelBuildError(f"{shown} did not compile:\n"
                                   f"{toolchain.readable_compiler_error(str(error), files)}"
                                   ) from None
    struct = sources.launchers[0][1]
    kernel = Kernel(source=shown, name=name, struct=struct,
                    build_seconds=time.perf_counter() - started, cached=cached)
    namespace = getattr(torch.ops, name)
    kernel.ops = {op: getattr(namespace, op) for op, _ in sources.launchers}
    # Fake kernels and autograd formulas (chapter 6): once per library, as its namespace is new.
    for hook in ON_BUILD:
        hook(kernel, struct)
    _LOADED[name] = kernel
    _FRESH[key] = (kernel, _mtimes(sources.files()))
    return kernel


def _build_in_this_process(source, archs) -> tuple[list[str], float, bool]:
    kernel = load(source, archs=archs)
    return sorted(kernel.ops), kernel.build_seconds, kernel.cached


@contextlib.contextmanager
def builds_in_processes(sources, archs, workers: int):
    """Build many kernel files at once, ``workers`` at a time, each in a spawned process (a build
    keeps about one core busy; spawned, not forked: the caller may have started CUDA). Yields
    ``{source: future}``, each future's result ``(sorted ops, build seconds, cached)`` or the
    build's KernelBuildError; the caller then loads them from the cache. ``archs`` must be
    given: the builders do not ask a GPU. Leaving the block, by an error too, cancels the builds
    not yet begun.
    """
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        try:
            yield {source: pool.submit(_build_in_this_process, source, archs)
                   for source in sources}
        finally:
            pool.shutdown(cancel_futures=True)
