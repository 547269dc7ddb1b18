"""Chapter 8's losses on 1, 2 and 4 GPUs, one run (not a timed test).

    python bench/vocab_parallel_scaling.py      # on a machine with 2 or more GPUs

The task ``scaling`` of ``kernels/ops/ranks.py`` on every GPU count up to the machine's (1, 2,
4, 8...): the vocab-parallel cross-entropy (bf16 fwd+bwd, 8192 x 256000 and 16384 x 128256,
the vocabulary split) and the exact global mean (every rank 4096 rows of its own); on 2 or more
GPUs also exercise 8.1's one-collective step (the solution's ``row_log_sum_exp``). Writes
``book/results/ch8_scaling.csv``, each row with its GPU count and model, which chapter 8 plots.
Prints PASS/MISS: the vocab-parallel step on R GPUs at least 0.9 R times as fast as on one.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.build.toolchain import require_gpus  # noqa: E402

EFFICIENCY_TARGET = 0.9
SOLUTION = ROOT / "solutions" / "kernels" / "ch8_one_collective.py"


def gpu_counts(available: int) -> list[int]:
    """1, 2, 4, ... up to ``available``."""
    counts, n = [], 1
    while n <= available:
        counts.append(n)
        n *= 2
    return counts


def verdicts(rows: list[dict]) -> list[str]:
    """One PASS/MISS line per shape and GPU count above one: the step's speedup over one GPU."""
    steps = [r for r in rows if r["loss"] == "vocab-parallel CE" and r["what"] == "step"]
    lines = []
    for r in steps:
        one = next(o for o in steps if o["shape"] == r["shape"] and o["gpus"] == 1)
        if r["gpus"] == 1:
            continue
        speedup = one["ms"] / r["ms"]
        verdict = "PASS" if speedup >= EFFICIENCY_TARGET * r["gpus"] else "MISS"
        lines.append(f"{verdict}: vocab-parallel CE {r['shape']} bf16 fwd+bwd on {r['gpus']} "
                     f"x {r['gpu']}: {speedup:.2f}x one GPU ({one['ms']:.3f} -> {r['ms']:.3f} ms, "
                     f"efficiency {speedup / r['gpus']:.0%}), target >= "
                     f"{EFFICIENCY_TARGET * r['gpus']:.1f}x")
    return lines


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    gpus = require_gpus(2, "bench/vocab_parallel_scaling.py")
    from kernels import results
    from kernels.ops import ranks

    rows = []
    for n in gpu_counts(gpus):
        rows += ranks.launch("scaling", n, lse_file=str(SOLUTION))["rows"]
    results.save_table(rows, "ch8_scaling")
    lines = verdicts(rows)
    print("\n".join(lines))
    return int(any(line.startswith("MISS") for line in lines))


if __name__ == "__main__":
    sys.exit(main())
