"""The walk-through notebook runs top to bottom against a real cluster."""

import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "walkthrough.ipynb"


@pytest.mark.slow
def test_walkthrough_notebook_executes(tmp_path, peer_bin):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    os.environ["ST_NOTEBOOK_DATA"] = str(tmp_path / "nb")
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOK.parent.parent)}}).execute()
    finally:
        os.environ.pop("ST_NOTEBOOK_DATA", None)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
