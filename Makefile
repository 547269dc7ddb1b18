# make book : install into .venv and build the book into _build/html
# make test : install into .venv and run pytest (pytest.ini decides what runs)
.PHONY: book test install clean

VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# torch finds CUDA from CUDA_HOME, else guesses from the nvcc on PATH; where that nvcc
# is a wrapper script (/usr/local/bin/nvcc) it guesses /usr/local and linking fails.
ifeq ($(CUDA_HOME),)
ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
export CUDA_HOME := /usr/local/cuda
endif
endif

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

test: $(STAMP)
	$(VENV)/bin/pytest

install: $(STAMP)

# Reinstall only when the requirements change.
$(STAMP): requirements.txt .ci/constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -c .ci/constraints.txt
	touch $@

clean:
	rm -rf _build
