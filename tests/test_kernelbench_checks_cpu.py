"""The KernelBench validator's tolerances, tested on both sides of each bound, and its static
checks following a value through assignments, keyword arguments and aliases.

Each tolerance case has an answer just inside the bound (must pass) and just outside (must
fail), so dropping a term of the bound (``rtol``, the absolute part) or ignoring
``relative_only`` fails a test here.
"""

import pytest
import torch

from kernels import kernelbench as kb
from kernels.kernelbench.checks import check_against_float64, check_output

# --- check_output: torch.allclose(out, ref, atol=tol, rtol=tol): |out - ref| <= tol + tol |ref|

TOL = 1e-4


def t(x):
    return torch.tensor(x, dtype=torch.float64)  # float64: the bounds are not blurred by rounding


@pytest.mark.parametrize("ref, inside, outside", [
    (100.0, 100.0 + 0.0100, 100.0 + 0.0102),  # bound 0.0101: the relative part dominates
    (-100.0, -100.0 - 0.0100, -100.0 - 0.0102),  # |ref|, not ref
    (0.0, 0.99e-4, 1.01e-4),  # bound 1e-4: the absolute part alone
    (1.0, 1.0 + 1.99e-4, 1.0 + 2.01e-4),  # bound 2e-4: both parts
])
def test_check_output_passes_inside_the_bound_and_fails_outside(ref, inside, outside):
    assert check_output(t(inside), t(ref), TOL) is None
    assert check_output(t(2 * ref - inside), t(ref), TOL) is None  # below the reference
    failure = check_output(t(outside), t(ref), TOL)
    assert failure is not None and "> atol = rtol = 0.0001" in failure
    assert check_output(t(2 * ref - outside), t(ref), TOL) is not None


def test_check_output_rtol_counts():
    """0.0100 off at 100: within tol |ref| = 0.01 plus tol, far beyond the absolute tol alone."""
    assert check_output(t(100.0100), t(100.0), TOL) is None
    assert check_output(t(100.0100), t(100.0), 1e-5) is not None  # a tighter tolerance fails


def test_check_output_compares_every_element():
    ref = torch.zeros(5, dtype=torch.float64)
    out = ref.clone()
    out[3] = 2e-4
    assert "|difference| 0.0002" in check_output(out, ref, TOL)


# --- check_against_float64: |got - expected| <= tol |expected| (+ tol unless relative_only) ----

@pytest.mark.parametrize("expected, inside, between, outside", [
    # bound 0.0101 (0.01 relative-only); "between" passes with the absolute part only
    (100.0, 100.0099, 100.01005, 100.0102),
    (-100.0, -100.0099, -100.01005, -100.0102),
    (0.0, 0.0, 0.5e-4, 1.01e-4),  # at 0, relative-only allows nothing
])
def test_check_against_float64_on_each_side_of_each_tolerance(expected, inside, between, outside):
    for relative_only in (False, True):
        assert check_against_float64(t(inside), expected, TOL, relative_only) is None
        assert check_against_float64(t(outside), expected, TOL, relative_only) is not None
    assert check_against_float64(t(between), expected, TOL) is None
    failure = check_against_float64(t(between), expected, TOL, relative_only=True)
    assert failure is not None and "|difference|" in failure


def test_check_against_float64_rejects_what_is_not_one_finite_value():
    assert "not one value" in check_against_float64(t([1.0, 1.0]), 1.0, TOL)
    assert "not one value" in check_against_float64(1.0, 1.0, TOL)
    assert "not finite" in check_against_float64(t(float("nan")), 1.0, TOL)
    assert "not finite" in check_against_float64(t(float("-inf")), 1.0, TOL)


# --- static checks: the value followed through the forward's code --------------------------

def findings(body, header=""):
    source = (f"import torch\nimport torch.nn.functional as F\n{header}\n"
              f"class ModelNew(torch.nn.Module):\n    def forward(self, p, t):\n"
              + "".join(f"        {line}\n" for line in body.split("; ")))
    return [(f.line, f.why.split(" over ")[0]) for f in kb.check_source(source)
            if f.severity == "failure"]


FOLLOWED = {
    # assignments
    "d = p - t; return torch.mean(d * d)": (7, "PyTorch's `mean`"),
    "d = p - t; e = d * d; return e.sum() / p.numel()": (8, "PyTorch's `sum`"),
    "d: torch.Tensor = p - t; return torch.mean(d * d)": (7, "PyTorch's `mean`"),
    "a, b = p, t; return torch.mean((a - b) ** 2)": (7, "PyTorch's `mean`"),
    "for d in (p - t,): return torch.mean(d * d)": (6, "PyTorch's `mean`"),
    # keyword arguments
    "d = torch.sub(input=p, other=t); return torch.mean(d ** 2)": (7, "PyTorch's `mean`"),
    "return F.mse_loss(input=p, target=t)": (6, "PyTorch's `mse_loss`"),
    "return torch.mean(input=(p - t) ** 2)": (6, "PyTorch's `mean`"),
    # aliases
    "avg = torch.mean; return avg((p - t) ** 2)": (7, "PyTorch's `mean`"),
    "G = torch.nn.functional; return G.mse_loss(p, t)": (7, "PyTorch's `mse_loss`"),
    "s = (p - t).pow(2).sum; return s() / p.numel()": (7, "PyTorch's `sum`"),
    "return getattr(torch, 'mean')((p - t) ** 2)": (6, "PyTorch's `mean`"),
    "q = p; return torch.mean((q - t) ** 2)": (7, "PyTorch's `mean`"),
}


@pytest.mark.parametrize("body", sorted(FOLLOWED))
def test_static_checks_follow_the_inputs(body):
    assert findings(body) == [FOLLOWED[body]]


