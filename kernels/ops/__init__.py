"""The operators: the built kernels as PyTorch ops that a model or a training loop calls.

- ``schema.py``: what the ops' integer arguments mean (reductions, what a forward saves) and the
  chapters' final kernel files
- ``operators.py``: ``register``, the fake kernel and autograd formula of every op of a build
  (chapter 6); ``LossOps`` and ``build()``, the operators a training loop calls
- ``cross_entropy.py``: chapter 5's fused cross-entropy, a drop-in for ``F.cross_entropy``
- ``llm_head.py``: chapter 7's fused linear + cross-entropy, the logits never stored whole
- ``vocab_parallel.py``: chapter 8's cross-entropy with the rows or the vocabulary split over
  processes
- ``ranks.py``: what each of chapter 8's processes runs, started by ``torchrun`` (``launch``)

Layer ``ops`` of ``kernels.LAYERS``: it imports ``kernels.losses``, ``kernels.build`` and
``kernels.measure`` (``llm_head.measure_step`` and the ``time`` task of ``ranks`` time
themselves), never the course's bookkeeping.

Importing this package installs :func:`operators.register` as a hook of the build
(``kernels.build.loader.ON_BUILD``): every kernel ``load`` builds gets its fake kernels and
autograd formulas, as it did when the loader called the operators itself. ``import kernels``
imports this package, so ``from kernels import load`` registers them too. The hook imports
``operators`` (and PyTorch) only when a kernel is built.
"""

from ..build import loader as _loader


def _register(kernel, struct: str) -> None:
    """Fake kernels and autograd formulas for a new build (``operators.register``)."""
    from .operators import register

    register(kernel, struct)


_loader.ON_BUILD.append(_register)
