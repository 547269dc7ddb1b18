"""Static checks of a ModelNew's Python source, as KernelBench's ``kernel_static_checker.py`` and
the public leaderboards do before they run anything: patterns an honest kernel has no use for.

Each finding names the line. A *failure* fails the evaluation; a *warning* becomes a note:

- failure: ``forward`` calls one of PyTorch's losses or reductions (``F.mse_loss``,
  ``torch.mean``, ``x.sum()``, ...) on the inputs, or on a value computed from them with
  PyTorch: the library does the work, not a kernel;
- failure: ``forward`` rounds the inputs to half precision (``.half()``, ``.to(torch.bfloat16)``):
  half the bytes, and an answer that is only as close as the rounding;
- failure: ``forward`` catches exceptions (a kernel that fails must fail the trial, not fall back);
- failure: the source starts threads or processes, assigns to an attribute of a module
  (``torch.cuda.synchronize = ...``: timing and checks read those), imports what reaches into
  the validator (``kernels``, ``gc``, ``inspect``, ``ctypes``), or reaches another frame or a
  hidden import (``sys._getframe``, ``f_back``, ``__globals__``, ``__import__``, ...);
- warning: the source creates CUDA streams (legitimate if the current stream waits for them: the
  timing's stream check decides).

What a kernel allocates (``torch.empty``), views (``.view``, ``.contiguous``), or calls through a
compiled extension is never flagged. These checks read Python only: a CUDA source is beyond
them, which is why the dynamic checks (coverage, fresh inputs, the stream check) decide.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
from dataclasses import dataclass

from .patching import patch_findings

REDUCTIONS = {
    "mean", "sum", "nansum", "nanmean", "logsumexp", "log_softmax", "softmax", "norm", "dot",
    "vdot", "einsum", "std", "var", "prod", "cumsum", "cross_entropy", "nll_loss", "mse_loss",
    "smooth_l1_loss", "huber_loss", "l1_loss", "hinge_embedding_loss", "soft_margin_loss",
    "margin_ranking_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
}
HALF_TYPES = {"half", "float16", "bfloat16"}
THREADS = {"threading", "_thread", "concurrent", "multiprocessing", "asyncio"}
REACHING = {"kernels", "gc", "inspect", "ctypes"}
STREAMS = {"Stream", "stream", "ExternalStream"}
TORCH_ROOTS = {"torch", "F", "nn", "functional"}
# Ways to another frame's variables (the isolated child's nonce, the checks' references) or to a
# module the imports above do not show.
OUTSIDE = {"_getframe", "currentframe", "f_back", "f_locals", "f_globals", "tb_frame", "gi_frame",
           "cr_frame", "__globals__", "__import__", "import_module"}


@dataclass(frozen=True)
class Finding:
    """One pattern in the source: ``severity`` is "failure" or "warning"."""

    severity: str
    line: int
    code: str
    why: str

    def __str__(self) -> str:
        return f"line {self.line}: `{self.code}`: {self.why}"


def _chain(node) -> list[str]:
    """``torch.nn.functional.mse_loss`` -> ["torch", "nn", "functional", "mse_loss"]; a call or
    subscript in the chain keeps its root (``x.view(-1).sum`` -> ["x", "view", "sum"])."""
    names = []
    while True:
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            break
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Forward(ast.NodeVisitor):
    """The rules that concern ``forward``: which values derive from the inputs through PyTorch
    (the taint), and what is done to them."""

    def __init__(self, params, torch_names, lines, offset, found):
        self.tainted, self.torch_names = set(params), torch_names
        self.lines, self.offset, self.found = lines, offset, found

    def _add(self, node, why):
        line = node.lineno + self.offset
        code = self.lines[node.lineno - 1].strip() if node.lineno <= len(self.lines) else ""
        self.found.append(Finding("failure", line, code[:80], why))

    def _torch_rooted(self, chain) -> bool:
        if not chain or chain[0] not in self.torch_names:
            return False
        return not (len(chain) > 2 and chain[1] == "ops" and chain[2] != "aten")  # own ops are kernels

    def _derives(self, node) -> bool:
        """Whether a value comes from the inputs through PyTorch or Python operators only (a call
        of anything else, a compiled extension say, ends the taint)."""
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and self._derives(node.func.value):
                return True  # a method of a value from the inputs: x.view(-1), (p - t).abs()
            return self._torch_rooted(_chain(node.func)) and any(
                self._derives(a) for a in [*node.args, *[k.value for k in node.keywords]])
        return bool(_names(node) & self.tainted)

    def visit_Assign(self, node):
        if self._derives(node.value):
            for target in node.targets:
                self.tainted |= _names(target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):  # d: torch.Tensor = p - t
        if node.value is not None and self._derives(node.value):
            self.tainted |= _names(node.target)
        self.generic_visit(node)

    def visit_For(self, node):  # for d in (p - t,): the loop variable holds the inputs' values
        if self._derives(node.iter):
            self.tainted |= _names(node.target)
        self.generic_visit(node)

    def visit_Try(self, node):
        self._add(node, "catches exceptions: a kernel that fails must fail the trial, not fall "
                        "back to something else")
        self.generic_visit(node)

    def visit_Call(self, node):
        chain = _chain(node.func)
        name = chain[-1] if chain else ""
        on_input = isinstance(node.func, ast.Attribute) and self._derives(node.func.value)
        args = [*node.args, *[k.value for k in node.keywords]]
        if self._torch_rooted(chain) and name not in REDUCTIONS:  # torch.ops.aten.mean.default
            name = next((part for part in chain if part in REDUCTIONS), name)
        if name in REDUCTIONS and (on_input or (self._torch_rooted(chain)
                                                and any(self._derives(a) for a in args))):
            self._add(node, f"PyTorch's `{name}` over the inputs: the library does the work "
                            f"that the kernel should")
        elif on_input and (name in HALF_TYPES or (name == "to" and any(
                _chain(a)[-1:] and _chain(a)[-1] in HALF_TYPES for a in args))):
            self._add(node, "rounds the inputs to half precision: half the bytes read, and an "
                            "answer only as close as the rounding")
        self.generic_visit(node)


def _module_names(tree) -> set[str]:
    """The names the source binds to modules by importing them, and the usual ones."""
    names = {"torch", "time", "sys", "os", "kernels", "F"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_rules(tree, lines, offset, found):
    """Rules for the whole source: threads, patched modules, reaching into the validator, streams."""
    modules = _module_names(tree)

    def add(node, severity, why):
        code = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""
        found.append(Finding(severity, node.lineno + offset, code[:80], why))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in imported:
                root = module.split(".")[0]
                if root in THREADS:
                    add(node, "failure", f"imports {module}: threads or processes run work the "
                                         f"timing does not see")
                elif root in REACHING:
                    add(node, "failure", f"imports {module}: a ModelNew has no business with the "
                                         f"validator's memory or modules")
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                chain = _chain(target) if isinstance(target, ast.Attribute) else []
                if len(chain) > 1 and chain[0] in modules:
                    add(node, "failure", f"assigns to {'.'.join(chain)}: patching a module "
                                         f"(timers, synchronize) fools the measurement")
        elif isinstance(node, ast.Call):
            chain = _chain(node.func)
            if chain[-1:] == ["setattr"] and node.args and _chain(node.args[0])[:1] and \
                    _chain(node.args[0])[0] in modules:
                add(node, "failure", "setattr on a module: patching timers or checks fools them")
            elif chain[:1] == ["torch"] and chain[-1:] and chain[-1] in STREAMS:
                add(node, "warning", "creates a CUDA stream: its work counts only if the current "
                                     "stream waits for it (the timing checks)")
            elif chain[-1:] == ["fork"]:
                add(node, "failure", f"{'.'.join(chain)}: reaches outside the program")
        if isinstance(node, (ast.Attribute, ast.Name)) and \
                (node.attr if isinstance(node, ast.Attribute) else node.id) in OUTSIDE:
            add(node, "failure", f"uses {node.attr if isinstance(node, ast.Attribute) else node.id}: "
                                 f"reaches outside the program (another frame's variables, or a "
                                 f"module imported out of sight)")


def _torch_names(tree) -> set[str]:
    names = set(TORCH_ROOTS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname for a in node.names if a.asname and a.name.startswith("torch")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            names |= {a.asname or a.name for a in node.names}
    return names


class _Aliases(ast.NodeTransformer):
    """Write each use of an alias as what it names, so that the rules of ``forward`` see
    ``torch.mean(...)`` however it was spelled: ``avg = torch.mean; avg(x)``,
    ``G = torch.nn.functional; G.mse_loss(p, t)``, ``s = (p - t).sum; s()``,
    ``from torch.nn.functional import mse_loss as l; l(p, t)``, ``getattr(torch, "mean")(x)``.
    ``names``: alias -> the expression it stands for (see :func:`_aliases`)."""

    def __init__(self, names: dict):
        self.names, self.expanding = names, set()

    def visit_Name(self, node):
        if not isinstance(node.ctx, ast.Load) or node.id not in self.names \
                or node.id in self.expanding:  # a = b.x; b = a.y: expanded once, not forever
            return node
        self.expanding.add(node.id)
        named = self.visit(ast.parse(ast.unparse(self.names[node.id]), mode="eval").body)
        self.expanding.discard(node.id)
        for part in ast.walk(named):  # findings inside it name the line of the use
            ast.copy_location(part, node)
        return named

    def visit_Call(self, node):
        self.generic_visit(node)
        if _is_getattr(node):
            return ast.copy_location(ast.Attribute(node.args[0], node.args[1].value, ast.Load()),
                                     node)
        return node


def _is_getattr(node) -> bool:
    """``getattr(x, "constant")``: an attribute spelled as a call."""
    return (isinstance(node, ast.Call) and _chain(node.func) == ["getattr"] and len(node.args) == 2
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))


def _aliases(tree, function) -> dict:
    """alias -> what it names: the module's ``from torch... import x as y``, and the names
    ``function`` binds once to a name, an attribute (no call of its own) or a getattr. A name
    bound twice is left alone (which binding a use sees depends on the flow)."""
    names, bound = {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            for a in node.names:
                if a.asname and a.asname != a.name:
                    names[a.asname] = ast.parse(f"{node.module}.{a.name}", mode="eval").body
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.NamedExpr)):
            targets = [node.target]
        else:
            continue
        for name in set().union(*(_names(t) for t in targets)):
            bound[name] = bound.get(name, 0) + 1
            names.pop(name, None)  # bound here: no longer the module's import
        if isinstance(node, ast.Assign) and len(targets) == 1 and isinstance(targets[0], ast.Name) \
                and (isinstance(node.value, (ast.Name, ast.Attribute)) or _is_getattr(node.value)):
            names[targets[0].id] = node.value
    return {k: v for k, v in names.items() if bound.get(k, 0) <= 1}


def _without_aliases(tree, function):
    """A copy of ``function`` with its aliases written out (the tree itself is left as it is)."""
    return _Aliases(_aliases(tree, function)).visit(copy.deepcopy(function))


def _patch_rules(tree, lines, offset, found, torch_names):
    """Functions of PyTorch replaced or wrapped, by any route the source shows (:mod:`.patching`)."""
    for node, why in patch_findings(tree, torch_names):
        code = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""
        found.append(Finding("failure", node.lineno + offset, code[:80], why))


def check_source(source: str, offset: int = 0, torch_names: set | None = None,
                 patching: bool = False) -> list[Finding]:
    """The findings in a Python source (a whole ModelNew file, or one class's source); line
    numbers are the source's own plus ``offset``."""
    source = textwrap.dedent(source)
    tree = ast.parse(source)
    lines = source.splitlines()
    found: list[Finding] = []
    names = (torch_names or set()) | _torch_names(tree)
    _module_rules(tree, lines, offset, found)
    if patching:  # the trusted validator's rules only (evaluate_trusted); chapter 9's path has none
        _patch_rules(tree, lines, offset, found, names)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "forward":
            params = [a.arg for a in node.args.args[1:]] + [a.arg for a in node.args.kwonlyargs]
            if node.args.vararg:
                params.append(node.args.vararg.arg)
            visitor = _Forward(params, names, lines, offset, found)
            node = _without_aliases(tree, node)
            for statement in node.body:
                visitor.visit(statement)
    return sorted(set(found), key=lambda f: (f.line, f.why))


def check_model(model_new, patching: bool = False) -> tuple[list[Finding], str | None]:
    """The findings for a ModelNew given as source text, class or instance; and why the source
    could not be read, if it could not (then there are no findings: the dynamic checks decide)."""
    if isinstance(model_new, str):
        try:
            return check_source(model_new, patching=patching), None
        except SyntaxError as error:
            return [], f"the source does not parse ({error.msg}, line {error.lineno})"
    cls = model_new if isinstance(model_new, type) else type(model_new)
    try:
        source, first = inspect.getsourcelines(cls)
        return check_source("".join(source), offset=first - 1, patching=patching), None
    except (OSError, TypeError):
        pass
    found = []
    for name, member in vars(cls).items():  # a notebook's class: its methods' cells are readable
        if not inspect.isfunction(member):
            continue
        try:
            source, first = inspect.getsourcelines(member)
        except (OSError, TypeError):
            return [], f"the source of {cls.__name__}.{name} is not available"
        found += check_source("".join(source), offset=first - 1, patching=patching)
    return found, None
