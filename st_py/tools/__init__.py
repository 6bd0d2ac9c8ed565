"""Analysis tools for StoreTorrent (run with ``python -m st_py.tools.<name>``)."""
