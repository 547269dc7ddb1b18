"""Measure how long building each kernel version takes: cold (empty cache) and cached.

    python bench/build_times.py [--archs 7.5 9.0] [files...]

Cold: each file built alone in a fresh cache directory (what a learner waits for the first time
a cell builds a kernel). Cached: a new Python process loading the same build (every later run).
Targets (issue 2): cold at most 10 s on the H100 machine, at most 15 s for sm_75 + sm_90 on
CI's 2 cores; cached under 1 s. Writes book/results/build_times.csv.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOAD = ("import sys, time, torch; sys.path.insert(0, {root!r}); "
        "from kernels import load; t = time.perf_counter(); k = load({src!r}, archs={archs!r}); "
        "print(time.perf_counter() - t, k.cached)")


def timed_load(source: str, archs, build_dir: str) -> tuple[float, bool]:
    """Seconds for load() in a new process (after importing torch), and whether it was cached."""
    env = dict(os.environ, KERNELS_BUILD_DIR=build_dir)
    code = LOAD.format(root=str(ROOT), src=source, archs=archs)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, text=True,
                         capture_output=True).stdout.split()
    return float(out[-2]), out[-1] == "True"


def main() -> int:
    from kernels.measure.envinfo import environment
    from kernels.build.build_cache import KERNELS_DIR
    from kernels.build.toolchain import nvcc, target_archs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--archs", nargs="*")
    parser.add_argument("--keep", help="build directory to keep the builds in (warms a cache)")
    args = parser.parse_args()
    if nvcc() is None:
        print("bench/build_times.py needs nvcc, the CUDA toolkit's compiler (or CUDA_HOME set to it).")
        return 2
    try:
        archs = tuple(target_archs(args.archs))
    except RuntimeError:  # no GPU to take the architecture from, and none named
        print("bench/build_times.py needs a CUDA GPU, or the architectures to build for "
              "(--archs 9.0).")
        return 2
    files = args.files or sorted(p.relative_to(KERNELS_DIR).as_posix()
                                 for p in KERNELS_DIR.glob("ch*/*.cu"))
    gpu = environment()["gpu"]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        build_dir = args.keep or scratch
        for source in files:
            started = time.perf_counter()
            cold, was_cached = timed_load(source, archs, build_dir)
            cached, _ = timed_load(source, archs, build_dir)
            rows.append({"gpu": gpu, "archs": " ".join(archs), "source": source,
                         "cold_s": f"{cold:.2f}", "cached_s": f"{cached:.3f}",
                         "was_cached": was_cached})
            print(f"{source:<55} cold {cold:6.2f} s  cached {cached:6.3f} s"
                  f"{'  (already in cache!)' if was_cached else ''}", flush=True)
    out = ROOT / "book" / "results" / "build_times.csv"
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    worst = max(float(r["cold_s"]) for r in rows)
    print(f"{len(rows)} kernel files; slowest cold build {worst:.1f} s; "
          f"slowest cached load {max(float(r['cached_s']) for r in rows):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
