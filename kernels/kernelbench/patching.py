"""The static check of a program that replaces or wraps functions of ``torch``,
``torch.nn.functional`` or ``torch.Tensor``, by any route the source shows: assignment (through
an alias too: ``T = torch.Tensor; T.mean = ...``), ``vars(torch)[...]``, ``torch.__dict__``,
``setattr`` (or an alias of it, or ``object.__setattr__``), and decorators that take a function
of PyTorch (``@functools.wraps(torch.mean)``, ``@replace(torch.mean)``).

A second line only: an isolated evaluation (:mod:`.trusted`) computes every reference in a
process the program never reaches, and its "PyTorch unchanged" check sees what was replaced
whatever the route; this one names the line where the source shows it.
"""

from __future__ import annotations

import ast

SETATTR = {"setattr", "__setattr__"}
DICT_WRITES = {"update", "setdefault", "__setitem__", "pop", "__delitem__"}
WHY = ("replaces or wraps PyTorch's `{}`: a program must not change the library it is checked "
       "and timed against")


def _parts(node) -> list:
    """``torch.nn.functional`` -> ["torch", "nn", "functional"]; [] for anything but names."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return [node.id, *names[::-1]] if isinstance(node, ast.Name) else []


class _Routes:
    """The source's names for PyTorch's modules and classes, their namespaces' dicts, and setattr."""

    def __init__(self, tree, torch_names):
        self.torch, self.dicts, self.setattrs = set(torch_names), set(), {"setattr"}
        assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
        for _ in range(3):  # aliases of aliases
            for node in assigns:
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                if self.rooted(node.value):
                    self.torch |= names
                elif self.namespace(node.value):
                    self.dicts |= names
                elif self.is_setattr(node.value):
                    self.setattrs |= names

    def rooted(self, node) -> bool:
        """A module or class of PyTorch, or one of its attributes: ``torch``, ``F.mse_loss``,
        ``getattr(torch, "Tensor")``, ``sys.modules["torch"]``."""
        if isinstance(node, ast.Call) and _parts(node.func)[-1:] == ["getattr"] and node.args:
            return self.rooted(node.args[0])
        if isinstance(node, ast.Subscript) and _parts(node.value)[-1:] == ["modules"]:
            key = node.slice
            return isinstance(key, ast.Constant) and str(key.value).startswith("torch")
        if isinstance(node, ast.Attribute):
            return node.attr != "__dict__" and self.rooted(node.value)
        return isinstance(node, ast.Name) and node.id in self.torch

    def namespace(self, node) -> bool:
        """The dict behind a PyTorch namespace: ``vars(torch)``, ``torch.__dict__``, an alias."""
        if isinstance(node, ast.Call) and _parts(node.func) == ["vars"] and node.args:
            return self.rooted(node.args[0])
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return self.rooted(node.value)
        if isinstance(node, ast.Call) and _parts(node.func)[-1:] == ["getattr"] and len(node.args) > 1:
            key = node.args[1]
            return isinstance(key, ast.Constant) and key.value == "__dict__" and self.rooted(node.args[0])
        return isinstance(node, ast.Name) and node.id in self.dicts

    def is_setattr(self, node) -> bool:
        parts = _parts(node)
        return bool(parts) and (parts[-1] in SETATTR or parts[0] in self.setattrs)

    def named(self, node) -> str:
        parts = _parts(node)
        return ".".join(parts) if parts else ast.unparse(node)[:40]


def patch_findings(tree, torch_names) -> list[tuple[ast.AST, str]]:
    """(node, why) for every place the source replaces or wraps a function of PyTorch."""
    routes, found = _Routes(tree, torch_names), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and routes.rooted(target.value):
                    found.append((node, WHY.format(routes.named(target))))
                elif isinstance(target, ast.Subscript) and routes.namespace(target.value):
                    found.append((node, WHY.format(ast.unparse(target)[:40])))
        elif isinstance(node, ast.Call):
            func = node.func
            if routes.is_setattr(func) and node.args and routes.rooted(node.args[0]):
                found.append((node, WHY.format(ast.unparse(node)[:40])))
            elif isinstance(func, ast.Attribute) and func.attr in DICT_WRITES and routes.namespace(func.value):
                found.append((node, WHY.format(ast.unparse(node)[:40])))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:
                args = decorator.args + [k.value for k in decorator.keywords] \
                    if isinstance(decorator, ast.Call) else []
                for arg in args:
                    if len(_parts(arg)) > 1 and routes.rooted(arg):
                        found.append((decorator, WHY.format(routes.named(arg))))
    return found
