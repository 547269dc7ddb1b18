"""The timing harness on a GPU: what ``clear_and_lead`` queues before each call, that the events
time a known duration, and that a call's kernels are found between the leads' sleeps."""

import time

import pytest

from gpu_support import kernel_names  # (and puts the repository on sys.path)

pytestmark = pytest.mark.gpu

import torch  # noqa: E402

from kernels.measure import events, spans  # noqa: E402


def test_each_lead_queues_a_random_count_of_empty_launches_before_its_sleep():
    before_call = events.clear_and_lead()
    counts = []
    for _ in range(40):
        names = kernel_names(before_call)
        sleeps = [i for i, name in enumerate(names) if spans.SLEEP_KERNEL in name]
        assert sleeps[-1] == len(names) - 1  # the long sleep last, after the clear
        assert sleeps == list(range(len(names) - len(sleeps), len(names)))
        counts.append(len(sleeps) - 1)
    assert 0 <= min(counts) and max(counts) < events.PHASE_LAUNCHES
    assert len(set(counts)) > 10  # a count drawn for each call, not one per measurement


def test_the_events_time_a_kernel_of_known_length_and_not_the_lead():
    # A sleep of 2e5 cycles is about 0.1 ms at these GPUs' clocks: the events around it hold it
    # and nothing of the clear, the empty launches or the 1e6-cycle sleep queued before it.
    lead_ms = events.time_ms(lambda: torch.cuda._sleep(events.LEAD_CYCLES), [()], reps=10)
    ms = events.time_ms(lambda: torch.cuda._sleep(events.LEAD_CYCLES // 5), [()], reps=20)
    assert ms == pytest.approx(lead_ms / 5, rel=0.1)


def test_a_call_whose_host_work_outlasts_the_usual_lead_is_timed_on_the_gpu():
    # 2 ms of host work before a 0.1 ms kernel, far past the 0.5 ms sleep: the lead grows
    # with the warm-up's host time, so the events hold the kernel, not the host's wait.
    def kernel():
        torch.cuda._sleep(events.LEAD_CYCLES // 5)

    def slow_host():
        time.sleep(0.002)
        kernel()

    assert events.time_ms(slow_host, [()], reps=20) == pytest.approx(
        events.time_ms(kernel, [()], reps=20), rel=0.1)


def test_a_calls_span_covers_its_kernels_whatever_the_lead_queued():
    x = torch.rand(1 << 22, device="cuda")

    def two_kernels(x):
        return (x * 2).sum()

    ms = spans.call_span_ms(two_kernels, [(x,)], events.clear_and_lead(), calls=30)
    one_ms = spans.call_span_ms(lambda x: x * 2, [(x,)], events.clear_and_lead(), calls=30)
    assert one_ms < ms < 1.0  # both kernels, and not a lead's sleep (0.5 ms)
