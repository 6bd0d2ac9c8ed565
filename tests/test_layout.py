"""The package layout of docs/architecture.md, enforced: imports go one way
(client library <- local cluster <- CLI; the tracker uses no client code;
nothing in the core imports the analysis integrations or the tools)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CLIENT_ONLY = (
    "st_py.client",
    "st_py.file",
    "st_py.transport",
    "st_py.getlocal",
    "st_py.tracker_client",
    "st_py.rebalance",
    "st_py.locate",
)
TOP = ("st_py.cluster", "st_py.cli", "st_tools")
ENGINES = ("st_integrations",)

# module prefix -> prefixes it must not import
RULES = {
    "st_py.tracker": CLIENT_ONLY + TOP + ENGINES,
    "st_py.cluster": ("st_py.cli", "st_tools") + ENGINES,
    "st_py.supervisor": ("st_py.cli", "st_tools") + ENGINES,  # the local cluster's, as cluster
    "st_integrations": ("st_py.tracker", "st_py.cluster", "st_py.cli", "st_tools"),
    # the CLI is the core's top, and still below the tools and the engines: what
    # they add to it (demo, sql, the durability model) they register as entry
    # points (st_py/extras.py)
    "st_py.cli": ("st_tools",) + ENGINES,
}
# command plugins (entry-point group storetorrent.commands) sit on the CLI
PLUGINS = ("st_integrations.commands", "st_tools.commands")
CORE = [
    m
    for m in (p.stem for p in (ROOT / "st_py").glob("*.py"))
    if m not in ("cluster", "supervisor", "cli", "__init__", "__main__")
]
for m in CORE:
    RULES[f"st_py.{m}"] = ("st_py.tracker",) + TOP + ENGINES


def _modules():
    for base, pkg in ((ROOT, "st_py"), (ROOT, "st_tools"), (ROOT / "integrations", "st_integrations")):
        for path in sorted((base / pkg).rglob("*.py")):
            if "_proto" in path.parts:
                continue
            rel = path.relative_to(base).with_suffix("")
            parts = list(rel.parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts = parts[:-1]
            yield ".".join(parts), path, is_pkg


def _imports(module: str, path: Path, is_pkg: bool):
    tree = ast.parse(path.read_text())
    package = module if is_pkg else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, node.lineno
            for a in node.names:  # "from . import x" imports module x
                yield f"{target}.{a.name}", node.lineno


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_imports_go_one_way():
    bad = []
    checked = 0
    for module, path, is_pkg in _modules():
        rules = [forbidden for prefix, forbidden in RULES.items() if _matches(module, prefix)]
        if module in PLUGINS:
            rules = [tuple(f for f in forbidden if f != "st_py.cli") for forbidden in rules]
        for target, line in _imports(module, path, is_pkg):
            for forbidden in rules:
                hit = [f for f in forbidden if _matches(target, f)]
                if hit:
                    bad.append(f"{path.relative_to(ROOT)}:{line} {module} imports {target}")
            checked += 1
    assert checked > 100
    assert not bad, "\n".join(bad)


def test_the_rules_catch_a_bad_import(tmp_path):
    """The checker itself: a tracker module importing client code is caught."""
    p = tmp_path / "service.py"
    p.write_text("from ..file import StFile\nfrom ..errors import BadNameError\n")
    found = list(_imports("st_py.tracker.service", p, False))
    assert ("st_py.file", 1) in found and ("st_py.errors", 2) in found
    assert any(_matches(t, f) for t, _ in found for f in RULES["st_py.tracker"])


def test_the_tracker_loads_no_client_code():
    """The tracker daemon imports st_py.<module>s; the package's lazy
    attributes (st_py.Client, ...) must not pull the client library in."""
    import subprocess
    import sys

    code = (
        "import sys, st_py.tracker.server, st_py.tracker.service\n"
        "loaded = sorted(m for m in sys.modules if m in " + repr(CLIENT_ONLY) + ")\n"
        "assert not loaded, loaded\n"
        "import st_py\n"
        "assert st_py.Client.__module__ == 'st_py.client'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_layers_above_register_their_commands():
    """demo and sql come from st_tools and st_integrations through entry
    points (st_py.extras), as does status's durability model."""
    from st_py import extras

    assert {"demo", "sql"} <= set(extras.names(extras.COMMANDS))
    from st_py.cli import cli

    assert {"demo", "sql", "put", "status"} <= set(cli.list_commands(None))  # type: ignore[arg-type]
    assert callable(extras.load(extras.DURABILITY, "cluster"))
    assert extras.load(extras.COMMANDS, "no-such-command") is None
