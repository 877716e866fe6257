#!/usr/bin/env bash
# lint.sh: the style checks CI runs: formatting, what library code may not call, comments that state facts, and
# the layers of src/.
#
#   tools/lint.sh          check; exit 1 listing every offending file or line
#   tools/lint.sh --fix    reformat the offending files in place with clang-format, then check the rest
#
# 1. Formatting: clang-format (the repository's .clang-format) in dry-run mode over every *.h, *.cc, *.cu and
#    *.cuh under include/ src/ tests/ bench/ tools/ python/src/ that git tracks or would track (untracked, not ignored).
# 2. Library code (src/, include/) never exits, aborts or prints to stdout: no exit( (nor _exit, _Exit,
#    quick_exit), abort(, printf( (device printf included), std::cout or fprintf(stdout; and only
#    src/core/config.cc, src/bootstrap/rendezvous.cc and src/nccl_shim/shim_config.cc (the NCCL drop-in
#    library's settings) call getenv(. Tests are not checked (_exit in a forked test child is fine).
#    Comments and string literals are ignored; member functions named abort() (Communicator::abort) are not
#    calls of the C library's abort.
# 3. Comments state facts, not history: no comment (//, /* */, # in scripts and CMake, Python's triple-quoted
#    text; every line of another *.txt) in a *.h, *.cc, *.cu, *.cuh, *.sh, *.py, *.txt (CMakeLists.txt
#    included) or *.cmake file under include/ src/ tests/ bench/ tools/ that git tracks or would track names
#    a session ("the twelfth session", "sessions"), says "a review found", cites an issue number ("issue 6",
#    "issues 3, 4", "issue-4"), carries an ISO date (2026-11-25) or points outside the repository (the
#    field notes, ../shared/). String literals are not checked (test
#    data may hold dates). The same words, except dates, in every line of the Markdown files (README.md, docs/,
#    tests/README.md): results there carry the date they were measured. Not checked: this file (it holds the
#    patterns) and the files of HISTORY_EXCLUDED.
# 4. Layers: no folder under src/ includes a folder of its own layer or above (tools/check_layers.sh).
# 5. Markdown tables (README.md, docs/, tests/README.md): every separator row (|---|...) follows a header row,
#    or the table renders as text.
#
# Needs only git and clang-format (CLANG_FORMAT names another binary). Exit status: 0 clean, 1 findings,
# 2 usage or tool error.
set -uo pipefail

usage() { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; }

fix=0
for arg in "$@"; do
  case $arg in
    --fix) fix=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "lint: unknown argument '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.." || exit 2
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "lint: $clang_format not found (apt-get install clang-format)" >&2
  exit 2
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "lint: $(pwd) is not a git work tree" >&2
  exit 2
fi

# Files of the given folders with a C++/CUDA extension that exist on disk, one per line.
source_files() {
  git ls-files --cached --others --exclude-standard -- "$@" | grep -E '\.(h|cc|cu|cuh)$' | sort -u |
    while IFS= read -r f; do
      if [ -f "$f" ]; then printf '%s\n' "$f"; fi
    done
}

status=0

# --- 1. formatting ----------------------------------------------------------------------------------------
unformatted=()
while IFS= read -r f; do
  if ! "$clang_format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then unformatted+=("$f"); fi
done < <(source_files include src tests bench tools python/src)

if [ "${#unformatted[@]}" -gt 0 ]; then
  if [ "$fix" -eq 1 ]; then
    echo "lint: reformatting ${#unformatted[@]} file(s):"
    printf '  %s\n' "${unformatted[@]}"
    "$clang_format" --style=file -i "${unformatted[@]}" || status=1
  else
    echo "lint: ${#unformatted[@]} file(s) not clang-formatted (tools/lint.sh --fix reformats them):"
    printf '  %s\n' "${unformatted[@]}"
    status=1
  fi
fi

