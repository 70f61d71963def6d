#!/usr/bin/env bash
# Two hosts without shared memory (issue 15, item 7): tools/twohost.sh makes
# two network namespaces joined by a veth pair, each its own host name; Open
# MPI talks TCP only (btl self,tcp) and starts the rank of the second host
# through the script's launch agent (ip netns exec), with a fresh login
# environment there. engine-run --np 2 --hostfile runs train_cls (a small
# BERT with dropout, ZeRO-2) across them, and the test checks:
#   - where the ranks ran: rank 0 in host 1's network namespace, rank 1 in
#     host 2's (/proc/self/ns/net against /run/netns), each with its host
#     name, btl self,tcp, and a DS_* variable that only engine-run's -x can
#     have carried to host 2;
#   - the same losses on two hosts as on one (the arithmetic does not depend
#     on the transport);
#   - 10 steps with a checkpoint into a folder both hosts see, then --resume
#     for 10 more: the losses of steps 11-20 equal the straight run's, and
#     the checkpoint verifies (zero_to_fp32 --verify);
#   - a checkpoint folder host 2 does not see (an empty tmpfs in its own
#     mount namespace, twohost.sh --hide): train_cls stops at start-up
#     (ds_checkpoint_clean) with one line naming rank 1, host 2, the folder
#     and the rule, and no generic file error; a program that saves without
#     that start-up check (test_ckpt_resume) gets the same line from
#     ds_save_checkpoint;
#   - nothing is left running in either namespace after each job, and the
#     namespaces are gone at the end.
# Exit 77 (skipped, saying why) where namespaces cannot be made (not root,
# no ip or unshare).
#
#   test_two_hosts.sh BINDIR WORKDIR TWOHOST CKPT_RESUME_BIN
set -u
. "$(dirname "$0")/../unit/test_util.sh"
need_args 4 "BINDIR WORKDIR TWOHOST CKPT_RESUME_BIN" $#
bin=$(readlink -f "$1")
twohost=$(readlink -f "$3")
resume_bin=$(readlink -f "$4")
if ! why=$("$twohost" check); then
  echo "skipped: $why"
  exit 77
fi
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
work=$(pwd -P)
name=zt$$ # unique: tests running at once make their own pairs
# a pair an earlier run could not remove (killed at its timeout): its pid is gone
for d in /run/twohost/zt*; do
  [ -d "$d" ] && ! kill -0 "${d##*/zt}" 2>/dev/null && "$twohost" down --name "${d##*/}"
done
h1=$name-1 h2=$name-2
trap '"$twohost" down --name $name' EXIT
"$twohost" up --name $name >up.log 2>&1 || { cat up.log; exit 1; }
hostfile=/run/twohost/$name/hostfile
export OMP_NUM_THREADS=1

# The link's raw rate and what it cost the machine, the line the benchmarks
# set their numbers against (bench/overlap_twohost.sh, ds_compare.sh)
"$twohost" link --name $name >link.log 2>&1 || fail "twohost.sh link exited $?: $(cat link.log)"
grep -Eq '^link: [0-9.]+ MB/s raw TCP \([0-9]+ MB in [0-9.]+ s\), [0-9.]+ Gbit/s; the machine [0-9.]+ cores busy meanwhile, [0-9.]+ ms of CPU per MB$' link.log ||
  fail "twohost.sh link printed: $(cat link.log)"
awk '{ if ($2 + 0 <= 0) exit 1 }' link.log || fail "twohost.sh link measured no rate: $(cat link.log)"

"$bin/gen_sentences" --rows 400 --seed 7 --out data.csv >/dev/null || exit 1
cat >cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
 "scheduler": {"type": "WarmupLR",
               "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-2, "warmup_num_steps": 5}},
 "zero_optimization": {"stage": 2}}
JSON
# The schedule is named, and does not depend on the run's length: the first
# half (--max-steps 10) and the straight run (20) follow the same one.
# An APP that notes where its rank runs, then is train_cls. Host 2 gets a
# login's environment, so the DS_ variable there came through mpirun -x.
cat >probe.sh <<SH
#!/bin/sh
echo "host \$(hostname) net \$(readlink /proc/self/ns/net) btl \${OMPI_MCA_btl:-} zstd \${DS_CKPT_ZSTD_LEVEL:-}" >"$work/where.\$OMPI_COMM_WORLD_RANK"
exec "$bin/train_cls" "\$@"
SH
chmod +x probe.sh
TC="--data $work/data.csv --model bert --layers 2 --hidden 32 --heads 2 --intermediate 64
    --dropout 0.1 --max-seq-len 32"
# on2 LOG APP ARGS...: engine-run across the two hosts; sets rc
on2() {
  local log=$1
  shift
  "$twohost" exec --name $name ${hide:+--hide "$hide"} -- "$bin/engine-run" --np 2 \
    --hostfile "$hostfile" --config cfg.json "$@" </dev/null >"$log" 2>&1
  rc=$?
  local p
  for p in $(ip netns pids $h1) $(ip netns pids $h2); do
    fail "$log: process $p ($(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)) still runs on a host"
  done
}
losses() { # step and loss of each step line of a metrics file, from step $2 on
  sed -n 's/^{"step": \([0-9]*\), .*"loss": \([0-9.]*\),.*/\1 \2/p' "$1" | awk -v from="$2" '$1 >= from'
}
hide=""

# ---- the ranks: two namespaces, TCP, -x forwarding; the straight run ----------
DS_CKPT_ZSTD_LEVEL=3 on2 straight.log "$work/probe.sh" $TC --max-steps 20 \
  --metrics "$work/straight.jsonl"
