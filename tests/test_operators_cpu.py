"""Chapter 6's operator machinery without a GPU: the loss registry's reductions and gradients,
the fake kernels' shapes, the headers a build hashes, the generated registration, and the
argument checks that answer before any kernel runs."""

import pytest
import torch

from kernels import losses
from kernels.build.build_cache import Sources, source_path
from kernels.build.codegen import registration
from kernels.ops import grad_guess, operators

ELEMENT_WISE = losses.ELEMENT_WISE


@pytest.mark.parametrize("name", ELEMENT_WISE)
def test_reduced_reference_is_the_course_reference_for_the_mean(name):
    g = torch.Generator().manual_seed(0)
    loss = losses.get_loss(name)
    pred, target = loss.make_inputs((7, 12), g, "cpu", torch.float64)
    assert torch.allclose(loss.reference_reduced(pred, target), loss.reference(pred, target))
    each = loss.reference_reduced(pred, target, "none")
    assert each.shape == pred.shape
    assert torch.allclose(loss.reference_reduced(pred, target, "sum"), each.sum())


def test_reduce_rejects_an_unknown_reduction():
    with pytest.raises(ValueError, match="reduction must be"):
        losses.reduce(torch.ones(3), "avg")


@pytest.mark.parametrize("name", ELEMENT_WISE)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_target_gradient_of_the_registry_matches_autograd(name, reduction):
    """What the operators' backward computes for the target, against autograd in float64,
    including Hinge's broadcast row (the gradient sums over the rows)."""
    g = torch.Generator().manual_seed(1)
    loss = losses.get_loss(name)
    pred, target = loss.make_inputs((9, 16), g, "cpu", torch.float64)
    pred.requires_grad_()
    target.requires_grad_()
    param = {loss.param[0]: 2.5} if loss.param else {}
    value = loss.reference_reduced(pred, target, reduction, **param)
    grad_output = torch.rand(value.shape, dtype=torch.float64, generator=g) + 0.5
    value.backward(grad_output)
    upstream = grad_output / pred.numel() if reduction == "mean" else grad_output
    got = loss.target_grad(pred.detach(), target.detach(), pred.grad, upstream, **param)
    assert torch.allclose(got.sum_to_size(target.shape), target.grad)


def test_the_element_wise_losses_are_the_registry_s():
    assert ELEMENT_WISE == ("mse", "smooth_l1", "hinge", "bce_with_logits")


def test_only_hinge_broadcasts_its_target():
    assert {n for n in ELEMENT_WISE if losses.get_loss(n).broadcast_target} == {"hinge"}
    assert losses.get_loss("smooth_l1").param == ("beta", 1.0)
    assert losses.get_loss("bce_with_logits").param == ("pos_weight", 1.0)


@pytest.mark.parametrize("reduction,want_grad", [(0, False), (1, True), (2, False), (0, True)])
def test_fake_fused_loss_shapes(reduction, want_grad):
    pred = torch.empty(5, 7, dtype=torch.bfloat16, device="meta")
    loss, grad = operators._fake_fused_loss(pred, pred, reduction, 1.0, want_grad)
    assert loss.shape == ((5, 7) if reduction == 0 else ()) and loss.dtype == torch.bfloat16
    assert grad.shape == ((5, 7) if want_grad else (0,)) and grad.is_contiguous()


@pytest.mark.parametrize("save,saved_shape,saved_dtype", [
    (0, (0,), torch.float32), (1, (6,), torch.float32), (2, (6, 11), torch.float16)])
@pytest.mark.parametrize("reduction", [0, 1])
def test_fake_cross_entropy_shapes(save, saved_shape, saved_dtype, reduction):
    logits = torch.empty(6, 11, dtype=torch.float16, device="meta")
    target = torch.empty(6, dtype=torch.int64, device="meta")
    loss, saved, bad = operators._fake_cross_entropy(logits, target, -100, reduction, 0.0, save)
    assert loss.shape == ((6,) if reduction == 0 else ()) and loss.dtype == torch.float16
    assert saved.shape == saved_shape and saved.dtype == saved_dtype
    assert bad.shape == () and bad.dtype == torch.int32


def test_a_build_hashes_exactly_the_headers_it_includes():
    sources = Sources.read(source_path("ch6_operators/fused_losses.cu"))
    assert sorted(h.name for h in sources.headers) == [
        "binding_utils.h", "cuda_utils.cuh", "fused_loss.cuh", "fused_loss_args.h",
        "loss_args.h", "losses.cuh", "numerics.cuh", "reduce.cuh"]
    chapter4 = Sources.read(source_path("ch4_two_pass/v5_block_tiles.cu"))
    assert "fused_loss.cuh" not in {h.name for h in chapter4.headers}


