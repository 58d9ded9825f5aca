#!/usr/bin/env bash
# wedge as a course. The exercises are regions of the real sources, never a fork:
#
#   // course 03 begin: layer norm backward, the reference kernel
#   ... the solution: mainline code, compiled and tested like any other ...
#   // course 03 end
#
# (comments, so they compile away). `make` writes a student tree in which each region is
# replaced by   throw std::logic_error("exercise 03: not implemented (...)");   and each
# exercise is graded by the engine's own tests: `ctest -L course.03` (tests/course.cmake).
#
#   tools/course.sh list           the exercises, in order, with the files that hold them
#   tools/course.sh make DIR       the student tree (DIR must not exist)
#   tools/course.sh check          every region well formed, every exercise graded
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

sources() {
  if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard
  else
    find . -type f -not -path './build*' -not -path './.git/*' | sed 's|^\./||'
  fi
}

marked_files() {
  sources | grep -E '\.(cpp|h|cu|cuh)$' | while read -r f; do
    if [ -f "$f" ] && grep -q '// course [0-9][0-9] begin' "$f"; then echo "$f"; fi
  done
}

# "NN<TAB>title<TAB>file" for every region, in exercise order.
regions() {
  marked_files | while read -r f; do
    sed -n "s|^[[:space:]]*// course \([0-9][0-9]\) begin: \(.*\)$|\1\t\2\t$f|p" "$f"
  done | sort -s -k1,1
}

# Checks one file's markers: every begin closed by the end of the same number, no nesting.
check_file() {
  awk -v file="$1" '
    match($0, /\/\/ course [0-9][0-9] begin/) { if (open != "") { printf "%s:%d: course %s begins inside course %s\n", file, NR, substr($0, RSTART + 10, 2), open; bad = 1 } open = substr($0, RSTART + 10, 2); next }
    match($0, /\/\/ course [0-9][0-9] end/) { n = substr($0, RSTART + 10, 2); if (n != open) { printf "%s:%d: course %s ends but %s is open\n", file, NR, n, (open == "" ? "none" : open); bad = 1 } open = ""; next }
    END { if (open != "") { printf "%s: course %s never ends\n", file, open; bad = 1 } exit bad }' "$1"
}

strip_file() {
  awk '
    match($0, /^[[:space:]]*\/\/ course [0-9][0-9] begin: /) {
      indent = $0; sub(/\/\/.*/, "", indent)
      n = substr($0, index($0, "course ") + 7, 2); title = substr($0, RSTART + RLENGTH)
      gsub(/\\/, "\\\\", title); gsub(/"/, "\\\"", title)
      print; printf "%sthrow std::logic_error(\"exercise %s: not implemented (%s)\");\n", indent, n, title
      skipping = 1; next
    }
    /^[[:space:]]*\/\/ course [0-9][0-9] end/ { skipping = 0 }
    !skipping { print }' "$1"
}

case "${1:-}" in
  list)
    regions | awk -F'\t' '{ if ($1 != last) printf "%s  %s\n", $1, $2; printf "      %s\n", $3; last = $1 }'
    ;;
  check)
    status=0
    while read -r f; do check_file "$f" || status=1; done < <(marked_files)
    graded="$(sed -n 's/^wedge_course_exercise(\([0-9][0-9]\) .*/\1/p' tests/course.cmake | sort -u)"
    for n in $(regions | cut -f1 | sort -u); do
      grep -qx "$n" <<< "$graded" || { echo "course: exercise $n has no test in tests/course.cmake"; status=1; }
    done
    for n in $graded; do
      regions | cut -f1 | grep -qx "$n" || { echo "course: tests/course.cmake grades exercise $n, which no source marks"; status=1; }
    done
    [ "$status" = 0 ] && echo "course: $(regions | cut -f1 | sort -u | wc -l) exercises, every region well formed and graded"
    exit "$status"
    ;;
  make)
    [ $# -eq 2 ] || usage 1
    dest="$2"
    if [ -e "$dest" ]; then
      echo "course: $dest already exists; give a new folder" >&2
      exit 1
    fi
    "$0" check > /dev/null
    tmp="$(mktemp -d "${dest%/}.partial.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    sources | while read -r f; do
      [ -f "$f" ] || continue
      mkdir -p "$tmp/$(dirname "$f")"
      cp -p "$f" "$tmp/$f"
    done
    marked_files | while read -r f; do
      { echo '#include <stdexcept>  // the exercises throw until solved'; strip_file "$f"; } > "$tmp/$f"
    done
    mv "$tmp" "$dest"
    trap - EXIT
    echo "course: student tree in $dest ($(regions | cut -f1 | sort -u | wc -l) exercises; tools/course.sh list says where)"
    ;;
  -h | --help | "") usage 0 ;;
  *) usage 1 ;;
esac
