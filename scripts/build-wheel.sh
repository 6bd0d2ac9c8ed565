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
# Offline: build with the environment's own scikit-build-core and nanobind
# (./dev setup installs them) instead of fetching them into an isolated one.
isolation=--no-build-isolation
"$PY" -c "import scikit_build_core, nanobind" 2>/dev/null || isolation=
# ST_WHEEL_BUILD_DIR: CMake's build folder (default: a fresh one, removed after). The
# test of the wheel passes ./dev's (build/wheel): the same compile, done already.
"$PY" -m pip wheel --no-deps $isolation . -w "$raw" -C build-dir="${ST_WHEEL_BUILD_DIR:-$raw/build}"
mkdir -p "$DIST"
# The platform tag this machine's build is consistent with (manylinux_2_35_x86_64
# on Debian 12 / Ubuntu 22.04), as auditwheel reads it from the binaries; PLAT overrides.
PLAT=${PLAT:-$(PATH="$BIN:$PATH" "$BIN/auditwheel" show "$raw"/storetorrent-*.whl |
    grep -o "manylinux_[0-9]*_[0-9]*_$(uname -m)" | head -n 1)}
[ -n "$PLAT" ] || { echo "build-wheel: auditwheel found no manylinux tag for this build (set PLAT)" >&2; exit 1; }
PATH="$BIN:$PATH" "$BIN/auditwheel" repair --plat "$PLAT" -w "$DIST" "$raw"/storetorrent-*.whl
ls "$DIST"/storetorrent-*manylinux*.whl
