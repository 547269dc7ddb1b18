"""A precompiled header of the bindings' PyTorch includes, made once and shared by every build.

Each build compiles one binding (kernels/bindings/*.cpp) with g++; parsing its PyTorch headers
(ATen's ``Tensor``, ``torch/library.h``) was 6 of the 10 CPU seconds that compile took, in every
build (56 of them in the compile test). :func:`cflags` compiles those headers once per torch
version and compiler into the build cache and returns the flags that make g++ load them
(``-include`` the header, beside which g++ finds its ``.gch``).

g++ uses a ``.gch`` only if it was made with the options of the compile that reads it; otherwise
``-Winvalid-pch`` says so and g++ reads the header's text instead: a slower build, never a
different one. The options here are torch's own for a binding (``_write_ninja_file`` in
torch.utils.cpp_extension) less ``-DTORCH_EXTENSION_NAME``, which no PyTorch header reads;
``tests/test_compile.py`` checks that the installed torch's real build uses the ``.gch``.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sysconfig
from pathlib import Path

from .build_cache import BINDINGS_DIR, COMMON_DIR, build_lock, build_root

PYTORCH_INCLUDE = re.compile(r"^\s*#\s*include\s+<((?:ATen|c10|torch)/[^>]+)>", re.MULTILINE)
OPT = ["-O0"]  # the loader's extra_cflags for a binding (see kernels/build/loader.py)
_MADE: dict[Path, list[str]] = {}  # build root -> the flags, once per process


def pytorch_includes() -> list[str]:
    """The PyTorch headers that the bindings and their shared headers include, sorted."""
    files = [*BINDINGS_DIR.glob("*.cpp"), *COMMON_DIR.glob("*.h")]
    return sorted({name for f in files for name in PYTORCH_INCLUDE.findall(f.read_text())})


def compile_options() -> list[str]:
    """torch's g++ options for a binding, as load_inline writes them, less the extension's name."""
    from torch.utils.cpp_extension import include_paths

    system = [*include_paths("cuda"), sysconfig.get_path("include", scheme="posix_prefix")]
    return (["-DTORCH_API_INCLUDE_EXTENSION_H", f"-I{COMMON_DIR}"]
            + [flag for path in system for flag in ("-isystem", path)]
            + ["-fPIC", f"-std={_cxx_standard()}", *OPT])


def _cxx_standard() -> str:
    """The -std torch's builds use (c++20 from torch 2.10; read from its source, not guessed)."""
    import torch.utils.cpp_extension as cpp

    found = re.search(r"\['-fPIC', '-std=(c\+\+\d+)'\]", Path(cpp.__file__).read_text())
    return found.group(1) if found else "c++17"


def cflags() -> list[str]:
    """The extra g++ flags that read the precompiled header; [] where it cannot be made (no g++,
    a compiler error): the build then parses the headers itself, as before."""
    import torch
    from torch.utils.cpp_extension import get_cxx_compiler

    root = build_root()
    if root in _MADE:
        return _MADE[root]
    compiler = get_cxx_compiler()
    options = compile_options()
    text = "".join(f"#include <{name}>\n" for name in pytorch_includes())
    key = hashlib.sha256("\n".join([torch.__version__, compiler, *options, text]).encode())
    directory = root / f"binding_pch_{key.hexdigest()[:12]}"
    header = directory / "binding_pch.h"
    flags = ["-include", str(header), "-Winvalid-pch"]
    with build_lock(directory):
        gch = header.with_name(header.name + ".gch")
        if not gch.exists():
            header.write_text("// Made by kernels/build/pch.py: the bindings' PyTorch headers.\n"
                              + text)
            made = subprocess.run([compiler, "-x", "c++-header", *options, str(header),
                                   "-o", str(gch) + ".tmp"], capture_output=True)
            if made.returncode != 0:
                flags = []
            else:
                Path(str(gch) + ".tmp").replace(gch)  # never a half-written .gch
    _MADE[root] = flags
    return flags