@pytest.mark.parametrize("header, body", [
    ("from torch import mean as avg", "return avg((p - t) ** 2)"),
    ("from torch.nn.functional import mse_loss as l2", "return l2(p, t)"),
    ("import torch.nn.functional as G", "return G.mse_loss(p, t)"),
])
def test_static_checks_follow_an_imported_alias(header, body):
    assert len(findings(body, header)) == 1


@pytest.mark.parametrize("body", [
    "d = ext.mse(p, t); return torch.mean(d)",  # the extension's output: the kernel's work
    "f = ext.mse; return f(p, t)",  # an alias of the extension
    "avg = torch.mean; avg = ext.mean; return avg(p - t)",  # bound twice: which one is unknown
    "a = b.x; b = a.y; return ext.f(p)",  # aliases of each other: expanded once, no loop
])
def test_static_checks_leave_the_kernels_own_calls_alone(body):
    assert findings(body) == []


def test_an_imported_alias_rebound_in_forward_is_the_new_value():
    assert findings("avg = ext.mean; return avg(p, t)", "from torch import mean as avg") == []


def test_the_finding_through_an_alias_names_the_line_of_the_use():
    source = ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, p, t):\n"
              "        s = (p - t).abs().sum\n        n = p.numel()\n        return s() / n\n")
    (finding,) = kb.check_source(source)
    assert finding.line == 6 and finding.code == "return s() / n"


# --- the notes' and the stream check's thresholds are strict: at the bound, nothing ----------

def test_excessive_speedup_is_above_ten_times_not_at_it():
    assert kb.excessive_speedup_note(10.0) is None
    assert kb.excessive_speedup_note(10.001) is not None


def test_the_hidden_time_must_exceed_both_bounds():
    """hidden = wall - event (the median), less the reference's (here 0). Binary fractions, so
    the comparisons at the bound are exact."""
    honest = kb.Timing([1.0] * 3, [1.0] * 3)

    def hidden(event, extra):
        return kb.check_timed_stream(kb.Timing([event] * 3, [event + extra] * 3), honest,
                                     min_ms=0.125, fraction=0.5)

    assert hidden(0.125, 0.125) is None  # at min_ms (and above fraction * event = 0.0625)
    assert hidden(0.125, 0.25) is not None
    assert hidden(1.0, 0.5) is None  # at fraction * event (and above min_ms)
    assert hidden(1.0, 0.625) is not None


# --- what each check says: the learner acts on these words ----------------------------------

def test_check_output_says_what_came_back():
    ref = t(2.0)
    assert check_output(None, ref, TOL) == "returned NoneType, not a tensor"
    assert check_output(t(float("nan")), ref, TOL) == "output nan is not finite (NaN or infinity)"
    assert check_output(t(2.5), ref, TOL) == ("output 2.5, reference 2: |difference| 0.5 > "
                                              "atol = rtol = 0.0001")
    assert check_output(t(0.0), ref, TOL) == ("output 0 (all zeros: was the result written?), "
                                              "reference 2: |difference| 2 > atol = rtol = 0.0001")
    many = torch.zeros(5, dtype=torch.float64)
    assert check_output(many + 1, many, TOL).startswith("output a tensor of shape (5,), reference "
                                                        "a tensor of shape (5,): |difference| 1 ")


def test_check_against_float64_says_what_came_back():
    assert check_against_float64(None, 1.0, TOL) == "returned None, not one value"
    assert check_against_float64(1.0, 1.0, TOL) == "returned 1.0, not one value"  # a float
    assert check_against_float64(t([1.0, 2.0]), 1.0, TOL) == ("returned a tensor of shape (2,), "
                                                              "not one value")
    assert check_against_float64(t(float("inf")), 1.0, TOL) == "output inf is not finite"
    assert check_against_float64(t(3.0), 1.0, TOL) == ("output 3, float64 reference 1: "
                                                       "|difference| 2 > 0.0002")


def test_check_not_constant_looks_past_an_output_that_is_not_a_tensor():
    same = t(1.0)
    outputs, references = [same, None, same.clone()], [t(1.0), t(2.0), t(3.0)]
    assert kb.check_not_constant(outputs, references) == (
        "trials 1 and 3 got the same output 1 although the reference changed (1, 3): a "
        "constant, or a result kept from an earlier call?")


# --- what a finding of forward's rules says (the survivors of static.py's mutation run) --------

def test_an_annotated_value_from_elsewhere_is_not_the_inputs():
    assert findings("s: float = 0.5; d = ext.mse(p, t); return torch.mean(d * s)") == []


@pytest.mark.parametrize("body", [
    "a = p - t; x: torch.Tensor = t * 2; return torch.mean(a * a)",
    "a = p - t; for x in (t,): pass; return torch.mean(a * a)",
])
def test_a_later_binding_adds_to_the_values_followed_and_forgets_none(body):
    assert findings(body) == [(8, "PyTorch's `mean`")]


def test_a_try_in_forward_is_a_finding_with_its_reason_at_its_line():
    source = ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, p, t):\n"
              "        try:\n            return ext.mse(p, t)\n"
              "        except RuntimeError:\n            return ext.mse(p, t)\n")
    (finding,) = kb.check_source(source, offset=10)
    assert (finding.severity, finding.line, finding.code) == ("failure", 14, "try:")
    assert finding.why == ("catches exceptions: a kernel that fails must fail the trial, not fall "
                           "back to something else")


def test_a_findings_code_is_the_lines_first_80_characters():
    long_name = "difference_" + "x" * 80
    source = ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, p, t):\n"
              f"        {long_name} = p - t\n        return torch.mean({long_name} ** 2)\n")
    (finding,) = kb.check_source(source)
    assert finding.code == f"return torch.mean({long_name} ** 2)"[:80] and len(finding.code) == 80
