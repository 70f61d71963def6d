#!/bin/sh
# hpZ and MiCS across two simulated hosts (tools/twohost.sh --slots 2: 2
# hosts x 2 ranks, Open MPI over TCP only), each beside plain stage 3 by
# tests/multirank/test_hier.c with --per-host 2, which checks every rank's
# bytes per step inside and across hosts against the formula:
#   hpz    zero_hpz_partition_size 2: the backward gathers stay inside each
#          host (bit-identical losses);
#   mics   mics_shard_size 2: a host is a shard group, the gathers stay
#          inside it and the gradients' all-reduce crosses (losses within
#          test_hier's band);
#   hier   mics_shard_size 4 with mics_hierarchical_params_gather: one group
#          over both hosts, gathered across hosts among the ranks of the
#          same place first, then inside each host (bit-identical: one group
#          reduces as plain stage 3 does);
#   hier_qwz the same with zero_quantized_weights: the two levels move the
#          int8 records as they are (the flat gather's bytes, each record
#          across the link once; losses within test_hier's QUANT_BAND);
#   zeropp zero_hpz_partition_size 2 with zero_quantized_weights and
#          zero_quantized_gradients (DeepSpeed's ZeRO++ tutorial): int8
#          records across hosts for the forward's gathers and the gradients'
#          all-to-all, int8 inside each host for the backward's (losses
#          within test_hier's QUANT_BAND);
# and configs/zeropp.json (DeepSpeed's ZeRO++ tutorial block, H = the 2
# ranks per host) through engine-run and train_cls on the same 2 x 2 ranks.
# Skipped (77) where namespaces cannot be made.
#   test_hier_twohost.sh TEST_HIER WORKDIR TWOHOST BIN_DIR
set -u
. "$(dirname "$0")/test_util.sh"
need_args 4 "TEST_HIER WORKDIR TWOHOST BIN_DIR" $#
exe=$(readlink -f "$1")
twohost=$(readlink -f "$3")
bin=$(readlink -f "$4")
cfg=$(readlink -f "$(dirname "$0")/../../configs/zeropp.json")
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
if ! why=$("$twohost" check); then
  echo "test_hier_twohost: skipped: $why"
  exit 77
fi
name=zh$$
for d in /run/twohost/zh*; do
  [ -d "$d" ] && ! kill -0 "${d##*/zh}" 2>/dev/null && "$twohost" down --name "${d##*/}"
done
trap '"$twohost" down --name $name >/dev/null 2>&1' EXIT
"$twohost" up --name $name --slots 2 > up.log 2>&1 || { fail "twohost.sh up: $(tail -3 up.log)"; finish; }
run() { # CASE ARGS...
  c=$1
  shift
  "$twohost" exec --name $name -- mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -np 4 --hostfile /run/twohost/$name/hostfile -x OMP_NUM_THREADS=1 \
    "$exe" --per-host 2 "$@" </dev/null > $c.log 2>&1 || fail "$c: exit $?: $(grep -v '^ok' $c.log | tail -5)"
  grep '^ok rank' $c.log
}
run hpz --hpz 2 --ckpt "$(pwd -P)/ck_hpz"
run mics --mics 2 --ckpt "$(pwd -P)/ck_mics"
run hier --mics 4 --hier 1 --ckpt "$(pwd -P)/ck_hier"
run hier_qwz --mics 4 --hier 1 --qwz 1 --ckpt "$(pwd -P)/ck_hier_qwz"
run zeropp --hpz 2 --qwz 1 --qgz 1 --ckpt "$(pwd -P)/ck_zeropp"
# qgZ int4 splits the communicator when the engine starts: with rank 1's
# allocations failing before it, every rank's start fails at once, the
# others naming rank 1 (not waiting in the split for a rank that never
# comes, which ended only when rank 1's exit took the job down)
"$twohost" exec --name $name -- mpirun --allow-run-as-root --oversubscribe --bind-to none \
  -np 4 --hostfile /run/twohost/$name/hostfile -x OMP_NUM_THREADS=1 \
  -x DS_FAULT_INJECT=error:stage3:alloc:rank=1 \
  "$exe" --per-host 2 --hpz 2 --qgz 1 --int4 1 --init-fails 1 </dev/null > int4_fails.log 2>&1 ||
  fail "int4_fails: exit $?: $(grep -v '^ok' int4_fails.log | tail -5)"
