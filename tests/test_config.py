"""Fast checks of the book configuration and the pins (no build, no browser)."""

import re
from pathlib import Path

import yaml

from kernels.course.book import toc_files

ROOT = Path(__file__).resolve().parents[1]


def load_yaml(name):
    return yaml.safe_load((ROOT / name).read_text())


def test_config_parses_and_names_the_repository():
    config = load_yaml("_config.yml")
    assert config["title"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", config["repository"]["url"])
    assert config["repository"]["branch"] == "main"
    assert config["html"]["use_repository_button"] is True
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def test_book_never_executes_notebooks():
    # The book renders the outputs stored by a GPU run; the build machine has no GPU.
    config = load_yaml("_config.yml")
    assert config["execute"]["execute_notebooks"] == "off"


def test_every_toc_entry_exists():
    toc = load_yaml("_toc.yml")
    assert toc["format"] == "jb-book"
    missing = [f for f in toc_files(toc)
               if not any((ROOT / f"{f}{ext}").is_file() for ext in (".md", ".ipynb"))]
    assert not missing, f"_toc.yml lists files that do not exist: {missing}"


def test_bibliography_file_exists():
    config = load_yaml("_config.yml")
    for bib in config["bibtex_bibfiles"]:
        assert (ROOT / bib).is_file(), bib


def requirement_lines(name="requirements.txt"):
    """The requirements of a file, with those of the files it includes (-r)."""
    found = []
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            found += requirement_lines(line[3:].strip())
        elif line:
            found.append(line)
    return found


def test_the_book_needs_no_pytorch():
    # `make book` installs requirements-book.txt alone: a build that executes nothing.
    assert not [r for r in requirement_lines("requirements-book.txt") if r.startswith("torch")]
    assert "-r requirements-book.txt" in (ROOT / "requirements.txt").read_text()


def test_jupyter_book_is_pinned_exactly():
    # `jupyter-book<2` with a newer Sphinx resolves to 0.6.5; 2.x cannot build offline.
    pins = [r for r in requirement_lines() if re.match(r"jupyter[-_]book\b", r, re.I)]
    assert pins == ["jupyter-book==1.0.4.post1"]


def test_everything_but_torch_is_pinned():
    loose = [r for r in requirement_lines() if "==" not in r and not r.startswith("torch")]
    assert not loose, f"unpinned requirements: {loose}"


def test_ci_constraints_pin_torch():
    constraints = (ROOT / ".ci" / "constraints.txt").read_text()
    assert re.search(r"^torch==\d+\.\d+\.\d+$", constraints, re.M)


def test_repository_url_is_written_once():
    # Pages use {{ repository_url }}; the README names _config.yml instead of the URL.
    url = load_yaml("_config.yml")["repository"]["url"]
    texts = [ROOT / "README.md", *sorted((ROOT / "book").rglob("*.md"))]
    repeated = [str(p.relative_to(ROOT)) for p in texts if url in p.read_text()]
    assert not repeated, f"the repository URL is repeated in {repeated}; use {{{{ repository_url }}}}"


def test_only_ci_applies_the_torch_pin():
    """A learner's make install keeps their torch (requirements.txt: torch>=2.5); .ci/run pins it."""
    import subprocess

    import os

    # CI's own run exports CONSTRAINTS (.ci/run): a learner's environment has none.
    env = {k: v for k, v in os.environ.items() if k not in ("CONSTRAINTS", "MAKEFLAGS", "MFLAGS")}

    def dry_run(*args):  # make -n: prints the install commands, runs nothing
        return subprocess.run(["make", "-n", "-W", "requirements.txt", "install", *args], cwd=ROOT,
                              capture_output=True, text=True, check=True, env=env).stdout

    assert "pip install -q --no-compile -r requirements.txt" in dry_run()
    assert "-r requirements.txt -c" not in dry_run()
    assert "-r requirements.txt -c .ci/constraints.txt" in dry_run("CONSTRAINTS=.ci/constraints.txt")
    ci = (ROOT / ".ci" / "run").read_text()  # the README's command, with the pin in its environment
    assert "export CONSTRAINTS=.ci/constraints.txt" in ci and "\nmake test\n" in ci
