"""The last step against chapter 5's version 3, instruction by instruction (no GPU needed).

    python bench/experiments/ch5_steps/same_sass.py

Builds both files for sm_75 and sm_90 with ``kernels.load`` and compares the SASS of every
kernel (``cuobjdump -sass``, from the CUDA toolkit or Triton's wheel). The only difference
allowed is the device assertion's ``__LINE__``: ``write_row`` moved from line 211 of
``v3_fused_rows.cu`` to ``kernels/common/ce_rows.cuh``. Prints one line per verdict; exits 1
if anything else differs.
"""
import argparse
import difflib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

FILES = ("ch5_cross_entropy/v3_fused_rows.cu", "bench/experiments/ch5_steps/v11_dtypes.cu")
ASSERTION = re.compile(r'assert\(!"cross_entropy: a target is out of range')


def cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    import triton  # its wheel carries NVIDIA's cuobjdump

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


def sass(path: str) -> dict:
    """(arch, mangled name) -> the kernel's instructions, without their addresses."""
    from kernels import load
    from kernels.build.build_cache import build_root

    kernel = load(path, archs=("7.5", "9.0"))
    library = build_root() / kernel.name / f"{kernel.name}.so"
    text = subprocess.run([cuobjdump(), "-sass", str(library)], capture_output=True, text=True,
                          check=True).stdout
    kernels, current, arch = {}, None, None
    for line in text.splitlines():
        if m := re.match(r"\s*arch = (sm_\d+)", line):
            arch = m.group(1)
        elif m := re.match(r"\s*Function : (\S+)", line):
            current = (arch, m.group(1))
            kernels[current] = []
        elif current and line.strip().startswith("/*"):
            kernels[current].append(re.sub(r"/\*[0-9a-f]{4,}\*/", "", line).strip())
    return kernels


def assertion_line(path: Path) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1)
                if ASSERTION.search(line))


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    old, new = sass(FILES[0]), sass(FILES[1])
    lines = (assertion_line(ROOT / "kernels" / FILES[0]),
             assertion_line(ROOT / "kernels" / "common" / "ce_rows.cuh"))
    # The line number is an immediate operand: 0x000000d3 for line 211.
    codes = tuple(f"0x{n:08x}" for n in lines)
    same = renumbered = 0
    other = []
    for key in sorted(old.keys() | new.keys()):
        if old.get(key) == new.get(key):
            same += 1
            continue
        changed = [d for d in difflib.unified_diff(old.get(key, []), new.get(key, []),
                                                   lineterm="", n=0)
                   if d[:1] in "+-" and d[:3] not in ("+++", "---")]
        if len(changed) == 2 and codes[0] in changed[0] and codes[1] in changed[1]:
            renumbered += 1
        else:
            other.append(f"{key[0]} {key[1]}: {changed[:4]}")
    print(f"{len(old)} kernels in v3, {len(new)} in the last step: {same} identical, "
          f"{renumbered} differ only in the assertion's line ({lines[0]} -> {lines[1]})")
    for line in other:
        print(f"FAIL  {line}")
    print("PASS  the same SASS" if not other else f"FAIL  {len(other)} kernels differ")
    return 1 if other else 0


if __name__ == "__main__":
    sys.exit(main())
