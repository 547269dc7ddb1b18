"""Chapter 9's validator on honest programs, many times: no false failure (PASS/MISS per program);
then every cheat, with its verdict and reason (PASS/MISS: the cheat fails for the reason meant).

Each honest ModelNew (the course's four entries and exercise 9.1's answer) is evaluated RUNS times at
KernelBench's size, inputs drawn on the GPU, every check but the timing (each run draws new secret
coverage and offset inputs), then TIMED times with the timing too (every timed call on fresh inputs,
checked). A single failure is a MISS: the validator's checks must never fail an honest program.

Every cheat of ``kernelbench.cheats`` runs at a sixteenth of KernelBench's size (timed only where its
check is in the timing), except the subsamples, which run at KernelBench's size, where their mean
passes KernelBench's own rules; the programs that only an isolated run survives run isolated.

``--trusted`` (opt-in; chapter 9 still uses the path above): the timed honest runs go through
``kernelbench.evaluate_trusted`` (the program in a child process, every reference here, every
timed call on new inputs with secret positions, checked in float64); the cheats are
``kernelbench.trusted_cheats`` (with "honest until timed", through evaluate_trusted), then the
programs that patch PyTorch (``kernelbench.TRUSTED_ONLY``), timed, also through it. The tables
are saved as validator_cheats_trusted and validator_reliability_trusted.

    python bench/validator_reliability.py [--runs 20] [--timed 2] [--skip-honest] [--skip-cheats]
                                          [--trusted]
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import kernelbench as kb  # noqa: E402
from kernels import results  # noqa: E402

SOLUTION = "solutions/kernels/ch9_model_new.py"


def honest_programs():
    """(problem, ModelNew class, its spec for a trusted run, entry)."""
    programs = [(pid, entry, entry, "course") for pid, entry in kb.COURSE_ENTRIES.items()]
    namespace = {}
    exec(compile(Path(kb.isolated.ROOT, SOLUTION).read_text(), SOLUTION, "exec"), namespace)
    return programs + [(100, namespace["ModelNew"], SOLUTION, "exercise 9.1's answer")]


MID = {94: {"batch_size": 8192, "dim": 8192}, 95: {"batch_size": 16384, "num_classes": 4096},
       96: {"batch_size": 8192, "dim": 8192}, 100: {"batch_size": 8192, "dim": 8192}}
TIMED_CHECKS = {"timed stream", "fresh inputs"}


def cheat_table(trusted: bool = False) -> int:
    rows, missed = [], 0
    for pid in sorted(kb.PROBLEMS):
        for name, cheat in (kb.trusted_cheats if trusted else kb.cheats)(pid).items():
            full = cheat.check == "coverage"  # where the mean of a subsample passes KernelBench
            problem = kb.PROBLEMS[pid] if full else kb.PROBLEMS[pid].resized(**MID[pid])
            if trusted:
                result = kb.evaluate_trusted(problem, cheat, entry=name, exact_inputs=False,
                                             measure=cheat.check in TIMED_CHECKS, perf_trials=10)
            else:
                result = kb.evaluate(problem, cheat.model, entry=name, exact_inputs=False,
                                     measure=cheat.check in TIMED_CHECKS, perf_trials=10)
            rows.append(_cheat_row(pid, name, cheat.check, result))
    for name, (model, check) in kb.ISOLATED_ONLY.items():
        spec = f"{model.__module__}:{model.__name__}"
        isolated = kb.evaluate_trusted if trusted else kb.evaluate_isolated
        result = isolated(kb.PROBLEMS[94].resized(**MID[94]), spec, entry=name,
                          exact_inputs=False, measure=False, time_limit=60)
        rows.append(_cheat_row(94, name, check, result))
    for name, (model, check) in (kb.TRUSTED_ONLY.items() if trusted else ()):
        spec = f"{model.__module__}:{model.__name__}"
        result = kb.evaluate_trusted(kb.PROBLEMS[94].resized(**MID[94]), spec, entry=name,
                                     exact_inputs=False, perf_trials=10)
        rows.append(_cheat_row(94, name, check, result))
    for row in rows:
        missed += row["meant"] != "yes"
        print(f"{'PASS' if row['meant'] == 'yes' else 'MISS'}  {row['problem']:>3}  {row['cheat']:<36} "
              f"KernelBench {row['kernelbench']:<4}  ours {row['verdict']}: {row['reason'][:150]}", flush=True)
    results.save_table(rows, "validator_cheats" + "_trusted" * trusted)
    return missed


def _cheat_row(pid, name, check, result) -> dict:
    failed = [c.split(" (")[0] for c, _ in result.failures]
    meant = not result.passed and (check in failed or (check == "runs" and "crashed" in failed))
    return {"gpu": torch.cuda.get_device_name(), "problem": pid, "cheat": name,
            "kernelbench": "PASS" if result.kernelbench_passed else "FAIL",
            "verdict": "PASS" if result.passed else "FAIL", "check_meant": check,
            "meant": "yes" if meant else "no", "failed_checks": ", ".join(failed),
            "reason": result.reason}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--timed", type=int, default=2)
    parser.add_argument("--skip-honest", action="store_true")
    parser.add_argument("--skip-cheats", action="store_true")
    parser.add_argument("--trusted", action="store_true", help="evaluate_trusted (opt-in)")
    args = parser.parse_args()
    require_gpus(1, "bench/validator_reliability.py")
    missed = 0 if args.skip_cheats else cheat_table(args.trusted)
    if args.skip_honest:
        return 1 if missed else 0
    rows = []
    for pid, program, spec, entry in honest_programs():
        began, failures = time.perf_counter(), []
        for run in range(args.runs + args.timed):
            timed = run >= args.runs
            if timed and args.trusted:  # the program in a child, every reference here
                result = kb.evaluate_trusted(pid, spec, entry=entry, exact_inputs=False, perf_trials=20)
            else:
                result = kb.evaluate(pid, program, entry=entry, exact_inputs=False, measure=timed,
                                     perf_trials=20 if timed else None)
            if not result.passed:
                failures.append(f"run {run + 1} (secret seed {result.secret_seed}): {result.reason}")
        seconds = time.perf_counter() - began
        total = args.runs + args.timed
        verdict = "PASS" if not failures else "MISS"
        missed += bool(failures)
        print(f"{verdict}  {pid:>3} {entry:<24} {total - len(failures)}/{total} runs passed "
              f"({args.timed} timed), {seconds:.0f} s", flush=True)
        for failure in failures:
            print(f"      {failure}")
        rows.append({"gpu": torch.cuda.get_device_name(), "problem": pid, "entry": entry,
                     "runs": total, "timed_runs": args.timed, "passed": total - len(failures),
                     "seconds": f"{seconds:.0f}"})
    results.save_table(rows, "validator_reliability" + "_trusted" * args.trusted)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
