"""Mutation testing of the toolkit's core logic on CPU: how many small bugs the CPU tests catch.

    make mutation                                   # every module below (hours on 2 cores)
    python tools/mutation.py kernels/kernelbench/checks.py ...   # some of them

mutmut (https://mutmut.readthedocs.io) makes one mutant per small change of a function (a ``>=``
for a ``>``, a constant off by one, a dropped argument...), and runs the CPU tests that reach
that function on each: a mutant the tests fail is *killed*, one they pass *survived* (a bug they
would not see, or an equivalent change). The run happens in a scratch copy of the repository
(``.mutation/``, ignored by git), so the checkout is never mutated.

The score (killed / mutants that ran) and its date, per module, go to
``book/results/mutation.json``, which tools/reliability_report.py shows on the reliability page,
with the survivors; tools/mutation_survivors.md says why each of them is left, and the JSON's
``equivalent`` lists those no input can tell from the original (kept across runs while they
survive), so that the page also shows the score over the mutants that change behaviour.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"
RESULTS = ROOT / "book" / "results" / "mutation.json"

# module -> the CPU tests that guard it (mutmut runs, for each mutant, those that reach it)
MODULES = {
    "kernels/losses.py": ["tests/test_losses_cpu.py", "tests/test_operators_cpu.py",
                          "tests/test_correctness_cpu.py", "tests/test_toolkit.py"],
    "kernels/measure/correctness.py": ["tests/test_correctness_cpu.py", "tests/test_toolkit.py"],
    "kernels/kernelbench/checks.py": ["tests/test_kernelbench_checks_cpu.py",
                                      "tests/test_kernelbench_cpu.py"],
    "kernels/kernelbench/static.py": ["tests/test_kernelbench_checks_cpu.py",
                                      "tests/test_kernelbench_cpu.py"],
    "kernels/kernelbench/problems.py": ["tests/test_kernelbench_problems_cpu.py",
                                        "tests/test_kernelbench_cpu.py"],
    "kernels/build/provenance.py": ["tests/test_toolkit.py", "tests/test_skeletons.py"],
    "kernels/build/skeletons.py": ["tests/test_skeletons.py", "tests/test_chapter.py"],
    "kernels/course/chapter.py": ["tests/test_chapter.py"],
}
# Tests that fail under mutmut for a reason of its own (torch._dynamo's config module has
# neither limit attribute there, as if half imported): Chapter.allow_recompiles goes unmutated.
DESELECT = ["tests/test_chapter.py::test_allow_recompiles_raises_dynamos_limit"]
# What the tests read besides the package (notebooks, tools, the book's results...): everything
# at the top of the repository but hidden folders and build outputs, copied as it is (20 MB).
ALSO = sorted(p.name for p in ROOT.iterdir()
              if not p.name.startswith(".") and p.name not in ("kernels", "_build", "mutants"))


def workspace(modules: list[str]) -> list[str]:
    """A fresh scratch copy with mutmut's configuration for ``modules``; the tests to run."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.o")
    shutil.copytree(ROOT / "kernels", WORK / "kernels", ignore=ignore)
    for path in ALSO:
        source = ROOT / path
        if source.is_dir():
            shutil.copytree(source, WORK / path, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, WORK / path)
    (WORK / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n"
                                     "timeout = 900\n")
    tests = sorted({t for m in modules for t in MODULES[m]})
    lines = "\n    ".join
    (WORK / "setup.cfg").write_text(
        "[mutmut]\nsource_paths = kernels\n"
        f"only_mutate =\n    {lines(modules)}\n"
        f"also_copy =\n    {lines(ALSO + ['pytest.ini'])}\n"
        f"pytest_add_cli_args_test_selection =\n    {lines(tests)}\n"
        "pytest_add_cli_args =\n    -q\n    -x\n    -p\n    no:randomly\n"
        + "".join(f"    --deselect\n    {test}\n" for test in DESELECT))
    return tests


def mutmut(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    # One thread per process: mutmut forks a process per mutant from one that has run torch,
    # and a fork of a process whose OpenMP pool is running hangs in its first parallel op
    # (each such mutant then "timed out" with its tests passing when run alone).
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=WORK, check=check,
                          text=True, capture_output=args[0] != "run", env=env)


def outcomes() -> dict[str, str]:
    """mutant name -> killed, survived, no tests, timeout, ... (``mutmut results --all``)."""
    text = mutmut("results", "--all", "true").stdout
    return dict(re.findall(r"^\s*(\S+__mutmut_\d+): ([\w ]+?)\s*$", text, re.M))


def module_of(mutant: str) -> str:
    """kernels.measure.correctness.x_check__mutmut_3 -> kernels/measure/correctness.py"""
    return next((m for m in MODULES if mutant.startswith(m[:-3].replace("/", ".") + ".")), "?")


def score(found: dict[str, str], modules: list[str]) -> dict:
    table = {}
    for module in modules:
        mine = {k: v for k, v in found.items() if module_of(k) == module}
        # A timeout is not counted as a kill (mutmut counts it as one): on 2 busy cores the tests
        # that start KernelBench's child processes ran past mutmut's limit with mutants they
        # pass when run alone. Run those again by hand (see tools/mutation_survivors.md).
        killed = sum(v == "killed" for v in mine.values())
        ran = sum(v in ("killed", "timeout", "survived") for v in mine.values())
        table[module] = {
            "mutants": len(mine), "ran": ran, "killed": killed,
            "no_tests": sum(v == "no tests" for v in mine.values()),
            "score": round(100 * killed / ran, 1) if ran else None,
            "survivors": sorted(k for k, v in mine.items() if v == "survived"),
            "timeouts": sorted(k for k, v in mine.items() if v == "timeout"),
        }
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", default=list(MODULES),
                        help="modules to mutate (default: all of them)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-record", action="store_true",
                        help=f"print the score only, do not update {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    unknown = set(args.modules) - set(MODULES)
    if unknown:
        parser.error(f"not a module of the core: {sorted(unknown)}; one of {list(MODULES)}")
    workspace(args.modules)
    mutmut("run", "--max-children", str(args.jobs))
    table = score(outcomes(), args.modules)
    killed = sum(t["killed"] for t in table.values())
    ran = sum(t["ran"] for t in table.values())
    for module, t in table.items():
        print(f"{module:34} {t['killed']:4d} killed of {t['ran']:4d} run "
              f"({t['score']}%), {t['no_tests']} with no test")
        for name in t["survivors"]:
            print(f"    survived: {name}")
        for name in t["timeouts"]:
            print(f"    timed out (not counted as killed): {name}")
    total = round(100 * killed / ran, 1) if ran else 0.0
    print(f"mutation score: {total}% ({killed} of {ran} mutants killed)")
    if not args.no_record:
        recorded = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"modules": {}}
        record(recorded, table, datetime.date.today().isoformat(),
               f"mutmut, {args.jobs} jobs, OMP_NUM_THREADS=1")
        RESULTS.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    return 0


def record(recorded: dict, table: dict, date: str, how: str) -> None:
    """A run's table into the results: each module's entry replaced, but for the survivors
    tools/mutation_survivors.md calls equivalent, kept as long as they survive."""
    for module, t in table.items():
        before = recorded["modules"].get(module, {}).get("equivalent", [])
        recorded["modules"][module] = {
            **t, "date": date, "how": how,
            "equivalent": [name for name in before if name in t["survivors"]]}


if __name__ == "__main__":
    sys.exit(main())
