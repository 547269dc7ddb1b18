"""kernels/kernelbench/ without a GPU: the four problems against KernelBench's definitions, the
validator's rules, and every anti-cheat check catching its cheat (CPU tensors, small sizes).

The GPU half (the course's entries pass, the same cheats fail, work on a side stream is caught)
is tests/gpu/test_kernelbench.py.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from kernels import kernelbench as kb
from kernels import losses, results
from kernels.operators import LossOps

SMALL = {94: {"batch_size": 48, "dim": 40}, 95: {"batch_size": 40, "num_classes": 33},
         96: {"batch_size": 48, "dim": 40}, 100: {"batch_size": 48, "dim": 48}}


def small(problem_id):
    return kb.PROBLEMS[problem_id].resized(**SMALL[problem_id])


def run(problem_id, model, **kwargs):
    return kb.evaluate(small(problem_id), model, device="cpu", **kwargs)


def failed_checks(result):
    return [check.split(" (")[0] for check, _ in result.failures]


# --- the problems are KernelBench's ----------------------------------------------------------

def test_problem_sizes_and_expressions_are_upstreams():
    """Level 1's files at the commit read (sizes of July 2025: 76b487e, 6b1cea2)."""
    expected = {
        94: ("94_MSELoss", {"batch_size": 32768, "dim": 32768}, "torch.mean((predictions - targets) ** 2)"),
        95: ("95_CrossEntropyLoss", {"batch_size": 32768, "num_classes": 4096},
             "torch.nn.functional.cross_entropy(predictions, targets)"),
        96: ("96_HuberLoss", {"batch_size": 32768, "dim": 32768},
             "torch.nn.functional.smooth_l1_loss(predictions, targets)"),
        100: ("100_HingeLoss", {"batch_size": 32768, "dim": 32768},
              "torch.mean(torch.clamp(1 - predictions * targets, min=0))"),
    }
    assert sorted(kb.PROBLEMS) == sorted(expected)
    for pid, (name, sizes, expression) in expected.items():
        problem = kb.PROBLEMS[pid]
        assert (problem.id, problem.name, problem.sizes, problem.expression) == (pid, name, sizes, expression)
        assert problem.url.endswith(f"/blob/{kb.COMMIT}/KernelBench/level1/{name}.py")
        assert problem.get_init_inputs() == []
    assert kb.PROBLEMS[94].input_shapes() == [(32768, 32768), (32768, 32768)]
    assert kb.PROBLEMS[95].input_shapes() == [(32768, 4096), (32768,)]
    assert kb.PROBLEMS[100].input_shapes() == [(32768, 32768), (32768,)]
    assert kb.PROBLEMS[94].min_bytes() == 2 * 4 * 32768 ** 2
    assert kb.PROBLEMS[95].min_bytes() == 4 * 32768 * 4096 + 8 * 32768
    assert kb.PROBLEMS[100].min_bytes() == 4 * (32768 ** 2 + 32768)


def upstream_get_inputs(problem_id, sizes):
    """get_inputs() as the upstream files write it (global RNG), at other sizes."""
    if problem_id in (94, 96):
        scale = torch.rand(())
        shape = (sizes["batch_size"], sizes["dim"])
        return [torch.rand(*shape) * scale, torch.rand(*shape)]
    if problem_id == 95:
        return [torch.rand(sizes["batch_size"], sizes["num_classes"]),
                torch.randint(0, sizes["num_classes"], (sizes["batch_size"],))]
    return [torch.rand(sizes["batch_size"], sizes["dim"]),
            torch.randint(0, 2, (sizes["batch_size"],)).float() * 2 - 1]


@pytest.mark.parametrize("problem_id", sorted(kb.PROBLEMS))
def test_get_inputs_draws_what_upstream_draws_after_the_same_seed(problem_id):
    for seed in (42, 734796314):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            expected = upstream_get_inputs(problem_id, SMALL[problem_id])
        got = small(problem_id).get_inputs(seed)
        assert [x.dtype for x in got] == [x.dtype for x in expected]
        assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_trial_seeds_are_run_and_check_correctness_seeds():
    with torch.random.fork_rng():
        torch.manual_seed(42)
        upstream = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(5)]
    assert kb.trial_seeds() == upstream == [734796314, 576165995, 2197670066, 839703249, 2584932063]
    assert kb.trial_seeds(42, 3) == upstream[:3]


@pytest.mark.parametrize("workers", [1, 3])
def test_inputs_drawn_ahead_in_threads_are_the_exact_inputs(workers):
    problem, seeds = small(94), kb.trial_seeds() + [kb.SEED]
    draws = kb.ExactDraws(problem, seeds, workers=workers)
    asked = seeds[:2] + [12345] + seeds[3:] + [seeds[2]]  # one seed not in the order, one late
    try:
        for seed in asked:
            assert all(torch.equal(a, b) for a, b in zip(draws(seed), problem.get_inputs(seed)))
            assert len(draws.ahead) <= workers
    finally:
        draws.close()
    assert draws.pool is None and not draws.ahead and not draws.order
    draws.close()  # twice is harmless