# --- 2. forbidden calls in library code ---------------------------------------------------------------------
# Prints "file:line: what: source line" for each finding. String and character literals and comments are
# removed before matching (block comments across lines included).
forbidden_calls() {
  awk '
    FNR == 1 { in_block = 0 }
    {
      line = $0
      gsub(/"([^"\\]|\\.)*"/, "\"\"", line)
      gsub(/'"'"'([^'"'"'\\]|\\.)*'"'"'/, "0", line)
      code = ""
      while (line != "") {
        if (in_block) {
          end = index(line, "*/")
          if (end == 0) { line = ""; break }
          line = substr(line, end + 2); in_block = 0
          continue
        }
        slash = index(line, "//"); star = index(line, "/*")
        if (slash > 0 && (star == 0 || slash < star)) { code = code substr(line, 1, slash - 1); break }
        if (star > 0) { code = code substr(line, 1, star - 1); line = substr(line, star + 2); in_block = 1; continue }
        code = code line; line = ""
      }
      what = ""
      # exit/abort/printf called as free functions: std::x(, ::x( or x( not preceded by an identifier,
      # a member access (. -> ::) or "void" (the declaration of a member function named abort).
      call = "(exit|_exit|_Exit|quick_exit|abort|printf)[ \t]*\\("
      if (match(code, "(^|[^A-Za-z0-9_])(std)?::" call)) what = "exit/abort/printf call"
      else if (match(code, "(^|[^A-Za-z0-9_.:>])" call) && !match(code, "void[ \t]+(exit|abort)[ \t]*\\(")) {
        what = "exit/abort/printf call"
      }
      if (match(code, "std::cout|fprintf[ \t]*\\([ \t]*stdout")) what = "printing to stdout"
      if (match(code, "(^|[^A-Za-z0-9_])(secure_)?getenv[ \t]*\\(") &&
          FILENAME != "src/core/config.cc" && FILENAME != "src/bootstrap/rendezvous.cc" &&
          FILENAME != "src/nccl_shim/shim_config.cc") {
        what = "getenv outside src/core/config.cc, src/bootstrap/rendezvous.cc and src/nccl_shim/shim_config.cc"
      }
      if (what != "") printf "  %s:%d: %s: %s\n", FILENAME, FNR, what, $0
    }
  ' "$@"
}

library_files=()
while IFS= read -r f; do library_files+=("$f"); done < <(source_files src include)
if [ "${#library_files[@]}" -gt 0 ]; then
  findings=$(forbidden_calls "${library_files[@]}")
  if [ -n "$findings" ]; then
    echo "lint: library code must not exit, abort, print to stdout or read the environment directly:"
    printf '%s\n' "$findings"
    status=1
  fi
fi

# --- 3. history words in comments ---------------------------------------------------------------------------
# Files not checked (none at present); each entry names a file whose comments are being rewritten.
HISTORY_EXCLUDED=()

# Files of the given folders that check 3 reads, one per line (existing, tracked or not ignored).
text_files() {
  git ls-files --cached --others --exclude-standard -- "$@" | grep -E '\.(h|cc|cu|cuh|sh|py|txt|cmake|md)$' |
    sort -u | while IFS= read -r f; do
      if [ -f "$f" ]; then printf '%s\n' "$f"; fi
    done
}

