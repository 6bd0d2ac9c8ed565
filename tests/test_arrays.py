"""Arrays as many small chunks and Polars over Parquet records (issue 38,
item 14): an xarray Dataset written as a Zarr store of 100 chunks through a
``storetorrent://`` URL and read back exactly (xarray and zarr's own
FsspecStore), appended to (its metadata replaced from zarr's threads), and
Polars reading Parquet records through fsspec, compared with pandas.
docs/fsspec.md, "Arrays and Polars"."""

from __future__ import annotations

import fsspec
import numpy as np
import pandas as pd
import polars as pl
import pyarrow.dataset as pads
import xarray as xr
import zarr
from zarr.storage import FsspecStore


def dataset(y0: int, ny: int) -> xr.Dataset:
    y = np.arange(y0, y0 + ny)
    t = np.sin(np.arange(ny * 120, dtype="float64").reshape(ny, 120) / 7 + y0)
    return xr.Dataset(
        {"t": (("y", "x"), t, {"units": "K"})},
        coords={"y": y, "x": np.linspace(0.0, 1.0, 120)},
        attrs={"run": "zarr1"},
    )


def test_xarray_writes_and_reads_a_zarr_store_of_many_chunks(cluster):
    url = f"storetorrent://{cluster.tracker_addr}/exp/zarr1"
    ds = dataset(0, 100)
    ds.to_zarr(url, encoding={"t": {"chunks": (10, 12)}}, consolidated=False)  # 10 x 10 chunks of t

    fs = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr)
    chunks = [p for p in fs.find("/exp/zarr1/t/c")]
    assert len(chunks) == 100 and fs.info("/exp/zarr1")["st_type"] == "file"  # one record per chunk

    back = xr.open_zarr(url, consolidated=False)
    assert back["t"].encoding["chunks"] == (10, 12)
    xr.testing.assert_identical(back.load(), ds)

    # zarr itself, through its fsspec store: a read across four chunks
    z = zarr.open_array(FsspecStore.from_url(f"{url}/t", read_only=True), mode="r")
    assert z.shape == (100, 120) and z.chunks == (10, 12)
    np.testing.assert_array_equal(z[5:15, 6:18], ds["t"].values[5:15, 6:18])

    # appending replaces the metadata records (zarr writes from its threads)
    dataset(100, 30).to_zarr(url, append_dim="y", consolidated=False)
    whole = xr.concat([ds, dataset(100, 30)], dim="y")
    xr.testing.assert_identical(xr.open_zarr(url, consolidated=False).load(), whole)
    assert len(fs.find("/exp/zarr1/t/c")) == 130

    # mode="w" replaces the whole store (the StoreTorrent file deleted, made again)
    small = dataset(0, 20)
    small.to_zarr(url, mode="w", encoding={"t": {"chunks": (10, 12)}}, consolidated=False)
    xr.testing.assert_identical(xr.open_zarr(url, consolidated=False).load(), small)
    assert len(fs.find("/exp/zarr1/t/c")) == 20


def test_polars_reads_parquet_records_through_fsspec(cluster):
    base = f"storetorrent://{cluster.tracker_addr}/exp/pl"
    parts = [
        pd.DataFrame({"a": np.arange(i * 100, i * 100 + 100), "b": [f"s{i}-{j}" for j in range(100)]}) for i in range(3)
    ]
    for i, part in enumerate(parts):
        part.to_parquet(f"{base}/part-{i}.parquet")
    want = pd.read_parquet(f"{base}/part-1.parquet")

    got = pl.read_parquet(f"{base}/part-1.parquet", use_pyarrow=True)  # fsspec opens the URL
    pd.testing.assert_frame_equal(got.to_pandas(), want)
    got = pl.read_parquet(
        "storetorrent:///exp/pl/part-1.parquet", use_pyarrow=True, storage_options={"tracker": cluster.tracker_addr}
    )
    pd.testing.assert_frame_equal(got.to_pandas(), want)

    fs = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr)
    with fs.open("/exp/pl/part-1.parquet") as fh:  # an fsspec file: Polars' own reader
        pd.testing.assert_frame_equal(pl.scan_parquet(fh).collect().to_pandas(), want)

    # every record of the file, lazily, a filter pushed down through pyarrow
    lazy = pl.scan_pyarrow_dataset(pads.dataset("/exp/pl", filesystem=fs, format="parquet"))
    got = lazy.filter(pl.col("a") >= 150).sort("a").collect().to_pandas()
    whole = pd.concat(parts, ignore_index=True)
    pd.testing.assert_frame_equal(got, whole[whole["a"] >= 150].reset_index(drop=True))
