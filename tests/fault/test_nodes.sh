#!/usr/bin/env bash
# One job from one launcher per node, torchrun-style (issue 19):
# engine-run --nnodes N --node-rank R --master-addr A --master-port P
# --nproc-per-node K, and the RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
# environment an outside agent sets. The "nodes" are launchers on this
# machine (and, in two_hosts, in two network namespaces). train_cls trains a
# small BERT (ZeRO-2, dropout 0) for 10 steps; one case per ctest test:
#
#   np1x2      two launchers of one rank each: the losses of every step equal
#              those of engine-run --np 2, exactly (the same arithmetic in
#              the same rank order: the joined job is ordered by node rank)
#   np2x2      two launchers of two ranks each against engine-run --np 4
#   env        RANK/WORLD_SIZE/MASTER_*: rank 1 through engine-run, rank 0
#              train_cls itself; the losses of engine-run --np 2
#   never      node 0 alone, then node 1 alone, then RANK 0 alone: each ends
#              within the timeout + 10 s, rc 1, one line naming the one that
#              never came
#   bad_addr   node 1 is given a master address that does not resolve: both
#              launchers end within the timeout + 10 s, one line each, node
#              1's naming node 0 and the address, node 0's naming node 1
#   port_busy  a second node 0 on the port the first listens on ends at once
#              with one line ("in use"); the first and node 1 then train
#   rank_range --node-rank 2 of --nnodes 2: refused at once (rc 2, one line);
#              node 0 ends within the timeout naming node 1
#   duplicate  nodes 0, 1 and 1 of --nnodes 3: all three end at once, each
#              with one line saying node 1 was given twice
#   node_dies  a rank of node 1 is killed mid-training: both launchers end
#              within 15 s (node 0 stops its ranks for node 1), node 1's line
#              names the job's rank 1, node 0's names node 1
#   node_pipe  node 0's rank dies of SIGPIPE (as one does that writes to a
#              rank already gone) 1.5 s before node 1's is SIGKILLed
#              (rank_echo stands in for the ranks): node 0 names node 1 and
#              exits 137, the cause, not 141, the echo
#   two_hosts  two launchers in two network namespaces (tools/twohost.sh):
#              node 1's launcher on host 2, started through twohost's agent;
#              the losses of --np 2. Exit 77 where namespaces cannot be made.
#
# Every launcher runs in a session of its own (setsid); when the case ends,
# no process of those sessions may remain (ranks, mpirun, ompi-server).
#
#   test_nodes.sh BINDIR WORKDIR TWOHOST CASE
set -u
. "$(dirname "$0")/../unit/test_util.sh"
need_args 4 "BINDIR WORKDIR TWOHOST CASE" $#
bin=$(readlink -f "$1")
twohost=$(readlink -f "$3")
tcase=$4
if [ "$tcase" = two_hosts ] && ! why=$("$twohost" check); then
  echo "skipped: $why"
  exit 77
fi
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
work=$(pwd -P)
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK PMI_SIZE PMI_RANK SLURM_JOB_ID SLURM_PROCID \
  SLURM_NTASKS SLURM_STEP_ID RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT \
  NODE_RANK DS_JOIN_NODE_RANK DS_JOIN_NNODES
# several launchers on one small machine: one thread a rank, as --np does
export OMP_NUM_THREADS=1
T=4 # the rendezvous timeout of the bad-input cases (comm_timeout_s): short, so the test is
"$bin/gen_sentences" --rows 400 --seed 5 --out data.csv >/dev/null || exit 1
config() { # config FILE TIMEOUT
  cat >"$1" <<JSON
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}},
 "zero_optimization": {"stage": 2},
 "zero_engine": {"comm_timeout_s": $2}}
JSON
}
# The training runs may wait for each other on a loaded machine: 60 s.
config cfg.json 60
config short.json $T
# a port nothing else here uses: from this process's id, in 20000..29999
port=$((20000 + $$ % 10000))
train=(train_cls --data "$work/data.csv" --model bert --layers 2 --hidden 64 --heads 2
  --intermediate 128 --max-seq-len 64 --dropout 0 --seed 3)

since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
losses() { sed -n 's/^{"step": \([0-9]*\),.*"loss": \([^,]*\),.*/\1 \2/p' "$1"; }

