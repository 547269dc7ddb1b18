"""The validator: run a ModelNew on a problem under KernelBench's rules and every check of this
package, in this process (:func:`evaluate`). :mod:`.isolated` runs the same in a subprocess.
"""

from __future__ import annotations

import math
import secrets

import torch

from ..correctness import poison_allocator
from . import static
from .checks import (check_against_float64, check_inputs_unchanged, check_not_constant,
                     check_output, check_recomputes, check_timed_stream, excessive_speedup_note,
                     synchronize)
from .draws import ExactDraws
from .problems import CORRECT_TRIALS, SEED, SPIKES, TOLERANCES, KernelBenchError, Problem, \
    get_problem, sized_for, trial_seeds
from .report import Result
from .timing import WARMUP_NEW, WARMUP_REFERENCE, gpu_only_ms, time_trials, time_trials_anywhere

COVERAGE_TRIALS = 2  # each with its own secret positions


def model_from_source(source: str, name: str = "ModelNew") -> type:
    """The class ``name`` defined by a Python source text (KernelBench's form of a solution)."""
    namespace: dict = {}
    exec(compile(source, "<ModelNew source>", "exec"), namespace)  # noqa: S102  (the learner's code)
    found = namespace.get(name)
    if found is None:
        classes = sorted(k for k, v in namespace.items() if isinstance(v, type))
        raise KernelBenchError(f"the source defines no {name}: KernelBench looks for a class named "
                               f"{name} (classes found: {', '.join(classes) or 'none'})")
    return found


def _instantiate(model_new, problem: Problem):
    """ModelNew(*get_init_inputs()), or the module itself; errors a learner can act on."""
    if model_new is None:
        raise KernelBenchError("evaluate() needs your ModelNew: a class ModelNew(torch.nn.Module) "
                               "whose forward(predictions, targets) returns the loss (got None)")
    if isinstance(model_new, str):
        model_new = model_from_source(model_new)
    if isinstance(model_new, torch.nn.Module):
        return model_new
    if not isinstance(model_new, type):
        raise KernelBenchError(f"ModelNew must be a class (a torch.nn.Module subclass), got "
                               f"{type(model_new).__name__}")
    if not issubclass(model_new, torch.nn.Module):
        raise KernelBenchError(f"ModelNew must subclass torch.nn.Module (KernelBench moves it with "
                               f".to(device)), got {model_new.__name__}({', '.join(b.__name__ for b in model_new.__bases__)})")
    return model_new(*problem.get_init_inputs())


def _on_device(inputs, device, dtype):
    """KernelBench's _process_input_tensor, integers kept (issue #151): floats to ``dtype``."""
    return [x.to(device=device, dtype=dtype) if x.is_floating_point() else x.to(device)
            for x in inputs]


def _describe_error(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first[:160]}"


def _call(model, inputs):
    """ModelNew's output on inputs, with the allocator's free memory poisoned first (memory
    nobody wrote reads NaN, never a lucky value); or the error it raised, as a failure."""
    poison_allocator(inputs[0].device)
    try:
        with torch.no_grad():
            out = model(*inputs)
        synchronize(inputs)
    except Exception as error:  # the learner's code: report it, never crash the notebook
        return None, ("runs", f"ModelNew raised {_describe_error(error)}")
    return out, None


def _trial(model, reference, inputs):
    """One correctness trial: (output, reference output, [(check, why), ...]). ModelNew first, on
    the inputs; the reference on copies taken before; then the inputs compared with the copies.
    The tolerance is KernelBench's for the reference's dtype."""
    originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    out, error = _call(model, inputs)
    if error:
        return None, None, [error]
    with torch.no_grad():
        ref = reference(*originals)
    failures = []
    failure = check_output(out, ref, TOLERANCES.get(ref.dtype, TOLERANCES[torch.float32]))
    if failure is not None:
        failures.append(("correct", failure))
    failure = check_inputs_unchanged(inputs, originals)
    if failure is not None:
        failures.append(("inputs unchanged", failure))
    return out, ref, failures


def _comparable(out, ref) -> bool:
    return isinstance(out, torch.Tensor) and isinstance(ref, torch.Tensor) and \
        out.shape == ref.shape and out.dtype == ref.dtype and out.device == ref.device


def fitted_to(problem: Problem, device) -> tuple[Problem, str | None]:
    """The problem as large as ``device`` holds, and the sentence that says it was made smaller
    (None where it was not): KernelBench's size on an 80 GB GPU, halved in each dimension where
    an evaluation (the inputs, their copies, the outputs) would not fit, as on a 16 GB GPU, whose
    problem 94 (two 4 GiB inputs) runs out of memory at the copies (:func:`sized_for`)."""
    if device.type != "cuda":
        return problem, None
    fitted, sentence = sized_for(problem, torch.cuda.mem_get_info(device)[0])
    return fitted, (None if fitted is problem else sentence)


