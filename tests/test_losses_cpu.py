"""The loss registry (kernels/losses.py) on CPU: the inputs each loss draws, its parameters, its
per-element expressions and their gradients, checked against values worked out here. Written
for the survivors of a mutation run (tools/mutation_survivors.md): each test below fails on a
small bug of the registry that the operators' and checks' tests let through."""

import math

import pytest
import torch
import torch.nn.functional as F

from kernels import losses

SHAPES = {"mse": (3, 50), "smooth_l1": (3, 50), "hinge": (3, 50), "bce_with_logits": (3, 50),
          "cross_entropy": (60, 4)}


def draw(name, shape=None, seed=0, device="cpu", dtype=None):
    g = torch.Generator().manual_seed(seed)
    return losses.get_loss(name).make_inputs(shape or SHAPES[name], g, device, dtype)


@pytest.mark.parametrize("name", list(losses.LOSSES))
def test_inputs_come_from_the_generator_alone(name):
    """The checks report a seed: the same seed must draw the same inputs, whatever the global
    random state did in between (an input drawn without the generator would not)."""
    first = draw(name)
    torch.manual_seed(12345)
    torch.rand(1000)
    second = draw(name)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[0], draw(name, seed=1)[0])


@pytest.mark.parametrize("name", list(losses.LOSSES))
def test_inputs_are_made_on_the_device_asked_for(name):
    # "meta" stands for the GPU here: a tensor left on the default device would be on the CPU
    assert {x.device.type for x in draw(name, device="meta")} == {"meta"}


@pytest.mark.parametrize("name", list(losses.LOSSES))
def test_inputs_take_the_dtype_asked_for(name):
    pred, target = draw(name, dtype=torch.float64)
    assert pred.dtype == torch.float64
    assert target.dtype == (torch.int64 if name == "cross_entropy" else torch.float64)


def test_hinge_labels_are_minus_one_and_one_one_per_column():
    pred, target = draw("hinge", shape=(2, 3, 400))
    assert pred.shape == (2, 3, 400) and target.shape == (400,)
    assert sorted(set(target.tolist())) == [-1.0, 1.0]
    # both labels about as often: a fair coin per column
    assert 150 < int((target > 0).sum()) < 250


def test_cross_entropy_targets_cover_every_class_from_zero():
    logits, target = draw("cross_entropy", shape=(400, 3))
    assert sorted(set(target.tolist())) == [0, 1, 2]


def test_bce_logits_spread_a_few_units_and_targets_are_probabilities():
    logits, target = draw("bce_with_logits", shape=(100_000,))
    assert abs(logits.mean().item()) < 0.05
    assert 2.95 < logits.std().item() < 3.05  # 3 standard normal units
    assert 0 <= target.min().item() and target.max().item() < 1
    assert abs(target.mean().item() - 0.5) < 0.01


def test_smooth_l1_each_uses_its_beta():
    d = torch.tensor([0.1, 0.4, 0.6, 2.0], dtype=torch.float64)
    got = losses.smooth_l1_each(d, torch.zeros_like(d), beta=0.5)
    # 0.5 d^2 / beta below beta, |d| - beta / 2 above
    want = [0.5 * 0.01 / 0.5, 0.5 * 0.16 / 0.5, 0.6 - 0.25, 2.0 - 0.25]
    assert got.tolist() == pytest.approx(want, rel=1e-12)


def test_hinge_is_defined_for_any_target_not_only_plus_minus_one():
    """KernelBench's expression, mean(clamp(1 - p y, min=0)), with y = 2 and 0.5."""
    p = torch.tensor([0.4, 0.7, 3.0, -1.0], dtype=torch.float64)
    y = torch.tensor([2.0, 2.0, 0.5, 0.5], dtype=torch.float64)
    each = [1 - 0.8, 0.0, 0.0, 1 + 0.5]
    assert losses.hinge(p, y).item() == pytest.approx(sum(each) / 4, rel=1e-12)
    assert losses.hinge_each(p, y).tolist() == pytest.approx(each, rel=1e-12)