def test_fused_loss_registration_gives_the_backward_op_its_schema():
    code = registration("lib", [("mse", "FusedLossArgs"), ("loss_scale_grad", "FusedLossArgs")])
    assert 'm.def("mse" FUSED_LOSS_SCHEMA);' in code
    assert 'm.def("loss_scale_grad" FUSED_LOSS_SCALE_GRAD_SCHEMA);' in code
    assert "&fused_loss_scale_grad_op<loss_scale_grad_launch>" in code


class _NoKernel:
    ops = {}


@pytest.mark.parametrize("call,error,match", [
    (lambda ops: ops.mse(torch.ones(3), torch.ones(3), reduction="avg"), ValueError,
     "reduction must be"),
    (lambda ops: ops.mse(torch.ones(3), torch.ones(3)), RuntimeError, "CUDA tensors"),
    (lambda ops: ops.smooth_l1(torch.ones(3), torch.ones(3), beta=-0.5), ValueError,
     "beta must be >= 0"),
    (lambda ops: ops.mse([1.0], torch.ones(1)), TypeError, "must be tensors"),
    (lambda ops: ops.bce_with_logits(torch.ones(3), torch.ones(3), pos_weight=torch.ones(3)),
     TypeError, "pos_weight must be a Python number"),
    (lambda ops: ops.mse(torch.ones(3), torch.ones(3), beta=0.5), TypeError,
     "unexpected keyword argument 'beta'"),
])
def test_loss_ops_check_arguments_before_any_kernel(call, error, match):
    with pytest.raises(error, match=match):
        call(operators.LossOps(_NoKernel()))


# --- a loss is declared once: its functor and its entry make its launcher and its operator ----

FUSED = source_path("ch6_operators/fused_losses.cu")


def test_every_element_wise_loss_names_a_functor_of_losses_cuh():
    header = (source_path("common/losses.cuh")).read_text()
    for name in ELEMENT_WISE:
        assert f"struct {losses.get_loss(name).functor} {{" in header, name


def test_the_fused_kernel_file_has_a_launcher_per_registry_loss():
    ops = [op for op, struct in Sources.read(FUSED).launchers]
    assert sorted(ops) == sorted([*ELEMENT_WISE, "loss_scale_grad"])
    assert "bce" not in FUSED.read_text()  # no loss is named in the kernel file


def test_a_new_registry_entry_gets_a_launcher_with_no_line_in_the_kernel_file(monkeypatch):
    new = losses.Loss("log_cosh", None, None, (), each=lambda p, t: p, functor="LogCoshLoss")
    monkeypatch.setitem(losses.LOSSES, "log_cosh", new)
    monkeypatch.setattr(losses, "ELEMENT_WISE", (*ELEMENT_WISE, "log_cosh"))
    sources = Sources.read(FUSED)
    assert ("log_cosh", "FusedLossArgs") in sources.launchers
    assert "X(log_cosh, LogCoshLoss)" in sources.cuda_text


def test_the_loss_list_keeps_the_file_s_line_numbers():
    text = Sources.read(FUSED).cuda_text
    define, rest = text.split("\n#line 1\n", 1)
    assert define.startswith("#define KERNELS_ELEMENT_WISE_LOSSES(X)")
    assert rest == FUSED.read_text()


def test_a_file_without_the_loss_list_is_left_as_it_is():
    from kernels.build.codegen import with_loss_list

    text = 'extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t s);'
    assert with_loss_list(text) == text


@pytest.mark.parametrize("name", ELEMENT_WISE)
def test_loss_ops_has_an_operator_per_registry_loss(name):
    method = getattr(operators.LossOps, name)
    assert method.__name__ == name and name in method.__doc__


# --- the loss-scaling guess (kernels/ops/grad_guess.py) ---------------------------------------

@pytest.mark.parametrize("dtype,reduction,want_grad,uses", [
    (torch.float32, "mean", True, True), (torch.bfloat16, "sum", True, True),
    (torch.float16, "mean", True, False),   # an old guess could overflow float16
    (torch.float32, "none", True, False),   # grad_output is a tensor, not one value
    (torch.float32, "mean", False, False)])  # no gradient to scale
def test_the_guess_is_used_only_where_it_can_help(monkeypatch, dtype, reduction, want_grad, uses):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert grad_guess.wanted(dtype, reduction != "none", want_grad) == uses


@pytest.mark.parametrize("where", ["torch.compile", "CUDA graph capture"])
def test_no_guess_where_the_next_one_could_not_be_kept(monkeypatch, where):
    capturing, compiling = where == "CUDA graph capture", where == "torch.compile"
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
    assert not grad_guess.wanted(torch.float32, True, True)


