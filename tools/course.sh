#!/usr/bin/env bash
# wedge as a course. The exercises are regions of the real sources, never a fork:
#
#   // course 08 begin: layer norm backward, the reference kernel
#   ... the solution: mainline code, compiled and tested like any other ...
#   // course 08 end
#
# (comments, so they compile away). `make` writes a student tree in which each region is
# replaced by   throw std::logic_error("exercise 08: not implemented (...)");   (in CUDA
# kernels WEDGE_COURSE_UNSOLVED, kernels/cuda/common.cuh) and each exercise is graded by
# the engine's own tests: `ctest -L course.08` (tests/course.cmake).
#
#   tools/course.sh list           the exercises, in order, with the files that hold them
#   tools/course.sh make DIR       the student tree (DIR must not exist)
#   tools/course.sh check          every region well formed, every exercise graded
#   tools/course.sh walk BUILD     (CI) the student tree compiles, and each exercise's
#                                  tests fail at its own stub; BUILD: a build of this tree
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
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
  # One grep over all the files (a process per file made `check` take a minute); files
  # listed by git but deleted from the work tree are skipped as before.
  sources | grep -E '\.(cpp|h|cu|cuh)$' | tr '\n' '\0' |
    xargs -0 -r grep -l --no-messages -e '// course [0-9][0-9] begin' -- || true
}

# "NN<TAB>title<TAB>file" for every region, in exercise order.
regions() {
  local files
  mapfile -t files < <(marked_files)
  [ "${#files[@]}" -gt 0 ] || return 0
  awk 'match($0, /^[[:space:]]*\/\/ course [0-9][0-9] begin: /) {
         printf "%s\t%s\t%s\n", substr($0, RSTART + RLENGTH - 10, 2), substr($0, RSTART + RLENGTH), FILENAME }' \
    "${files[@]}" | sort -s -k1,1
}

# Checks one file's markers: every begin closed by the end of the same number, no nesting.
check_file() {
  awk -v file="$1" '
    match($0, /\/\/ course [0-9][0-9] begin/) { if (open != "") { printf "%s:%d: course %s begins inside course %s\n", file, NR, substr($0, RSTART + 10, 2), open; bad = 1 } open = substr($0, RSTART + 10, 2); next }
    match($0, /\/\/ course [0-9][0-9] end/) { n = substr($0, RSTART + 10, 2); if (n != open) { printf "%s:%d: course %s ends but %s is open\n", file, NR, n, (open == "" ? "none" : open); bad = 1 } open = ""; next }
    END { if (open != "") { printf "%s: course %s never ends\n", file, open; bad = 1 } exit bad }' "$1"
}

# Writes file $1 to stdout with each region turned into
#   student  the exercise's throw instead of the solution (the student tree);
#   walk     the solution kept, behind a throw taken while the exercise counts as unsolved:
#            its number is at least $WEDGE_COURSE_UNSOLVED_FROM (see "walk").
# In CUDA files (.cu, .cuh) regions lie in device code: the student's stub is the macro
# WEDGE_COURSE_UNSOLVED, and the walk's guard exists only in the host emulation.
strip_file() {
  local kernel=0
  case "$1" in *.cu | *.cuh) kernel=1 ;; esac
  awk -v mode="$2" -v kernel="$kernel" '
    match($0, /^[[:space:]]*\/\/ course [0-9][0-9] begin: /) {
      indent = $0; sub(/\/\/.*/, "", indent)
      n = substr($0, index($0, "course ") + 7, 2); title = substr($0, RSTART + RLENGTH)
      gsub(/\\/, "\\\\", title); gsub(/"/, "\\\"", title)
      message = sprintf("\"exercise %s: not implemented (%s)\"", n, title)
      print
      if (mode == "student") {
        if (kernel) printf "%sWEDGE_COURSE_UNSOLVED(%s);\n", indent, message
        else printf "%sthrow std::logic_error(%s);\n", indent, message
        skipping = 1
      } else {
        if (kernel) print "#if defined(WEDGE_CUDA_EMULATE)"
        printf "%sif (const char* from = std::getenv(\"WEDGE_COURSE_UNSOLVED_FROM\"); from != nullptr && std::atoi(from) <= %d)\n", indent, n + 0
        printf "%s  throw std::logic_error(%s);\n", indent, message
        if (kernel) print "#endif"
      }
      next
    }
    /^[[:space:]]*\/\/ course [0-9][0-9] end/ { skipping = 0 }
    !skipping { print }' "$1"
}

# The ctest targets grading exercise $1 (the test binaries to build).
graded_targets() {
  sed -n 's/^wedge_course_exercise(\([0-9][0-9]\) \([a-z_]*\) .*/\1 \2/p' tests/course.cmake | sort -u | cut -d' ' -f2 | sort -u
}

# The compile command of source $2 in the compilation database $1, unescaped for eval.
compile_command() {
  awk -v file="\"file\": \"$2\"" '
    /"command": / { command = $0 }
    index($0, file) { sub(/^[[:space:]]*"command": "/, "", command); sub(/",?[[:space:]]*$/, "", command)
                      gsub(/\\"/, "\"", command); gsub(/\\\\/, "\\", command); print command; exit }' "$1"
}

