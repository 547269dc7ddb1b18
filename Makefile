# make book : install what the book build needs into .venv (no PyTorch) and build _build/html
# make test : install everything into .venv and run pytest (pytest.ini decides what runs)
# make check CHAPTER=3 : grade your exercises of chapter 3 (on a GPU): says which exercise files
#   you have changed, then re-executes the chapter with nbval; a failing attempt fails the run
.PHONY: book test check install clean

VENV       := .venv
PY         := $(VENV)/bin/python
STAMP      := $(VENV)/.installed
BOOK_STAMP := $(VENV)/.book-installed

book: $(BOOK_STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

test: $(STAMP)
	$(VENV)/bin/pytest

install: $(STAMP)

# The gate (kernels/build/skeletons.py) refuses an unknown chapter and a machine without a GPU
# in one line, and lists the chapter's exercise files; only then does nbval run the notebook.
check: $(STAMP)
	@$(PY) -c "import sys; from kernels.build.skeletons import main; sys.exit(main())" --grade "$(CHAPTER)"
	KERNELS_BENCH_REPS=10 $(VENV)/bin/pytest chapters/$$(printf %02d "$(CHAPTER)")_*.ipynb

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

clean:
	rm -rf _build
