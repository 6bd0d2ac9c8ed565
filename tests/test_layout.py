"""The package layout of docs/architecture.md, enforced: st_py's layers
(core <- wire <- client <- maintenance <- deploy <- cli) import one way; the
tracker sits on the core and the wire only; nothing in st_py imports the
analysis integrations or the tools; the public paths keep working."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import parse_python

ROOT = Path(__file__).resolve().parent.parent

# The layers of st_py, bottom up (docs/architecture.md, "The client package
# by role"): a layer imports only the layers below it. st_py.errors, the
# generated stubs (st_py._proto) and the native extension sit below them all.
LAYERS = ["st_py.core", "st_py.wire", "st_py.client", "st_py.maintenance", "st_py.deploy", "st_py.cli"]
ABOVE_ST_PY = ("st_tools", "st_integrations")
CLIENT_ONLY = ("st_py.client", "st_py.maintenance", "st_py.deploy", "st_py.cli")

# module prefix -> prefixes it must not import
RULES: dict[str, tuple[str, ...]] = {}
for i, layer in enumerate(LAYERS):
    # the local cluster (deploy) starts tracker processes and checks the
    # tracker's lock; nothing else below the CLI reaches into the tracker
    tracker = () if layer in ("st_py.deploy", "st_py.cli") else ("st_py.tracker",)
    RULES[layer] = tuple(LAYERS[i + 1 :]) + tracker + ABOVE_ST_PY
# the tracker daemon sits on the core and the wire only
RULES["st_py.tracker"] = CLIENT_ONLY + ABOVE_ST_PY
RULES["st_py.errors"] = ("st_py.core", "st_py.wire", "st_py.tracker") + CLIENT_ONLY + ABOVE_ST_PY
# nothing in st_py reaches the layers above it, even inside a function:
# optional features are found through entry points (st_py.core.extras)
RULES["st_py"] = ABOVE_ST_PY
RULES["st_integrations"] = ("st_py.tracker", "st_py.deploy", "st_py.cli", "st_py.maintenance", "st_tools")
# command plugins (entry-point group storetorrent.commands) sit on the CLI
PLUGINS = ("st_integrations.commands", "st_tools.commands")
# the thin modules at public paths that moved (their docstrings say where to)
PUBLIC_PATHS = {
    "st_py.cluster": "st_py.deploy.cluster",
    "st_py.repair": "st_py.maintenance.repair",
    "st_py.tls": "st_py.wire.tls",
    "st_py.capability": "st_py.core.capability",
}


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
    tree = parse_python(path.read_text(), str(path))
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
        if module in PUBLIC_PATHS:
            continue  # a thin module re-exporting its new place
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
    p.write_text("from ..client.file import StFile\nfrom ..errors import BadNameError\n")
    found = list(_imports("st_py.tracker.service", p, False))
    assert ("st_py.client.file", 1) in found and ("st_py.errors", 2) in found
    bad = [t for t, _ in found if any(_matches(t, f) for f in RULES["st_py.tracker"])]
    assert bad == ["st_py.client.file", "st_py.client.file.StFile"]
    # a lower layer importing an upper one, relatively or not, inside a function too
    q = tmp_path / "infofile.py"
    q.write_text("def f():\n    from ..client import reader\n    import st_py.maintenance.repair\n")
    found = list(_imports("st_py.core.infofile", q, False))
    assert ("st_py.client.reader", 2) in found and ("st_py.maintenance.repair", 3) in found
    assert all(any(_matches(t, f) for f in RULES["st_py.core"]) for t, _ in found)


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
        "assert st_py.Client.__module__ == 'st_py.client.client'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_layers_above_register_their_commands():
    """demo and sql come from st_tools and st_integrations through entry
    points (st_py.core.extras), as does status's durability model."""
    from st_py.core import extras

    assert {"demo", "sql"} <= set(extras.names(extras.COMMANDS))
    from st_py.cli import cli

    assert {"demo", "sql", "put", "status"} <= set(cli.list_commands(None))  # type: ignore[arg-type]
    assert callable(extras.load(extras.DURABILITY, "cluster"))
    assert extras.load(extras.COMMANDS, "no-such-command") is None


