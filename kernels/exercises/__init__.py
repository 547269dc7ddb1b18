"""The exercises: skeletons a learner completes, and the checks that print their verdicts.

- ``chN_*.cu`` (and ``ch8_one_collective.py``, ``ch9_model_new.py``): the skeletons; each
  compiles (or imports) and fails its check until it is done. The answers are in
  ``solutions/kernels/``.
- ``skeletons.json``: each skeleton's SHA-256 as shipped (``kernels/build/skeletons.py``): a file
  that differs from it is the learner's attempt.
- ``chN_checks.py``: a chapter's checks, one PASS or FAIL line per case (``Chapter.exercise``
  prints the verdict, and raises it for a failing attempt); ``ch1_checks.py`` checks the
  numbers of chapter 1's exercises without showing the expected ones.

Layer ``exercises`` of ``kernels.LAYERS``: the checks may import every layer below it
(``kernels.losses``, ``kernels.build``, ``kernels.measure``, ``kernels.ops``, ``kernels.course``),
never KernelBench.
"""
