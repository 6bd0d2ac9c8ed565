#!/usr/bin/env bash
# Build and run the peer's libFuzzer targets (docs/security.md, "Fuzzing").
#
#   scripts/fuzz.sh [--seconds N] [--regressions-only] [--jobs J]
#
#   1. installs clang and libFuzzer (Debian: clang, clang-14, libfuzzer-14-dev)
#      if missing;
#   2. configures build/fuzz with clang and -DST_FUZZ=ON (ASan + UBSan, every
#      UBSan finding fatal) and builds the targets with ninja -j J (default 2);
#   3. writes the seed corpora from tests/vectors/wire.json into
#      build/fuzz/corpus/<target>/ (st_core/fuzz/make_corpus.py);
#   4. replays every input of st_core/fuzz/regressions/ through every target:
#      any crash fails the script;
#   5. unless --regressions-only, fuzzes each target for N seconds (default
#      60) with -max_total_time=N -timeout=5 -rss_limit_mb=2048, starting from
#      its corpus and the regression inputs. A crash, leak, timeout or OOM
#      fails the script, and its input is copied into st_core/fuzz/regressions/
#      as <target>-<kind>-<sha1> so that it becomes a regression test once the
#      bug is fixed (ctest replays that directory in the regular test build).
#
# Logs: build/fuzz/logs/<target>.log. Needs the same Debian packages as the
# regular build (./dev setup installs them): configuring st_core looks for
# gRPC, protobuf, SQLite and OpenSSL, though the fuzz targets link only
# SQLite and OpenSSL.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECONDS_PER_TARGET=60
REGRESSIONS_ONLY=0
JOBS=${ST_FUZZ_JOBS:-2}
TARGETS=(frame_decoder_fuzz name_codec_fuzz request_fuzz)
BUILD=$ROOT/build/fuzz
REGRESSIONS=$ROOT/st_core/fuzz/regressions

usage() { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_TARGET=${2:?--seconds needs a number}; shift 2 ;;
    --seconds=*) SECONDS_PER_TARGET=${1#*=}; shift ;;
    --regressions-only) REGRESSIONS_ONLY=1; shift ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fuzz.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
case "$SECONDS_PER_TARGET" in
  ''|*[!0-9]*) echo "fuzz.sh: --seconds wants a whole number, not '$SECONDS_PER_TARGET'" >&2; exit 2 ;;
esac

log() { printf '\033[1m[fuzz]\033[0m %s\n' "$*" >&2; }
START=$(date +%s)

# ---- 1. clang and libFuzzer -------------------------------------------------------
have_libfuzzer() {
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
    ls /usr/lib/llvm-*/lib/clang/*/lib/x86_64-*/libclang_rt.fuzzer.a >/dev/null 2>&1
}
find_clang() {
  for c in clang++ clang++-14 clang++-15 clang++-16; do
    if command -v "$c" >/dev/null 2>&1; then echo "$c"; return 0; fi
  done
  return 1
}
if ! find_clang >/dev/null || ! have_libfuzzer; then
  log "installing clang and libFuzzer (apt-get install clang clang-14 libfuzzer-14-dev)"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang clang-14 libfuzzer-14-dev >/dev/null
fi
CXX_BIN=$(find_clang) || { echo "fuzz.sh: no clang++ after installing it" >&2; exit 1; }

# ---- 2. build ------------------------------------------------------------------------
log "configuring $BUILD with $CXX_BIN (ST_FUZZ=ON: -fsanitize=fuzzer,address,undefined)"
mkdir -p "$BUILD"
if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DST_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DCMAKE_CXX_COMPILER="$CXX_BIN" >"$BUILD/configure.log" 2>&1; then
  cat "$BUILD/configure.log" >&2
  echo "fuzz.sh: configuring failed; './dev setup' installs the build's Debian packages" >&2
  exit 1
fi
log "building ${TARGETS[*]} (ninja -j$JOBS)"
cmake --build "$BUILD" --target fuzz -j "$JOBS"
BUILT=$(date +%s)

# ---- 3. seed corpora -------------------------------------------------------------------
python3 "$ROOT/st_core/fuzz/make_corpus.py" --out "$BUILD/corpus" >&2

# request_fuzz's sandbox (a record store, a namespace root) lives under
# $TMPDIR: on tmpfs when the caller names no other place, so each input's
# mkdir/rmdir of its files' directories costs no disk journal.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
mkdir -p "$BUILD/logs"
FAILED=()

# ---- 4. regression inputs ------------------------------------------------------------------
mapfile -t REG_FILES < <(find "$REGRESSIONS" -maxdepth 1 -type f ! -name '.*' | sort)
if [ ${#REG_FILES[@]} -gt 0 ]; then
  for t in "${TARGETS[@]}"; do
    log "$t: replaying ${#REG_FILES[@]} regression inputs"
    if ! "$BUILD/st_core/fuzz/$t" -timeout=5 -rss_limit_mb=2048 "${REG_FILES[@]}" \
         >"$BUILD/logs/$t.regressions.log" 2>&1; then
      tail -n 60 "$BUILD/logs/$t.regressions.log" >&2
      log "FAIL: $t crashes on a regression input (log: build/fuzz/logs/$t.regressions.log)"
      FAILED+=("$t (regressions)")
    fi
  done
fi
if [ ${#FAILED[@]} -gt 0 ]; then
  log "regression inputs crash: ${FAILED[*]}; not fuzzing"
  exit 1
fi

# ---- 5. fuzzing ---------------------------------------------------------------------------
SUMMARY=()
if [ "$REGRESSIONS_ONLY" -eq 0 ]; then
  for t in "${TARGETS[@]}"; do
    art="$BUILD/artifacts/$t"
    rm -rf "$art"
    mkdir -p "$art"
    log "$t: fuzzing for ${SECONDS_PER_TARGET} s"
    rc=0
    "$BUILD/st_core/fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=5 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/" \
      "$BUILD/corpus/$t" "$REGRESSIONS" >"$BUILD/logs/$t.log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$BUILD/logs/$t.log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$BUILD/logs/$t.log" | tail -n 1)
    cov=$(grep -oE 'cov: [0-9]+' "$BUILD/logs/$t.log" | tail -n 1 || true)
    SUMMARY+=("$t: ${execs:-?} executions (${rate:-?}/s), ${cov:-cov: ?}, exit $rc")
    found=0
    for a in "$art"/*; do
      [ -f "$a" ] || continue
      found=1
      dst="$REGRESSIONS/$t-$(basename "$a")"
      cp "$a" "$dst"
      log "NEW CRASH INPUT: ${dst#"$ROOT"/} (reproduce: build/fuzz/st_core/fuzz/$t ${dst#"$ROOT"/});"
      log "  fix the bug and keep the file: it is then a regression test (ctest and this script)"
    done
    if [ "$rc" -ne 0 ] || [ "$found" -eq 1 ]; then
      tail -n 80 "$BUILD/logs/$t.log" >&2
      log "FAIL: $t (exit $rc; log: build/fuzz/logs/$t.log)"
      FAILED+=("$t")
    fi
  done
fi

END=$(date +%s)
log "build $((BUILT - START)) s, total $((END - START)) s"
for s in "${SUMMARY[@]}"; do log "$s"; done
if [ ${#FAILED[@]} -gt 0 ]; then
  log "FAILED: ${FAILED[*]}"
  exit 1
fi
log "OK: no crash"
