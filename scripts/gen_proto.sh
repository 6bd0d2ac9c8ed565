#!/usr/bin/env bash
# Regenerates the Python gRPC stubs of proto/storetorrent/v1/tracker.proto into
# st_py/_proto/ (committed, with .pyi). Run after changing the proto.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
"$PY" -m grpc_tools.protoc -Iproto --python_out=st_py/_proto --pyi_out=st_py/_proto \
  --grpc_python_out=st_py/_proto proto/storetorrent/v1/tracker.proto
mv st_py/_proto/storetorrent/v1/tracker_pb2*.py* st_py/_proto/
rm -rf st_py/_proto/storetorrent
# The generated service module imports its messages by proto package path;
# make that import relative to st_py._proto.
sed -i 's/^from storetorrent.v1 import tracker_pb2/from . import tracker_pb2/' st_py/_proto/tracker_pb2_grpc.py
touch st_py/_proto/__init__.py