def test_the_draws_ahead_fit_the_hosts_memory(monkeypatch):
    from kernels.kernelbench import draws
    full = kb.PROBLEMS[94]  # 8 GiB of inputs
    monkeypatch.setattr(draws.os, "cpu_count", lambda: 16)
    for available, workers in ((12 << 30, 1), (40 << 30, 2), (200 << 30, 6), (0, 1)):
        monkeypatch.setattr(draws, "available_host_memory", lambda: available)
        assert draws.draw_workers(full, 6) == workers
    monkeypatch.setattr(draws.os, "cpu_count", lambda: 2)
    assert draws.draw_workers(small(94), 6) == 1  # a core left free


def test_kernelbench_constants():
    assert (kb.CORRECT_TRIALS, kb.SEED, kb.WARMUP_NEW, kb.WARMUP_REFERENCE, kb.DISCARD_FIRST) == (5, 42, 3, 5, 1)
    assert kb.TOLERANCES == {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
    assert kb.FLUSH_BYTES == 32 * 1024 * 1024 * 8 and kb.EXCESSIVE_SPEEDUP == 10


def test_what_kernelbench_inputs_never_exercise_and_the_off_distribution_trial_does():
    g = torch.Generator().manual_seed(0)
    p, t = small(96).get_inputs(1)
    assert (p - t).abs().max() < 1  # Huber's quadratic part only: smooth_l1 == 0.5 * MSE
    assert torch.allclose(F.smooth_l1_loss(p, t), 0.5 * torch.mean((p - t) ** 2))
    p, t = small(100).get_inputs(1)
    assert (1 - p * t).min() > 0  # the hinge's clamp never acts
    logits, target = small(95).get_inputs(1)
    assert 0 <= logits.min() and logits.max() < 1 and target.dtype == torch.int64
    p, t = kb.PROBLEMS[96].off_distribution(SMALL[96], g, "cpu")
    assert (p - t).abs().max() > 1
    p, t = kb.PROBLEMS[100].off_distribution(SMALL[100], g, "cpu")
    assert (1 - p * t).min() < 0
    logits, _ = kb.PROBLEMS[95].off_distribution(SMALL[95], g, "cpu")
    assert logits.max() > 89  # exp() of it overflows float32


def test_integer_inputs_stay_integers_on_the_device():
    """KernelBench casts every input to the precision (issue #151); class indices must stay."""
    from kernels.kernelbench.evaluate import _on_device

    logits, target = _on_device(small(95).get_inputs(3), torch.device("cpu"), torch.float16)
    assert logits.dtype == torch.float16 and target.dtype == torch.int64


def test_reference_models_compute_the_course_losses():
    for pid in sorted(kb.PROBLEMS):
        problem = small(pid)
        inputs = problem.get_inputs(5)
        assert torch.allclose(problem.model()(*inputs), losses.get_loss(problem.loss).reference(*inputs))
    p, t = small(96).get_inputs(5)
    assert torch.allclose(kb.Model96()(p, t), F.huber_loss(p, t, delta=1.0))


def test_hinge_pairs_each_target_with_a_column():
    pred = torch.tensor([[0.5, 2.0], [0.5, 2.0]])
    target = torch.tensor([1.0, -1.0])  # column 0 has label +1, column 1 label -1
    # [1 - 0.5, 1 + 2], twice: mean 1.75 (a label per row would give (0.5 + 0 + 1.5 + 3) / 4)
    assert kb.Model100()(pred, target).item() == pytest.approx(1.75)


def test_resized_rejects_unknown_sizes_and_a_non_square_hinge():
    with pytest.raises(kb.KernelBenchError, match="num_classes"):
        kb.PROBLEMS[94].resized(num_classes=3)
    with pytest.raises(kb.KernelBenchError, match="dim == batch_size"):
        kb.PROBLEMS[100].resized(batch_size=8, dim=4)


def test_get_problem_by_id_and_name():
    assert kb.get_problem(95) is kb.PROBLEMS[95]
    assert kb.get_problem("96_HuberLoss") is kb.PROBLEMS[96]
    with pytest.raises(kb.KernelBenchError, match="unknown problem"):
        kb.get_problem(97)


def test_problems_table_lists_the_four():
    text = kb.problems_table()
    assert all(p.url in text for p in kb.PROBLEMS.values())
    assert "8.59 GB" in text


# --- honest models pass ------------------------------------------------------------------------

@pytest.mark.parametrize("problem_id", sorted(kb.PROBLEMS))
def test_the_reference_itself_passes(problem_id):
    """Every dynamic check, coverage and offset trials included, passes PyTorch's own expression
    (no false alarm); the static checks flag it, with the line, as the library's work."""
    result = run(problem_id, kb.PROBLEMS[problem_id].model, entry="reference", static_checks=False)
    assert result.passed and result.kernelbench_passed, result.verdict
    assert result.trials_passed == result.trials == 5
    assert result.verdict.startswith("PASS") and result.reason == ""
    assert result.max_abs_diff == 0
    flagged = run(problem_id, kb.PROBLEMS[problem_id].model, entry="reference")
    assert failed_checks(flagged) == ["static"], flagged.verdict
    assert "line " in flagged.reason and "PyTorch's" in flagged.reason


def test_an_instance_and_a_source_text_are_accepted():
    assert run(94, kb.Model94(), static_checks=False).passed
    source = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, p, t):\n" \
             "        return ((p - t) ** 2).mean()\n"
    assert run(94, source, static_checks=False).passed
    flagged = run(94, source)
    assert failed_checks(flagged) == ["static"] and flagged.reason.startswith("static: line 4: ")


# --- bad learner input: clear errors and verdicts ------------------------------------------------

