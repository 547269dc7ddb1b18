"""Build a kernel version from its single ``.cu`` file with ``load_inline``.

``load("ch4_two_pass/v2_deterministic_tiles.cu")`` compiles the file together with the binding
its launchers need (``kernels/bindings``), registers one PyTorch op per launcher it defines
(``extern "C" cudaError_t mse_launch(const ReductionArgs*, ...)`` becomes ``.mse``), and returns
a :class:`Kernel` whose attributes are those ops.

Why it is fast: the ``.cu`` files include only CUDA headers and the binding includes only the
few ATen headers it uses (no ``torch/extension.h``, no pybind11), and ops are registered with
``TORCH_LIBRARY``: a cold build takes seconds, not a minute. Builds are cached on disk under a
name made from a hash of every source that goes in, so editing a kernel never reuses a stale
build and two versions never overwrite each other.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

def _point_torch_at_the_cuda_toolkit() -> None:
    """Set CUDA_HOME where torch would guess it wrong.

    torch.utils.cpp_extension takes the toolkit from $CUDA_HOME, else from the nvcc on PATH.
    Where that nvcc is a wrapper script outside the toolkit (/usr/local/bin/nvcc on our CI
    machines), torch guesses /usr/local and the link cannot find -lcudart. Only then, and only
    before cpp_extension is imported (it reads the variable once), point it at /usr/local/cuda.
    """
    if "CUDA_HOME" in os.environ or "CUDA_PATH" in os.environ:
        return
    nvcc = shutil.which("nvcc")
    toolkit = Path("/usr/local/cuda")
    beside = Path(nvcc).resolve().parent.parent if nvcc else None
    if (beside is None or not (beside / "include" / "cuda.h").exists()) \
            and (toolkit / "bin" / "nvcc").exists():
        os.environ["CUDA_HOME"] = str(toolkit)


_point_torch_at_the_cuda_toolkit()

KERNELS_DIR = Path(__file__).resolve().parent
COMMON_DIR = KERNELS_DIR / "common"
BINDINGS_DIR = KERNELS_DIR / "bindings"

# Each launcher's argument struct names its binding and its op's schema.
BINDINGS = {
    "ReductionArgs": ("reduction.cpp", "reduction_op", "REDUCTION_SCHEMA"),
    "CrossEntropyArgs": ("cross_entropy.cpp", "cross_entropy_op", "CROSS_ENTROPY_SCHEMA"),
    "FusedLossArgs": ("fused_loss.cpp", "fused_loss_op", "FUSED_LOSS_SCHEMA"),
    "VocabShardArgs": ("vocab_shard.cpp", "shard_stats_op", "SHARD_STATS_SCHEMA"),
}
# Ops of one binding that take another schema, chosen by the end of the op's name (cross-entropy's
# backward ops): struct -> {suffix: (template, schema macro[, binding file])}. A binding file named
# here is compiled after the struct's binding only for a kernel file that defines such an op.
OP_VARIANTS = {
    "CrossEntropyArgs": {
        "_backward": ("cross_entropy_backward_op", "CROSS_ENTROPY_BACKWARD_SCHEMA"),
        "_scale_grad": ("cross_entropy_scale_grad_op", "CROSS_ENTROPY_SCALE_GRAD_SCHEMA"),
        "_into_logits": ("cross_entropy_into_logits_op", "CROSS_ENTROPY_INTO_LOGITS_SCHEMA",
                         "cross_entropy_into_logits.cpp"),
    },
    "FusedLossArgs": {
        "_scale_grad": ("fused_loss_scale_grad_op", "FUSED_LOSS_SCALE_GRAD_SCHEMA"),
    },
    "VocabShardArgs": {"_grad": ("shard_grad_op", "SHARD_GRAD_SCHEMA")},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
INCLUDE_CU = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+\.cu)"[ \t]*$', re.MULTILINE)
LAUNCHER = re.compile(r'extern\s+"C"\s+cudaError_t\s+(\w+)_launch\s*\(\s*const\s+(\w+)\s*\*')


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


def source_path(source: str | os.PathLike) -> Path:
    """Resolve a kernel file given relative to ``kernels/`` (or as any existing path)."""
    path = Path(source)
    if not path.is_absolute() and not path.exists():
        path = KERNELS_DIR / path
    if not path.is_file():
        raise FileNotFoundError(f"no kernel file {source!r} (looked in {KERNELS_DIR})")
    return path.resolve()


def find_launchers(cuda_text: str) -> list[tuple[str, str]]:
    """The (op name, argument struct) of every ``extern "C" cudaError_t <op>_launch`` defined."""
    found = LAUNCHER.findall(cuda_text)
    if not found:
        raise ValueError('no launcher found: define extern "C" cudaError_t <op>_launch(const '
                         'ReductionArgs* args, cudaStream_t stream) (or CrossEntropyArgs)')
    unknown = {struct for _, struct in found} - set(BINDINGS)
    if unknown:
        raise ValueError(f"launchers take an unknown argument struct {sorted(unknown)}; "
                         f"known: {sorted(BINDINGS)}")
    if len({struct for _, struct in found}) > 1:
        raise ValueError("all launchers of one kernel file must take the same argument struct")
    return found


def op_variant(struct: str, op: str) -> tuple:
    """(template, schema macro, binding file or None) of one op, by the end of its name."""
    for suffix, found in OP_VARIANTS.get(struct, {}).items():
        if op.endswith(suffix):
            return (*found, None)[:3]
    _, template, schema = BINDINGS[struct]
    return template, schema, None


def registration(library: str, launchers: list[tuple[str, str]]) -> str:
    """The C++ that declares each launcher and registers it as ``torch.ops.<library>.<op>``."""
    lines = [f'extern "C" cudaError_t {op}_launch(const {struct}*, cudaStream_t);'
             for op, struct in launchers]
    lines.append(f"TORCH_LIBRARY({library}, m) {{")
    lines += [f'    m.def("{op}" {op_variant(struct, op)[1]});' for op, struct in launchers]
    lines.append("}")
    lines.append(f"TORCH_LIBRARY_IMPL({library}, CUDA, m) {{")
    lines += [f'    m.impl("{op}", &{op_variant(struct, op)[0]}<{op}_launch>);'
              for op, struct in launchers]
    lines.append("}")
    return "\n".join(lines) + "\n"


def target_archs(archs=None) -> tuple[str, ...]:
    """The GPU architectures to compile for: given, else the GPU present, else an error."""
    if archs:
        return tuple(archs)
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return (f"{major}.{minor}",)
    env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env:
        return tuple(env.replace(";", " ").split())
    raise RuntimeError("no GPU found: pass archs=('7.5', '9.0') to compile without running, "
                       "or set TORCH_CUDA_ARCH_LIST")


def build_root() -> Path:
    """Where builds are cached: $KERNELS_BUILD_DIR, else ~/.cache/loss-kernels/torch-<version>."""
    import torch

    root = os.environ.get("KERNELS_BUILD_DIR")
    if root:
        return Path(root)
    return Path.home() / ".cache" / "loss-kernels" / f"torch-{torch.__version__}"


def included_headers(texts) -> list[Path]:
    """The headers of kernels/common/ that the given sources include, directly or not, sorted."""
    found, todo = set(), list(texts)
    while todo:
        for name in INCLUDE.findall(todo.pop()):
            header = COMMON_DIR / name
            if header.is_file() and header not in found:
                found.add(header)
                todo.append(header.read_text())
    return sorted(found)


def splice_kernel_files(path: Path, text: str, spliced: dict) -> str:
    """Replace each ``#include "<other version>.cu"`` by that file's text (recursively).

    A later version may build on an earlier one by including its file (chapter 7's version 4
    includes chapter 5's version 3); ``load_inline`` compiles a single text, so the loader splices
    it in, with ``#line`` markers that keep the compiler's messages pointing at the right file.
    ``spliced`` collects the files read, for the build's hash and the notebooks' provenance.
    """
    def splice(match):
        included = (path.parent / match.group(1)).resolve()
        if not included.is_file():
            raise FileNotFoundError(f"{path.name} includes {match.group(1)}: no such file")
        if included in spliced:
            raise ValueError(f"{included.name} is included twice (or includes itself)")
        spliced[included] = included.read_text()
        line = text.count("\n", 0, match.start()) + 2  # the line after the #include
        return (f'#line 1 "{included.name}"\n'
                f"{splice_kernel_files(included, spliced[included], spliced)}\n"
                f'#line {line} "{path.name}"')

    return INCLUDE_CU.sub(splice, text)


@dataclass(frozen=True)
class Sources:
    """Everything that goes into one build, each file read once."""

    path: Path
    cuda_text: str
    launchers: list
    binding: Path
    binding_text: str
    headers: dict  # Path -> text
    file_text: str  # the file itself, before splicing
    spliced: dict = field(default_factory=dict)  # earlier versions' .cu files included: Path -> text
    extra_bindings: dict = field(default_factory=dict)  # OP_VARIANTS' binding files: Path -> text

    @classmethod
    def read(cls, path: Path) -> "Sources":
        spliced = {}
        file_text = path.read_text()
        cuda_text = splice_kernel_files(path, file_text, spliced)
        launchers = find_launchers(cuda_text)
        struct = launchers[0][1]
        binding = BINDINGS_DIR / BINDINGS[struct][0]
        binding_text = binding.read_text()
        extra = sorted({BINDINGS_DIR / binding_file for op, _ in launchers
                        if (binding_file := op_variant(struct, op)[2])})
        extra_bindings = {f: f.read_text() for f in extra}
        headers = {h: h.read_text()
                   for h in included_headers([cuda_text, binding_text, *extra_bindings.values()])}
        return cls(path, cuda_text, launchers, binding, binding_text, headers, file_text, spliced,
                   extra_bindings)

    def build_name(self, archs) -> str:
        """A library name unique to the sources, the architectures and the torch version."""
        import torch

        digest = hashlib.sha256()
        for text in [self.cuda_text, self.binding_text, *self.extra_bindings.values(),
                     *self.headers.values(), ",".join(archs),
                     torch.__version__]:
            digest.update(text.encode())
            digest.update(b"\0")
        stem = re.sub(r"\W", "_", self.path.stem)[:40]
        return f"{stem}_{digest.hexdigest()[:12]}"


def build_name(path: Path, archs) -> str:
    """The library name of one kernel file's build (see :meth:`Sources.build_name`)."""
    return Sources.read(path).build_name(archs)


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


@contextlib.contextmanager
def _exclusive(directory: Path):
    """Hold a lock on ``directory`` while building in it.

    torch's own lock file outlives a build killed midway (a notebook interrupted during a build)
    and every later build then waits on it forever. An flock dies with its process, so once we
    hold ours, any torch lock file left there is stale and is removed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".course-lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        (directory / "lock").unlink(missing_ok=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _arch_list(archs):
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(archs)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old


_LOADED: dict[str, Kernel] = {}


def _record_sources(sources: Sources) -> None:
    """Append the hashes of the sources just built to $KERNELS_SOURCES_LOG (set by tools/execute.py)."""
    log = os.environ.get("KERNELS_SOURCES_LOG")
    if not log:
        return
    texts = {sources.path: sources.file_text, sources.binding: sources.binding_text,
             **sources.headers, **sources.spliced, **sources.extra_bindings}
    with open(log, "a") as handle:
        for file, text in texts.items():
            rel = file.relative_to(KERNELS_DIR.parent).as_posix()
            handle.write(json.dumps({rel: hashlib.sha256(text.encode()).hexdigest()}) + "\n")


def load(source: str | os.PathLike, archs=None, verbose: bool = False) -> Kernel:
    """Build (or fetch from the cache) one kernel file and return its ops.

    ``archs`` are compute capabilities such as ``("7.5", "9.0")``; by default the GPU present.
    Raises :class:`KernelBuildError` with the compiler's messages if the file does not compile.
    """
    import torch
    from torch.utils.cpp_extension import load_inline

    path = source_path(source)
    archs = target_archs(archs)
    sources = Sources.read(path)
    name = sources.build_name(archs)
    # Shown relative to kernels/ (course kernels) or to the repository (solutions/kernels/...).
    inside = path.is_relative_to(KERNELS_DIR)
    shown = path.relative_to(KERNELS_DIR if inside else KERNELS_DIR.parent).as_posix()
    _record_sources(sources)
    if name in _LOADED:
        return _LOADED[name]

    directory = build_root() / name
    library = directory / f"{name}.so"
    cached = library.exists()
    started = time.perf_counter()
    with _exclusive(directory), _arch_list(archs):
        try:
            load_inline(
                name=name,
                cpp_sources=[sources.binding_text, *sources.extra_bindings.values(),
                             registration(name, sources.launchers)],
                cuda_sources=[sources.cuda_text],
                extra_include_paths=[str(COMMON_DIR)],
                # The binding only checks tensors and calls the launcher: optimising it saves
                # nothing measurable per call but costs seconds of every build.
                extra_cflags=["-O0"],
                extra_cuda_cflags=["-O3", "-lineinfo"],
                build_directory=str(directory),
                is_python_module=False,
                no_implicit_headers=True,
                verbose=verbose,
            )
        except RuntimeError as error:
            files = {"cuda.cu": f"kernels/{shown}" if inside else shown,
                     "main.cpp": f"kernels/bindings/{sources.binding.name}"}
            raise KernelBuildError(
                f"{shown} did not compile:\n{readable_compiler_error(str(error), files)}"
            ) from None
    struct = sources.launchers[0][1]
    kernel = Kernel(source=shown, name=name, struct=struct,
                    build_seconds=time.perf_counter() - started, cached=cached)
    namespace = getattr(torch.ops, name)
    kernel.ops = {op: getattr(namespace, op) for op, _ in sources.launchers}
    # Fake kernels and autograd formulas (chapter 6): once per library, as its namespace is new.
    from .operators import register

    register(kernel, struct)
    _LOADED[name] = kernel
    return kernel
