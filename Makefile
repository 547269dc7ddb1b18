# make book : install what the book build needs into .venv (no PyTorch) and build _build/html
# make test : install everything into .venv and run pytest (pytest.ini decides what runs; without
#   a GPU, in parallel over the cores)
# make check CHAPTER=3 : grade your exercises of chapter 3 (on a GPU): says which exercise files
#   you have changed, then re-executes the chapter with nbval; a failing attempt fails the run
# make toolchain : whether your nvcc and your PyTorch's CUDA build kernels together
# make mutation : mutation testing of the toolkit's core on CPU (tools/mutation.py, mutmut): the
#   share of small bugs the CPU tests catch, into book/results/mutation.json. Hours on 2 cores, so
#   a separate job, not part of `make test`; MODULES="kernels/losses.py ..." runs some of them
.PHONY: book test check install toolchain clean mutation

VENV       := .venv
PY         := $(VENV)/bin/python
STAMP      := $(VENV)/.installed
BOOK_STAMP := $(VENV)/.book-installed
# pip constraints, none by default: a learner keeps the torch already in .venv, or gets pip's.
# CI pins torch with CONSTRAINTS=.ci/constraints.txt (.ci/run sets it).
CONSTRAINTS ?=

book: $(BOOK_STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

# Without a GPU, pytest-xdist runs the tests in one process per core, a whole file at a time
# (--dist loadfile: each notebook stays in one process, as nbval needs): the kernels' compile
# tests, the book's build and browser tests and the notebooks then overlap. With a GPU, one
# process: timing tests must never share the GPU with other tests.
test: $(STAMP)
	$(VENV)/bin/pytest $$($(PY) -c "import torch; print('' if torch.cuda.is_available() else '-n auto --dist loadfile')")

install: $(STAMP)

# The gate (kernels/build/skeletons.py) refuses an unknown chapter and a machine without a GPU
# in one line, and lists the chapter's exercise files; only then does nbval run the notebook.
check: $(STAMP)
	@$(PY) -c "import sys; from kernels.build.skeletons import main; sys.exit(main())" --grade "$(CHAPTER)"
	KERNELS_BENCH_REPS=10 $(VENV)/bin/pytest chapters/$$(printf %02d "$(CHAPTER)")_*.ipynb

# Reinstall only when the requirements change. pip byte-compiles what it installs one file at a
# time (66 of the 111 s a cached install took on 2 cores); compileall on every core took 18 s.
# Compiled before the tests, not by them: 23 bench scripts start at once, and each would compile
# torch for itself. compileall exits 1 for a file of torch's tests in Python 3.12 syntax, a file
# pip skips too: hence the `|| true`.
COMPILE_ALL = $(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true

$(STAMP): requirements.txt requirements-book.txt $(CONSTRAINTS)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -r requirements.txt $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	$(COMPILE_ALL)
	touch $@ $(BOOK_STAMP)

$(BOOK_STAMP): requirements-book.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -r requirements-book.txt
	$(COMPILE_ALL)
	touch $@

# The check the loader makes before a build (kernels/build/toolchain.py, cuda_mismatch): PyTorch
# builds extensions only with an nvcc of the CUDA major version it was built with.
toolchain: $(STAMP)
	@$(PY) -c "import sys, torch; from kernels.build.toolchain import cuda_mismatch, nvcc, nvcc_release; \
	why = cuda_mismatch(nvcc_release(), torch.version.cuda); \
	print(why or f'{nvcc()} is CUDA {nvcc_release()} and PyTorch {torch.__version__} was built with CUDA {torch.version.cuda}: they build the kernels together'); \
	sys.exit(2 if why else 0)"

mutation: $(STAMP)
	$(PY) -m pip install -q mutmut==3.8.1
	$(PY) tools/mutation.py $(MODULES)

clean:
	rm -rf _build .mutation
