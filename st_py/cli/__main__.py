"""``python -m st_py.cli``: the ``storetorrent`` command line."""

from st_py.cli import main

main()