def test_no_model_new_is_a_clear_error():
    with pytest.raises(kb.KernelBenchError, match="needs your ModelNew"):
        run(94, None)
    with pytest.raises(kb.KernelBenchError, match="defines no ModelNew.*Model"):
        kb.model_from_source("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    with pytest.raises(kb.KernelBenchError, match="subclass torch.nn.Module"):
        run(94, type("ModelNew", (), {}))
    with pytest.raises(kb.KernelBenchError, match="must be a class"):
        run(94, 3)


def test_timing_on_the_cpu_is_refused():
    with pytest.raises(kb.KernelBenchError, match="needs a CUDA device"):
        run(94, kb.Model94, measure=True)


class Shaped(torch.nn.Module):
    def forward(self, p, t):
        return torch.mean((p - t) ** 2, dim=1)


class Float64(torch.nn.Module):
    def forward(self, p, t):
        return torch.mean((p.double() - t.double()) ** 2)


class PythonFloat(torch.nn.Module):
    def forward(self, p, t):
        return torch.mean((p - t) ** 2).item()


class Raises(torch.nn.Module):
    def forward(self, p, t):
        raise RuntimeError("no kernel yet")


class BrokenInit(torch.nn.Module):
    def __init__(self):
        super().__init__()
        raise OSError("nvcc not found")


class NaNs(torch.nn.Module):
    def forward(self, p, t):
        return torch.mean((p - t) ** 2) * math.nan


@pytest.mark.parametrize("model, check, words", [
    (Shaped, "correct", "output shape (48,), expected ()"),
    (Float64, "correct", "dtype torch.float64, expected torch.float32"),
    (PythonFloat, "correct", "returned float, not a tensor"),
    (Raises, "runs", "ModelNew raised RuntimeError: no kernel yet"),
    (NaNs, "correct", "not finite"),
], ids=["shape", "dtype", "not a tensor", "raises", "nan"])
def test_wrong_outputs_fail_with_the_reason(model, check, words):
    result = run(94, model, entry=model.__name__)
    assert not result.passed and not result.kernelbench_passed
    assert failed_checks(result)[0] == check and words in result.reason, result.verdict
    assert result.verdict.startswith("FAIL   94 MSELoss") and words in result.verdict


def test_a_model_new_whose_constructor_raises_fails_naming_the_error():
    result = run(94, BrokenInit)
    assert failed_checks(result) == ["builds"] and result.trials_passed == 0
    assert "ModelNew() raised OSError: nvcc not found" in result.verdict


# --- the cheats ----------------------------------------------------------------------------------

CPU_CHEATS = [(pid, name) for pid in sorted(kb.PROBLEMS)
              for name, cheat in kb.cheats(pid).items() if not cheat.gpu_only]


# A check that compares a mean needs the elements for its signal to stand clear of the sampling
# noise: a bfloat16 downcast shifts the loss by h^2/6, and at 48 x 40 the noise of the cross term
# is as large (test_a_downcast_fails_the_offset_and_scale_trial).
SIZE_FOR_CHECK = {"offset and scale": {"batch_size": 512, "dim": 512}}


@pytest.mark.parametrize("problem_id, name", CPU_CHEATS, ids=[f"{p}-{n}" for p, n in CPU_CHEATS])
def test_each_cheat_fails_the_check_meant_for_it(problem_id, name):
    cheat = kb.cheats(problem_id)[name]
    sizes = SIZE_FOR_CHECK.get(cheat.check)
    problem = kb.PROBLEMS[problem_id].resized(**sizes) if sizes else small(problem_id)
    result = kb.evaluate(problem, cheat.model, entry=name, device="cpu")
    assert not result.passed and cheat.check in failed_checks(result), result.verdict
    if cheat.kernelbench_accepts is not None:
        assert result.kernelbench_passed == cheat.kernelbench_accepts, result.verdict
    assert result.verdict.startswith("FAIL")


def test_the_cheats_cover_what_kernelbench_and_its_issues_describe():
    names = set(kb.cheats(95))
    assert {"zero output", "a constant", "zeroes its inputs", "answers, then changes an input",
            "uninitialised output", "result cached by address", "work on a side stream",
            "no max subtracted", "every other row (and fourth column)", "a random half of the rows",
            "replays when timed"} == names
    assert {"PyTorch's own loss", "reads bfloat16"} <= set(kb.cheats(94))
    assert "only Huber's quadratic part" in kb.cheats(96) and "no clamp" in kb.cheats(100)
    assert not any(c.check == "beyond KernelBench's inputs" for c in kb.cheats(94).values())


def test_zero_output_is_named():
    result = run(94, kb.cheats(94)["zero output"].model)
    assert failed_checks(result)[0] == "correct" and "all zeros" in result.reason
    assert "not constant" in failed_checks(result)


def test_changing_the_inputs_fails_although_kernelbench_accepts_it():
    result = run(94, kb.cheats(94)["answers, then changes an input"].model)
    assert result.kernelbench_passed and not result.passed
    assert failed_checks(result) == ["inputs unchanged"], result.verdict
    assert "KernelBench's own rules: PASS" in result.verdict


class CachedByShape(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, p, t):
        key = tuple(p.shape)
        if key not in self.cache:
            self.cache[key] = torch.mean((p - t) ** 2)
        return self.cache[key]


def test_a_result_cached_by_shape_fails():
    result = run(94, CachedByShape)
    assert not result.passed and {"correct", "not constant", "recomputes"} <= set(failed_checks(result))


@pytest.mark.parametrize("problem_id", [95, 96, 100])
def test_shortcuts_fail_beyond_kernelbench_inputs(problem_id):
    """Each shortcut fails the off-distribution trial first; the offset trial and the static
    checks may see it too, never the trials of KernelBench's own distribution."""
    (cheat,) = [c for c in kb.cheats(problem_id).values() if c.check == "beyond KernelBench's inputs"]
    result = run(problem_id, cheat.model)
    assert result.kernelbench_passed and not result.passed
    assert failed_checks(result)[0] == "beyond KernelBench's inputs", result.verdict
    assert set(failed_checks(result)) <= {"beyond KernelBench's inputs", "coverage",
                                          "offset and scale", "static"}, result.verdict


# --- each check alone ----------------------------------------------------------------------------

def test_check_output():
    ref = torch.tensor(2.0)
    assert kb.check_output(torch.tensor(2.0001), ref, 1e-4) is None  # within atol + rtol * 2
    assert "|difference| 0.01" in kb.check_output(torch.tensor(2.01), ref, 1e-4)
    assert "all zeros" in kb.check_output(torch.tensor(0.0), ref, 1e-4)
    assert "shape (1,)" in kb.check_output(torch.tensor([2.0]), ref, 1e-4)
    assert "not finite" in kb.check_output(torch.tensor(math.inf), ref, 1e-4)


def test_check_inputs_unchanged():
    x = torch.arange(6.0)
    kept = [x.clone()]
    assert kb.check_inputs_unchanged([x], kept) is None
    x[2] = -1
    assert "changed input 0 in place (1 of 6 values)" in kb.check_inputs_unchanged([x], kept)


def test_check_not_constant():
    refs = [torch.tensor(1.0), torch.tensor(1.5), torch.tensor(1.5)]
    assert kb.check_not_constant([torch.tensor(1.0), torch.tensor(1.5), torch.tensor(1.5)], refs) is None
    # equal outputs where the references are equal too: fine
    assert kb.check_not_constant([torch.tensor(1.0), torch.tensor(1.4), torch.tensor(1.4)], refs) is None
    message = kb.check_not_constant([torch.tensor(1.2)] * 3, refs)
    assert "trials 1 and 2 got the same output 1.2" in message


def test_check_recomputes_catches_a_cache_on_the_tensors():
    problem = small(94)
    inputs, other = problem.get_inputs(1), problem.get_inputs(2)
    expected = problem.model()(*other)
    assert kb.check_recomputes(kb.Model94(), [x.clone() for x in inputs], other, expected, 1e-4) is None
    cached = kb.cheats(94)["result cached by address"].model()
    message = kb.check_recomputes(cached, [x.clone() for x in inputs], other, expected, 1e-4)
    assert message.startswith("new values in the same tensors: output")


def timing(event, wall):
    return kb.Timing([event] * 9, [wall] * 9)


def test_check_timed_stream():
    eager = timing(8.0, 8.15)  # wall - event: 0.15 ms of flush and latencies
    assert kb.check_timed_stream(timing(2.6, 2.75), eager) is None  # honest
    assert kb.check_timed_stream(timing(2.6, 2.78), eager) is None  # jitter
    # the work ran on a side stream: the events saw 0.01 ms, the device was busy 2.6 ms more
    message = kb.check_timed_stream(timing(0.01, 2.76), eager)
    assert "2.600 ms per call after ModelNew's end event" in message
    # half the work hidden is caught; hidden work below 50 us is not (too small to tell)
    assert kb.check_timed_stream(timing(1.3, 2.75), eager) is not None
    assert kb.check_timed_stream(timing(0.01, 0.19), eager) is None


def test_timing_statistics():
    t = kb.Timing([1.0, 2.0, 3.0, 6.0], [1.5, 2.5, 3.5, 6.5])
    assert t.mean == 3.0 and t.median == 2.5 and t.hidden_ms == 0.5
    assert t.stats()["trials"] == 4 and t.stats()["min"] == 1.0


def test_excessive_speedup_is_flagged_not_failed():
    assert kb.excessive_speedup_note(12.0).startswith("12.0x eager exceeds KernelBench's 10x flag")
    assert kb.excessive_speedup_note(9.9) is None


# --- results: verdict, rows, table, CSV --------------------------------------------------------

def timed_result(**kwargs):
    result = kb.Result(94, "94_MSELoss", "course", kernelbench_passed=True, trials_passed=5, trials=5,
                       bytes=8 * 10**9, gpu="GPU", **kwargs)
    result.timings = {"ModelNew": timing(2.5, 2.6), "eager": timing(7.5, 7.6),
                      "torch.compile": timing(2.75, 2.85)}
    return result


def test_verdict_and_row_of_a_timed_result():
    result = timed_result()
    assert result.speedup("eager") == pytest.approx(3.0) and result.gbps == pytest.approx(3200)
    assert result.verdict.endswith("5/5 trials and every check passed, 2.500 ms (median 2.500), "
                                   "3.00x eager, 1.10x torch.compile")
    row = result.row()
    assert (row["verdict"], row["kernelbench"], row["ms"], row["speedup_eager"]) == ("PASS", "PASS", "2.5", "3")


def test_table_from_results_and_from_the_csv(tmp_path, monkeypatch):
    failing = timed_result()
    failing.failures = [("timed stream", "the GPU worked 2.6 ms per call after ...")]
    rows = kb.rows([timed_result(), failing])
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    results.save_table(rows, "kernelbench")
    back = results.read_table("kernelbench")
    assert kb.table(back) == kb.table([timed_result(), failing])
    text = kb.table(back)
    assert "| 94 MSELoss | course | PASS | 2.500 | 7.500 | 2.750 | 3.00x | 1.10x | 3200 |" in text
    assert "| FAIL (1) |" in text and "(1) 94, course: timed stream: the GPU worked" in text


def test_fast_p_counts_correct_results_faster_than_p():
    slow = timed_result()
    slow.timings["eager"] = timing(3.0, 3.1)  # 1.2x eager
    wrong = timed_result(failures=[("correct", "no")])
    wrong.kernelbench_passed = False
    found = [timed_result(), slow, wrong]
    assert kb.fast_p(found, 1.0) == pytest.approx(2 / 3)
    assert kb.fast_p(found, 2.0) == pytest.approx(1 / 3)
    assert kb.fast_p(kb.rows(found), 1.05, "torch.compile") == pytest.approx(2 / 3)


def test_untimed_results_show_dashes():
    text = kb.table([run(94, kb.cheats(94)["zero output"].model, entry="zero")])
    assert "| 94 MSELoss | zero | FAIL (1) | – | – | – | – | – | – |" in text


# --- the course's entry for problem 100 keeps the reference's broadcast ------------------------

class FakeOps:
    """LossOps' hinge without a GPU: the same target rule (its _broadcast_row), PyTorch's math."""

    def __init__(self):
        self.seen = []

    def hinge(self, pred, target):
        self.seen.append(tuple(target.shape))
        if target.shape != pred.shape:
            target = LossOps._broadcast_row("hinge", pred, target)
        return torch.mean(torch.clamp(1 - pred * target, min=0))


@pytest.mark.parametrize("target_shape", [(6,), (1, 6), (5, 1), (5, 6), ()])
def test_course_hinge_entry_computes_the_reference_for_any_broadcast(monkeypatch, target_shape):
    monkeypatch.setattr(kb.entries, "_OPS", FakeOps())
    entry = kb.CourseHinge()
    g = torch.Generator().manual_seed(0)
    pred = torch.randn(5, 6, generator=g)
    target = torch.randint(0, 2, target_shape, generator=g).float() * 2 - 1
    assert torch.allclose(entry(pred, target), kb.Model100()(pred, target))
    # the kernel's own broadcast is used where it is PyTorch's (a row of the last dimension)
    passed_on = entry.ops.seen[-1]
    assert passed_on == (target_shape if target_shape in [(6,), (1, 6), (5, 6)] else (5, 6))


def test_course_entries_cover_the_four_problems():
    assert sorted(kb.COURSE_ENTRIES) == sorted(kb.PROBLEMS)


# --- what the leaderboards add: coverage, offset and scale, static checks, isolation --------------

@pytest.mark.parametrize("problem_id", sorted(kb.PROBLEMS))
@pytest.mark.parametrize("hidden", [False, True], ids=["exact", "hidden"])
def test_every_spike_of_a_coverage_input_carries_more_than_the_tolerance(problem_id, hidden):
    """The detection rule: removing any one of the K spikes moves the float64 loss by more than
    the tolerance, relative, so a program that skips it fails; float32 PyTorch passes (20 seeds)."""
    problem = small(problem_id)
    for seed in range(20):
        generator = torch.Generator().manual_seed(seed)
        inputs = problem.coverage(problem.sizes, generator, "cpu", torch.float32, kb.SPIKES[torch.float32], hidden)
        expected = problem.reference64(inputs)
        out = problem.model()(*inputs)
        assert kb.check_against_float64(out, expected, 1e-4, relative_only=True) is None
    pred, target = inputs
    if problem_id == 95:  # the spike rows: those whose loss is far above the others'
        losses = F.cross_entropy(pred.double(), target, reduction="none")
        spike = int(losses.argmax())
        without = [pred.clone(), target]
        without[0][spike] = pred[spike].clamp(max=1.0)
    else:
        terms = {94: lambda p, t: (p - t) ** 2, 96: lambda p, t: F.smooth_l1_loss(p, t, reduction="none"),
                 100: lambda p, t: torch.clamp(1 - p * t, min=0)}[problem_id](pred.double(), target.double())
        spike = int(terms.view(-1).argmax())
        without = [pred.clone(), target]
        without[0].view(-1)[spike] = target.view(-1)[spike] if problem_id != 100 else \
            target[spike % pred.shape[1]]
    moved = abs(problem.reference64(without) - expected)
    assert moved > 1e-4 * abs(expected) * 4, (moved, expected)


def test_the_reference64_of_a_block_split_is_the_whole_mean(monkeypatch):
    from kernels.kernelbench import problems

    for problem_id in sorted(kb.PROBLEMS):
        problem = small(problem_id)
        inputs = problem.get_inputs(1)
        whole = problem.model()(*[x.double() if x.is_floating_point() else x for x in inputs]).item()
        monkeypatch.setattr(problems, "REFERENCE_CHUNK", 7 * inputs[0].shape[-1])  # blocks of 7 rows
        assert problem.reference64(inputs) == pytest.approx(whole, rel=1e-12)


def test_subsamples_pass_kernelbench_and_fail_coverage_at_a_size_where_the_mean_hides_them():
    """Every other row and fourth column of 1024 x 1024 is within KernelBench's tolerance on its
    i.i.d. inputs (hinge: terms in (0, 2), a mean near 1); the coverage trials catch it."""
    problem = kb.PROBLEMS[100].resized(batch_size=1024, dim=1024)
    for name in ("every other row (and fourth column)", "a random half of the rows"):
        result = kb.evaluate(problem, kb.cheats(100)[name].model, entry=name, device="cpu", trials=2)
        assert "coverage" in failed_checks(result), result.verdict
        assert "is every element read?" in dict((c.split(" (")[0], w) for c, w in result.failures)["coverage"]


def test_a_downcast_fails_the_offset_and_scale_trial():
    """At 512 x 512: the rounding's shift of the loss (h^2 / 6) stands clear of the sampling noise
    of the cross term 2 mean((p - t) e), which at the 48 x 40 of the other tests is of the same size
    (2.5% of secret seeds passed there)."""
    problem = kb.PROBLEMS[94].resized(**SIZE_FOR_CHECK["offset and scale"])
    result = kb.evaluate(problem, kb.cheats(94)["reads bfloat16"].model, device="cpu")
    assert result.kernelbench_passed and "offset and scale" in failed_checks(result), result.verdict
    why = dict((c.split(" (")[0], w) for c, w in result.failures)["offset and scale"]
    assert "are the inputs read at full precision?" in why


def test_secret_seed_replays_a_failure():
    cheat = kb.cheats(94)["a random half of the rows"].model
    first = run(94, cheat)
    assert first.secret_seed and run(94, cheat, secret_seed=first.secret_seed).failures
    assert run(94, kb.Model94(), static_checks=False).secret_seed != first.secret_seed


STATIC_CASES = {
    "torch.mean((p - t) ** 2)": "PyTorch's `mean`",
    "F.mse_loss(p, t)": "PyTorch's `mse_loss`",
    "torch.nn.functional.cross_entropy(p, t)": "PyTorch's `cross_entropy`",
    "(p - t).abs().sum() / p.numel()": "PyTorch's `sum`",
    "torch.ops.aten.mean.default(p)": "PyTorch's `mean`",
    "mod.kernel(p.bfloat16(), t)": "half precision",
    "mod.kernel(p.to(torch.float16), t)": "half precision",
}


@pytest.mark.parametrize("expression", sorted(STATIC_CASES))
def test_static_checks_name_the_line_and_the_pattern(expression):
    source = ("import torch\nimport torch.nn.functional as F\n\nclass ModelNew(torch.nn.Module):\n"
              f"    def forward(self, p, t):\n        return {expression}\n")
    (finding,) = kb.check_source(source)
    assert finding.severity == "failure" and finding.line == 6 and STATIC_CASES[expression] in finding.why
    assert str(finding).startswith(f"line 6: `return {expression}")


def test_static_checks_of_the_forbidden_patterns_outside_forward():
    source = '''import threading, torch, time
class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()
        time.perf_counter = lambda: 0.0
        setattr(torch.cuda, "synchronize", lambda: None)
    def forward(self, p, t):
        try:
            return mod.kernel(p, t)
        except RuntimeError:
            return mod.slow(p, t)
'''
    found = {(f.line, f.severity) for f in kb.check_source(source)}
    assert found == {(1, "failure"), (5, "warning"), (6, "failure"), (7, "failure"), (9, "failure")}


@pytest.mark.parametrize("line", [
    "nonce = sys._getframe(3).f_locals['nonce']",
    "frame = inspect_module.currentframe().f_back",
    "g = self.forward.__globals__",
    "gc_module = __import__('gc')",
    "mod = importlib.import_module('g' + 'c')",
])
def test_static_checks_reject_the_ways_to_another_frame_or_a_hidden_import(line):
    source = f"import sys, importlib, torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, p, t):\n        {line}\n"
    assert any(f.line == 4 and "reaches outside the program" in f.why and f.severity == "failure"
               for f in kb.check_source(source))


def test_static_checks_leave_an_honest_kernel_alone():
    """What an honest ModelNew does: allocate, view, make contiguous, expand, call its extension,
    add up its own partial sums; and the course's entries."""
    source = '''import torch
class ModelNew(torch.nn.Module):
    def forward(self, predictions, targets):
        out = torch.empty((), device=predictions.device)
        flat = predictions.contiguous().view(-1)
        if targets.shape != predictions.shape:
            targets = targets.expand(predictions.shape)
        partials = hinge_module.partials(flat, targets.contiguous(), out)
        return partials.sum() / predictions.numel()
'''
    assert kb.check_source(source) == []
    for entry in kb.COURSE_ENTRIES.values():
        assert kb.check_model(entry) == ([], None)


def test_a_source_that_does_not_parse_is_a_build_failure_not_a_crash():
    result = run(94, "class ModelNew(:\n")
    assert failed_checks(result)[0] == "builds" and any("does not parse" in n for n in result.notes)


# Isolation: the program in a child process (CPU here: no timing).
ISOLATED = {"device": "cpu", "measure": False}


def test_isolated_run_of_a_source_file_passes_and_says_why(tmp_path):
    path = tmp_path / "model_new.py"
    path.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n"
                    "    def forward(self, p, t):\n"
                    "        print('{\"problem\": 94, \"failures\": []}')  # a forged verdict is ignored\n"
                    "        return kernel(p, t)\n\n"
                    "def kernel(p, t):\n    return ((p - t) ** 2).mean()\n")
    result = kb.evaluate_isolated(small(94), str(path), **ISOLATED)
    assert result.passed, result.verdict
    assert result.trials_passed == 5 and result.gpu == "cpu"


