"""Is the trusted validator's calibration still needed? The timed-stream check's two baselines, side
by side, for every honest program (issue 56).

``kernelbench.evaluate_trusted`` compares the program's hidden time (wall minus event time per
call) with an honest loss timed in the child before the program is imported
(``trusted.Program.calibration``: 11 timed calls on two 64 MiB inputs, every evaluation). Before
``_switch_to_this_context``, the parent's eager timing was the baseline and every honest program
failed by 0.16 ms per call. This probe runs each honest program (the course's four entries and
exercise 9.1's answer) RUNS times through ``evaluate_trusted`` at KernelBench's size and prints,
for each run, the program's hidden time, the calibration's and the parent's eager one, and
whether ``check_timed_stream`` fails with each baseline. PASS: no honest run fails with the eager
baseline (the calibration can go); MISS: some does (it stays).

    python bench/trusted_baseline_probe.py [--runs 3]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.build.toolchain import require_gpus  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    require_gpus(1, "bench/trusted_baseline_probe.py")

    from kernels import kernelbench as kb
    from kernels.kernelbench import trusted
    from kernels.kernelbench.checks import check_timed_stream
    from validator_reliability import honest_programs

    calibrations = []  # each Program's, as evaluate_trusted made it
    calibrate = trusted.Program._calibrate

    def kept(self, device):
        calibrations.append(calibrate(self, device))
        return calibrations[-1]

    trusted.Program._calibrate = kept
    fails_eager = 0
    print(f"{'program':<28} {'run':>3} {'hidden':>8} {'calib.':>8} {'eager':>8}  "
          f"{'with calib.':<11} {'with eager':<10}")
    for pid, _, spec, entry in honest_programs():
        for run in range(args.runs):
            result = kb.evaluate_trusted(kb.PROBLEMS[pid], spec, entry=entry, perf_trials=10)
            new, eager = result.timings["ModelNew"], result.timings["eager"]
            calibration = calibrations[-1]
            verdicts = [check_timed_stream(new, b) if b else None for b in (calibration, eager)]
            fails_eager += verdicts[1] is not None
            print(f"{f'{pid} {entry}':<28} {run:>3} {new.hidden_ms:8.4f} "
                  f"{calibration.hidden_ms if calibration else float('nan'):8.4f} "
                  f"{eager.hidden_ms:8.4f}  {'FAIL' if verdicts[0] else 'ok':<11} "
                  f"{'FAIL' if verdicts[1] else 'ok':<10} {result.verdict}", flush=True)
    print(f"{'PASS' if fails_eager == 0 else 'MISS'}: {fails_eager} honest run(s) fail the "
          f"timed-stream check with the parent's eager timing as the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
