"""kernels/kernelbench/problems.py's input makers on CPU, checked against what each one promises
(its docstring): drawn from the generator alone, on the device and in the dtype asked for, with
the scales, offsets and secret positions it says. Written for the survivors of a mutation run
(tools/mutation_survivors.md): each test fails on a small bug that the validator's tests let
through."""

import pytest
import torch
import torch.nn.functional as F

from kernels import kernelbench as kb
from kernels.kernelbench import problems

SMALL = {94: {"batch_size": 48, "dim": 40}, 95: {"batch_size": 40, "num_classes": 33},
         96: {"batch_size": 48, "dim": 40}, 100: {"batch_size": 48, "dim": 48}}
F32 = torch.float32


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# every way a problem makes inputs, as (sizes, generator, device) -> inputs
MAKERS = {
    "inputs": lambda p: p.make_inputs,
    "off distribution": lambda p: p.off_distribution,
    "shifted": lambda p: p.shifted,
    "coverage": lambda p: lambda s, g, d: p.coverage(s, g, d, F32, kb.SPIKES[F32], False),
    "coverage, hidden": lambda p: lambda s, g, d: p.coverage(s, g, d, F32, kb.SPIKES[F32], True),
}
CASES = [(pid, how) for pid in sorted(kb.PROBLEMS) for how in MAKERS]


def make(pid, how, seed=0, device="cpu", sizes=None):
    problem = kb.PROBLEMS[pid]
    return MAKERS[how](problem)(sizes or SMALL[pid], gen(seed), device)


@pytest.mark.parametrize("pid, how", CASES, ids=[f"{p}-{h}" for p, h in CASES])
def test_inputs_come_from_the_generator_alone(pid, how):
    """A failure names its seed: the seed must redraw the same inputs, whatever the global random
    state did in between."""
    first = make(pid, how)
    torch.manual_seed(1234)
    torch.rand(100)
    second = make(pid, how)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[0], make(pid, how, seed=1)[0])


@pytest.mark.parametrize("pid, how", [c for c in CASES if c[1] != "shifted"],
                         ids=[f"{p}-{h}" for p, h in CASES if h != "shifted"])
def test_inputs_are_made_on_the_device_asked_for(pid, how):
    # "meta" stands for the GPU: a tensor left on the default device would be on the CPU. (The
    # shifted inputs read their offset with .item(), which a meta tensor cannot give.)
    assert {x.device.type for x in make(pid, how, device="meta")} == {"meta"}