def test_isolated_run_of_a_module_class_and_its_failures():
    spec = "kernels.kernelbench.cheats:Crash"
    crashed = kb.evaluate_isolated(small(94), spec, **ISOLATED)
    assert failed_checks(crashed) == ["crashed"] and "SIGABRT" in crashed.reason
    hung = kb.evaluate_isolated(small(94), "kernels.kernelbench.cheats:Hang", time_limit=15, **ISOLATED)
    assert failed_checks(hung) == ["time limit"] and "no verdict within 15 s" in hung.reason


def test_isolated_run_refuses_a_notebook_class_with_a_clear_error():
    class ModelNew(torch.nn.Module):
        def forward(self, p, t):
            return p.sum()

    with pytest.raises(ValueError, match="needs it in a file"):
        kb.evaluate_isolated(94, ModelNew)


def test_the_checks_call_a_model_new_as_often_as_the_cheats_count():
    """kernels.kernelbench.cheats.CHECKING_CALLS, which the replay cheat (and exercise 9.2's answer)
    count on, is the number of calls evaluate() makes before the timing."""
    calls = []

    class Counted(torch.nn.Module):
        def forward(self, p, t):
            calls.append(1)
            return kb.Model94()(p, t)

    from kernels.kernelbench.cheats import CHECKING_CALLS

    run(94, Counted, static_checks=False)
    assert len(calls) == CHECKING_CALLS