# node R ARGS...: a launcher of --nnodes in the background, in a session of
# its own; its pid in pids[R], its output in nR.out / nR.err (R may be a tag)
declare -A pids
sessions=""
node() {
  local r=$1
  shift
  setsid "$bin/engine-run" "$@" >"n$r.out" 2>"n$r.err" </dev/null &
  pids[$r]=$!
  sessions="$sessions $!"
}
# wait_node R LIMIT: its exit status in rc; a launcher still running after
# LIMIT s is a hang: killed with its session
wait_node() {
  local r=$1 limit=$2 t0
  t0=$(now)
  while kill -0 "${pids[$r]}" 2>/dev/null; do
    if [ "$(awk -v a="$t0" -v b="$(now)" -v l="$limit" 'BEGIN { print (b - a > l) }')" = 1 ]; then
      fail "node $r did not end within $limit s: killing its session"
      kill -KILL -- "-${pids[$r]}" 2>/dev/null
      break
    fi
    sleep 0.05
  done
  wait "${pids[$r]}"
  rc=$?
}
# one_line R CODE PATTERN: node R exited CODE with one line on stderr
# holding PATTERN (an extended regular expression)
one_line() {
  local r=$1 code=$2 pattern=$3
  [ "$rc" -eq "$code" ] || fail "node $r exited $rc, want $code: $(cat "n$r.err")"
  [ "$(wc -l <"n$r.err")" -eq 1 ] || fail "node $r printed $(wc -l <"n$r.err") lines, want 1: $(cat "n$r.err")"
  grep -Eq "$pattern" "n$r.err" || fail "node $r's line does not match '$pattern': $(cat "n$r.err")"
  echo "node $r (rc $rc): $(cat "n$r.err")"
}
# Nothing of the launchers' sessions may remain running (a killed rank may
# stay a zombie where this container's init does not reap orphans).
no_leftovers() {
  sleep 0.5
  local s left=""
  for s in $sessions; do
    left="$left$(ps -e -o sid=,stat=,pid=,args= | awk -v s="$s" '$1 == s && $2 !~ /^Z/')"
  done
  [ -z "$left" ] || fail "processes left behind: $left"
}
# same_losses REF GOT: the step losses of two metrics files, equal
same_losses() {
  local want got
  want=$(losses "$1")
  got=$(losses "$2")
  [ -n "$want" ] || fail "no losses in $1"
  [ "$want" = "$got" ] || fail "losses differ from $1's:
$(diff <(echo "$want") <(echo "$got"))"
  echo "$(echo "$got" | wc -l) steps, the same losses as $1 (step 10: $(echo "$got" | sed -n '10p'))"
}
nodes=(--master-addr localhost --master-port "$port")

case $tcase in
np1x2 | np2x2)
  k=${tcase:2:1}
  "$bin/engine-run" --np $((2 * k)) --config cfg.json "${train[@]}" --max-steps 10 \
    --metrics "$work/ref.jsonl" >ref.out 2>ref.err || { fail "engine-run --np $((2 * k)) failed"; cat ref.err; }
  for r in 1 0; do
    node $r --nnodes 2 --node-rank $r "${nodes[@]}" --nproc-per-node "$k" --config cfg.json \
      "${train[@]}" --max-steps 10 --metrics "$work/m.jsonl"
  done
  for r in 0 1; do
    wait_node $r 60
    [ "$rc" -eq 0 ] || fail "node $r exited $rc: $(cat "n$r.err")"
  done
  same_losses ref.jsonl m.jsonl
  ;;
env)
  "$bin/engine-run" --np 2 --config cfg.json "${train[@]}" --max-steps 10 \
    --metrics "$work/ref.jsonl" >ref.out 2>ref.err || { fail "engine-run --np 2 failed"; cat ref.err; }
  for r in 1 0; do
    if [ $r = 1 ]; then run=("$bin/engine-run" --config cfg.json "${train[@]}")
    else run=("$bin/${train[0]}" --config cfg.json "${train[@]:1}"); fi
    MASTER_ADDR=localhost MASTER_PORT=$port WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
      setsid "${run[@]}" --max-steps 10 --metrics "$work/m.jsonl" >"n$r.out" 2>"n$r.err" </dev/null &
    pids[$r]=$!
    sessions="$sessions $!"
  done
  for r in 0 1; do
    wait_node $r 60
    [ "$rc" -eq 0 ] || fail "rank $r exited $rc: $(cat "n$r.err")"
  done
  same_losses ref.jsonl m.jsonl
  ;;
