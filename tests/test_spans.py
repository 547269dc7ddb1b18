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
