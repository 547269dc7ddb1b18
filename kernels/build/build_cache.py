"""Where a build is cached and under which name: its sources, read once, hashed into the name.

A build's name holds a hash of every source that goes in (the kernel file and the versions it
includes, the binding, the headers), of the architectures and of the torch version, so editing a
kernel never reuses a stale build and two versions never overwrite each other. Builds live in
:func:`build_root`, one folder per name, each built under :func:`build_lock`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .codegen import BINDINGS, find_launchers, op_variant, splice_kernel_files, with_loss_list

KERNELS_DIR = Path(__file__).resolve().parent.parent
COMMON_DIR = KERNELS_DIR / "common"
BINDINGS_DIR = KERNELS_DIR / "bindings"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def source_path(source: str | os.PathLike) -> Path:
    """Resolve a kernel file given relative to ``kernels/`` (or as any existing path)."""
    path = Path(source)
    if not path.is_absolute() and not path.exists():
        path = KERNELS_DIR / path
    if not path.is_file():
        raise FileNotFoundError(f"no kernel file {source!r} (looked in {KERNELS_DIR})")
    return path.resolve()


def included_headers(texts) -> dict[Path, str]:
    """The headers of kernels/common/ that the given sources include, directly or not, sorted by
    path, with their text (each read once)."""
    found, todo = {}, list(texts)
    while todo:
        for name in INCLUDE.findall(todo.pop()):
            header = COMMON_DIR / name
            if header not in found and header.is_file():
                found[header] = header.read_text()
                todo.append(found[header])
    return dict(sorted(found.items()))


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
        cuda_text = with_loss_list(splice_kernel_files(path, file_text, spliced))
        launchers = find_launchers(cuda_text)
        struct = launchers[0][1]
        binding = BINDINGS_DIR / BINDINGS[struct][0]
        binding_text = binding.read_text()
        extra = sorted({BINDINGS_DIR / binding_file for op, _ in launchers
                        if (binding_file := op_variant(struct, op)[2])})
        extra_bindings = {f: f.read_text() for f in extra}
        headers = included_headers([cuda_text, binding_text, *extra_bindings.values()])
        return cls(path, cuda_text, launchers, binding, binding_text, headers, file_text, spliced,
                   extra_bindings)

    def files(self) -> dict:
        """Every file the build read, with its text: the kernel file, the files spliced into it,
        its bindings and the headers they include."""
        return {self.path: self.file_text, self.binding: self.binding_text, **self.headers,
                **self.spliced, **self.extra_bindings}

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


def build_root() -> Path:
    """Where builds are cached: $KERNELS_BUILD_DIR, else ~/.cache/loss-kernels/torch-<version>."""
    import torch

    root = os.environ.get("KERNELS_BUILD_DIR")
    if root:
        return Path(root)
    return Path.home() / ".cache" / "loss-kernels" / f"torch-{torch.__version__}"


@contextlib.contextmanager
def build_lock(directory: Path):
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
