"""The layers of the durability tools (docs/architecture.md): in
st_tools.dataloss and st_tools.reliability, model <- simulation <- stats <-
analysis <- report <- cli; a layer imports only those below it, never the
package face (which re-exports them all), and reliability uses dataloss's
model and simulation only."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import parse_python

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("model", "simulation", "stats", "analysis", "report", "cli")
TOOLS = ("dataloss", "reliability")


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(parse_python(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_tool_layers_import_downwards():
    bad = []
    for tool in TOOLS:
        for i, layer in enumerate(LAYERS):
            path = ROOT / "st_tools" / tool / f"{layer}.py"
            if not path.exists():
                continue
            allowed = {f"st_tools.{tool}.{low}" for low in LAYERS[:i]}
            if tool == "reliability":
                allowed |= {"st_tools.dataloss.model", "st_tools.dataloss.simulation"}
            for name in _imports(path):
                if not name.startswith("st_tools.") or name.startswith("st_tools.reporting"):
                    continue
                if name.count(".") < 2 or not any(name == a or name.startswith(a + ".") for a in allowed):
                    bad.append(f"st_tools/{tool}/{layer}.py imports {name}")
    assert not bad, "\n".join(bad)


def test_the_package_faces_keep_the_old_names():
    from st_tools import dataloss as dl
    from st_tools import reliability as rl

    for name in dl.__all__:
        assert hasattr(dl, name), name
    for name in rl.__all__:
        assert hasattr(rl, name), name
