#!/usr/bin/env bash
# Builds a self-contained wheel of StoreTorrent into DIST (default dist/):
# pip wheel (scikit-build-core compiles st-peer and st_py._native against the
# system's gRPC, protobuf, absl, SQLite and OpenSSL), then `auditwheel repair`
# copies those shared libraries into the wheel (storetorrent.libs/, found
# through RPATH) and tags it manylinux_2_35, so `pip install` of the wheel
# works on a machine without the apt -dev packages (docs/deployment.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${1:-dist}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
BIN=$(dirname "$PY")
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
"$PY" -m pip wheel --no-deps . -w "$raw" -C build-dir="$raw/build"
mkdir -p "$DIST"
PATH="$BIN:$PATH" "$BIN/auditwheel" repair --plat manylinux_2_35_x86_64 -w "$DIST" "$raw"/storetorrent-*.whl
ls "$DIST"/storetorrent-*manylinux*.whl
