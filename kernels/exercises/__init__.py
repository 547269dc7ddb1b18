"""The exercises: skeletons a learner completes, and the checks that print their verdicts.

- ``chN_*.cu`` (and ``ch8_one_collective.py``, ``ch9_model_new.py``): the skeletons; each
  compiles (or imports) and fails its check until it is done. The answers are in
  ``solutions/kernels/``.
- ``chN_checks.py``: a chapter's checks, one PASS or FAIL line per case, never an exception
  (``Chapter.exercise`` prints the verdict).

Layer ``exercises`` of ``kernels.LAYERS``: the checks may import every layer below it
(``kernels.losses``, ``kernels.build``, ``kernels.measure``, ``kernels.ops``, ``kernels.course``),
never KernelBench.
"""