def test_every_st_py_module_is_in_a_layer():
    """A new module lands in a layer's folder (or is the face, errors, or a
    public path's thin module), so the rules above cover it."""
    loose = []
    for module, _path, _ in _modules():
        if not module.startswith("st_py.") or module.startswith("st_py.tracker"):
            continue
        if module in PUBLIC_PATHS or module in ("st_py.errors",):
            continue
        if not any(_matches(module, layer) for layer in LAYERS):
            loose.append(module)
    assert not loose, loose


def test_the_public_paths_still_work():
    """The paths users and the docs name keep working, with no warning
    (docs/architecture.md, "Public paths"): the face, st_py.errors, the thin
    modules at the old paths, the ``python -m`` commands and the entry point."""
    import subprocess
    import sys

    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "import importlib, st_py, st_py.errors\n"
        "from st_py import Client, create, open, StFile, StoreTorrentError, RecordNotFoundError\n"
        "from st_py.client import Client as C2\n"
        "assert C2 is Client\n"
        "from st_py.cluster import LocalCluster\n"
        "from st_py import repair\n"
        "from st_py.tls import make_local_ca\n"
        "from st_py.cli import main, cli\n"
        "for old, new in " + repr(PUBLIC_PATHS) + ".items():\n"
        "    o, n = importlib.import_module(old), importlib.import_module(new)\n"
        "    for name in dir(n):\n"
        "        if not name.startswith('_') and getattr(n, name).__class__.__name__ in ('function', 'type'):\n"
        "            assert getattr(o, name) is getattr(n, name), (old, name)\n"
        "assert LocalCluster.__module__ == 'st_py.deploy.cluster'\n"
        "assert repair.repair.__module__ == 'st_py.maintenance.repair'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    for module in ("st_py.capability", "st_py.tracker", "st_py.cli"):
        r = subprocess.run(
            [sys.executable, "-W", "error", "-m", module, "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert r.returncode == 0 and "usage" in r.stdout.lower(), (module, r.stdout, r.stderr)
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "storetorrent"]
    assert ep.value == "st_py.cli:main"
    assert ep.load() is __import__("st_py.cli", fromlist=["main"]).main


# -- one owner of the infofile's SQL on the client side ---------------------------
INFOFILE_SQL = re.compile(
    r"\b(FROM|JOIN|INTO|UPDATE)\s+(records|copies|pending_copies|objects|record_history|object_history|"
    r"retained_copies|retained_unstored|copy_history|snapshots)\b"
)
INFOFILE_SQL_OWNERS = ("st_py.core.infofile", "st_py.core.history")


def _infofile_sql(path: Path) -> list[str]:
    """The string constants of ``path`` that read or write an infofile table."""
    tree = parse_python(path.read_text(), str(path))
    return [
        f"{node.lineno}: {node.value.strip()[:60]}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and INFOFILE_SQL.search(node.value)
    ]


def test_only_the_infofile_readers_hold_sql_over_its_tables():
    """On the client side (st_py outside the tracker, the integrations), SQL
    over the infofile's tables lives in st_py.core.infofile and
    st_py.core.history (docs/infofile.md): a schema change has one place to
    go, and S3's versions, a multipart retry's past versions and a version
    id are the snapshots' answers, not copies of them."""
    found = []
    for module, path, _ in _modules():
        if module.startswith(("st_py.tracker", "st_tools")) or module in INFOFILE_SQL_OWNERS:
            continue
        found += [f"{module}:{hit}" for hit in _infofile_sql(path)]
    assert not found, "SQL over infofile tables outside its readers:\n" + "\n".join(found)


def test_the_infofile_sql_rule_finds_a_query(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('q = "SELECT commit_seq FROM record_history WHERE name = ?"\nr = "FROM records_data"\n')
    assert [h.split(":")[0] for h in _infofile_sql(sample)] == ["1"]
