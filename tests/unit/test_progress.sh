#!/bin/sh
# Rank 0's progress in the bundled trainers (tools/common/progress.h), for
# train_cls and train_lm, 12 steps at steps_per_print 5:
#   log       stdout a file: a plain line at steps 5, 10 and 12 (the last)
#             with step/total, epoch, the loss averaged over the steps since
#             the previous line, lr, samples/s, tokens/s, elapsed and time
#             left; one evaluation line with its rows and rate; at 2 ranks
#             (train_lm through engine-run) each line once;
#   terminal  stdout a pseudo-terminal (script(1)): the status line redrawn
#             in place ("\r\033[K" then "train S/12 ..."), more than once,
#             ending at 12/12 100% followed by a newline; the engine's step
#             lines still whole on lines of their own; no plain progress
#             lines; evaluation's own status line.
#   test_progress.sh BINDIR CSV WORKDIR
set -u
. "$(dirname "$0")/test_util.sh"
need_args 3 "BINDIR CSV WORKDIR" $#
bin=$(readlink -f "$1")
csv=$(readlink -f "$2")
rm -rf "$3" && mkdir -p "$3" && cd "$3" || exit 1
export OMP_NUM_THREADS=1 OMPI_MCA_btl=self,vader,tcp

python3 - <<'PY' || exit 1
import random
r = random.Random(7)
w = ["anna", "bob", "sees", "likes", "the", "red", "small", "ball", "house", "tree"]
docs = [" ".join(r.choice(w) for _ in range(r.randint(4, 12))) + "." for _ in range(200)]
open("corpus.txt", "w").write("\n\n".join(docs) + "\n")
PY
printf '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 5}\n' > cfg.json
cls="$bin/train_cls --config cfg.json --data $csv --model mlp --hidden 16 --intermediate 32 --max-seq-len 32 --max-steps 12"
lm="$bin/train_lm --config cfg.json --data corpus.txt --seq-len 16 --layers 1 --hidden 16 --heads 2 --max-steps 12"

# check_log PROG LOG: the plain lines of a log
check_log() {
  prog=$1
  log=$2
  steps=$(grep -E "^$prog: step [0-9]+/12 " "$log" | sed -E "s/^$prog: step ([0-9]+)\/.*/\1/" | tr '\n' ' ')
  [ "$steps" = "5 10 12 " ] || fail "$prog log: progress lines at steps '$steps', want '5 10 12 '"
  line=$(grep -E "^$prog: step 10/12 " "$log" | head -1)
  echo "$line" | grep -Eq "^$prog: step 10/12 \(83%\) epoch [0-9.]+ loss [0-9.]+ \(mean of 5 steps\) lr [0-9.e+-]+ [0-9.]+ samples/s [0-9]+ tokens/s elapsed [0-9]+:[0-9]{2} left [0-9]+:[0-9]{2}$" ||
    fail "$prog log: step 10's line is '$line'"
  grep -q "^$prog: step 12/12 (100%) .*(mean of 2 steps).* left 0:00$" "$log" ||
    fail "$prog log: no last line at 12/12 with the mean of 2 steps and 0:00 left"
  grep -Eq "^$prog: evaluation: [0-9]+ rows in [0-9.]+ s \([0-9.]+ rows/s\)$" "$log" ||
    fail "$prog log: no evaluation line"
  if grep -q "$(printf '\r')" "$log"; then fail "$prog log: a carriage return in a log file"; fi
}

# check_tty PROG LOG: what a terminal received
check_tty() {
  prog=$1
  log=$2
  esc=$(printf '\r\033\\[K')
  draws=$(grep -ao "${esc}train [0-9]*/12 [0-9]*%" "$log" | wc -l)
  [ "$draws" -ge 2 ] || fail "$prog tty: $draws status draws, want at least 2"
  grep -aq "${esc}train 12/12 100% [0-9:]*<0:00 | loss [0-9.]* | lr [0-9.e+-]* | epoch" "$log" ||
    fail "$prog tty: no final status 12/12 100% with 0:00 left"
  # script(1) turns the final newline into \r\n
  grep -aq "${esc}train 12/12 100%.*$(printf '\r')\$" "$log" ||
    fail "$prog tty: the final status line is not ended by a newline"
  grep -aq "^$prog: step [0-9]" "$log" && fail "$prog tty: plain progress lines on a terminal"
  # the engine's line at step 10 starts on a cleared line, whole
  grep -aq "${esc}\[zero-engine\] step 10 epoch .* mem [0-9.]* MiB" "$log" ||
    fail "$prog tty: the engine's step 10 line is not on a cleared line of its own"
  grep -aq "${esc}evaluation 1/[0-9]* " "$log" || fail "$prog tty: no evaluation status line"
}

$cls > cls.log 2>&1 || fail "train_cls exited $?: $(tail -3 cls.log)"
check_log train_cls cls.log
$lm > lm.log 2>&1 || fail "train_lm exited $?: $(tail -3 lm.log)"
check_log train_lm lm.log
# 2 ranks: rank 0 alone prints (engine-run's relay shows rank 0's stdout)
"$bin/engine-run" --np 2 --config cfg.json train_lm --data corpus.txt --seq-len 16 --layers 1 \
  --hidden 16 --heads 2 --max-steps 12 > lm2.log 2>&1 || fail "train_lm --np 2 exited $?: $(tail -3 lm2.log)"
n=$(grep -c "train_lm: step 10/12 " lm2.log)
[ "$n" = 1 ] || fail "train_lm at 2 ranks: step 10's progress line $n times"

if ! command -v script >/dev/null; then
  echo "test_progress: no script(1) (util-linux) for a pseudo-terminal; the terminal half skipped"
  finish
fi
script -qfec "$cls" /dev/null > cls.tty 2>&1 || fail "train_cls on a terminal exited $?"
check_tty train_cls cls.tty
script -qfec "$lm" /dev/null > lm.tty 2>&1 || fail "train_lm on a terminal exited $?"
check_tty train_lm lm.tty
finish