def test_sized_for_halves_a_problem_the_memory_cannot_hold(monkeypatch):
    import torch

    from kernels import kernelbench
    from kernels.kernelbench import problems
    from kernels.measure import bench

    problem = kernelbench.get_problem(100)
    need = problems.PEAK_FACTOR * problem.min_bytes()
    assert kernelbench.sized_for(100, need)[0] is problem
    smaller, said = kernelbench.sized_for(100, need // 2)
    assert smaller.sizes == {"batch_size": 16384, "dim": 16384}
    assert "this GPU has" in said
    # a per-process cap that mem_get_info cannot see counts too
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench, "free_memory", lambda: need // 2)
    assert kernelbench.sized_for(100, 80 << 30)[0].sizes == smaller.sizes


def test_evaluate_makes_a_problem_fit_the_gpus_memory(monkeypatch):
    """A 16 GB GPU (or a 15 GiB cap) evaluates problem 94 halved per dimension, and says so;
    a GPU that holds KernelBench's size, and the CPU, keep it."""
    import torch

    from kernels import kernelbench
    from kernels.kernelbench import problems
    from kernels.kernelbench.evaluate import fitted_to
    from kernels.measure import bench

    problem = kernelbench.get_problem(94)
    need = problems.PEAK_FACTOR * problem.min_bytes()
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (need, 80 << 30))
    monkeypatch.setattr(bench, "free_memory", lambda: 15 << 30)  # the cap mem_get_info misses
    fitted, said = fitted_to(problem, gpu)
    assert fitted.sizes == {"batch_size": 16384, "dim": 16384}
    assert said.startswith("problem 94 at 16384 x 16384: KernelBench's size needs about 32 GiB")
    monkeypatch.setattr(bench, "free_memory", lambda: need)
    assert fitted_to(problem, gpu) == (problem, None)
    assert fitted_to(problem, torch.device("cpu")) == (problem, None)