@pytest.mark.parametrize("pid", sorted(kb.PROBLEMS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden", [False, True])
def test_coverage_inputs_take_the_precision_asked_for(pid, dtype, hidden):
    problem = kb.PROBLEMS[pid]
    pred, target = problem.coverage(SMALL[pid], gen(), "cpu", dtype, kb.SPIKES[dtype], hidden)
    assert pred.dtype == dtype
    assert target.dtype == (torch.int64 if pid == 95 else dtype)


def test_cross_entropy_targets_cover_every_class_from_zero():
    sizes = {"batch_size": 300, "num_classes": 3}
    for how in ("inputs", "off distribution", "shifted"):
        assert sorted(set(make(95, how, sizes=sizes)[1].tolist())) == [0, 1, 2], how


def test_cross_entropy_off_distribution_logits_are_40_standard_normals():
    logits, _ = make(95, "off distribution", sizes={"batch_size": 200, "num_classes": 500})
    assert abs(logits.mean().item()) < 0.5 and 39 < logits.std().item() < 41


def test_cross_entropy_shifted_logits_have_one_offset_and_scale_in_their_ranges():
    """a + s randn with a in [-1000, 1000), s in [1, 5): over 60 seeds the offsets reach both
    ends and the scales stay in range, reaching below 1.5 and above 4.5."""
    sizes = {"batch_size": 2, "num_classes": 4000}
    offsets, scales = [], []
    for seed in range(60):
        logits, _ = make(95, "shifted", seed=seed, sizes=sizes)
        offsets.append(logits.mean().item())
        scales.append(logits.std().item())
    assert min(offsets) < -800 and max(offsets) > 800
    assert all(-1000.5 < a < 1000.5 for a in offsets)
    assert all(0.95 < s < 5.05 for s in scales)
    assert min(scales) < 1.5 and max(scales) > 4.5


def spikes_of(logits, target):
    """The rows and columns of a cross-entropy coverage input's spikes: the logits above 1 that
    are not a row's target."""
    high = logits.float() > 1
    high[torch.arange(len(target)), target] = False
    return high.nonzero().tolist()


@pytest.mark.parametrize("rows, spikes, want", [(40, 256, 20), (40, 5, 5), (1, 256, 1),
                                                (7, 256, 3)])
def test_cross_entropy_coverage_puts_one_spike_in_at_most_half_the_rows(rows, spikes, want):
    sizes = {"batch_size": rows, "num_classes": 9}
    for hidden in (False, True):
        logits, target = kb.PROBLEMS[95].coverage(sizes, gen(), "cpu", F32, spikes, hidden)
        found = spikes_of(logits, target)
        assert len(found) == want and len({r for r, _ in found}) == want, hidden


def test_cross_entropy_coverage_values():
    """Not hidden: every target logit 60, the spikes 90 times a weight in [1, 1.5). Hidden:
    KernelBench's draws in [0, 1), the spikes 1000 times the weight."""
    sizes = {"batch_size": 400, "num_classes": 2}  # two classes: the spike's is the other one
    logits, target = kb.PROBLEMS[95].coverage(sizes, gen(), "cpu", F32, 256, False)
    assert (logits[torch.arange(400), target] == 60.0).all()
    values = torch.tensor([logits[r, c] for r, c in spikes_of(logits, target)])
    assert len(values) == 200 and 90 <= values.min() and values.max() < 135
    assert values.min() < 95 and values.max() > 130  # the weights spread over [1, 1.5)
    logits, target = kb.PROBLEMS[95].coverage(sizes, gen(), "cpu", F32, 256, True)
    rest = logits.clone()
    found = spikes_of(logits, target)
    values = torch.tensor([logits[r, c] for r, c in found])
    assert 1000 <= values.min() and values.max() < 1500
    for r, c in found:
        rest[r, c] = 0
    assert 0 <= rest.min() and rest.max() < 1


def test_cross_entropy_coverage_never_spikes_the_target_column():
    for classes in (2, 3, 9):
        sizes = {"batch_size": 200, "num_classes": classes}
        logits, target = kb.PROBLEMS[95].coverage(sizes, gen(classes), "cpu", F32, 256, False)
        columns = [c for r, c in spikes_of(logits, target)]
        assert len(columns) == 100
        # every other column is reached: a shift of 1 to classes - 1 from the target
        shifts = {(c - int(target[r])) % classes for r, c in spikes_of(logits, target)}
        assert shifts == set(range(1, classes)), classes


@pytest.mark.parametrize("pid", [94, 96])
def test_regression_coverage_loss_is_about_one_carried_by_the_spikes(pid):
    """Each spike's loss term is n / spikes times a weight in [1, 1.5): a loss in [1, 1.5), and 0
    everywhere else (MSE: (p - t)^2 = term; Huber: |p - t| - 1/2 = term)."""
    problem = kb.PROBLEMS[pid]
    pred, target = problem.coverage(SMALL[pid], gen(), "cpu", F32, 64, False)
    assert 1 <= problem.reference64([pred, target]) < 1.5
    assert int((pred != target).sum()) <= 64


@pytest.mark.parametrize("pid", [94, 96, 100])
def test_hidden_coverage_keeps_kernelbench_s_draws_around_the_spikes(pid):
    problem = kb.PROBLEMS[pid]
    pred, target = problem.coverage(SMALL[pid], gen(), "cpu", F32, 64, True)
    drawn = problem.make_inputs(SMALL[pid], gen(), "cpu")
    assert int((pred != drawn[0]).sum()) <= 64 and torch.equal(target, drawn[1])


def test_sized_for_stops_halving_at_256():
    problem = kb.PROBLEMS[95].resized(batch_size=1028, num_classes=514)
    # the smaller size 257 is above 256: halved once more
    assert kb.sized_for(problem, 1)[0].sizes == {"batch_size": 257, "num_classes": 128}
    problem = kb.PROBLEMS[95].resized(batch_size=1024, num_classes=512)
    assert kb.sized_for(problem, 1)[0].sizes == {"batch_size": 512, "num_classes": 256}


def test_sized_for_says_how_much_memory_is_free():
    _, said = kb.sized_for(94, 8 << 30)
    assert said == ("problem 94 at 16384 x 16384: KernelBench's size needs about 32 GiB, this "
                    "GPU has 8 GiB free")


def test_problems_table_rows():
    lines = kb.problems_table().split("\n")
    assert lines[:2] == ["| problem | reference `Model.forward` | inputs | least bytes read |",
                         "| --- | --- | --- | ---: |"]
    p = kb.PROBLEMS[95]
    assert lines[3] == (f"| [95 CrossEntropyLoss]({p.url}) | `{p.expression}` | 32768x4096 and "
                        "32768 | 0.54 GB |")
    assert len(lines) == 6
