"""The toolkit's layout: layers that import downwards only, no import cycle, no overlong module,
and the old module names the notebooks still import.

The layers are ``kernels.LAYERS`` (lowest first). Every module under ``kernels/`` is parsed, not
imported: each ``import`` and ``from ... import`` (inside functions too) is resolved to the module
it names, relative imports and the old names of ``kernels.MOVED`` included.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import kernels

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kernels"
FACE = "kernels"  # kernels/__init__.py: above every layer
MAX_LINES = 400
# A module longer than MAX_LINES says why in its first docstring, in a sentence with this phrase.
LONG_REASON = "lines because"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def canonical(name: str) -> str:
    """The module's name now: an old name of kernels.MOVED is followed to the moved module."""
    package, _, rest = name.partition(".")
    if package == FACE and rest:
        first, _, tail = rest.partition(".")
        if first in kernels.MOVED:
            return ".".join(filter(None, [FACE, kernels.MOVED[first], tail]))
    return name


def is_module(name: str) -> bool:
    return canonical(name) in MODULES


def imports(name: str) -> set[str]:
    """The toolkit's modules that the module ``name`` imports, wherever in it the import is."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            # ``from a import b`` imports the module a.b when there is one, else a's name b.
            targets = [f"{source}.{alias.name}" if is_module(f"{source}.{alias.name}") else source
                       for alias in node.names]
        else:
            continue
        for target in targets:
            if target == FACE or target.startswith(FACE + "."):
                found.add(canonical(target))
    return {t for t in found if t in MODULES} - {name}


GRAPH = {name: imports(name) for name in MODULES}


def layer(name: str) -> int:
    """The module's place in kernels.LAYERS; the package's face is above them all."""
    if name == FACE:
        return len(kernels.LAYERS)
    top = name.split(".")[1]
    assert top in kernels.LAYERS, (f"{MODULES[name].relative_to(ROOT)} is in no layer: add "
                                   f"{top!r} to kernels.LAYERS, or move it into a layer")
    return kernels.LAYERS.index(top)


def test_every_module_is_in_a_layer():
    for name in MODULES:
        layer(name)


def test_the_layers_import_downwards_only():
    upward = [f"{MODULES[name].relative_to(ROOT)} ({kernels.LAYERS[layer(name)]}) imports "
              f"{target} ({'the package face' if target == FACE else kernels.LAYERS[layer(target)]})"
              for name, targets in GRAPH.items() if name != FACE
              for target in sorted(targets) if layer(target) > layer(name)]
    assert not upward, "imports of a higher layer (kernels.LAYERS, lowest first):\n" + "\n".join(
        upward)


def test_no_import_cycle():
    """Imports inside functions count: a cycle through them still ties the modules together."""
    state, cycles = {}, []

    def visit(name, stack):
        state[name] = "open"
        stack.append(name)
        for target in sorted(GRAPH[name]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_graph_sees_relative_late_and_old_name_imports():
    """The parser itself: what the checks above stand on."""
    assert "kernels.build.loader" in GRAPH["kernels.ops.operators"]  # inside build(), relative
    assert "kernels.losses" in GRAPH["kernels.build.codegen"]  # inside loss_list(), two dots
    assert "kernels.measure.bench" in GRAPH["kernels.course.chapter"]  # from ..measure import
    assert canonical("kernels.bench") == "kernels.measure.bench"
    assert not any(t.startswith("kernels.ops") for t in GRAPH["kernels.build.loader"])


def test_no_module_is_longer_than_400_lines_without_a_reason():
    long = []
    for name, path in MODULES.items():
        lines = len(path.read_text().splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and LONG_REASON not in doc:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not long, (f"modules over {MAX_LINES} lines: split them, or say why in the first "
                      f"docstring (a sentence with {LONG_REASON!r}):\n" + "\n".join(long))


@pytest.mark.parametrize("top", kernels.LAYERS)
def test_every_package_says_what_it_holds_and_may_import(top):
    init = PACKAGE / top / "__init__.py"
    path = init if init.exists() else PACKAGE / f"{top}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert "kernels.LAYERS" in doc, f"{path.relative_to(ROOT)}: its docstring names no layer"


# --- the old names ------------------------------------------------------------------------------

def notebook_names() -> set[str]:
    """Every ``kernels.<...>`` name the notebooks' code imports, and the attributes it reads of
    the toolkit's modules (``kernels.bench.time_ms``, or ``bench.time_ms`` after ``from kernels
    import bench``; a name the notebook assigns to is left out)."""
    names = set()
    for notebook in sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]):
        trees = []
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                             for line in "".join(cell["source"]).splitlines())
            try:
                trees.append(ast.parse(code))
            except SyntaxError:
                continue
        nodes = [node for tree in trees for node in ast.walk(tree)]
        local = {FACE: FACE}  # a name in the notebook -> the toolkit's dotted name it stands for
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == FACE:
                        names.add(a.name)
                        local[a.asname or FACE] = a.name if a.asname else FACE
            elif isinstance(node, ast.ImportFrom) and not node.level and \
                    node.module.split(".")[0] == FACE:
                for a in node.names:
                    names.add(f"{node.module}.{a.name}")
                    local[a.asname or a.name] = f"{node.module}.{a.name}"
        assigned = {node.id for node in nodes
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
        for node in nodes:
            if not isinstance(node, ast.Attribute):
                continue
            chain = []
            while isinstance(node, ast.Attribute):
                chain.append(node.attr)
                node = node.value
            if isinstance(node, ast.Name) and node.id in local and node.id not in assigned:
                names.add(".".join([local[node.id], *reversed(chain)]))
    return names


NOTEBOOK_NAMES = sorted(notebook_names())


def test_the_notebooks_use_old_names():
    """The collection works: the notebooks import modules by the names they had (kernels.MOVED)."""
    assert {"kernels.notebook.show_source", "kernels.cross_entropy.cross_entropy",
            "kernels.bench.time_ms", "kernels.operators.build"} <= set(NOTEBOOK_NAMES)


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_every_name_the_notebooks_use_still_resolves(name):
    parts = name.split(".")
    for stop in range(len(parts), 0, -1):  # the longest prefix that imports, then attributes
        try:
            found = importlib.import_module(".".join(parts[:stop]))
            break
        except ModuleNotFoundError:
            continue
    for attribute in parts[stop:]:
        found = getattr(found, attribute)


@pytest.mark.parametrize("old", sorted(kernels.MOVED))
def test_an_old_name_is_the_moved_module_itself(old, monkeypatch):
    moved = importlib.import_module(f"kernels.{kernels.MOVED[old]}")
    assert importlib.import_module(f"kernels.{old}") is moved
    assert getattr(kernels, old) is moved and sys.modules[f"kernels.{old}"] is moved
    assert moved.__name__ == f"kernels.{kernels.MOVED[old]}"
    assert moved.__spec__.name == moved.__name__
    monkeypatch.setattr(f"kernels.{old}.MONKEYPATCHED", True, raising=False)
    assert moved.MONKEYPATCHED


def test_the_face_imports_no_pytorch_and_the_modules_run_with_dash_m():
    """The book's build has no PyTorch: ``import kernels`` must not need it. ``python -m``
    runs the modules by their new names (tools/gpu_run.sh, ranks.launch) without a warning."""
    check = "import sys, kernels; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", check], cwd=ROOT, check=True)
    done = subprocess.run([sys.executable, "-W", "error", "-m", "kernels.course.book"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert done.stdout.split()[0].endswith(".ipynb") and not done.stderr


def test_a_build_runs_the_hook_the_operators_installed():
    """The loader calls no operator: the ops package appended its registration to ON_BUILD."""
    from kernels.build import loader

    assert [hook.__module__ for hook in loader.ON_BUILD] == ["kernels.ops"]
