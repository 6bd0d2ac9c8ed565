#!/usr/bin/env bash
# Build SeaweedFS's `weed` from the Go module proxy into build/seaweedfs/weed,
# for the benchmarks that run it beside StoreTorrent (bench/seaweedfs.py:
# `weed benchmark` in `./dev bench --only weed`, `weed s3` in `--only s3`).
# `go install ...@VERSION` refuses this module (its go.mod has replace
# directives), so the module's source is copied out of the module cache and
# built as the main module. About 8 minutes and 1 GB of downloads on 2 cores.
# Usage: scripts/get-seaweedfs.sh [VERSION]
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-v0.0.0-20261109003541-7506e5f91cd6}  # SeaweedFS 4.53, as served by the proxy on 2026-11-25
OUT=$PWD/build/seaweedfs
command -v go >/dev/null || { echo "get-seaweedfs: needs Go (https://go.dev/dl/); none on PATH" >&2; exit 1; }
if [ -x "$OUT/weed" ] && [ "$(cat "$OUT/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  echo "$OUT/weed"; exit 0
fi
DIR=$(go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[ -n "$DIR" ] || { echo "get-seaweedfs: the Go module proxy did not give github.com/seaweedfs/seaweedfs@$VERSION" >&2; exit 1; }
SRC=$(mktemp -d)
trap 'rm -rf "$SRC"' EXIT
cp -r "$DIR/." "$SRC" && chmod -R u+w "$SRC"
mkdir -p "$OUT"
(cd "$SRC" && GOFLAGS=-mod=mod go build -o "$OUT/weed" ./weed)
echo "$VERSION" > "$OUT/VERSION"
echo "$OUT/weed"