# Prints "file:line: what: source line" for each comment line that uses a history word (see 3. above).
# C/C++/CUDA: // and /* */ comments, string and character literals skipped. Scripts and CMake: text after a #
# at the start of a line or after a blank, outside quotes; Python also its triple-quoted text. Other *.txt:
# every line.
history_words() {
  awk '
    FNR == 1 {
      in_block = 0; in_doc = 0; kind = "text"
      if (FILENAME ~ /\.(h|cc|cu|cuh)$/) kind = "c"
      else if (FILENAME ~ /\.md$/) kind = "md"
      else if (FILENAME ~ /(\.sh|\.py|\.cmake|(^|\/)CMakeLists\.txt)$/) kind = "hash"
    }
    # The rest of `s` after the string literal it starts with (quote `q`; a lone quote is skipped alone).
    function skip_string(s, q,    re) {
      re = q == "\"" ? "^\"([^\"\\\\]|\\\\.)*\"" : (kind == "c" ? "^'"'"'([^'"'"'\\\\]|\\\\.)*'"'"'" : "^'"'"'[^'"'"']*'"'"'")
      return match(s, re) ? substr(s, RLENGTH + 1) : substr(s, 2)
    }
    {
      line = $0; text = ""
      if (kind == "text" || kind == "md") text = line
      else if (kind == "c") {
        while (line != "") {
          if (in_block) {
            end = index(line, "*/")
            if (end == 0) { text = text " " line; break }
            text = text " " substr(line, 1, end - 1); line = substr(line, end + 2); in_block = 0
            continue
          }
          if (!match(line, /"|'"'"'|\/\/|\/\*/)) break
          tok = substr(line, RSTART, RLENGTH)
          if (tok == "//") { text = text " " substr(line, RSTART + 2); break }
          if (tok == "/*") { line = substr(line, RSTART + 2); in_block = 1; continue }
          line = skip_string(substr(line, RSTART), tok)
        }
      } else {
        if (FILENAME ~ /\.py$/) {
          quotes = gsub(/"""|'"'"''"'"''"'"'/, "&", line)
          if (in_doc || quotes > 0) text = line
          if (quotes % 2 == 1) in_doc = !in_doc
        }
        if (text == "") {
          while (line != "") {
            if (!match(line, /"|'"'"'|#/)) break
            tok = substr(line, RSTART, RLENGTH)
            if (tok == "#") {
              if (RSTART == 1 || substr(line, RSTART - 1, 1) ~ /[ \t]/) { text = substr(line, RSTART + 1); break }
              line = substr(line, RSTART + 1)
              continue
            }
            line = skip_string(substr(line, RSTART), tok)
          }
        }
      }
      if (text == "") next
      t = tolower(text); what = ""
      if (t ~ /session/) what = "a session"
      else if (t ~ /a review found/) what = "\"a review found\""
      else if (t ~ /(^|[^a-z0-9_])issues?[ -]?#?[0-9]/) what = "an issue number"
      else if (kind != "md" && t ~ /(^|[^0-9])[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]([^0-9]|$)/) what = "a date"
      else if (t ~ /field-notes|\.\.\/shared\//) what = "a file outside the repository"
      if (what != "") printf "  %s:%d: %s: %s\n", FILENAME, FNR, what, $0
    }
  ' "$@"
}

history_files=()
while IFS= read -r f; do
  [ "$f" = tools/lint.sh ] && continue
  excluded=0
  for x in "${HISTORY_EXCLUDED[@]}"; do [ "$f" = "$x" ] && excluded=1; done
  [ "$excluded" -eq 0 ] && history_files+=("$f")
done < <(text_files include src tests bench tools docs README.md)
if [ "${#history_files[@]}" -gt 0 ]; then
  findings=$(history_words "${history_files[@]}")
  if [ -n "$findings" ]; then
    echo "lint: comments must state facts, not history (no session, \"a review found\", issue number, date or file outside the repository):"
    printf '%s\n' "$findings"
    status=1
  fi
fi

# --- 4. layers -----------------------------------------------------------------------------------------------
if ! bash tools/check_layers.sh .; then status=1; fi

# --- 5. Markdown tables --------------------------------------------------------------------------------------
markdown=()
while IFS= read -r f; do
  [ -f "$f" ] && markdown+=("$f")
done < <(git ls-files --cached --others --exclude-standard -- README.md docs tests/README.md | grep -E '\.md$')
if [ "${#markdown[@]}" -gt 0 ]; then
  headless=$(awk 'FNR == 1 { prev = "" }
    /^\|[ :]*---/ && prev !~ /^\|/ { printf "  %s:%d: %s\n", FILENAME, FNR, $0 }
    { prev = $0 }' "${markdown[@]}")
  if [ -n "$headless" ]; then
    echo "lint: a Markdown table's separator row has no header row above it:"
    printf '%s\n' "$headless"
    status=1
  fi
fi

if [ "$status" -eq 0 ]; then echo "lint: ok"; fi
exit "$status"
