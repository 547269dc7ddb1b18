"""Checks for chapter 2's exercises that no run on a GPU can make.

Exercise 2.1's trap is a lane that leaves the kernel (``if (i >= n) return;``) before a
``__shfl_*_sync`` with the full mask ``0xffffffff``: the CUDA Programming Guide requires every
lane named in the mask to execute the same shuffle, so the result is undefined. Undefined is not
wrong on every GPU: on the H100 such a kernel gives the right sums and compute-sanitizer's
synccheck reports nothing (bench/PERFLOG.md, session 7). So the rule is checked in the source.
"""

from __future__ import annotations

import re

FULL_MASK_SHUFFLE = re.compile(r"__shfl\w*_sync\s*\(\s*0xffffffff", re.IGNORECASE)
RETURN = re.compile(r"\breturn\b")
KERNEL = re.compile(r"__global__[^{;]*?(\w+)\s*\([^(){;]*\)\s*\{")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _body(text: str, opening: int) -> str:
    """The text between the brace at ``opening`` and its matching closing brace."""
    depth = 0
    for i in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[opening + 1:i]
    return text[opening + 1:]


def lanes_leaving_before_a_shuffle(cuda_text: str) -> list[str]:
    """The kernels (``__global__`` functions) of the text with a ``return`` before their first
    full-mask shuffle: lanes that may leave while the others shuffle."""
    text = COMMENT.sub("", cuda_text)
    found = []
    for kernel in KERNEL.finditer(text):
        body = _body(text, kernel.end() - 1)
        shuffle = FULL_MASK_SHUFFLE.search(body)
        if shuffle and RETURN.search(body, 0, shuffle.start()):
            found.append(kernel.group(1))
    return found


def every_lane_reaches_the_shuffles(source) -> bool:
    """Exercise 2.1: print PASS, or FAIL naming the kernels where lanes return before a
    full-mask shuffle; return whether it passed."""
    from kernels.build.build_cache import source_path

    path = source_path(source)
    kernels = lanes_leaving_before_a_shuffle(path.read_text())
    if not kernels:
        print(f"PASS  every lane reaches the full-mask shuffles ({path.name})")
        return True
    print(f"FAIL  {', '.join(kernels)}: a `return` comes before __shfl_*_sync(0xffffffff, ...): "
          "lanes that left never reach it, which is undefined behaviour even where the sums "
          "come out right. Keep every lane and let those past the end contribute 0")
    return False


def check_warp_atomics(source, device="cuda"):
    """Exercise 2.1's whole check for ``source``, as ``Chapter.exercise`` takes it: the values
    (``kernels.check``, which raises at a wrong one), then the rule above, whose verdict it
    returns. Both halves run, in this order, whatever the first returns: a kernel that gives
    the right sums but returns before its shuffles fails. ``device``: "cpu" for the tests."""
    from kernels.measure.correctness import check

    def checked(kernel) -> bool:
        check(kernel.mse, "mse", device=device)
        return every_lane_reaches_the_shuffles(source)

    return checked