class _Ctx:
    """What setup_context and backward use of autograd's ctx."""
    needs_input_grad = (True, False, False, False, False, False)

    def mark_non_differentiable(self, *_):
        pass

    def set_materialize_grads(self, _):
        pass

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def _cpu_scale_grad(grad, grad_output, grad_guess=None):
    """The scale op's contract on the CPU: grad *= grad_output / guess; returns the next guess."""
    grad.mul_(grad_output / (1.0 if grad_guess is None else grad_guess))
    return grad_output.float().clone()


def test_each_backward_divides_out_its_own_forward_s_guess_and_keeps_the_next():
    """Two forwards of one loss before their backwards (0.5 * mse(a) + 2 * mse(b)) each read
    the guess of 1; each backward stores its grad_output as the next guess, which the next
    forward reads, and the tensor a forward used is never written."""
    key = ("cpu_test::mse", torch.device("cpu"))
    grad_guess._GUESSES.pop(key, None)
    setup, backward = operators._fused_loss_autograd(None, _cpu_scale_grad, "mse", key[0])
    first = grad_guess.current(*key)
    assert first.item() == 1.0 and grad_guess.current(*key) is first
    contexts, grads = [], []
    for _ in range(2):  # the forward wrote f' * guess = 2 * 1
        ctx, grad = _Ctx(), torch.full((4,), 2.0)
        setup(ctx, (torch.ones(4), torch.ones(4), 1, 0.0, True, grad_guess.current(*key)),
              (torch.ones(()), grad))
        contexts.append(ctx)
        grads.append(grad)
    assert backward(contexts[0], torch.tensor(0.5), None)[0] is grads[0]
    assert torch.equal(grads[0], torch.full((4,), 1.0))
    assert grad_guess.current(*key).item() == 0.5
    backward(contexts[1], torch.tensor(2.0), None)
    assert torch.equal(grads[1], torch.full((4,), 4.0))
    assert grad_guess.current(*key).item() == 2.0 and first.item() == 1.0
    ctx, grad = _Ctx(), torch.full((4,), 2.0 * 2.0)  # a forward that read the guess 2
    setup(ctx, (torch.ones(4), torch.ones(4), 1, 0.0, True, grad_guess.current(*key)),
          (torch.ones(()), grad))
    backward(ctx, torch.tensor(2.0), None)  # right: the gradient is f' * 2 already
    assert torch.equal(grad, torch.full((4,), 4.0))
    grad_guess._GUESSES.pop(key)


def test_the_traced_backward_s_factor_is_the_kernels_guess_factor():
    """grad_guess.factor (a backward traced by torch.compile) and guess_factor in
    kernels/common/cuda_utils.cuh (the kernels) must count the same guesses as 1."""
    header = source_path("common/cuda_utils.cuh").read_text()
    assert "g >= 0x1p-32f && g <= 0x1p32f ? *guess : 1.0f" in header
    for value, factor in ((3.0, 3.0), (-0.5, -0.5), (2.0**-32, 2.0**-32), (2.0**32, 2.0**32),
                          (2.0**-33, 1.0), (2.0**33, 1.0), (0.0, 1.0), (float("inf"), 1.0),
                          (float("-inf"), 1.0), (float("nan"), 1.0)):
        assert grad_guess.factor(torch.tensor(value)).item() == factor, value


def test_hinge_target_gradient_at_the_kink_is_the_kernels_choice():
    """Where 1 - p y is exactly 0 the target's gradient is -p, as the kernel's prediction
    gradient is -y there (common/losses.cuh: clamp passes the gradient where its input >= min;
    tests/gpu/test_operators.py::test_kinks_follow_pytorch compares it with CUDA autograd). Not
    compared with autograd here: on CPU, torch 2.14's clamp(min=0) gives 0 at the kink."""
    loss = losses.get_loss("hinge")
    pred = torch.tensor([1.0, -1.0, 0.5, -3.0], dtype=torch.float64)  # two on the kink
    target = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    grad_pred = torch.where(1 - pred * target >= 0, -target, 0)  # the kernel's, at the kink too
    got = loss.target_grad(pred, target, grad_pred, torch.tensor(2.0, dtype=torch.float64))
    assert got.tolist() == [-2.0, 2.0, -1.0, 0.0]


def test_smooth_l1_takes_beta_zero_as_pytorch_does():
    """beta = 0 is the L1 loss; PyTorch accepts it, and only a negative beta is refused."""
    check = losses.get_loss("smooth_l1").check_param
    p, t = torch.tensor([0.0, 2.0]), torch.tensor([1.0, -1.0])
    assert torch.nn.functional.smooth_l1_loss(p, t, beta=0.0).item() == 2.0
    assert check(0.0) == 0.0 and check(0) == 0 and check(2.5) == 2.5
    with pytest.raises(ValueError, match="beta must be >= 0"):
        check(-1e-9)
