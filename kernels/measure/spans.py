"""A loss's providers timed by their kernels' span, beside the events' timing of bench.

``bench.time_ms`` times a call between two CUDA events; at a few microseconds per call the events
hold a few microseconds more than the kernels, which moved identical builds' ratios by up to a
tenth (chapter 4). :func:`loss_spans` times the same calls, queued the same way, from the first
kernel's start to the last kernel's end (``profile.call_span_ms``), and names each provider with
:data:`KERNELS` so that its rows sit beside the events' rows in one results file.
"""

from __future__ import annotations

from .bench import Measurement, clear_and_lead
from .profile import call_span_ms

KERNELS = " (kernels)"  # appended to a provider's name for its kernels' span


def loss_spans(providers: dict, loss_name: str, shape, seed: int = 0) -> list[Measurement]:
    """Each provider's (name -> callable) kernels' span on one set of the loss's inputs at
    ``shape`` (seeded by ``seed``), each call behind bench's L2 clear and sleep."""
    import torch

    from ..losses import get_loss

    loss = get_loss(loss_name)
    inputs = [loss.make_inputs(shape, torch.Generator(device="cuda").manual_seed(seed), "cuda")]
    before_call = clear_and_lead()
    return [Measurement(loss_name, name + KERNELS, tuple(shape), loss.min_bytes(shape),
                        call_span_ms(fn, inputs, before_call)) for name, fn in providers.items()]
