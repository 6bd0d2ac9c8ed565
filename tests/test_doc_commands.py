"""Every ``storetorrent`` command line in the docs' shell blocks parses with
the CLI's own parser (a wrong flag or a missing required option fails here),
and docs/snapshots.md's block runs as written against a real cluster
(issue 38, item 11: its ``ls --as-of`` needed ``-r`` and its ``sql`` a
``--file``). The README's Python blocks: tests/test_readme.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from helpers import run_cli

from st_py.cli import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
SHELL = ("bash", "console", "sh", "shell", "")  # fences whose lines are commands; "" untyped


def command_lines(doc: Path) -> list[list[str]]:
    """The argv (after ``storetorrent``) of each command of ``doc``'s shell
    blocks: a ``$ `` prompt dropped, ``\\`` continuations joined, ``;``
    separating commands, ``#`` comments cut."""
    out = []
    for lang, body in re.findall(r"```([a-z]*)\n(.*?)```", doc.read_text(), flags=re.S):
        if lang not in SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            for part in line.split(";"):
                part = part.strip().removeprefix("$ ")
                if part.startswith("storetorrent "):
                    out.append(shlex.split(part, comments=True)[1:])
    return out


def parse(argv: list[str]) -> None:
    """Parse ``storetorrent ARGV`` as the CLI would, down to the command,
    without running it. Raises click.UsageError (unknown option or command,
    missing required option or argument, bad value)."""
    try:
        ctx = cli.make_context("storetorrent", list(argv))
        cmd: click.Command = cli
        while isinstance(cmd, click.Group):
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            if not rest:
                return
            name, sub, rest = cmd.resolve_command(ctx, rest)
            assert sub is not None and name is not None
            cmd, ctx = sub, sub.make_context(name, rest, parent=ctx)
    except click.exceptions.Exit as e:  # --version, --help
        assert e.exit_code == 0
    except click.BadParameter as e:  # a local path the reader has (put's ./shots/) parses
        if not (e.param is not None and isinstance(e.param.type, click.Path) and "does not exist" in e.message):
            raise


COMMANDS = [(doc.name, argv) for doc in DOCS for argv in command_lines(doc)]


def test_the_docs_have_command_lines():
    docs = {d for d, _ in COMMANDS}
    assert {"README.md", "snapshots.md", "operations.md", "analysis.md"} <= docs and len(COMMANDS) >= 30


@pytest.mark.parametrize("doc,argv", COMMANDS, ids=[f"{d}:{' '.join(a)[:60]}" for d, a in COMMANDS])
def test_a_doc_command_parses(doc, argv):
    parse(argv)


def test_a_wrong_command_line_fails_to_parse():
    with pytest.raises(click.UsageError):
        parse(["sql", "SELECT 1", "--as-of", "v1"])  # --file is required
    with pytest.raises(click.UsageError):
        parse(["ls", "/exp", "--no-such-flag"])


def test_the_snapshots_doc_runs_as_written(cluster):
    block = command_lines(ROOT / "docs" / "snapshots.md")[:5]
    assert [a[:2] for a in block] == [
        ["snapshot", "create"],
        ["snapshot", "ls"],
        ["ls", "-r"],
        ["sql", "SELECT count(*) FROM records"],
        ["snapshot", "delete"],
    ]
    c = cluster.client()
    with c.create("/exp/run1", "x2") as f:
        for i in range(5):
            f.put(f"shot-{i}", bytes([i]) * 100)

    def run(argv: list[str]) -> str:
        r = run_cli(cluster, *argv)
        assert r.returncode == 0, f"storetorrent {shlex.join(argv)}: {r.stderr}"
        return r.stdout

    run(block[0])  # snapshot create
    with c.open("/exp/run1") as f:  # the file moves on after the snapshot
        f.put("shot-5", b"new")
        f.delete("shot-0")
    assert "paper-v1" in run(block[1])
    assert run(block[2]).split() == [f"shot-{i}" for i in range(5)]
    assert "5" in run(block[3]).split()
    run(block[4])  # snapshot delete
    assert "paper-v1" not in run(block[1])