def evaluate(problem, model_new, entry: str = "ModelNew", trials: int = CORRECT_TRIALS,
             perf_trials: int | None = None, seed: int = SEED, device="cuda",
             exact_inputs: bool = True, measure: bool | None = None,
             precision=torch.float32, verbose: bool = False,
             secret_seed: int | None = None, static_checks: bool = True,
             trusted: bool = False) -> Result:
    """Run ``model_new`` (a ModelNew class, an instance, or a source text defining ModelNew) on a
    problem under KernelBench's rules and this package's checks (see its docstring).

    ``exact_inputs``: draw the inputs on the CPU, KernelBench's exact values (seconds of CPU time
    per 2^30 values), else on ``device`` from the same distributions. ``measure``: time ModelNew,
    eager Model and torch.compile(Model) (by default on a CUDA device); as in KernelBench, only
    a ModelNew that passed the correctness trials is timed. ``secret_seed``: the seed of the
    coverage, offset and timed inputs, drawn afresh for every evaluation unless given (a failure
    is replayed by passing ``result.secret_seed``). ``static_checks=False`` leaves out the checks
    of the source (to ask whether PyTorch's own expression passes the dynamic ones). ``trusted``
    (as :func:`~.isolated.evaluate_trusted` calls it; off by default, chapter 9's path): every
    timed call of ModelNew on secret coverage inputs checked in float64, the static checks of
    patching PyTorch (:mod:`.patching`), a ModelNew in a child process read by its ``source``
    and timed on the CPU too. Errors of the learner's code become a FAIL result with the reason;
    only a call that cannot be evaluated at all (no ModelNew, an unknown problem) raises
    :class:`KernelBenchError`.
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    problem, resized = fitted_to(get_problem(problem), device)
    measure = device.type == "cuda" if measure is None else measure
    if measure and device.type != "cuda" and not trusted:
        raise KernelBenchError("timing needs a CUDA device (pass measure=False on the CPU)")
    if precision not in TOLERANCES:
        raise KernelBenchError(f"precision must be one of {list(TOLERANCES)}, got {precision}")
    secret = secrets.randbits(62) if secret_seed is None else secret_seed
    result = Result(problem.id, problem.name, entry, bytes=problem.min_bytes(), secret_seed=secret,
                    gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    if resized:
        result.notes.append(resized)
    failures: dict = {}  # check -> (the first reason, the trials it failed in)

    def fail(check, why, trial=None):
        first, where = failures.get(check, (why, []))
        failures[check] = (first, where + ([trial] if trial else []))

    def say(text):
        if verbose:
            print(f"[{problem.name}, {entry}] {text}", flush=True)

    if model_new is None or not isinstance(model_new, (str, type, torch.nn.Module)):
        _instantiate(model_new, problem)  # raises KernelBenchError with the reason
    source = getattr(model_new, "source", model_new) if trusted else model_new  # a child's text
    findings, unreadable = static.check_model(source, patching=trusted) if static_checks else ([], None)
    try:
        model = _instantiate(model_new, problem).to(device=device, dtype=precision)
    except KernelBenchError:
        raise  # the call itself is wrong: no ModelNew, not a class, ...
    except Exception as error:  # KernelBench's "compiled: False"
        fail("builds", f"ModelNew() raised {_describe_error(error)} (call ModelNew() yourself "
                       f"for the whole error)")
        model = None
    reference = problem.model().to(device=device, dtype=precision)

    seeds = trial_seeds(seed, trials)
    # The trials' exact inputs, then the timed ones, drawn ahead on the CPU (ExactDraws).
    draws = ExactDraws(problem, seeds + [seed] * bool(measure)) if exact_inputs else None

    def inputs_for(seed_):
        if draws is not None:
            return _on_device(draws(seed_), device, precision)
        generator = torch.Generator(device=device).manual_seed(seed_)
        return _on_device(problem.make_inputs(problem.sizes, generator, device), device, precision)

    try:
        if not failures:
            # The last trial's inputs go to _beyond, which frees them before its last step.
            last = _correctness(model, reference, inputs_for, seeds, result, fail, say)
            _beyond(model, reference, problem, last, device, precision, seed, fail, say)
            if last is not None:
                _hidden_inputs(model, problem, device, precision, secret, fail, say)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        timed = None  # as in KernelBench, only a ModelNew that passed its trials is timed
        if measure and result.kernelbench_passed and not failures.get("runs"):
            timed = inputs_for(seed)
    finally:
        if draws is not None:
            draws.close()  # nothing drawn beside the timing
    result.failures = [(check + (f" (trial{'s' * (len(where) > 1)} {', '.join(map(str, where))})"
                                 if where else ""), why) for check, (why, where) in failures.items()]
    failed = [str(f) for f in findings if f.severity == "failure"]
    if failed:
        result.failures.append(("static", "; ".join(failed)))
    result.notes += [f"static warning, {f}" for f in findings if f.severity == "warning"]
    if unreadable:
        result.notes.append(f"static checks skipped: {unreadable}")
    if timed is not None:
        _measure(problem, model, reference, timed, result, perf_trials, precision, say, trusted)
    return result


def _correctness(model, reference, inputs_for, seeds, result, fail, say):
    """KernelBench's trials (plus the input and constant checks); the last trial's inputs, or
    None when ModelNew could not run."""
    outputs, references, inputs = [], [], None
    result.trials = len(seeds)
    for k, trial_seed in enumerate(seeds, 1):
        inputs = None  # the previous trial's tensors are freed before the next are made
        inputs = inputs_for(trial_seed)
        out, ref, failures = _trial(model, reference, inputs)
        if _comparable(out, ref):
            diff = (out.double() - ref.double()).abs().max().item()
            result.max_abs_diff = diff if math.isnan(result.max_abs_diff) else max(result.max_abs_diff, diff)
        say(f"trial {k}: " + ("; ".join(why for _, why in failures) or "pass"))
        for check, why in failures:
            fail(check, why, k)
        if any(check == "runs" for check, _ in failures):
            return None  # it raised: nothing more to learn from further calls
        if not any(check == "correct" for check, _ in failures):
            result.trials_passed += 1  # KernelBench's rule: the output, whatever the inputs
        outputs.append(out.detach().clone() if isinstance(out, torch.Tensor) else out)
        references.append(ref)
    result.kernelbench_passed = result.trials_passed == result.trials
    failure = check_not_constant(outputs, references)
    if failure:
        fail("not constant", failure)
    return inputs


def _beyond(model, reference, problem, last, device, precision, seed, fail, say) -> None:
    """:func:`check_recomputes` on the last trial's tensors (new values from KernelBench's
    distribution), then the trial with inputs outside it. Nothing when ModelNew could not run
    (``last`` is None)."""
    if last is None:
        return
    generator = torch.Generator(device=device).manual_seed(seed + 2)
    new = _on_device(problem.make_inputs(problem.sizes, generator, device), device, precision)
    with torch.no_grad():
        expected = reference(*new)
    try:
        failure = check_recomputes(model, last, new, expected, TOLERANCES[precision])
    except Exception as error:
        failure = f"ModelNew raised {_describe_error(error)}"
    if failure:
        fail("recomputes", failure)
    del new, expected, last
    generator = torch.Generator(device=device).manual_seed(seed + 1)
    off = _on_device(problem.off_distribution(problem.sizes, generator, device), device, precision)
    _, _, failures = _trial(model, reference, off)
    say("off-distribution trial: " + ("; ".join(why for _, why in failures) or "pass"))
    for check, why in failures:
        fail("beyond KernelBench's inputs" if check == "correct" else check,
             f"{problem.off_text}: {why}")


def _hidden_inputs(model, problem, device, precision, secret, fail, say) -> None:
    """The trials whose inputs come from a secret seed and are compared with a float64 reference:
    two coverage trials, where K = SPIKES[precision] secret positions carry the loss, about 1/K
    each, so that a program that skips a fraction f of the input passes one with probability
    (1 - f)^K (compared relative to the loss, which is far from 0). In the first every other term
    is exactly 0; in the second the spikes hide among KernelBench's own draws, so that a program
    cannot tell the trial from KernelBench's inputs by sampling a few values. Then one trial with
    a random offset and scale (atol = rtol = KernelBench's tolerance)."""
    generator = torch.Generator(device=device).manual_seed(secret)
    tolerance = TOLERANCES[precision]
    for k, hidden in enumerate((False, True)[:COVERAGE_TRIALS]):
        inputs = problem.coverage(problem.sizes, generator, device, precision, SPIKES[precision], hidden)
        expected = problem.reference64(inputs)
        out, error = _call(model, inputs)
        why = error[1] if error else check_against_float64(out, expected, tolerance, relative_only=True)
        say(f"coverage trial {k + 1}: {why or 'pass'}")
        if why:
            fail("coverage", f"a loss carried by {SPIKES[precision]} secret positions, each about "
                             f"1/{SPIKES[precision]} of it: {why} (is every element read?)", k + 1)
        del inputs, out
    inputs = _on_device(problem.shifted(problem.sizes, generator, device), device, precision)
    expected = problem.reference64(inputs)
    out, error = _call(model, inputs)
    why = error[1] if error else check_against_float64(out, expected, tolerance)
    say(f"offset and scale trial: {why or 'pass'}")
    if why:
        fail("offset and scale", f"inputs a + s * randn, a random offset and scale: {why} (are "
                                 f"the inputs read at full precision?)")


def _measure(problem, model, reference, inputs, result, perf_trials, precision, say,
             trusted=False) -> None:
    """Time ModelNew, eager Model and torch.compile(Model), each call on new values written into
    the same tensors (so no result can be replayed by address, version or content). Without
    ``trusted`` (chapter 9's path), ModelNew's outputs are checked against the reference of each
    call's inputs (KernelBench's draws). With it, each of ModelNew's timed calls gets a coverage
    input of its own (secret positions that carry the loss, hidden among KernelBench's draws)
    and its output is checked against the float64 loss of those very inputs, as strictly as a coverage trial: a program that skips part of its input
    in any timed call fails. Then check that ModelNew's work was on the timed stream, flag an
    excessive speed-up (KernelBench's 10x), and, for a ModelNew that passed everything, measure
    each program's GPU-only time. A ModelNew in a child process (:mod:`.trusted`) times its own
    calls there; the references are timed here. On the CPU (a child's protocol, in tests) the
    host's clock times eager only."""
    device = inputs[0].device
    generator = torch.Generator(device=device).manual_seed(result.secret_seed + 1)
    tolerance, spikes = TOLERANCES[precision], SPIKES[precision]

    def fresh():
        problem.refill(inputs, generator)

    def fresh_with_reference():
        if not trusted:
            fresh()
            with torch.no_grad():
                return reference(*inputs)  # before ModelNew runs: it cannot change what this sees
        new = problem.coverage(problem.sizes, generator, device, precision, spikes, True)
        for x, y in zip(inputs, new):
            x.copy_(y)
        del new
        return problem.reference64(inputs)  # before ModelNew runs: it cannot change what this sees

    def verify(out, expected):
        if not trusted:
            return check_output(out, expected, tolerance)
        return check_against_float64(out, expected, tolerance, relative_only=True)

    clock = time_trials_anywhere if trusted else time_trials  # the CPU too, on the opt-in path
    own_timer = trusted and getattr(model, "time_trials", None)  # a child's program times there
    timer = own_timer or (lambda *a, **k: clock(model, *a, **k))
    try:
        result.timings["ModelNew"] = timer(inputs, perf_trials, WARMUP_NEW,
                                           refill=fresh_with_reference, verify=verify)
    except Exception as error:
        result.failures.append(("times", f"ModelNew raised {_describe_error(error)} while timed"))
        return
    say(f"ModelNew {result.ms():.3f} ms")
    result.timings["eager"] = clock(reference, inputs, perf_trials, WARMUP_REFERENCE, refill=fresh)
    say(f"eager {result.ms('eager'):.3f} ms")
    compiled = None
    if device.type == "cuda":
        torch._dynamo.reset()  # as measure_ref_program_time: a fresh compile of this Model
        compiled = torch.compile(reference)
        result.timings["torch.compile"] = clock(compiled, inputs, perf_trials, WARMUP_REFERENCE,
                                                refill=fresh)
        say(f"torch.compile {result.ms('torch.compile'):.3f} ms")
    failure = result.timings["ModelNew"].failure
    if failure:
        result.failures.append(("fresh inputs", f"{failure}: was a result replayed from an "
                                                f"earlier call?") if not trusted else
                               ("fresh inputs", f"{failure}: a loss carried by {spikes} secret "
                                                f"positions in each timed call's inputs (was a "
                                                f"result replayed, or part of the input skipped?)"))
    failure = check_timed_stream(result.timings["ModelNew"], result.timings["eager"])
    if failure:
        result.failures.append(("timed stream", failure))
    note = excessive_speedup_note(result.speedup("eager"))
    if note:
        result.notes.append(note)
    if result.passed and compiled is not None:
        for program, fn in (("ModelNew", model), ("eager", reference), ("torch.compile", compiled)):
            own = trusted and getattr(fn, "gpu_only_ms", None)  # a child's program: timed there
            result.gpu_only[program] = own(inputs) if own else gpu_only_ms(fn, inputs)
    del compiled, inputs
    if device.type == "cuda":
        torch.cuda.empty_cache()
