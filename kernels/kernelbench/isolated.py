"""The validator with the program under test in a process of its own, and every reference out of
its reach: a crash, a hang or a lost CUDA context (a device-side assert) is a FAIL with the
reason, never a dead notebook kernel, and nothing the program does to its own process changes
what it is compared with.

    result = evaluate_isolated(100, "kernels/exercises/ch9_model_new.py")   # a KernelBench file
    result = evaluate_isolated(94, "kernels.kernelbench.entries:CourseMSE")  # module:Class
    result = evaluate_isolated(94, cheats(94)["zero output"])               # a Cheat

The design, as built (:mod:`.trusted`): this process, the trusted one, never imports the
program. It reads the program's text for the static checks, starts a child (``spawn``) that
loads the program and builds ``ModelNew``, and runs :func:`~.evaluate.evaluate` with a
``ModelNew`` whose ``forward`` sends the inputs to the child and gets the output back. So the
reference ``Model``, ``reference64`` (the coverage and offset expectations), the inputs and
their secret seed, every check, and the eager and ``torch.compile`` timings live here; the
child receives inputs and returns outputs, and its own timings: for each timed call this
process writes new inputs with secret positions that carry the loss, computes their float64
loss, and asks the child to time one call on them (events and wall clock around the call, as
:func:`~.timing.time_trials`), then checks the output. The child's answers are JSON, never a
pickle. A program that replaces functions of PyTorch changes only its own process: the verdict
is unmoved, and the check "PyTorch unchanged" names what it replaced (the static checks name
the line where they can see it).

The program's own timings come from its process: a program could lie about them (it cannot
about its outputs). The static checks reject the ways to patch the clock and PyTorch in
Python; the "PyTorch unchanged" check sees any function of torch, torch.nn.functional and
torch.Tensor replaced; C++ in an extension is beyond both.

Memory: the inputs are allocated once, here, and the child maps the same memory (CUDA IPC), so
the two processes hold one copy. The child's CUDA context is made before the problem is sized
(:func:`~.evaluate.fitted_to`), so the sizing counts it; the rest is as in one process
(``PEAK_FACTOR``): on a 15 GiB GPU the problems run at half their size per dimension, as
:func:`~.problems.sized_for` says.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from .problems import get_problem
from .report import Result

TIME_LIMIT = 900  # seconds: KernelBench's full-size problems take a minute or two with the build
ROOT = Path(__file__).resolve().parents[2]  # the repository: where relative paths are found
PRECISIONS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _program_spec(program) -> str:
    """A path to a ModelNew file, ``module:Class``, a class importable from a module, or one of
    :func:`~.cheats.cheats` (``cheat:<problem>:<name>``)."""
    if getattr(program, "spec", ""):
        return program.spec
    if isinstance(program, type):
        if program.__module__ in ("__main__", "builtins") or "<locals>" in program.__qualname__:
            raise ValueError(f"{program.__name__} is defined in a notebook or a function: an isolated "
                             f"run needs it in a file (KernelBench's form: a .py file defining "
                             f"ModelNew) or a module")
        return f"{program.__module__}:{program.__qualname__}"
    if isinstance(program, Path) or (isinstance(program, str) and program.endswith(".py")):
        path = Path(program)
        if not path.is_absolute() and not path.exists():
            path = ROOT / path  # a notebook in chapters/ names files from the repository's root
        if not path.is_file():
            raise FileNotFoundError(f"no ModelNew file at {program} (nor at {path})")
        return str(path.resolve())
    if isinstance(program, str) and ":" in program and "\n" not in program:  # module:Class, cheat:
        return program
    raise ValueError("evaluate_isolated takes a .py file defining ModelNew, 'module:Class', or a "
                     f"class defined in a module (got {type(program).__name__})")


def _failed(problem, entry, check, why) -> Result:
    problem = get_problem(problem)
    return Result(problem.id, problem.name, entry, failures=[(check, why)],
                  bytes=problem.min_bytes())


def evaluate_isolated(problem, program, entry: str = "ModelNew", time_limit: float = TIME_LIMIT,
                      **options) -> Result:
    """:func:`~.evaluate.evaluate` with the program in a child process and everything else here
    (same arguments; ``precision`` as a dtype or its name); a crash, a non-zero exit or no
    verdict within ``time_limit`` seconds is a FAIL."""
    from .evaluate import evaluate
    from .trusted import Program, ProgramGone, remote_class, source_of

    problem = get_problem(problem)
    precision = options.get("precision", torch.float32)
    if isinstance(precision, str):
        precision = options["precision"] = PRECISIONS[precision]
    spec = _program_spec(program)
    device = torch.device(options.get("device", "cuda"))
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    options["device"] = device
    source = source_of(spec)
    try:
        child = Program(spec, problem.id, device, str(precision).removeprefix("torch."), time_limit)
    except ProgramGone as gone:
        return _failed(problem, entry, gone.check, gone.why)
    try:
        model = remote_class(child, source or "")
        result = evaluate(problem, model, entry=entry, **options)
        if source is None:
            result.notes.append(f"static checks skipped: the source of {spec} was not found")
        if child.gone is None:
            changed = child.ask("changed")["changed"]
            if changed:
                result.failures.append(("PyTorch unchanged", f"the program replaced {', '.join(changed[:5])}"
                                        f"{' and more' if len(changed) > 5 else ''} in its process: "
                                        f"a program must not change the library it is measured against"))
    except ProgramGone:
        result = None
    finally:
        child.close()
    if child.gone is not None:  # what ended it is the verdict; the rest followed from it
        failed = _failed(problem, entry, child.gone.check, child.gone.why)
        if result is not None:
            failed.trials, failed.trials_passed, failed.secret_seed = result.trials, result.trials_passed, result.secret_seed
        return failed
    return result

