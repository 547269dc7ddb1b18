"""kernels.measure.spans without a GPU: each provider's kernels' span becomes a measurement named
with KERNELS, on one set of the loss's inputs, every call behind one clear."""

import torch

from kernels import losses
from kernels.measure import spans


class FakeGenerator:
    def __init__(self, device):
        self.device = device

    def manual_seed(self, seed):
        self.seed = seed
        return self


class FakeLoss:
    def make_inputs(self, shape, generator, device):
        return ("pred", "target", shape, generator.seed, device)

    def min_bytes(self, shape):
        return 8 * shape[0]


def test_loss_spans_names_each_provider_and_times_it_on_one_input_set(monkeypatch):
    calls = []

    def fake_span(fn, arg_sets, before_call):
        calls.append((fn, arg_sets, before_call))
        return {"compiled": 0.002, "ours": 0.001}[fn]

    monkeypatch.setattr(torch, "Generator", FakeGenerator)
    monkeypatch.setattr(losses, "get_loss", lambda name: FakeLoss())
    monkeypatch.setattr(spans, "clear_and_lead", lambda: "lead")
    monkeypatch.setattr(spans, "call_span_ms", fake_span)
    measured = spans.loss_spans({"compile": "compiled", "final": "ours"}, "mse", [16], seed=7)
    assert [(m.provider, m.shape, m.bytes, m.ms) for m in measured] == [
        ("compile (kernels)", (16,), 128, 0.002), ("final (kernels)", (16,), 128, 0.001)]
    inputs = [("pred", "target", [16], 7, "cuda")]
    assert calls == [("compiled", inputs, "lead"), ("ours", inputs, "lead")]


def test_calls_between_sleeps_keeps_each_calls_events_and_drops_the_next_clear():
    # Three calls as bench.time_ms queues them: a clear of two events (a memset, the read), empty
    # sleeps (none, two, one), the lead's sleep, then the call's kernels; out of order, as a
    # profiler may list them.
    events = [("memset", 0, 1), ("reduce_kernel", 1, 80), ("spin_kernel", 80, 180),
              ("tile_partials", 181, 190), ("finish_mean", 188, 192),
              ("memset", 200, 201), ("reduce_kernel", 201, 280), ("spin_kernel", 281, 283),
              ("spin_kernel", 284, 286), ("spin_kernel", 286, 386),
              ("tile_partials", 387, 395), ("finish_mean", 393, 399),
              ("memset", 400, 401), ("reduce_kernel", 401, 480), ("spin_kernel", 481, 483),
              ("spin_kernel", 483, 583), ("tile_partials", 584, 590)]
    groups = spans.calls_between_sleeps(events[::-1], clear_events=2)
    assert [[name for name, *_ in g] for g in groups] == [["tile_partials", "finish_mean"]] * 2 + [
        ["tile_partials"]]
    assert [max(e[2] for e in g) - min(e[1] for e in g) for g in groups] == [11, 12, 6]
