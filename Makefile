# make book : install into .venv and build the book into _build/html
# make test : install into .venv and run pytest (pytest.ini decides what runs)
.PHONY: book test install clean

VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

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
