"""The C++ a build adds to a kernel file: its launchers found, their ops registered.

A launcher ``extern "C" cudaError_t mse_launch(const ReductionArgs*, cudaStream_t)`` becomes the
op ``mse``; its argument struct names the binding (``kernels/bindings``) and the op's schema, or,
by the end of the op's name, a variant of them (:data:`OP_VARIANTS`). A file that includes an
earlier version's ``.cu`` gets that file spliced in, since ``load_inline`` compiles one text.

A file that writes its launchers once for every loss of the registry (chapter 6's) expands
``KERNELS_ELEMENT_WISE_LOSSES(LAUNCHER)``, with ``LAUNCHER(op, Functor)`` a macro that defines
``op##_launch``: the build defines the list from ``kernels/losses.py`` (:func:`with_loss_list`),
so a new loss needs no line in the kernel file.
"""

from __future__ import annotations

import re
from pathlib import Path

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
LOSS_LIST = "KERNELS_ELEMENT_WISE_LOSSES"
USES_LOSS_LIST = re.compile(rf"^[ \t]*{LOSS_LIST}\s*\(\s*\w+\s*\)", re.MULTILINE)
INCLUDE_CU = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+\.cu)"[ \t]*$', re.MULTILINE)
LAUNCHER = re.compile(r'extern\s+"C"\s+cudaError_t\s+(\w+)_launch\s*\(\s*const\s+(\w+)\s*\*')
# The launcher of a macro that the loss list expands: extern "C" cudaError_t op##_launch(const S*
LIST_LAUNCHER = re.compile(
    r'extern\s+"C"\s+cudaError_t\s+\w+\s*##\s*_launch\s*\(\s*const\s+(\w+)\s*\*')


def loss_list() -> list[tuple[str, str]]:
    """(op, functor) of every element-wise loss of the registry, in its order."""
    from ..losses import ELEMENT_WISE, get_loss

    return [(name, get_loss(name).functor) for name in ELEMENT_WISE]


def with_loss_list(cuda_text: str) -> str:
    """The text with ``KERNELS_ELEMENT_WISE_LOSSES`` defined first, if the text expands it."""
    if not USES_LOSS_LIST.search(cuda_text):
        return cuda_text
    entries = "".join(f" \\\n    X({op}, {functor})" for op, functor in loss_list())
    # "#line 1" keeps the compiler's line numbers those of the file.
    return f"#define {LOSS_LIST}(X){entries}\n#line 1\n{cuda_text}"


def find_launchers(cuda_text: str) -> list[tuple[str, str]]:
    """The (op name, argument struct) of every ``extern "C" cudaError_t <op>_launch`` defined."""
    found = LAUNCHER.findall(cuda_text)
    if USES_LOSS_LIST.search(cuda_text):
        found += [(op, struct) for struct in LIST_LAUNCHER.findall(cuda_text)
                  for op, _ in loss_list()]
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
