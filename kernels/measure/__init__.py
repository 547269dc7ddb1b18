"""Measuring: timing, correctness against PyTorch, the results' CSV files, plots and profiles.

- ``events.py``: how one call is timed: the L2 clear, the launches and the sleep queued before
  it, the CUDA events around it (``time_ms``), and the host-queued ``queued_ms``
- ``bench.py``: the same names (``bench.time_ms``), effective bandwidth, the GPU's read and copy
  bandwidth, size sweeps, the exercises' PASS/MISS performance targets
- ``correctness.py``: ``check``, an op against PyTorch in float64 over awkward cases;
  ``CheckFailed``, ``relative_error``
- ``results.py``: benchmark rows as CSV under ``book/results/``
- ``plot.py``: the course's figure style (``subplots``, ``legend``) and ``plot_throughput``
- ``profile.py``: ncu counters, SASS and PTX of a built kernel (book/profiling.md)
- ``spans.py``: a call's kernels' span from torch.profiler (``call_span_ms``), and a loss's
  providers timed by it, as ``bench`` measurements
- ``envinfo.py``: the GPU, driver, torch, CUDA and nvcc versions a measurement was taken with

Layer ``measure`` of ``kernels.LAYERS``: it imports ``kernels.losses`` (inputs, byte counts)
and ``kernels.build`` (``profile`` reads a build's sources and runs nvcc), never the operators
or the course: it times and checks any callable.
"""
