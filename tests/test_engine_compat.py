"""The engine hooks of st_integrations.engine_compat against a real cluster
(tracker + 4 peers): Ray's two placements on a Ray of two nodes standing
for two hosts, Dask's scheduler plugin on workers named by the peers'
addresses, and each hook's fallback (an untested version, a hook point or a
task structure not as tested): the same answer and one WARNING line."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from analysis_data import N_PARTS, PARQUET_FILE, ROWS, parquet_part, plans_made, record_peers, source_frame
from helpers import sorted_rows, with_dask_worker

from st_integrations import engine_compat
from st_integrations.placement import PLACEMENTS, PlacementError, check_placement
from st_py.errors import InvalidOptionError

FILE = PARQUET_FILE
LOGGER = "st.engine_compat"


class _PeersOfFirstPlan(dict):
    """``{"/file/record": peer}`` of the first scan plan the test's read
    made (Ray's or Dask's), filled when first asked: the read is checked
    against the plan it used, as plans_made says why."""

    def __init__(self, *plan_lists: list):
        super().__init__()
        self._plan_lists = plan_lists

    def __missing__(self, path: str) -> str:
        if not self:
            firsts = [plans[0] for plans in self._plan_lists if plans]
            assert len(firsts) == 1, f"{len(firsts)} readers made a plan; one read was expected"
            self.update(record_peers(firsts[0]))
            if path in self:
                return dict.__getitem__(self, path)
        raise KeyError(path)


@pytest.fixture
def peer_of(monkeypatch) -> dict[str, str]:
    from st_integrations import dask_reader, ray_reader

    return _PeersOfFirstPlan(plans_made(monkeypatch, ray_reader), plans_made(monkeypatch, dask_reader))


@pytest.fixture
def fresh_warnings(monkeypatch, caplog):
    """The once-per-process warnings forgotten for this test, and captured."""
    monkeypatch.setattr(engine_compat, "_warned", set())
    caplog.set_level(logging.WARNING, logger=LOGGER)
    return caplog


def _compat_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def _check_answer(df):
    assert len(df) == N_PARTS * ROWS
    pd.testing.assert_frame_equal(
        sorted_rows(df[["part", "row", "x", "k"]], "part", "row"), source_frame(), check_dtype=False
    )


# -- the table and the placement values ---------------------------------------
def test_one_table_holds_the_pinned_engine_versions():
    """The versions pyproject.toml pins are the tested ones, and the running
    engines are among them (so the hooks are on in this test run)."""
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    pins = dict(re.findall(r'"(ray|dask)\[[^\]]*\]==([^"]+)"', text))
    assert set(pins) == {"ray", "dask"}
    assert set(engine_compat.TESTED) == {"ray", "dask", "distributed"}
    assert pins["ray"] in engine_compat.TESTED["ray"]
    assert pins["dask"] in engine_compat.TESTED["dask"]
    for package in engine_compat.TESTED:
        pytest.importorskip(package)
        assert engine_compat.untested(package) is None, package


def test_an_unknown_placement_is_a_value_error_naming_the_values():
    from st_integrations.ray_reader import read_storetorrent

    assert PLACEMENTS == ("auto", "task", "node")
    assert check_placement("node") == "node"
    # raised before the tracker is asked (nothing listens on port 9)
    for bad in ("nodes", "Task", "", None):
        with pytest.raises(ValueError, match=r"'auto', 'task', 'node'") as e:
            read_storetorrent(FILE, tracker="127.0.0.1:9", placement=bad)
        assert isinstance(e.value, InvalidOptionError) and e.value.option == "placement"


def test_a_run_spec_of_another_shape_is_reported_not_walked():
    pytest.importorskip("dask")
    from dask._task_spec import DataNode, Task

    from st_integrations.readplan import ReadUnit

    unit = ReadUnit("127.0.0.1:7100")
    assert engine_compat.find_read_unit(Task("k", len, DataNode(None, [unit]))) == unit
    assert engine_compat.find_read_unit(Task("k", len, DataNode(None, [1]))) is None
    with pytest.raises(engine_compat.UnexpectedRunSpecError, match="tuple"):
        engine_compat.find_read_unit((len, unit))  # the legacy tuple task


# -- Ray ----------------------------------------------------------------------
READ_SCHEMA = (
    parquet_part(0).schema.append(pa.field("read_node", pa.string())).append(pa.field("read_task", pa.string()))
)


def _decode_where(name: str, path: str) -> pa.Table:
    """A decoder (it runs in the read task): the record, and where it was read."""
    import ray

    t = pq.read_table(path)
    ctx = ray.get_runtime_context()
    t = t.append_column("read_node", pa.array([ctx.get_node_id()] * len(t), pa.string()))
    return t.append_column("read_task", pa.array([ctx.get_task_id()] * len(t), pa.string()))


def _map_where(batch):
    import ray

    batch = batch.copy()
    batch["map_task"] = ray.get_runtime_context().get_task_id()
    return batch


def _ray_read(parquet_cluster, placement):
    from st_integrations.ray_reader import read_storetorrent

    ds = read_storetorrent(
        FILE,
        tracker=parquet_cluster.tracker_addr,
        decoder=_decode_where,
        schema=READ_SCHEMA,
        include_paths=True,
        block_size=60_000,
        placement=placement,
    )
    return ds.map_batches(_map_where, batch_format="pandas").to_pandas()


def _check_read_nodes(df, peer_of, ray_nodes):
    assert df.read_node.nunique() == 2  # both "hosts" read
    for path, node in set(zip(df.path, df.read_node)):
        assert node == ray_nodes[peer_of[path]], path


@pytest.mark.parametrize("placement", ["task", "node"])
def test_ray_both_placements_read_everything_on_the_peers_nodes(
    parquet_cluster, ray_nodes, peer_of, fresh_warnings, placement
):
    df = _ray_read(parquet_cluster, placement)
    _check_answer(df)
    _check_read_nodes(df, peer_of, ray_nodes)
    fused = df.read_task == df.map_task
    if placement == "task":
        assert fused.all(), "the map after the read ran outside the read task"
    else:
        assert not fused.any(), "maps after the per-node union were fused"  # what "node" costs
    assert _compat_lines(fresh_warnings) == []


def test_ray_untested_version_falls_back_to_node_with_one_line(
    parquet_cluster, ray_nodes, peer_of, fresh_warnings, monkeypatch
):
    import ray

    from st_integrations.ray_reader import read_storetorrent

    monkeypatch.setitem(engine_compat.TESTED, "ray", ("2.59.0",))
    df = _ray_read(parquet_cluster, "auto")
    _check_answer(df)
    _check_read_nodes(df, peer_of, ray_nodes)
    assert not (df.read_task == df.map_task).any(), "auto did not fall back to placement='node'"
    read_storetorrent(FILE, tracker=parquet_cluster.tracker_addr, schema=READ_SCHEMA)  # another read: no second line
    lines = _compat_lines(fresh_warnings)
    assert len(lines) == 1, lines
    assert f"ray {ray.__version__} is not a tested version (tested: ray 2.59.0)" in lines[0]
    assert "placement='node'" in lines[0] and "not fused" in lines[0]
    # "task" asked for explicitly is an error there, not a silent change
    with pytest.raises(PlacementError, match="placement='task' is not available"):
        read_storetorrent(FILE, tracker=parquet_cluster.tracker_addr, schema=READ_SCHEMA, placement="task")


def test_ray_without_the_hook_point_says_so(monkeypatch):
    """A tested version whose operator lacks the private method: the hook is
    not installed, and the reason names what is missing."""
    pytest.importorskip("ray")
    from ray.data._internal.execution.operators.map_operator import MapOperator
    from ray.data._internal.execution.operators.task_pool_map_operator import TaskPoolMapOperator

    for cls in (TaskPoolMapOperator, MapOperator):  # put back after the test
        monkeypatch.delattr(cls, "_get_dynamic_ray_remote_args")
    problem = engine_compat.install_ray_task_pinning()
    assert problem is not None and "has no _get_dynamic_ray_remote_args" in problem


# -- Dask ---------------------------------------------------------------------
@pytest.fixture
def pins_made(monkeypatch):
    """How many graphs the plugin restricted tasks of (its scheduler runs in
    this process)."""
    made = []
    orig = engine_compat.DaskPinning._pins

    def counted(self, scheduler, keys):
        out = orig(self, scheduler, keys)
        made.append(len(out))
        return out

    monkeypatch.setattr(engine_compat.DaskPinning, "_pins", counted)
    return made


def _dask_read(parquet_cluster, dclient):
    from st_integrations.dask_reader import read_storetorrent

    return read_storetorrent(
        FILE, tracker=parquet_cluster.tracker_addr, client=dclient, blocksize=60_000, include_paths=True
    )


def test_dask_plugin_pins_each_partition_to_its_peers_worker(
    parquet_cluster, dclient, peer_of, fresh_warnings, pins_made
):
    df = _dask_read(parquet_cluster, dclient).map_partitions(with_dask_worker).compute()
    _check_answer(df)
    for path, worker in set(zip(df.path, df.worker)):
        assert worker == peer_of[path], path
    assert sum(pins_made) > 4
    assert _compat_lines(fresh_warnings) == []


def test_dask_plugin_pins_a_persisted_read(parquet_cluster, dclient, peer_of, fresh_warnings, pins_made):
    """persist() sends the read graph as compute() does: its read tasks are
    pinned too (a reader that built its graph under another convert-string
    setting reached the scheduler with no ReadUnit in its read tasks, and
    the plugin pinned nothing, with one warning)."""
    from distributed import wait

    ddf = _dask_read(parquet_cluster, dclient).persist()
    wait(ddf)
    df = ddf.map_partitions(with_dask_worker).compute()
    _check_answer(df)
    assert sum(pins_made) > 4
    assert _compat_lines(fresh_warnings) == []


def test_dask_untested_version_pins_nothing_same_answer_one_line(
    parquet_cluster, dclient, fresh_warnings, pins_made, monkeypatch
):
    import distributed

    monkeypatch.setitem(engine_compat.TESTED, "distributed", ("2026.7.0",))
    ddf = _dask_read(parquet_cluster, dclient)
    _check_answer(ddf.compute())
    got = ddf.groupby("k").x.sum().compute().sort_index()  # another graph: still no second line
    want = source_frame().groupby("k").x.sum().sort_index()
    pd.testing.assert_series_equal(got.astype("float64"), want, check_names=False, check_index_type=False, rtol=1e-12)
    assert pins_made == [], "the plugin walked run_specs on an untested version"
    lines = _compat_lines(fresh_warnings)
    assert len(lines) == 1, lines
    assert f"distributed {distributed.__version__}" in lines[0] and "2026.7.0" in lines[0]
    assert "pins no read task" in lines[0] and "GetLocalError" in lines[0]


def _walk_finds_nothing(node, depth):
    return None


def _walk_breaks(node, depth):
    raise AttributeError("'Task' object has no attribute 'args'")


@pytest.mark.parametrize("walk", [_walk_finds_nothing, _walk_breaks], ids=["no-unit", "walk-raises"])
def test_dask_run_spec_not_as_tested_falls_back_and_the_scheduler_goes_on(
    parquet_cluster, dclient, fresh_warnings, monkeypatch, walk
):
    """A read task whose run_spec hides its unit, or a walk that raises: no
    task of the graph is pinned, one line, and the scheduler keeps working."""
    monkeypatch.setattr(engine_compat, "_walk", walk)
    ddf = _dask_read(parquet_cluster, dclient)
    _check_answer(ddf.compute())
    assert ddf.part.max().compute() == N_PARTS - 1  # a later graph on the same scheduler
    lines = _compat_lines(fresh_warnings)
    assert len(lines) == 1, lines
    assert "run_spec is not as tested" in lines[0] and "GetLocalError" in lines[0]
    assert ("holds no ReadUnit" if walk is _walk_finds_nothing else "AttributeError") in lines[0]