# --- trusted references: the program in a child, every reference and check in this process ------

TIMED_ON_CPU = {"device": "cpu", "measure": True, "perf_trials": 5}


@pytest.mark.parametrize("name", sorted(kb.TRUSTED_ONLY))
def test_a_program_that_patches_pytorch_fools_one_process_and_fails_isolated(name):
    """In one process (KernelBench's design) the patched torch.mean moves the reference with the
    program, and it passes; isolated, the references are this process's and it fails the check
    meant for it."""
    model, check = kb.TRUSTED_ONLY[name]
    with kb.restoring_torch():
        shared = run(94, model, entry=name)
    from kernels.kernelbench.cheats import _MEAN

    assert torch.mean is _MEAN  # put back
    assert shared.passed, shared.verdict
    result = kb.evaluate_trusted(small(94), f"{model.__module__}:{model.__name__}", entry=name,
                                  **TIMED_ON_CPU)
    assert not result.passed and check in failed_checks(result), result.verdict
    assert "PyTorch unchanged" in failed_checks(result)
    assert "the program replaced torch.mean in its process" in dict(result.failures)["PyTorch unchanged"]
    assert (result.kernelbench_passed, set(result.timings) == {"ModelNew", "eager"}) == \
        ((True, True) if name == "slows the reference" else (False, False)), result.verdict