[ "$(grep -c '^ok: rank' int4_fails.log)" = 4 ] ||
  fail "int4_fails: not every rank's start failed as it should: $(tail -5 int4_fails.log)"
grep '^ok: rank 0' int4_fails.log
"$bin/gen_sentences" --rows 600 --seed 7 --out "$(pwd -P)/data.csv" >/dev/null || fail "gen_sentences"
"$twohost" exec --name $name -- "$bin/engine-run" --np 4 --hostfile /run/twohost/$name/hostfile \
  --config "$cfg" train_cls --data "$(pwd -P)/data.csv" --model mlp --hidden 32 \
  --intermediate 64 --max-seq-len 32 --max-steps 4 </dev/null > zeropp_cls.log 2>&1 ||
  fail "configs/zeropp.json through train_cls: exit $?: $(tail -3 zeropp_cls.log)"
grep -q "macro avg" zeropp_cls.log || fail "configs/zeropp.json: no dev evaluation in the log"
grep "communication over" zeropp_cls.log
grep -q "secondary groups" zeropp_cls.log && fail "configs/zeropp.json placed host by host warned: $(grep 'secondary groups' zeropp_cls.log)"
# MiCS's hierarchy with the ranks placed round robin (--map-by node: ranks
# 0 and 2 on one host): refused at start-up naming the key on every rank
# (the "inside a host" level crossed the link, twice the bytes across)
printf '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "mics_shard_size": 4, "mics_hierarchical_params_gather": true}}' >hier_rr.json
if "$twohost" exec --name $name -- mpirun --allow-run-as-root --oversubscribe --bind-to none \
  -np 4 --map-by node --hostfile /run/twohost/$name/hostfile -x OMP_NUM_THREADS=1 \
  "$bin/train_cls" --config "$(pwd -P)/hier_rr.json" --data "$(pwd -P)/data.csv" --model mlp \
  --hidden 32 --intermediate 64 --max-seq-len 32 --max-steps 2 </dev/null > hier_rr.log 2>&1; then
  fail "MiCS hierarchy placed round robin: trained: $(tail -3 hier_rr.log)"
fi
[ "$(grep -c 'mics_hierarchical_params_gather: rank' hier_rr.log)" -ge 1 ] &&
  grep -q "consecutive ranks" hier_rr.log ||
  fail "MiCS hierarchy placed round robin: $(tail -5 hier_rr.log)"
# hpZ placed round robin trains (DeepSpeed's groups are consecutive ranks
# too) and says at start-up that its groups span hosts
printf '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}}' >hpz_rr.json
"$twohost" exec --name $name -- mpirun --allow-run-as-root --oversubscribe --bind-to none \
  -np 4 --map-by node --hostfile /run/twohost/$name/hostfile -x OMP_NUM_THREADS=1 \
  "$bin/train_cls" --config "$(pwd -P)/hpz_rr.json" --data "$(pwd -P)/data.csv" --model mlp \
  --hidden 32 --intermediate 64 --max-seq-len 32 --max-steps 2 </dev/null > hpz_rr.log 2>&1 ||
  fail "hpZ placed round robin: exit $?: $(tail -3 hpz_rr.log)"
grep -q "2 of the 2 secondary groups (consecutive ranks) span hosts" hpz_rr.log ||
  fail "hpZ placed round robin: no warning: $(grep -i hpz hpz_rr.log | head -3)"
finish
