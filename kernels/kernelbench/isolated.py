"""The validator with the program under test in a process of its own: a crash, a hang or a lost
CUDA context (a device-side assert) is a FAIL with the reason, never a dead notebook kernel.

    result = evaluate_isolated(100, "kernels/exercises/ch9_model_new.py")   # a KernelBench file
    result = evaluate_isolated(94, "kernels.kernelbench.entries:CourseMSE")  # module:Class

The child reads its job from standard input before it loads the program, runs
:func:`~.evaluate.evaluate`, and prints the result on one line that starts with a nonce from the
job: the parent reads only that line, so whatever the program prints cannot pass for a verdict.
The program shares its process with the checks there, and the nonce sits in the child's frame:
a program that walks frames or reads the validator's memory could find it. The static checks
reject the ways to do that in Python (``gc``, ``inspect``, ``ctypes``, ``sys._getframe``,
``f_back``, ``__globals__``, hidden imports); C++ in an extension is beyond them.

The stronger design is built, as an opt-in: :func:`evaluate_trusted` (same arguments). Its
process, the trusted one, never imports the program: it reads the program's text for the
static checks (with the rules against patching PyTorch, :mod:`.patching`), starts a child
(``spawn``, :mod:`.trusted`) that loads the program, builds ``ModelNew`` and only answers
requests, and runs :func:`~.evaluate.evaluate` (``trusted=True``) with a ``ModelNew`` whose
``forward`` sends the inputs to the child and gets the output back, as JSON, never a pickle.
So the reference ``Model``, ``reference64``, the inputs and their secret seed, every check and
the eager and ``torch.compile`` timings live here; every timed call of the program gets new
inputs with secret positions that carry the loss and is checked in float64; a program that
replaces functions of PyTorch changes only its own process, and fails the check "PyTorch
unchanged". The program's own timings still come from its process (it could lie about them,
not about its outputs). The inputs are allocated here and the child maps the same memory
(CUDA IPC); its CUDA context is made before the problem is sized, so the sizing counts it.

Chapter 9 and its solutions still use :func:`evaluate_isolated` (the nonce design above) and
:func:`~.evaluate.evaluate` with their defaults, whose stored outputs came from them: the
trusted path has run on the CPU only (tests/test_kernelbench_cpu.py), and chapter 9 moves to
it when it is re-executed on a GPU with it (tests/gpu/test_validator.py runs it there).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from .problems import PROBLEMS, get_problem
from .report import Result, crash_reason
from .timing import Timing

TIME_LIMIT = 900  # seconds: KernelBench's full-size problems take a minute or two with the build
ROOT = Path(__file__).resolve().parents[2]  # the repository: what the child puts on sys.path
PRECISIONS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CHILD = "from kernels.kernelbench.isolated import child; child()"


def _program_spec(program) -> str:
    """A path to a ModelNew file, ``module:Class``, or a class importable from a module."""
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
    if isinstance(program, str) and ":" in program and "\n" not in program:
        return program
    raise ValueError("evaluate_isolated takes a .py file defining ModelNew, 'module:Class', or a "
                     f"class defined in a module (got {type(program).__name__})")


def _failed(problem, entry, check, why) -> Result:
    problem = get_problem(problem)
    return Result(problem.id, problem.name, entry, failures=[(check, why)],
                  bytes=problem.min_bytes())


def evaluate_isolated(problem, program, entry: str = "ModelNew", time_limit: float = TIME_LIMIT,
                      **options) -> Result:
    """:func:`~.evaluate.evaluate` in a child process (same arguments; ``precision`` as a dtype or
    its name); a crash, a non-zero exit or no verdict within ``time_limit`` seconds is a FAIL."""
    problem = get_problem(problem)
    if isinstance(options.get("precision"), torch.dtype):
        options["precision"] = str(options["precision"]).removeprefix("torch.")
    nonce = secrets.token_hex(16)
    job = {"problem": problem.id, "sizes": problem.sizes, "program": _program_spec(program),
           "entry": entry, "options": options, "nonce": nonce}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryFile("w+") as stdin:
        json.dump(job, stdin)
        stdin.seek(0)
        process = subprocess.Popen([sys.executable, "-c", CHILD], stdin=stdin,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                   cwd=ROOT, start_new_session=True)
        try:
            out, err = process.communicate(timeout=time_limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return _failed(problem, entry, "time limit", f"no verdict within {time_limit:g} s: a "
                                                         f"hang, or far slower than the reference")
    for line in reversed(out.splitlines()):
        if line.startswith(nonce):
            return _from_json(json.loads(line[len(nonce):]))
    return _failed(problem, entry, "crashed", crash_reason(process.returncode, err))


def _to_json(result: Result) -> str:
    return json.dumps(dataclasses.asdict(result))


def _from_json(data: dict) -> Result:
    data["timings"] = {k: Timing(**v) for k, v in data["timings"].items()}
    data["failures"] = [tuple(f) for f in data["failures"]]
    return Result(**data)


def _load(spec: str):
    if spec.endswith(".py"):
        return Path(spec).read_text()
    module, _, name = spec.partition(":")
    found = __import__(module, fromlist=[name])
    for part in name.split("."):
        found = getattr(found, part)
    return found


def child() -> None:
    """The child's side: read the job, evaluate, print the nonce and the result on one line."""
    job = json.load(sys.stdin)  # before the program is loaded: the nonce is not in its reach
    nonce = job.pop("nonce")
    from .evaluate import evaluate

    options = job["options"]
    if "precision" in options:
        options["precision"] = PRECISIONS[options["precision"]]
    problem = PROBLEMS[job["problem"]].resized(**job["sizes"])
    try:
        result = evaluate(problem, _load(job["program"]), entry=job["entry"], **options)
    except Exception as error:  # the validator could not go on: a lost CUDA context, say
        first = (str(error).strip().splitlines() or [""])[0]
        result = _failed(problem, job["entry"], "crashed",
                         f"the evaluation stopped: {type(error).__name__}: {first[:200]}")
    sys.stdout.flush()
    print(nonce + _to_json(result), flush=True)



def _trusted_spec(program) -> str:
    """As :func:`_program_spec`, and a cheat of :func:`~.cheats.trusted_cheats` by its spec."""
    return getattr(program, "spec", "") or _program_spec(program)


def evaluate_trusted(problem, program, entry: str = "ModelNew", time_limit: float = TIME_LIMIT,
                     **options) -> Result:
    """:func:`~.evaluate.evaluate` with the program in a child process that returns only its
    outputs (and its own timings), and everything else here (same arguments; ``precision`` as a
    dtype or its name): every reference, check and baseline timing is this process's. A crash,
    a non-zero exit or no verdict within ``time_limit`` seconds is a FAIL."""
    from .evaluate import evaluate
    from .trusted import Program, ProgramGone, remote_class, source_of

    problem = get_problem(problem)
    precision = options.get("precision", torch.float32)
    if isinstance(precision, str):
        precision = options["precision"] = PRECISIONS[precision]
    spec = _trusted_spec(program)
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
        result = evaluate(problem, model, entry=entry, trusted=True, **options)
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