case "${1:-}" in
  list)
    regions | awk -F'\t' '{ if ($1 != last) printf "%s  %s\n", $1, $2; if ($1 != last || $3 != file) printf "      %s\n", $3; last = $1; file = $3 }'
    ;;
  check)
    status=0
    while read -r f; do check_file "$f" || status=1; done < <(marked_files)
    graded="$(sed -n 's/^wedge_course_exercise(\([0-9][0-9]\) .*/\1/p' tests/course.cmake | sort -u)"
    marked="$(regions | cut -f1 | sort -u)"
    for n in $marked; do
      grep -qx "$n" <<< "$graded" || { echo "course: exercise $n has no test in tests/course.cmake"; status=1; }
    done
    for n in $graded; do
      grep -qx "$n" <<< "$marked" || { echo "course: tests/course.cmake grades exercise $n, which no source marks"; status=1; }
    done
    [ "$status" = 0 ] && echo "course: $(wc -w <<< "$marked") exercises, every region well formed and graded"
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
      { echo '#include <stdexcept>  // the exercises throw until solved'; strip_file "$f" student; } > "$tmp/$f"
    done
    mv "$tmp" "$dest"
    trap - EXIT
    echo "course: student tree in $dest ($(regions | cut -f1 | sort -u | wc -l) exercises; tools/course.sh list says where)"
    ;;
  walk)
    # Proves the course works, for CI. BUILD must be a configured build of this checkout
    # (the marked files rewritten in place, then restored from git: they must be
    # committed and unchanged). Three checks:
    #  1. the student tree builds: every file it changes (and the CUDA emulation test,
    #     which includes the kernel files) compiles with BUILD's own commands;
    #  2. each exercise is graded by its tests, in order, as a student meets it: with the
    #     exercises before it solved and it and those after it not, its tests fail, and
    #     they fail at its own "exercise NN: not implemented" (the regions are guarded
    #     by WEDGE_COURSE_UNSOLVED_FROM, so one build serves every step);
    #  3. with every exercise solved (the guards off) all of `ctest -L course` passes.
    # BUILD is left built from the guarded sources; its next build recompiles them.
    [ $# -eq 2 ] || usage 1
    [ -f "$2/CTestTestfile.cmake" ] && [ -f "$2/compile_commands.json" ] || {
      echo "course: $2 is not a configured build folder (no CTestTestfile.cmake or compile_commands.json)" >&2
      exit 1
    }
    build="$(cd "$2" && pwd)"
    "$0" check
    mapfile -t files < <(marked_files)
    git diff --quiet HEAD -- "${files[@]}" || {
      echo "course: walk rewrites the marked files and restores them from git; commit or stash their changes first" >&2
      exit 1
    }
    student="$(mktemp -d)"
    rmdir "$student"
    trap 'git checkout -q HEAD -- "${files[@]}"; rm -rf "$student"' EXIT
    "$0" make "$student" > /dev/null

    started="$(date +%s)"
    checked=0
    for f in "${files[@]}" tests/kernels/test_cuda_emulated.cpp; do
      command="$(compile_command "$build/compile_commands.json" "$PWD/$f")"
      if [ -z "$command" ]; then
        # A CUDA file in a build without CUDA has none; a C++ source must have its own (one
        # compiled inside a unity unit, as the sub-commands' files are, has not).
        case "$f" in *.cpp) ;; *) continue ;; esac
        echo "course: $2/compile_commands.json has no command of its own for $f (a unity unit's member?)" >&2
        exit 1
      fi
      command="${command//"$PWD/$f"/"$student/$f"}"
      command="$(sed -E "s| -o [^ ]+| -o $student/.course_check.o|; s|^([^ ]+) |\1 -I$student |" <<< "$command")"
      case "$command" in *nvcc*) ;; *) command="${command/ -c / -fsyntax-only -c }" ;; esac
      if ! (cd "$build" && eval "$command") > "$student/.course_check.log" 2>&1; then
        echo "course: the student tree's $f does not compile:" >&2
        head -30 "$student/.course_check.log" >&2
        exit 1
      fi
      checked=$((checked + 1))
    done
    echo "course: the student tree compiles ($checked files differ from the mainline or include one; $(($(date +%s) - started)) s)"

    for f in "${files[@]}"; do
      { echo '#include <cstdlib>'; echo '#include <stdexcept>'; strip_file "$f" walk; } > "$student/.walk"
      cat "$student/.walk" > "$f"
    done
    mapfile -t targets < <(graded_targets)
    cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$student/.build.log" 2>&1 || {
      tail -40 "$student/.build.log" >&2
      echo "course: the guarded sources do not build" >&2
      exit 1
    }
    status=0
    for n in $(regions | cut -f1 | sort -u); do
      if out="$(WEDGE_COURSE_UNSOLVED_FROM="$n" ctest --test-dir "$build" -R "^course\.$n\$" --output-on-failure 2>&1)"; then
        echo "course: exercise $n: its tests pass while it is unsolved" >&2
        status=1
      elif ! grep -q "exercise $n: not implemented" <<< "$out"; then
        echo "course: exercise $n: its tests fail, but not at its own stub; they stop at:" >&2
        grep -o "exercise [0-9][0-9]: not implemented" <<< "$out" | sort | uniq -c >&2 || tail -15 <<< "$out" >&2
        status=1
      else
        echo "course: exercise $n fails until solved, at its own stub"
      fi
    done
    ctest --test-dir "$build" -L course --output-on-failure > "$student/.solved.log" 2>&1 || {
      tail -40 "$student/.solved.log" >&2
      echo "course: with every exercise solved, ctest -L course fails" >&2
      exit 1
    }
    echo "course: with every exercise solved, ctest -L course passes"
    exit "$status"
    ;;
  -h | --help | "") usage 0 ;;
  *) usage 1 ;;
esac