def test_hinge_target_gradient_for_any_target():
    p = torch.tensor([0.4, 0.7, 3.0, -1.0], dtype=torch.float64)
    y = torch.tensor([2.0, 2.0, 0.5, 0.5], dtype=torch.float64)
    got = losses._hinge_target_grad(p, y, None, torch.ones_like(p))
    # -p where 1 - p y > 0 (0.4 * 2 and -1 * 0.5), 0 where the clamp cuts (0.7 * 2, 3 * 0.5)
    assert got.tolist() == [-0.4, 0.0, 0.0, 1.0]


def test_bce_target_gradient_defaults_to_pytorch_s_weight_of_one():
    x = torch.tensor([-2.0, 0.5, 3.0], dtype=torch.float64)
    y = torch.tensor([0.2, 0.9, 0.5], dtype=torch.float64, requires_grad=True)
    F.binary_cross_entropy_with_logits(x, y, reduction="sum").backward()
    got = losses._bce_target_grad(x, y.detach(), None, torch.ones_like(x))
    assert torch.allclose(got, y.grad, rtol=1e-12, atol=0)
    assert torch.allclose(got, -x)  # weight 1: d/dy = -x


def test_bce_each_keeps_the_weight_in_the_logits_dtype():
    """0.1 is not a float32: a weight rounded to float32 would move a float64 loss by ~1e-9."""
    x = torch.tensor([-2.0, 0.5, 3.0], dtype=torch.float64)
    y = torch.tensor([0.2, 0.9, 0.5], dtype=torch.float64)
    got = losses.bce_with_logits_each(x, y, pos_weight=0.1)
    # (1 - y) x + (1 + (w - 1) y) softplus(-x), softplus(-x) = log(1 + exp(-x))
    want = [(1 - b) * a + (1 + (0.1 - 1) * b) * math.log1p(math.exp(-a))
            for a, b in zip(x.tolist(), y.tolist())]
    assert got.tolist() == pytest.approx(want, rel=1e-14, abs=0)
    assert got.dtype == torch.float64


def test_pos_weight_none_is_pytorch_s_default_of_one():
    check = losses.get_loss("bce_with_logits").check_param
    assert check(None) == 1.0 and check(2) == 2 and check(0.5) == 0.5


@pytest.mark.parametrize("weight", [torch.tensor([2.0]), True, "2"])
def test_pos_weight_that_is_not_a_number_is_refused_with_why(weight):
    check = losses.get_loss("bce_with_logits").check_param
    with pytest.raises(TypeError, match=r"^bce_with_logits: pos_weight must be a Python number "
                       r"here \(a tensor of one weight per class is not supported by this "
                       r"kernel\)$"):
        check(weight)


def test_an_unknown_loss_is_refused_with_the_registry_s_names():
    with pytest.raises(ValueError) as error:
        losses.get_loss("l2")
    assert str(error.value) == ("unknown loss 'l2'; choose from ['bce_with_logits', "
                                "'cross_entropy', 'hinge', 'mse', 'smooth_l1']")


def test_min_bytes_counts_float32_by_default_and_refuses_a_loss_it_cannot_count():
    assert losses.get_loss("mse").min_bytes((10,)) == (10 + 10) * 4
    assert losses.get_loss("cross_entropy").min_bytes((3, 10)) == 3 * 10 * 4 + 3 * 8
    # hinge's target is one row of the last dimension, whatever the predictions' rank
    assert losses.get_loss("hinge").min_bytes((2, 3, 5)) == (30 + 5) * 4
    other = losses.Loss("l1_of_rows", losses.mse, losses._element_wise_inputs, ())
    with pytest.raises(ValueError) as error:
        other.min_bytes((3, 10))
    assert str(error.value) == "l1_of_rows"
