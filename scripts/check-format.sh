#!/usr/bin/env bash
# Check that the C++ sources of st_core (src, tests, fuzz, python) are
# formatted as .clang-format says; part of ./dev test's lint phase.
#
#   scripts/check-format.sh                 check; lists the files to fix
#   scripts/check-format.sh --fix           reformat them in place
#   scripts/check-format.sh [--fix] FILE..  only these (paths from the repository root)
#
# clang-format comes from the virtualenv (the PyPI wheel, pinned in
# pyproject.toml's test extra: different major versions format differently);
# ST_CLANG_FORMAT names another binary.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${ST_VENV:-$PWD/.venv}
WANT_MAJOR=23

fix=0
if [ "${1:-}" = "--fix" ]; then
  fix=1
  shift
fi
case "${1:-}" in
  -h|--help)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  -*)
    echo "usage: scripts/check-format.sh [--fix] [FILE...]" >&2
    exit 2 ;;
esac

cf=${ST_CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  if [ -x "$VENV/bin/clang-format" ]; then
    cf=$VENV/bin/clang-format
  else
    cf=$(command -v clang-format || true)
  fi
fi
if [ -z "$cf" ]; then
  echo "check-format: no clang-format; install it with: $VENV/bin/pip install 'clang-format>=$WANT_MAJOR,<$((WANT_MAJOR + 1))'" >&2
  echo "  (./dev setup does, from pyproject.toml)" >&2
  exit 2
fi
version=$({ "$cf" --version 2>/dev/null || true; } | sed -n 's/.*clang-format version \([0-9][0-9]*\)\..*/\1/p')
if [ "$version" != "$WANT_MAJOR" ]; then
  echo "check-format: $cf is clang-format ${version:-of unknown version}; .clang-format is for version $WANT_MAJOR" >&2
  echo "  install it with: $VENV/bin/pip install 'clang-format>=$WANT_MAJOR,<$((WANT_MAJOR + 1))', or set ST_CLANG_FORMAT" >&2
  exit 2
fi

style=--style=file:$PWD/.clang-format
files=()
if [ $# -gt 0 ]; then
  files=("$@")
else
  while IFS= read -r -d '' f; do files+=("$f"); done < <(
    find st_core/src st_core/tests st_core/fuzz st_core/python -type f \
      \( -name '*.cc' -o -name '*.h' \) -print0 | sort -z)
fi

if [ "$fix" = 1 ]; then
  "$cf" "$style" -i "${files[@]}"
  echo "check-format: formatted ${#files[@]} files with $("$cf" --version)"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  # The first few differences of each file, as compiler-style warnings.
  if ! "$cf" "$style" --dry-run --Werror --ferror-limit=5 "$f"; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo >&2
  echo "check-format: ${#bad[@]} of ${#files[@]} C++ files are not formatted as .clang-format says:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix them with:  scripts/check-format.sh --fix   (or --fix FILE... for some of them)" >&2
  exit 1
fi
echo "check-format: ${#files[@]} C++ files formatted"
