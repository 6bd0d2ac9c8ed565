"""No private reach across modules (issue 30, item 3): a module uses only
the public names of another module's objects. Checked statically with
``ast``: an attribute ``x._name`` where ``x`` is not ``self``/``cls`` and
``_name`` is not defined in the same module, and any ``from m import
_name``. What remains is listed below with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import parse_python

ROOT = Path(__file__).resolve().parent.parent

# modules whose names start with _: the C++ extension and the generated gRPC code
MODULES = ("_native", "_proto")

# (path, the expression or import) -> why it may stay
ALLOWED = {
    ("integrations/st_integrations/fsspec_resources.py", "r._f"): (
        "which StFile an ObjectReader (st_py/client/striping.py) reads through, to keep that handle open: "
        "becomes public when issue 30 item 2 recomposes StFile's parts"
    ),
}


def _own_names(tree: ast.AST) -> set[str]:
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            own.update(
                e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
    return own


def reaches(path: Path, source: str) -> list[str]:
    """The private reaches of one module's ``source``: expressions and imports."""
    tree = parse_python(source)
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__") and a.name not in MODULES:
                    found.append(f"import {a.name} from {node.module or ''}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr not in own:
                found.append(ast.unparse(node))
    return found


def _bad() -> list[str]:
    from helpers import library_files

    bad = []
    for rel, path in library_files():
        for expr in reaches(path, path.read_text()):
            if (rel, expr) not in ALLOWED:
                bad.append(f"{rel}: {expr}")
    stale = [
        f"stale allow-list entry (remove it): {k}"
        for k in ALLOWED
        if k[1] not in reaches(ROOT / k[0], (ROOT / k[0]).read_text())
    ]
    return sorted(set(bad)) + stale


def test_no_module_reaches_into_another_modules_private_names():
    bad = _bad()
    assert not bad, "private names of another module used:\n" + "\n".join(bad)


def test_the_checker_finds_a_private_reach():
    src = (
        "from .x import _helper\n"
        "class A:\n"
        "    def f(self, o):\n"
        "        self._mine = 1\n"
        "        return o._theirs + o._mine\n"
    )
    assert reaches(Path("m.py"), src) == ["import _helper from x", "o._theirs"]
