# make book : install what the book build needs into .venv (no PyTorch) and build _build/html
# make test : install everything into .venv and run pytest (pytest.ini decides what runs)
# make check CHAPTER=3 : grade your exercises of chapter 3 (on a GPU): says which exercise files
#   you have changed, then re-executes the chapter with nbval; a failing attempt fails the run
# make mutation : mutation testing of the toolkit's core on CPU (tools/mutation.py, mutmut): the
#   share of small bugs the CPU tests catch, into book/results/mutation.json. Hours on 2 cores, so
#   a separate job, not part of `make test`; MODULES="kernels/losses.py ..." runs some of them
.PHONY: book test check install clean mutation

VENV       := .venv
PY         := $(VENV)/bin/python
STAMP      := $(VENV)/.installed
BOOK_STAMP := $(VENV)/.book-installed

book: $(BOOK_STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

test: $(STAMP)
	$(VENV)/bin/pytest

install: $(STAMP)

check: $(STAMP)
	@test -n "$(CHAPTER)" || { echo "which chapter? make check CHAPTER=3"; exit 2; }
	$(PY) -c "import sys; from kernels.build.skeletons import main; sys.exit(main())" --chapter $(CHAPTER)
	KERNELS_BENCH_REPS=10 $(VENV)/bin/pytest $(wildcard chapters/0$(CHAPTER)_*.ipynb)

# Reinstall only when the requirements change.
$(STAMP): requirements.txt requirements-book.txt .ci/constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -c .ci/constraints.txt
	touch $@ $(BOOK_STAMP)

$(BOOK_STAMP): requirements-book.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-book.txt
	touch $@

mutation: $(STAMP)
	$(PY) -m pip install -q mutmut==3.8.1
	$(PY) tools/mutation.py $(MODULES)

clean:
	rm -rf _build .mutation
