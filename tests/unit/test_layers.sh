#!/bin/sh
# The dependency direction of ../DESIGN.md's layout, checked on the sources:
#   - the ground floor (every subfolder of engine/: core, backend, comm, io,
#     data, monitor) includes nothing from the floors above it (zero/,
#     offload/, models/, text/, hf/, metrics/, tools/) nor the top
#     (engine/engine*.h);
#   - offload/ includes nothing of zero/ ("zero uses offload") or models/;
#   - models/ includes nothing of zero/ or offload/ (models know nothing of
#     ZeRO).
# Prints every include that breaks a rule (file:line: text) and exits 1.
# Usage: test_layers.sh SOURCE_DIR
set -u
src=${1:?usage: test_layers.sh SOURCE_DIR}
cd "$src" || exit 2
bad=0
# check "what" "folders..." -- regex of forbidden include paths
check() {
    what=$1
    re=$2
    shift 2
    hits=$(grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
        "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"($re)" "$@" 2>/dev/null)
    if [ -n "$hits" ]; then
        echo "$what:"
        echo "$hits" | sed 's/^/  /'
        bad=1
    fi
}
ground=$(find engine -mindepth 1 -maxdepth 1 -type d | sort)
# shellcheck disable=SC2086
check "the ground floor includes a floor above it" \
    'zero/|offload/|models/|text/|hf/|metrics/|tools/|engine/engine[^/]*\.h' $ground
check "offload/ includes zero/ or models/" 'zero/|models/' offload
check "models/ includes zero/ or offload/" 'zero/|offload/' models
if [ "$bad" -ne 0 ]; then
    echo "test_layers: FAILED (the dependency direction, DESIGN.md \"Layout\")"
    exit 1
fi
# shellcheck disable=SC2086
echo "test_layers: ok ($(echo $ground | wc -w) ground-floor folders, offload/, models/)"
