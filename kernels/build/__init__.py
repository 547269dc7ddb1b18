"""The build: a kernel file and its binding compiled into PyTorch ops (``load``).

- ``toolchain.py``: nvcc, the CUDA toolkit PyTorch is pointed at, the architectures built for,
  the compiler's messages made readable
- ``codegen.py``: the C++ a build adds to a kernel file: its launchers found and registered as
  ops (``TORCH_LIBRARY``), included kernel files spliced in, chapter 6's loss list
- ``build_cache.py``: the sources read once and hashed, the build's cached name and folder;
  ``KERNELS_DIR`` (the ``kernels/`` folder, which kernel paths are relative to)
- ``provenance.py``: the notebooks' record of the sources each build read
- ``skeletons.py``: the exercises' skeletons as shipped (``kernels/exercises/skeletons.json``),
  so that a learner's edit is known as theirs and never counts as a change of the course
- ``loader.py``: ``load``, ``Kernel``, ``KernelBuildError``, and ``ON_BUILD``, the hooks a new
  build runs

Layer ``build`` of ``kernels.LAYERS``: it imports ``kernels.losses`` (the registry's loss list,
which chapter 6's launchers expand) and nothing else of the toolkit. It knows nothing of
autograd: the ops layer installs its registration of fake kernels and autograd formulas as a
hook of ``loader.ON_BUILD``.
"""
