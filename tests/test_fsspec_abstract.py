"""fsspec's own abstract filesystem tests (``fsspec.tests.abstract``: copy,
get, put, open, pipe) run against ``storetorrent://`` on a real tracker and
real peers (docs/fsspec.md, "Conformance").

Each test gets a fresh StoreTorrent file as its root (``fs_path``): the
suite's directories are record-name prefixes inside it, its files records.
StoreTorrent has no empty directories (``makedirs`` is a no-op, a prefix
exists while a record is under it), so ``supports_empty_directories`` is
False, as for S3 and GCS.
"""

from __future__ import annotations

import itertools
import posixpath

import pytest
from fsspec.tests.abstract import AbstractCopyTests as _Copy
from fsspec.tests.abstract import AbstractFixtures
from fsspec.tests.abstract import AbstractGetTests as _Get
from fsspec.tests.abstract import AbstractOpenTests as _Open
from fsspec.tests.abstract import AbstractPipeTests as _Pipe
from fsspec.tests.abstract import AbstractPutTests as _Put

_COUNTER = itertools.count()


@pytest.fixture(scope="module")
def st_cluster(make_module_cluster):
    return make_module_cluster(3, name="fsabstract")


class StoreTorrentFixtures(AbstractFixtures):
    @pytest.fixture
    def fs(self, st_cluster):
        from st_integrations.fsspec_fs import StoreTorrentFileSystem

        return StoreTorrentFileSystem(tracker=st_cluster.tracker_addr, skip_instance_cache=True)

    @pytest.fixture
    def fs_join(self):
        return posixpath.join

    @pytest.fixture
    def fs_path(self, st_cluster):
        """A new, empty StoreTorrent file: the root of one test."""
        name = f"/abstract/t{next(_COUNTER)}"
        with st_cluster.client().create(name, replication="x2"):
            pass
        return name

    @pytest.fixture
    def supports_empty_directories(self):
        return False


class TestStoreTorrentCopy(StoreTorrentFixtures, _Copy):
    pass


class TestStoreTorrentGet(StoreTorrentFixtures, _Get):
    pass


class TestStoreTorrentPut(StoreTorrentFixtures, _Put):
    pass


class TestStoreTorrentOpen(StoreTorrentFixtures, _Open):
    pass


class TestStoreTorrentPipe(StoreTorrentFixtures, _Pipe):
    pass
