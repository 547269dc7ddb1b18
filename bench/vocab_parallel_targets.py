"""Measure the chapter 8 target (issue 17) in one run and save the rows (not a timed test).

    python bench/vocab_parallel_targets.py        # on a machine with 2 GPUs (nvidia-h200-x2)

Vocab-parallel cross-entropy, forward + backward of bf16 logits (8192 x 256000 and 16384 x
128256): the same kernels on 1 GPU and with the vocabulary split over every GPU of the machine,
side by side in one run; target: at least 1.8x the throughput on 2 GPUs. Writes
book/results/vocab_parallel_targets.csv (columns of kernels.measure.results.COLUMNS).
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

import torch

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import results
from kernels.ops import ranks


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    gpus = require_gpus(2, "bench/vocab_parallel_targets.py")
    one = ranks.launch("time", 1)
    many = ranks.launch("time", gpus)
    results.save(ranks.results_rows(one, many), "vocab_parallel_targets")
    status = 0
    for s in ranks.scaling(one, many):
        print(f"{s['verdict']}: {s['shape']} bf16 fwd+bwd on {s['gpus']} GPUs: {s['speedup']:.2f}x "
              f"the same kernels on 1 GPU ({s['one_gpu_ms']:.3f} -> {s['ms']:.3f} ms, "
              f"efficiency {s['efficiency']:.0%}; all-reduces {s['comm_ms'] * 1e3:.0f} µs) "
              f"target >= {ranks.SCALING_TARGET}x")
        status |= s["verdict"] != "PASS"
    return status


if __name__ == "__main__":
    sys.exit(main())