[ "$rc" -eq 0 ] || { fail "straight run across two hosts: rc $rc"; tail -20 straight.log; }
for r in 0 1; do
  h=$name-$((r + 1))
  want="host $h net net:[$(stat -L -c %i /run/netns/$h)] btl self,tcp zstd 3"
  got=$(cat where.$r 2>/dev/null)
  [ "$got" = "$want" ] || fail "rank $r: '$got', want '$want'"
done
[ "$(readlink /proc/self/ns/net)" != "$(sed 's/.* net \([^ ]*\) .*/\1/' where.1 2>/dev/null)" ] ||
  fail "rank 1 ran in this test's own network namespace"
echo "where the ranks ran: $(cat where.0) | $(cat where.1)"

# the same run on one host, shared memory allowed: the same losses
OMP_NUM_THREADS=1 "$bin/engine-run" --np 2 --config cfg.json train_cls $TC --max-steps 20 \
  --metrics "$work/onehost.jsonl" </dev/null >onehost.log 2>&1 ||
  { fail "the one-host run failed"; tail -20 onehost.log; }
losses straight.jsonl 1 >straight.txt
losses onehost.jsonl 1 >onehost.txt
[ "$(wc -l <straight.txt)" -eq 20 ] || fail "straight run: $(wc -l <straight.txt) steps, want 20"
cmp -s straight.txt onehost.txt ||
  { fail "losses on two hosts differ from one host:"; paste straight.txt onehost.txt | head; }

# ---- checkpoint into a folder both hosts see, resume ---------------------------
on2 first.log train_cls $TC --max-steps 10 --save-steps 10 --ckpt-dir "$work/ck" \
  --metrics "$work/first.jsonl"
[ "$rc" -eq 0 ] || { fail "first half: rc $rc"; tail -20 first.log; }
[ "$(head -n1 ck/latest 2>/dev/null)" = global_step10 ] || fail "ck/latest is not global_step10"
"$bin/zero_to_fp32" --verify ck >verify.log 2>&1 || { fail "zero_to_fp32 --verify:"; cat verify.log; }
on2 second.log train_cls $TC --max-steps 20 --save-steps 10 --ckpt-dir "$work/ck" --resume \
  --metrics "$work/second.jsonl"
[ "$rc" -eq 0 ] || { fail "resumed half: rc $rc"; tail -20 second.log; }
grep -q "resumed from $work/ck/global_step10 at step 10" second.log || fail "no resume line"
losses straight.jsonl 11 >want.txt
losses second.jsonl 1 >got.txt
[ "$(wc -l <want.txt)" -eq 10 ] || fail "straight run: $(wc -l <want.txt) steps from step 11"
cmp -s want.txt got.txt || { fail "resumed losses differ:"; paste want.txt got.txt; }
[ "$(head -n1 ck/latest 2>/dev/null)" = global_step20 ] || fail "ck/latest is not global_step20"
[ -e ck/.shared-check ] && fail "the shared-folder marker was left in ck"

# ---- a checkpoint folder host 2 does not see ------------------------------------
rule="every rank must see the same checkpoint folder"
# check_unseen LOG DIR N: N lines (1 through engine-run, which shows an error
# every rank prints once; 2 from mpirun itself: rank 1's and rank 0's "rank 1
# failed with ...") naming rank 1 on host 2, rank 0 on host 1, DIR, the rule
check_unseen() {
  local log=$1 dir=$2 want=$3 n
  [ "$rc" -ne 0 ] || fail "$log: the job exited 0 with a folder host 2 does not see"
  n=$(grep -c "$rule" "$log")
  [ "$n" -eq "$want" ] || fail "$log: $n lines say '$rule', want $want"
  grep -q "checkpoint folder $dir: rank 1 (host $h2) does not see the folder rank 0 (host $h1) writes ($dir/.shared-check, which rank 0 has just written, is not there); $rule" "$log" ||
    { fail "$log: no line naming rank 1, $h2, $h1 and $dir:"; grep -v '^ \|^{\|^}' "$log" | tail -5; }
  grep -q "No such file" "$log" && fail "$log: a generic file error: $(grep 'No such file' "$log")"
  sed -n "/$rule/{p;q}" "$log"
}
mkdir -p hidden hidden2
hide=$work/hidden on2 unseen.log train_cls $TC --max-steps 10 --save-steps 5 \
  --ckpt-dir "$work/hidden"
check_unseen unseen.log "$work/hidden" 1
[ "$(ls -A hidden)" = .lock ] || fail "hidden/ holds $(ls -A hidden), want .lock only"
# ds_save_checkpoint itself, without the start-up check: the same line
"$twohost" exec --name $name --hide "$work/hidden2" -- mpirun -np 2 --hostfile "$hostfile" \
  --allow-run-as-root --bind-to none -x OMP_NUM_THREADS "$resume_bin" --mode first --steps 2 --dir "$work/hidden2" \
  --out "$work/save" --model mlp --stage 2 --precision fp32 --dropout 0 </dev/null \
  >unseen_save.log 2>&1
rc=$?
check_unseen unseen_save.log "$work/hidden2" 2
[ "$(ls -A hidden2)" = .lock ] || fail "hidden2/ holds $(ls -A hidden2), want .lock only"

"$twohost" down --name $name
trap - EXIT
[ -e /run/netns/$h1 ] || [ -e /run/netns/$h2 ] && fail "the namespaces are still there"
[ $fails -eq 0 ] && echo "two hosts: steps 11-20 resumed = straight = one host: $(tr '\n' ' ' <got.txt)"
[ $fails -eq 0 ] && cd .. && rm -rf "$work"
finish
