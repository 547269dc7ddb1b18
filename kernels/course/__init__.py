"""The course's bookkeeping: what the notebooks, the tools and the tests share.

- ``chapter.py``: ``Chapter("ch3")``, a notebook's id, GPU and peak bandwidth; saves and reads
  its rows, runs its exercises' checks and prints their verdicts
- ``notebook.py``: ``SETUP_CELL`` (every notebook's first cell), ``show_source`` (a listing of a
  file of the repository), ``kernels_launched``
- ``colab.py``: what the set-up cell checks on Colab (a GPU, ninja, an nvcc PyTorch accepts)
- ``book.py``: the notebooks and the table of contents (``python -m kernels.course.book``)

Layer ``course`` of ``kernels.LAYERS``: it may import every layer below it (``kernels.losses``,
``kernels.build``, ``kernels.measure``, ``kernels.ops``), never the exercises or KernelBench.
"""
