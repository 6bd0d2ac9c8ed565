"""Ray's own readers over ``storetorrent://`` (issue 38, item 6): Ray 2.60
resolves a URL's filesystem through pyarrow's ``FileSystem.from_uri``, which
knows no fsspec protocol and has no hook for one, so
``ray.data.read_parquet("storetorrent://...")`` fails inside Ray; the one
line docs/analysis.md and docs/fsspec.md give (the path, and the filesystem
as ``filesystem=``) reads the records."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq


def test_ray_read_parquet_with_the_documented_filesystem_line(cluster, local_ray):
    import fsspec

    ray = local_ray
    with cluster.client() as c, c.create("/rf/pq", replication="x2") as f:
        for i in range(4):
            buf = io.BytesIO()
            pq.write_table(pa.table({"a": [i, 10 * i]}), buf)
            f.put(f"part-{i}.parquet", buf.getvalue())
    tracker = cluster.tracker_addr
    # the line of docs/analysis.md ("Ray's own readers")
    ds = ray.data.read_parquet("/rf/pq", filesystem=fsspec.filesystem("storetorrent", tracker=tracker))
    assert ds.count() == 8 and ds.sum("a") == sum(11 * i for i in range(4))
    # an empty host: the path Ray keeps is the same
    ds = ray.data.read_parquet("storetorrent:///rf/pq", filesystem=fsspec.filesystem("storetorrent", tracker=tracker))
    assert ds.count() == 8
