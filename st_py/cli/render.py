"""How the command line shows results: plain lines, tables, JSON and CSV.

Names are data: nothing user-given is ever read as rich markup.
"""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from st_py.core.units import human_bytes, when

# Names are data: record and file names may hold "[", "]" or anything else,
# so nothing user-given is ever read as rich markup or highlighted; colour
# comes from explicit styles (say()). Lines are never wrapped (soft_wrap):
# a long path piped to a file stays one line.
console = Console(markup=False, highlight=False, soft_wrap=True)


FORMATS = ("table", "json", "csv")


def say(*parts: str | tuple[str, str], err: bool = False) -> None:
    """Print one line made of plain strings and ``(text, style)`` pairs;
    no part is read as markup (names are data)."""
    line = Text()
    for p in parts:
        line.append(*(p if isinstance(p, tuple) else (p,)))
    (Console(stderr=True, markup=False, highlight=False) if err else console).print(line, soft_wrap=True)


def _plain(v):
    """A value JSON and CSV can carry: SQL decimals that are whole (DuckDB's
    sum of integers) as ints, other decimals as floats, bytes as hex."""
    import decimal

    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return v


def emit(
    rows: list[dict],
    fmt: str,
    title: str | None = None,
    sizes: tuple[str, ...] = (),
    right: tuple[str, ...] = (),
    times: tuple[str, ...] = (),
) -> None:
    """Print ``rows`` (plain dicts with the same keys) as a table, JSON or
    CSV. ``sizes`` are byte counts and ``times`` unix times (seconds):
    human-readable in a table (``1.5 KiB``; ``01:23:45 (in 3 min)``),
    exact numbers in JSON and CSV."""
    rows = [{k: _plain(v) for k, v in r.items()} for r in rows]
    if fmt == "json":
        import json

        click.echo(json.dumps(rows, indent=1, default=str))
        return
    if fmt == "csv":
        import csv

        if rows:
            w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        return
    if not rows:  # no table, and no empty line either
        if title:
            click.echo(title)
        return
    cols = list(rows[0])
    cells = [
        [
            ""
            if r[c] is None
            else human_bytes(r[c])
            if c in sizes and isinstance(r[c], int)
            else when(r[c])
            if c in times and isinstance(r[c], (int, float)) and not isinstance(r[c], bool)
            else f"{r[c]:,}"
            if isinstance(r[c], int) and not isinstance(r[c], bool)
            else str(r[c])
            for c in cols
        ]
        for r in rows
    ]
    justify = ["right" if c in sizes or c in right else "left" for c in cols]
    if not console.is_terminal:  # piped: plain columns, one line per row, whatever the width
        click.echo(plain_table(cols, cells, justify, title))
        return
    natural = max(len(line) for line in plain_table(cols, cells, justify).splitlines())
    if natural > console.width:  # too wide to read folded: one block per row, a field per line (psql's \x)
        if title:
            console.print(Text(title))
        for i, row in enumerate(cells):
            if len(cells) > 1:
                console.print(Text(f"-[ {i + 1} of {len(cells)} ]-", style="dim"))
            block = Table(box=None, show_header=False, padding=(0, 1, 0, 0))
            block.add_column(style="bold", no_wrap=True)
            block.add_column(overflow="fold")
            for col, v in zip(cols, row):
                block.add_row(Text(col), Text(v))
            console.print(block)
        return
    tab = Table(title=Text(title) if title else None, box=None)
    for col, j in zip(cols, justify):
        tab.add_column(Text(col), justify=j, overflow="fold")  # type: ignore[arg-type]
    for row in cells:  # cells as Text: a name like "run[bold]2" is shown as it is
        tab.add_row(*[Text(v) for v in row])
    console.print(tab)


def plain_table(cols: list[str], cells: list[list[str]], justify: list[str], title: str | None = None) -> str:
    """A table as plain text for pipes and files: a header line, then one
    line per row, columns two spaces apart and as wide as their widest cell
    (never wrapped or cut), no trailing spaces; ``title`` first if given.
    Line breaks and tabs inside a cell are shown as ``\\n`` and ``\\t``."""
    cells = [[v.replace("\n", "\\n").replace("\t", "\\t") for v in row] for row in cells]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if j == "right" else v.ljust(w) for v, w, j in zip(values, widths, justify)
        ).rstrip()

    return "\n".join(([title] if title else []) + [line(cols)] + [line(row) for row in cells])


def fail(message: str, status: int = 2) -> None:
    """A user's error: one line on stderr, exit ``status``, no traceback."""
    say(("error:", "red"), f" {message}", err=True)
    sys.exit(status)