never)
  t0=$(now)
  node 0 --nnodes 2 --node-rank 0 "${nodes[@]}" --config short.json "${train[@]}"
  wait_node 0 $((T + 10))
  one_line 0 1 "^engine-run: node 0: node 1 of 2 did not arrive at port $port within $T s\$"
  t0=$(now)
  node 1 --nnodes 2 --node-rank 1 "${nodes[@]}" --config short.json "${train[@]}"
  wait_node 1 $((T + 10))
  one_line 1 1 "^engine-run: node 1: node 0 \\(the master, localhost:$port\\) did not answer within $T s"
  # the env form: RANK 0's train_cls waits for RANK 1
  MASTER_ADDR=localhost MASTER_PORT=$port WORLD_SIZE=2 RANK=0 \
    setsid "$bin/train_cls" --config short.json "${train[@]:1}" >ne.out 2>ne.err </dev/null &
  pids[e]=$!
  sessions="$sessions $!"
  wait_node e $((T + 10))
  grep -q "rank 1 of 2 did not arrive at port $port within $T s" ne.err ||
    fail "RANK 0 alone: no line naming rank 1: $(cat ne.err)"
  [ "$rc" -ne 0 ] || fail "RANK 0 alone exited 0"
  echo "RANK 0 alone (rc $rc): $(cat ne.err)"
  ;;
bad_addr)
  node 0 --nnodes 2 --node-rank 0 "${nodes[@]}" --config short.json "${train[@]}"
  node 1 --nnodes 2 --node-rank 1 --master-addr no-such-host.invalid --master-port "$port" \
    --config short.json "${train[@]}"
  for r in 0 1; do wait_node $r $((T + 10)); eval "rc$r=$rc"; done
  rc=$rc0
  one_line 0 1 "node 1 of 2 did not arrive"
  rc=$rc1
  one_line 1 1 "node 0 \\(the master, no-such-host.invalid:$port\\) did not answer within $T s \\(last: cannot resolve"
  ;;
port_busy)
  node 0 --nnodes 2 --node-rank 0 "${nodes[@]}" --config cfg.json "${train[@]}" --max-steps 3
  sleep 1 # node 0 listens by now
  node b --nnodes 2 --node-rank 0 "${nodes[@]}" --config cfg.json "${train[@]}" --max-steps 3
  wait_node b 10
  one_line b 1 "^engine-run: node 0: master port $port is in use on this machine"
  node 1 --nnodes 2 --node-rank 1 "${nodes[@]}" --config cfg.json "${train[@]}" --max-steps 3
  for r in 0 1; do
    wait_node $r 60
    [ "$rc" -eq 0 ] || fail "node $r exited $rc after the refused second node 0: $(cat "n$r.err")"
  done
  ;;
rank_range)
  node 0 --nnodes 2 --node-rank 0 "${nodes[@]}" --config short.json "${train[@]}"
  node 2 --nnodes 2 --node-rank 2 "${nodes[@]}" --config short.json "${train[@]}"
  wait_node 2 5
  one_line 2 2 "^engine-run: --node-rank 2 is out of range: --nnodes 2 numbers the nodes 0..1\$"
  wait_node 0 $((T + 10))
  one_line 0 1 "node 1 of 2 did not arrive"
  ;;
duplicate)
  t0=$(now)
  node 0 --nnodes 3 --node-rank 0 "${nodes[@]}" --config cfg.json "${train[@]}"
  node 1 --nnodes 3 --node-rank 1 "${nodes[@]}" --config cfg.json "${train[@]}"
  sleep 0.5
  node d --nnodes 3 --node-rank 1 "${nodes[@]}" --config cfg.json "${train[@]}"
  for r in 0 1 d; do
    wait_node $r 15 # the rendezvous timeout is 60 s: this is the refusal, not a timeout
    one_line $r 1 "node 1 was given twice \\(hosts [^ ]+ and [^ ]+\\): give each node its own number"
  done
  echo "all three ended $(since "$t0") s after the first started"
  ;;
node_dies)
  for r in 1 0; do
    node $r --nnodes 2 --node-rank $r "${nodes[@]}" --config cfg.json "${train[@]}" \
      --max-steps 100000 --metrics "$work/m.jsonl"
  done
  # node 1's rank: the train_cls child of node 1's mpirun
  victim=""
  until [ -n "$victim" ] || ! kill -0 "${pids[1]}" 2>/dev/null; do
    m=$(pgrep -P "${pids[1]}" -x mpirun)
    [ -n "$m" ] && victim=$(pgrep -P "$m" -x train_cls)
    sleep 0.05
  done
  until [ "$(cat m.jsonl 2>/dev/null | grep -c '^{"step"')" -ge 5 ] || ! kill -0 "${pids[0]}" 2>/dev/null; do
    sleep 0.05
  done
  [ -n "$victim" ] && kill -KILL "$victim"
  t0=$(now)
  for r in 0 1; do wait_node $r 30; eval "rc$r=$rc"; done
  took=$(since "$t0")
  awk -v t="$took" 'BEGIN { exit !(t <= 15) }' || fail "the launchers ended $took s after the kill, more than 15 s"
  [ "$rc0" -eq 137 ] && [ "$rc1" -eq 137 ] || fail "exit statuses $rc0 and $rc1, want 137 (SIGKILL) both"
  grep -q "^engine-run: rank 1 (on [^ ]*) was killed by signal 9 (SIGKILL)" n1.err ||
    fail "node 1 does not name the job's rank 1: $(cat n1.err)"
  grep -q "^engine-run: node 0: node 1's ranks ended with status 137: stopping the job's other nodes\$" n0.err ||
    fail "node 0 does not name node 1: $(cat n0.err)"
  echo "rank 1 killed after step 5: both launchers ended $took s later (rc $rc0, $rc1)"
  ;;