def test_honest_until_timed_fails_the_timed_calls_secret_positions():
    """Exercise 9.2's answer: honest for the checks' calls, every other row (and fourth column)
    when timed; KernelBench's own rules pass it (its trials come first). The first timed call's
    secret spikes show the skipped rows (at KernelBench's size, where the subsample's mean of
    i.i.d. draws is within the tolerance, only they do: tests/gpu/test_kernelbench.py)."""
    problem = kb.PROBLEMS[100].resized(batch_size=1024, dim=1024)
    cheat = kb.trusted_cheats(100)["honest until timed"]
    result = kb.evaluate_trusted(problem, cheat, entry="honest until timed", **TIMED_ON_CPU)
    assert result.kernelbench_passed and failed_checks(result) == ["fresh inputs"], result.verdict
    why = dict(result.failures)["fresh inputs"]
    assert why.startswith("timed call 1: output") and "float64 reference" in why
    assert "256 secret positions in each timed call's inputs" in why


def test_an_honest_program_passes_isolated_with_every_timed_call_checked(tmp_path):
    path = tmp_path / "model_new.py"
    path.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n"
                    "    def forward(self, p, t):\n        return kernel(p, t)\n\n"
                    "def kernel(p, t):\n    d = (p - t).reshape(-1)\n    return d.dot(d) / d.numel()\n")
    result = kb.evaluate_trusted(small(94), str(path), **TIMED_ON_CPU)
    assert result.passed, result.verdict
    assert len(result.timings["ModelNew"].event_ms) == 5 and result.timings["ModelNew"].failure is None
    assert "torch.compile" not in result.timings  # the CPU times eager only


