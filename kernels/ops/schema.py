"""What the ops' integer arguments mean, their registered names, and the chapters' final kernel
files.

The bindings (``kernels/bindings``) read a reduction and, for cross-entropy, what the forward
saves for the backward, as integers: these are their values. They live here, not in
``operators.py``, so that every module of the layer can read them without importing the others
(``cross_entropy.py`` is used by ``operators.py``, and would otherwise import it back).
"""

# The chapters' final kernel files (kernels.losses.ELEMENT_WISE names the losses, not a file).
FUSED_LOSSES_FILE = "ch6_operators/fused_losses.cu"
CROSS_ENTROPY_FILE = "ch5_cross_entropy/v3_fused_rows.cu"
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
# What a cross-entropy forward saves for its backward: nothing, each row's log-sum-exp, or the
# gradient times a guess of grad_output (kernels/ops/grad_guess.py,
# kernels/bindings/cross_entropy.cpp).
SAVE_NOTHING, SAVE_LSE, SAVE_GRAD = 0, 1, 2


def qualname(kernel, op: str) -> str:
    """The name ``op`` of a built kernel is registered under in torch.library, which also keys
    the op's guess of grad_output (kernels/ops/grad_guess.py)."""
    return f"{kernel.name}::{op}"