node_pipe)
  echo_app=$(dirname "$bin")/tests/rank_echo
  [ -x "$echo_app" ] || { fail "no rank_echo at $echo_app"; finish; }
  node 0 --nnodes 2 --node-rank 0 "${nodes[@]}" --config cfg.json "$echo_app" \
    --exit-rank 0 --signal 13 --after 500
  node 1 --nnodes 2 --node-rank 1 "${nodes[@]}" --config cfg.json "$echo_app" \
    --exit-rank 0 --signal 9 --after 2000
  for r in 0 1; do wait_node $r 30; eval "rc$r=$rc"; done
  [ "$rc0" -eq 137 ] && [ "$rc1" -eq 137 ] || fail "exit statuses $rc0 and $rc1, want 137 both"
  grep -q "^engine-run: node 0: node 1's ranks ended with status 137: stopping the job's other nodes\$" n0.err ||
    fail "node 0 does not name node 1: $(cat n0.err)"
  echo "node 0 (rc $rc0): $(grep 'node 0:' n0.err)"
  ;;
two_hosts)
  "$bin/engine-run" --np 2 --config cfg.json "${train[@]}" --max-steps 10 \
    --metrics "$work/ref.jsonl" >ref.out 2>ref.err || { fail "engine-run --np 2 failed"; cat ref.err; }
  name=zn$$ # unique: tests running at once make their own pairs
  for d in /run/twohost/zn*; do # a pair an earlier run could not remove: its pid is gone
    [ -d "$d" ] && ! kill -0 "${d##*/zn}" 2>/dev/null && "$twohost" down --name "${d##*/}"
  done
  trap '"$twohost" down --name $name' EXIT
  "$twohost" up --name $name >up.log 2>&1 || { cat up.log; exit 1; }
  # node 0 on host 1, node 1 on host 2 through the agent Open MPI would use
  # as ssh (a login's environment there: OMP_NUM_THREADS given again)
  words="${train[*]} --max-steps 10 --metrics $work/m.jsonl"
  cat >two.sh <<EOF
#!/bin/sh
\$OMPI_MCA_plm_rsh_agent $name-2 "cd $work && hostname >host1.txt && OMP_NUM_THREADS=1 $bin/engine-run --nnodes 2 --node-rank 1 --master-addr $name-1 --master-port $port --config cfg.json $words >n1.out 2>n1.err; echo \\\$? >rc1.txt" &
hostname >host0.txt
$bin/engine-run --nnodes 2 --node-rank 0 --master-addr $name-1 --master-port $port --config cfg.json $words >n0.out 2>n0.err
echo \$? >rc0.txt
wait
EOF
  chmod +x two.sh
  timeout 100 "$twohost" exec --name $name -- ./two.sh || fail "twohost exec failed"
  for h in $name-1 $name-2; do
    left=$(ip netns pids "$h" 2>/dev/null)
    [ -z "$left" ] || fail "processes left behind on $h: $(ps -o pid=,args= -p "$(echo $left | tr ' ' ,)")"
  done
  [ "$(cat host0.txt)" = "$name-1" ] && [ "$(cat host1.txt)" = "$name-2" ] ||
    fail "the launchers ran on $(cat host0.txt) and $(cat host1.txt), want $name-1 and $name-2"
  for r in 0 1; do
    [ "$(cat rc$r.txt)" = 0 ] || fail "node $r exited $(cat rc$r.txt): $(cat n$r.err)"
  done
  same_losses ref.jsonl m.jsonl
  ;;
*)
  echo "unknown case $tcase" >&2
  exit 2
  ;;
esac
no_leftovers
[ $fails -eq 0 ] && cd .. && rm -rf "$work"
finish