@pytest.mark.parametrize("name", ["zero output", "answers, then changes an input",
                                  "result cached by address", "a constant"])
def test_cheats_fail_isolated_as_in_one_process(name):
    cheat = kb.trusted_cheats(94)[name]
    result = kb.evaluate_trusted(small(94), cheat, entry=name, device="cpu", measure=False)
    assert not result.passed and cheat.check in failed_checks(result), result.verdict


def test_isolated_errors_keep_the_programs_words_and_the_parent_never_imports_it(tmp_path):
    import sys

    path = tmp_path / "wt56_never_imported.py"
    path.write_text("import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n"
                    "        super().__init__()\n        raise OSError('nvcc not found')\n")
    result = kb.evaluate_trusted(small(94), str(path), device="cpu", measure=False)
    assert failed_checks(result) == ["builds"], result.verdict
    assert "ModelNew() raised OSError: nvcc not found" in result.verdict
    assert not any("wt56_never_imported" in name for name in sys.modules)


def test_outputs_come_back_as_json_with_their_dtype_shape_and_device():
    from kernels.kernelbench.trusted import _decode, _encode

    for out in (torch.tensor(1.5), torch.tensor([1.0, 2.0], dtype=torch.bfloat16),
                torch.arange(3), torch.tensor(math.nan)):
        back = _decode(_encode(out))
        assert back.dtype == out.dtype and back.shape == out.shape and back.device == out.device
        assert torch.equal(back.nan_to_num(), out.nan_to_num())
    assert type(_decode(_encode(2.5))) is float
    assert type(_decode(_encode("a"))).__name__ == "str"


@pytest.mark.parametrize("lines", [
    ["T = torch.Tensor", "T.mean = slow"],
    ["vars(torch)['mean'] = slow"],
    ["torch.__dict__['mean'] = slow"],
    ["d = vars(F)", "d['mse_loss'] = slow"],
    ["vars(torch).update(mean=slow)"],
    ["s = setattr", "s(torch, 'mean', slow)"],
    ["m = torch", "setattr(m, 'mean', slow)"],
    ["object.__setattr__(torch.Tensor, 'mean', slow)"],
    ["t = sys.modules['torch']", "t.mean = slow"],
    ["f = getattr(torch, 'nn').functional", "f.mse_loss = slow"],
    ["@functools.wraps(torch.mean)", "def slow(x):", "    return x"],
], ids=lambda lines: lines[-1][:30])
def test_static_checks_name_every_route_to_replacing_a_pytorch_function(lines):
    source = "import functools, sys, torch\nimport torch.nn.functional as F\n" + "\n".join(lines) + "\n"
    findings = [f for f in kb.check_source(source, patching=True) if "replaces or wraps PyTorch's" in f.why]
    assert findings and all(f.severity == "failure" for f in findings), kb.check_source(source, patching=True)
    assert findings[0].line == 2 + (len(lines) if lines[0][0] != "@" else 1)


def test_static_patch_rule_leaves_honest_uses_of_torch_alone():
    source = '''import torch
T = torch.Tensor
d = dict(vars(torch))
@torch.library.custom_op("mine::mse", mutates_args=())
def mse(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    out = torch.empty((), device=p.device)
    setattr(out, "note", 1)
    return out
'''
    assert not [f for f in kb.check_source(source, patching=True) if "replaces or wraps" in f.why]


def test_the_trusted_path_is_opt_in_and_chapter_9s_defaults_are_mains():
    """Chapter 9's stored outputs come from evaluate/evaluate_isolated with their defaults: the
    patch rules, the extra cheat and timing on the CPU belong to evaluate_trusted only."""
    source = "import torch\nvars(torch)['mean'] = len\n"
    assert not [f for f in kb.check_source(source) if "replaces or wraps" in f.why]
    assert [f for f in kb.check_source(source, patching=True) if "replaces or wraps" in f.why]
    assert "honest until timed" not in kb.cheats(94) and "honest until timed" in kb.trusted_cheats(94)
    assert set(kb.cheats(94)) < set(kb.trusted_cheats(94))
    assert kb.trusted_cheats(94)["zero output"].spec == "cheat:94:zero output"
    with pytest.raises(kb.KernelBenchError, match="timing needs a CUDA device"):
        kb.evaluate(small(94), kb.CourseMSE, device="cpu", measure=True)
