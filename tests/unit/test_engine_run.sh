#!/bin/sh
# Tests of engine-run (tools/engine_run.c), one case per ctest test.
#
#   test_engine_run.sh CASE ENGINE_RUN RANK_ECHO WORKDIR [LAUNCH_PROBE]
#
# Most cases compare the exact --dry-run line, which is the command engine-run
# would run; run_np1 / run_np2 / rank_dies really start processes, with
# rank_echo (tests/unit/rank_echo.c) as APP; join, relay and relay_unhandled
# use launch_probe (tests/unit/launch_probe.c), an APP built on the library.
# Prints every mismatch and exits 1 if there was any.
set -u
. "$(dirname "$0")/test_util.sh"
[ $# -eq 4 ] || need_args 5 "CASE ENGINE_RUN RANK_ECHO WORKDIR [LAUNCH_PROBE]" $#
tcase=$1
er=$(readlink -f "$2")
app=$(readlink -f "$3")
probe=$(readlink -f "${5:-/nonexistent}")
rm -rf "$4" && mkdir -p "$4" && cd "$4" || exit 1
work=$(pwd -P)
bindir=$(dirname "$er")

# The cases choose the launcher environment themselves: clear what the
# environment running ctest may hold (an MPI job, a Slurm allocation, knobs).
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_LOCAL_SIZE PMI_SIZE PMI_RANK \
  SLURM_JOB_ID SLURM_PROCID SLURM_NTASKS SLURM_STEP_ID SLURM_STEP_NUM_TASKS SLURM_CPUS_PER_TASK \
  OMP_NUM_THREADS OPENBLAS_NUM_THREADS OPENBLAS_CORETYPE LD_LIBRARY_PATH ENGINE_RUN_CORES \
  RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT NODE_RANK
for v in $(env | sed -n 's/^\(DS_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
# The exact lines below hold on any host: engine-run takes OpenBLAS's core to
# be Haswell, which it never replaces, unless a case says otherwise (on a host
# where OpenBLAS fell back to an old core it would set OPENBLAS_CORETYPE).
export ENGINE_RUN_TEST_OPENBLAS=Haswell

echo '{"train_micro_batch_size_per_gpu": 1}' >cfg.json
cfg=$work/cfg.json
mkdir -p empty fakebin
# A stand-in srun for the dry runs: engine-run only needs to find it on PATH.
printf '#!/bin/sh\nexit 0\n' >fakebin/srun && chmod +x fakebin/srun
mpirun=$(command -v mpirun || echo "")
root=""
[ "$(id -u)" -eq 0 ] && root=" --allow-run-as-root"
# What every mpirun line carries: the relay of a SIGTERM as SIGURG (mpirun
# forwards it; ranks read it as SIGTERM, DS_PREEMPT_RELAY), and whether
# engine-run's stdout is a terminal (DS_PROGRESS_TTY: mpirun gives ranks a
# pseudo-terminal even when it is not).
relay="DS_PROGRESS_TTY=0 DS_PREEMPT_RELAY=23:15"
sigs="--tag-output --mca ess_base_forward_signals SIGURG"

# er_run ARGS...: run engine-run with the assignments in $E added to its
# environment (E="ENGINE_RUN_CORES=2 ..."; words without spaces; emptied after
# each run); sets rc, and out.txt / err.txt hold its output. $E rather than
# VAR=x before the function call, whose effect POSIX leaves unspecified.
E=""
er_run() {
  # shellcheck disable=SC2086 # $E is a list of words on purpose
  env $E "$er" "$@" >out.txt 2>err.txt
  rc=$?
  E=""
}

# expect_out WANT ARGS...: engine-run ARGS must exit 0 printing exactly WANT.
expect_out() {
  want=$1
  shift
  er_run "$@"
  got=$(cat out.txt)
  if [ "$rc" -ne 0 ]; then
    fail "engine-run $* exited $rc: $(cat err.txt)"
  elif [ "$got" != "$want" ]; then
    fail "engine-run $*
   want: $want
    got: $got"
  fi
}

# expect_error CODE PATTERN ARGS...: engine-run ARGS must exit CODE (or any
# non-zero status for CODE 'nz') with exactly one line on stderr, starting
# with 'engine-run: ' and containing the fixed string PATTERN, and no stdout.
expect_error() {
  code=$1
  pattern=$2
  shift 2
  er_run "$@"
  lines=$(wc -l <err.txt)
  if [ "$code" = nz ] && [ "$rc" -eq 0 ]; then
    fail "engine-run $* exited 0, expected an error"
  elif [ "$code" != nz ] && [ "$rc" -ne "$code" ]; then
    fail "engine-run $* exited $rc, expected $code; stderr: $(cat err.txt)"
  fi
  if [ "$lines" -ne 1 ]; then
    fail "engine-run $*: expected one line on stderr, got $lines: $(cat err.txt)"
  elif ! grep -q '^engine-run: ' err.txt; then
    fail "engine-run $*: stderr does not start with 'engine-run: ': $(cat err.txt)"
  elif ! grep -qF -- "$pattern" err.txt; then
    fail "engine-run $*: stderr lacks '$pattern': $(cat err.txt)"
  fi
  [ -s out.txt ] && fail "engine-run $*: printed on stdout: $(cat out.txt)"
  return 0
}

need_mpirun() {
  if [ -z "$mpirun" ]; then
    fail "mpirun not on PATH (install openmpi-bin)"
    exit 1
  fi
}

case "$tcase" in
help)
  er_run --help
  [ "$rc" -eq 0 ] || fail "--help exited $rc"
  [ -s err.txt ] && fail "--help wrote to stderr: $(cat err.txt)"
  for word in "--np N" "--hostfile F" "--launcher" "auto" "mpirun" "srun" "none" "--dry-run" \
    "--config FILE" "APP" "OMP_NUM_THREADS" "--oversubscribe" "--allow-run-as-root" \
    "--bind-to none" "--kill-on-bad-exit=1" "OMPI_COMM_WORLD_" "PMI_RANK" "SLURM_PROCID" "SLURM_JOB_ID" \
    "ENGINE_RUN_CORES" "exit status" "--nnodes N" "--node-rank R" "--master-addr A" \
    "--master-port P" "--nproc-per-node K" "--rdzv-timeout S" "ompi-server" "MASTER_ADDR" \
    "RANK, WORLD_SIZE"; do
    grep -qF -- "$word" out.txt || fail "--help does not mention '$word'"
  done
  er_run -h
  [ "$rc" -eq 0 ] || fail "-h exited $rc"
  ;;

dry_np1)
  expect_out "$app --config $cfg a 'b c' 'it'\\''s'" --dry-run --config cfg.json "$app" a "b c" "it's"
  expect_out "$app --config $cfg" --np 1 --dry-run --config "$cfg" "$app"
  expect_out "$app --config $cfg --np 4" --np=1 --dry-run --config=cfg.json "$app" --np 4
  expect_out "$app --config $cfg x" --launcher none --dry-run --config cfg.json "$app" x
  expect_out "$app --config $cfg -- x" --dry-run --config cfg.json -- "$app" -- x
  # A bundled program: found next to engine-run, by name.
  expect_out "$bindir/gen_sentences --config $cfg" --dry-run --config cfg.json gen_sentences
  ;;

dry_np2)
  need_mpirun
  E="ENGINE_RUN_CORES=2"
  expect_out "OMP_NUM_THREADS=1 $relay $mpirun -np 2$root --bind-to none $sigs -x OMP_NUM_THREADS -x DS_PROGRESS_TTY -x DS_PREEMPT_RELAY $app --config $cfg a" \
    --np 2 --dry-run --config cfg.json "$app" a
  [ -s err.txt ] && fail "--np 2 on 2 cores: unexpected stderr: $(cat err.txt)"
  # the config's save_on_signal, when mpirun does not forward it by itself
  echo '{"train_micro_batch_size_per_gpu": 1, "zero_engine": {"save_on_signal": "SIGXCPU"}}' >xcpu.json
  E="ENGINE_RUN_CORES=2"
  er_run --np 2 --dry-run --config xcpu.json "$app"
  grep -qF -- "--mca ess_base_forward_signals SIGURG,SIGXCPU " out.txt ||
    fail "save_on_signal SIGXCPU is not forwarded: $(cat out.txt)"
  # the trainer's --save-on-signal too, in both spellings, beside the config's
  echo '{"train_micro_batch_size_per_gpu": 1, "zero_engine": {"save_on_signal": "SIGPWR"}}' >pwr.json
  for flag in "--save-on-signal XCPU" "--save-on-signal=SIGXCPU"; do
    E="ENGINE_RUN_CORES=2"
    er_run --np 2 --dry-run --config pwr.json "$app" $flag
    grep -qF -- "--mca ess_base_forward_signals SIGURG,SIGPWR,SIGXCPU " out.txt ||
      fail "$flag (and the config's SIGPWR) not forwarded: $(cat out.txt)"
  done
  ;;

dry_np4)
  need_mpirun
  base="$sigs -x OMP_NUM_THREADS -x DS_PROGRESS_TTY -x DS_PREEMPT_RELAY $app --config $cfg"
  # More ranks than cores: oversubscribe, one thread each.
  E="ENGINE_RUN_CORES=2"
  expect_out "OMP_NUM_THREADS=1 $relay $mpirun -np 4$root --oversubscribe --bind-to none $base" \
    --np 4 --dry-run --config cfg.json "$app"
  # Enough cores: no oversubscription, the cores shared out (8 / 4 = 2).
  E="ENGINE_RUN_CORES=8"
  expect_out "OMP_NUM_THREADS=2 $relay $mpirun -np 4$root --bind-to none $base" \
    --np 4 --dry-run --config cfg.json "$app"
  # The user's OMP_NUM_THREADS is kept; DS_* variables are forwarded.
  E="OMP_NUM_THREADS=3 DS_TEST_KNOB=1 ENGINE_RUN_CORES=8"
  expect_out "$relay $mpirun -np 4$root --bind-to none $sigs -x OMP_NUM_THREADS -x DS_TEST_KNOB -x DS_PROGRESS_TTY -x DS_PREEMPT_RELAY $app --config $cfg" \
    --np 4 --dry-run --config cfg.json "$app"
  ;;

oversubscribe)
  need_mpirun
  # More ranks than cores: one warning naming both numbers.
  E="ENGINE_RUN_CORES=2"
  er_run --np 4 --dry-run --config cfg.json "$app"
  [ "$rc" -eq 0 ] && [ "$(wc -l <err.txt)" -eq 1 ] &&
    grep -qF "engine-run: warning: 4 ranks on this machine's 2 cores" err.txt ||
    fail "--np 4 on 2 cores: exit $rc, stderr: $(cat err.txt)"
  # Beyond 8 a core: refused, unless --oversubscribe.
  E="ENGINE_RUN_CORES=2"
  expect_error 2 "--np 17 is 8.5 ranks per core on this machine's 2 cores" \
    --np 17 --dry-run --config cfg.json "$app"
  grep -qF -- "--oversubscribe" err.txt || fail "the refusal does not name --oversubscribe"
  E="ENGINE_RUN_CORES=2"
  expect_error 2 "1000 is 500.0 ranks per core" --np 1000 --dry-run --config cfg.json "$app"
  E="ENGINE_RUN_CORES=2"
  er_run --np 1000 --oversubscribe --dry-run --config cfg.json "$app"
  grep -qF -- "-np 1000$root --oversubscribe --bind-to none" out.txt &&
    grep -qF "1000 ranks on this machine's 2 cores" err.txt ||
    fail "--np 1000 --oversubscribe: $(cat out.txt) $(cat err.txt)"
  # A hostfile's slots count as its cores; a line without slots: not counted.
  printf 'localhost slots=2\n' >hosts
  er_run --np 3 --hostfile hosts --dry-run --config cfg.json "$app"
  grep -qF "3 ranks on the hostfile's 2 slots" err.txt && grep -qF -- "--oversubscribe" out.txt ||
    fail "--np 3 on 2 slots: $(cat out.txt) $(cat err.txt)"
  expect_error 2 "17 is 8.5 ranks per core on the hostfile's 2 slots" \
    --np 17 --hostfile hosts --dry-run --config cfg.json "$app"
  printf 'localhost\n' >hosts_unknown
  er_run --np 17 --hostfile hosts_unknown --dry-run --config cfg.json "$app"
  [ "$rc" -eq 0 ] && [ ! -s err.txt ] || fail "a hostfile without slots: exit $rc, $(cat err.txt)"
  ;;

join)
  need_mpirun
  # Rank 1 starts 3 s late: after 2 s engine-run says how many have joined,
  # then that all did.
  "$er" --np 2 --config cfg.json "$probe" --delay-rank 1 3 >out.txt 2>err.txt
  rc=$?
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat err.txt)"
  grep -q "^engine-run: waiting for the ranks: 1 of 2 started, [01] connected ([0-9]* s)\$" err.txt ||
    fail "no progress line while rank 1 was late: $(cat err.txt)"
  grep -q "^engine-run: all 2 ranks connected ([0-9.]* s)\$" err.txt ||
    fail "no line saying all ranks connected: $(cat err.txt)"
  ;;

relay)
  need_mpirun
  # SIGTERM to engine-run: every rank sees it at a step boundary (relayed as
  # SIGURG through mpirun) and exits 143, and so does engine-run.
  "$er" --np 2 --config cfg.json "$probe" --train >out.txt 2>err.txt &
  pid=$!
  for _ in $(seq 600); do [ "$(grep -c training out.txt)" -eq 2 ] && break; sleep 0.05; done
  kill -TERM $pid
  wait $pid
  rc=$?
  [ "$rc" -eq 143 ] || fail "engine-run exited $rc after SIGTERM, want 143: $(cat err.txt)"
  [ "$(grep -c 'stopped by signal 15 at step' out.txt)" -eq 2 ] ||
    fail "both ranks should stop with signal 15: $(cat out.txt)"
  grep -qF "relayed as SIGURG" err.txt || fail "engine-run did not say it relayed: $(cat err.txt)"
  # The same SIGTERM sent to engine-run's whole process group (timeout,
  # kill -- -PGID, a scheduler): mpirun, in a group of its own, gets it only
  # as the relay, so the ranks still save (mpirun used to get it directly
  # and kill them). setsid: engine-run leads a group of its own; the
  # shell's own kill cannot name a group, procps' can.
  gkill=$(command -v /bin/kill || command -v /usr/bin/kill)
  if [ -n "$gkill" ]; then
    setsid "$er" --np 2 --config cfg.json "$probe" --train >out.txt 2>err.txt &
    pid=$!
    for _ in $(seq 600); do [ "$(grep -c training out.txt)" -eq 2 ] && break; sleep 0.05; done
    "$gkill" -s TERM -- "-$pid"
    wait $pid
    rc=$?
    [ "$rc" -eq 143 ] || fail "group SIGTERM: engine-run exited $rc, want 143: $(cat err.txt)"
    [ "$(grep -c 'stopped by signal 15 at step' out.txt)" -eq 2 ] ||
      fail "group SIGTERM: both ranks should save and stop: $(cat out.txt) $(cat err.txt)"
  else
    echo "relay: no /bin/kill (procps) to signal a process group: that part skipped"
  fi
  # SIGUSR1 goes through mpirun as it is: 138
  "$er" --np 2 --config cfg.json "$probe" --train >out.txt 2>err.txt &
  pid=$!
  for _ in $(seq 600); do [ "$(grep -c training out.txt)" -eq 2 ] && break; sleep 0.05; done
  kill -USR1 $pid
  wait $pid
  rc=$?
  [ "$rc" -eq 143 ] || [ "$rc" -eq 138 ] || fail "engine-run exited $rc after SIGUSR1"
  # launch_probe saves only on SIGTERM (no save_on_signal): SIGUSR1 ends it
  # by its default action, mpirun reports the death, engine-run says 138
  [ "$rc" -eq 138 ] || fail "SIGUSR1: exit $rc, want 138"
  ;;

mpirun_hangs)
  # Open MPI 4.1's mpirun can hang when a rank dies while the ranks connect.
  # A stand-in mpirun starts two "ranks" (sleep, with OMPI_COMM_WORLD_RANK
  # set) and then never reaps them; rank 1 is killed. engine-run must end
  # what is left 5 s after (ER_TEARDOWN_S) and return the dead rank's status.
  mkdir -p hang
  cat >hang/mpirun <<'SH'
#!/bin/sh
OMPI_COMM_WORLD_RANK=0 sleep 300 &
echo "$!" >rank0.pid
OMPI_COMM_WORLD_RANK=1 sleep 300 &
echo "$!" >ranks.pid
exec sleep 300
SH
  chmod +x hang/mpirun
  PATH="$work/hang:$PATH" "$er" --np 2 --config cfg.json "$app" >out.txt 2>err.txt &
  pid=$!
  for _ in $(seq 200); do [ -s ranks.pid ] && break; sleep 0.05; done
  sleep 0.5 # engine-run finds the ranks at its next poll (100 ms)
  start=$(date +%s)
  kill -KILL "$(cat ranks.pid)"
  wait $pid
  rc=$?
  took=$(($(date +%s) - start))
  [ "$rc" -eq 137 ] || fail "exit $rc, want 137 (rank 1's SIGKILL): $(cat err.txt)"
  [ "$took" -le 12 ] || fail "engine-run took $took s to end the hung job"
  grep -q "^engine-run: mpirun did not end the job within 5 s of a rank's end: ending it$" err.txt ||
    fail "no line saying engine-run ended the job: $(cat err.txt)"
  grep -q "^engine-run: rank 1 was killed by signal 9 (SIGKILL); mpirun stopped the other ranks$" err.txt ||
    fail "rank 1 not named: $(cat err.txt)"
  # SIGKILL is sent before engine-run returns; the kernel may take a moment
  # to end the process and its new parent to reap it: up to 2 s, a zombie
  # counting as ended
  r0=$(cat rank0.pid)
  for _ in $(seq 40); do
    st=$(awk '{print $3}' "/proc/$r0/stat" 2>/dev/null)
    [ -z "$st" ] || [ "$st" = Z ] && break
    sleep 0.05
  done
  [ -z "$st" ] || [ "$st" = Z ] || fail "rank 0 still runs 2 s after engine-run returned"
  ;;

relay_unhandled)
  need_mpirun
  # An APP that does not save on signals (rank_echo): SIGTERM goes to mpirun
  # at once, which ends the job; engine-run exits 143.
  "$er" --np 2 --config cfg.json "$app" --sleep 60 >out.txt 2>err.txt &
  pid=$!
  for _ in $(seq 200); do [ "$(grep -c rank_echo out.txt)" -eq 2 ] && break; sleep 0.05; done
  start=$(date +%s)
  kill -TERM $pid
  wait $pid
  rc=$?
  [ "$rc" -eq 143 ] || fail "exit $rc, want 143: $(cat err.txt)"
  [ $(($(date +%s) - start)) -lt 20 ] || fail "the job took more than 20 s to end"
  ;;

dry_hostfile)
  need_mpirun
  echo "localhost slots=4" >hosts
  # With a hostfile its slots decide: no --oversubscribe even above the cores.
  E="ENGINE_RUN_CORES=2"
  expect_out \
    "OMP_NUM_THREADS=1 $relay $mpirun -np 4 --hostfile $work/hosts$root --bind-to none $sigs -x OMP_NUM_THREADS -x DS_PROGRESS_TTY -x DS_PREEMPT_RELAY $app --config $cfg" \
    --np 4 --hostfile hosts --dry-run --config cfg.json "$app"
  expect_error 1 "nohosts" --np 2 --hostfile nohosts --dry-run --config cfg.json "$app"
  expect_error 2 "--hostfile is for mpirun" --np 1 --hostfile hosts --dry-run --config cfg.json "$app"
  # Without --np: every slot the hostfile names, as DeepSpeed's launcher
  # (it ran APP in place, then refused the hostfile); a host without slots=:
  # --np is asked for.
  E="ENGINE_RUN_CORES=2 HOME=$work/empty"
  er_run --hostfile hosts --dry-run --config cfg.json "$app"
  grep -qF -- "-np 4 --hostfile" out.txt || fail "--hostfile without --np: $(cat out.txt) $(cat err.txt)"
  printf 'localhost slots=4\nother\n' >hosts_noslots
  expect_error 2 "give --np" --hostfile hosts_noslots --dry-run --config cfg.json "$app"
  # max_slots= is not slots= (it counted as 8: no warning, no --oversubscribe)
  printf 'localhost max_slots=8 slots=2\n' >hosts_max
  E="HOME=$work/empty"
  er_run --np 3 --hostfile hosts_max --dry-run --config cfg.json "$app"
  grep -qF "3 ranks on the hostfile's 2 slots" err.txt && grep -qF -- "--oversubscribe" out.txt ||
    fail "max_slots=8 slots=2, --np 3: $(cat out.txt) $(cat err.txt)"
  # Two hosts of 2 slots, 4 ranks: 2 ranks share this host's 4 cores (it was
  # 4 cores / 4 ranks, as if every rank ran here)
  printf 'hostA slots=2\nhostB slots=2\n' >hosts2
  E="ENGINE_RUN_CORES=4 HOME=$work/empty"
  er_run --np 4 --hostfile hosts2 --dry-run --config cfg.json "$app"
  grep -qF "OMP_NUM_THREADS=2 " out.txt || fail "2 hosts x 2 ranks on 4 cores: $(cat out.txt)"
  # DeepSpeed's environment file reaches every host's ranks (-x), and so do
  # NCCL_* and UCX_* variables; a line that is not NAME=VALUE is refused
  printf '# for every host\n\nFOO_BAR=1 2\n' >env_file
  E="DS_ENV_FILE=$work/env_file NCCL_DEBUG=INFO"
  er_run --np 4 --hostfile hosts2 --dry-run --config cfg.json "$app"
  grep -qF -- "-x FOO_BAR" out.txt && grep -qF -- "-x NCCL_DEBUG" out.txt &&
    grep -qF "1 variable(s) from $work/env_file" err.txt ||
    fail "DS_ENV_FILE / NCCL_DEBUG not forwarded: $(cat out.txt) $(cat err.txt)"
  printf 'FOO_BAR=1\nnot a line\n' >env_bad
  E="DS_ENV_FILE=$work/env_bad"
  expect_error 2 "env_bad line 2: expected NAME=VALUE" --np 4 --hostfile hosts2 --dry-run \
    --config cfg.json "$app"
  ;;

dry_mpi_env)
  # Inside an MPI job this process is a rank already: APP runs in place, with
  # this host's cores shared among its local ranks (4 / 2 = 2 threads).
  export OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2 ENGINE_RUN_CORES=4
  expect_out "OMP_NUM_THREADS=2 $app --config $cfg a" --np 2 --dry-run --config cfg.json "$app" a
  expect_out "OMP_NUM_THREADS=2 $app --config $cfg" --dry-run --config cfg.json "$app"
  E="OMP_NUM_THREADS=5"
  expect_out "$app --config $cfg" --dry-run --config cfg.json "$app"
  expect_error 2 "OMPI_COMM_WORLD_SIZE=2" --np 4 --dry-run --config cfg.json "$app"
  expect_error 2 "--launcher mpirun inside a job" --launcher mpirun --dry-run --config cfg.json "$app"
  unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_LOCAL_SIZE
  # MPICH / Intel MPI (hydra) set PMI_SIZE and PMI_RANK instead.
  E="PMI_SIZE=3 PMI_RANK=1"
  expect_out "$app --config $cfg" --np 3 --dry-run --config cfg.json "$app"
  # Half a launcher's variables: the ranks would refuse it (ds_rank_discover),
  # so engine-run refuses it first, with the library's message.
  E="PMI_SIZE=3"
  expect_error 1 "PMI_SIZE is set but PMI_RANK is not" --np 3 --dry-run --config cfg.json "$app"
  ;;

dry_slurm)
  need_mpirun
  # In an srun step: a rank already, in place.
  E="SLURM_JOB_ID=7 SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0"
  expect_out "$app --config $cfg" --np 2 --dry-run --config cfg.json "$app"
  E="SLURM_JOB_ID=7 SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_CPUS_PER_TASK=3"
  expect_out "OMP_NUM_THREADS=3 $app --config $cfg" --dry-run --config cfg.json "$app"
  E="SLURM_JOB_ID=7 SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0"
  expect_error 2 "SLURM_NTASKS=2" --np 4 --dry-run --config cfg.json "$app"
  # A step of fewer tasks than the job: the step's count is the world.
  E="SLURM_JOB_ID=7 SLURM_PROCID=1 SLURM_NTASKS=8 SLURM_STEP_NUM_TASKS=2 SLURM_STEP_ID=0"
  expect_out "$app --config $cfg" --np 2 --dry-run --config cfg.json "$app"
  E="SLURM_JOB_ID=7 SLURM_PROCID=1 SLURM_NTASKS=8 SLURM_STEP_NUM_TASKS=2 SLURM_STEP_ID=0"
  expect_error 2 "SLURM_STEP_NUM_TASKS=2" --np 8 --dry-run --config cfg.json "$app"
  # In an sbatch script (task 0 of the job, no step): srun starts the ranks.
  export PATH="$work/fakebin:$PATH"
  E="SLURM_JOB_ID=7 SLURM_PROCID=0 SLURM_NTASKS=4"
  expect_out "$work/fakebin/srun -n 4 --kill-on-bad-exit=1 $app --config $cfg a" \
    --np 4 --dry-run --config cfg.json "$app" a
  E="SLURM_JOB_ID=7 SLURM_CPUS_PER_TASK=2"
  expect_out "OMP_NUM_THREADS=2 $work/fakebin/srun -n 2 --kill-on-bad-exit=1 $app --config $cfg" \
    --np 2 --dry-run --config cfg.json "$app"
  # One rank in an allocation runs in place; --launcher mpirun overrides srun.
  E="SLURM_JOB_ID=7"
  expect_out "$app --config $cfg" --np 1 --dry-run --config cfg.json "$app"
  E="SLURM_JOB_ID=7 ENGINE_RUN_CORES=2"
  expect_out "OMP_NUM_THREADS=1 $relay $mpirun -np 2$root --bind-to none $sigs -x OMP_NUM_THREADS -x DS_PROGRESS_TTY -x DS_PREEMPT_RELAY $app --config $cfg" \
    --launcher mpirun --np 2 --dry-run --config cfg.json "$app"
  # --launcher srun needs no allocation (srun can make one) and applies at N = 1 too.
  expect_out "$work/fakebin/srun -n 1 --kill-on-bad-exit=1 $app --config $cfg" \
    --launcher srun --dry-run --config cfg.json "$app"
  expect_error 2 "--hostfile is for mpirun" --launcher srun --hostfile cfg.json --np 2 --dry-run \
    --config cfg.json "$app"
  # No srun installed.
  E="PATH=$work/empty SLURM_JOB_ID=7"
  expect_error 1 "slurm-client" --np 2 --dry-run --config cfg.json "$app"
  ;;

blas_core)
  # OpenBLAS's fallback core replaced for the ranks (engine/backend/blas_core.h), with one
  # line on stderr; a user's OPENBLAS_CORETYPE, and a core OpenBLAS chose on purpose, kept
  avx512="avx,avx2,fma,avx512f,avx512bw,avx512vl,avx512dq"
  E="ENGINE_RUN_TEST_OPENBLAS=Prescott:$avx512"
  expect_out "OPENBLAS_CORETYPE=SkylakeX $app --config $cfg" --dry-run --config cfg.json "$app"
  [ "$(cat err.txt)" = "engine-run: OpenBLAS chose core Prescott, but this CPU has AVX-512 (F, BW, VL, DQ): OPENBLAS_CORETYPE=SkylakeX for the ranks (set it yourself to choose another)" ] ||
    fail "Prescott on AVX-512: stderr '$(cat err.txt)'"
  need_mpirun
  E="ENGINE_RUN_TEST_OPENBLAS=Sandybridge:avx,avx2,fma ENGINE_RUN_CORES=2"
  expect_out "OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS=1 $relay $mpirun -np 2$root --bind-to none $sigs -x OMP_NUM_THREADS -x OPENBLAS_CORETYPE -x DS_PROGRESS_TTY -x DS_PREEMPT_RELAY $app --config $cfg" \
    --np 2 --dry-run --config cfg.json "$app"
  grep -qF "chose core Sandybridge, but this CPU has AVX2 and FMA: OPENBLAS_CORETYPE=Haswell" err.txt ||
    fail "Sandybridge on AVX2: stderr '$(cat err.txt)'"
  E="OPENBLAS_CORETYPE=Prescott ENGINE_RUN_TEST_OPENBLAS=Prescott:$avx512 ENGINE_RUN_CORES=2"
  expect_out "OMP_NUM_THREADS=1 $relay $mpirun -np 2$root --bind-to none $sigs -x OMP_NUM_THREADS -x OPENBLAS_CORETYPE -x DS_PROGRESS_TTY -x DS_PREEMPT_RELAY $app --config $cfg" \
    --np 2 --dry-run --config cfg.json "$app"
  [ -s err.txt ] && fail "the user's OPENBLAS_CORETYPE: unexpected stderr: $(cat err.txt)"
  for core in Cooperlake Zen Haswell Unknown; do
    E="ENGINE_RUN_TEST_OPENBLAS=$core:$avx512"
    expect_out "$app --config $cfg" --dry-run --config cfg.json "$app"
    [ -s err.txt ] && fail "$core on AVX-512: unexpected stderr: $(cat err.txt)"
  done
  E="ENGINE_RUN_TEST_OPENBLAS=Prescott:avx,avx2"
  expect_out "$app --config $cfg" --dry-run --config cfg.json "$app"
  E="ENGINE_RUN_TEST_OPENBLAS=Prescott:sse"
  expect_error 1 "ENGINE_RUN_TEST_OPENBLAS: unknown flag 'sse'" --dry-run --config cfg.json "$app"
  # A rank (ds_initialize, rank 0) says when OpenBLAS did not take the user's name: a real
  # run of one rank in place, where this OpenBLAS reads the variable (DYNAMIC_ARCH, x86)
  if "$er" --report | grep -q "^openblas .*DYNAMIC_ARCH" && [ "$(uname -m)" = x86_64 ]; then
    E="OPENBLAS_CORETYPE=NoSuchCore"
    er_run --config cfg.json "$probe"
    [ "$rc" -eq 0 ] || fail "launch_probe with OPENBLAS_CORETYPE=NoSuchCore exited $rc: $(cat err.txt)"
    grep -q "^\[zero-engine\] warning: OPENBLAS_CORETYPE=NoSuchCore, but OpenBLAS runs core [A-Za-z0-9_]* (this OpenBLAS does not take that name)\$" err.txt ||
      fail "no warning from ds_initialize for a core name OpenBLAS did not take: $(cat err.txt)"
  fi
  ;;

launcher_none)
  expect_error 2 "engine-run: --np 2 with --launcher none: nothing would start the other ranks" \
    --np 2 --launcher none --dry-run --config cfg.json "$app"
  [ "$(cat err.txt)" = "engine-run: --np 2 with --launcher none: nothing would start the other ranks" ] ||
    fail "--launcher none message: $(cat err.txt)"
  expect_out "$app --config $cfg" --np 1 --launcher none --dry-run --config cfg.json "$app"
  ;;

no_mpirun)
  E="PATH=$work/empty"
  expect_error 1 "openmpi-bin" --np 2 --dry-run --config cfg.json "$app"
  E="PATH=$work/empty"
  expect_error 1 "mpirun not found" --np 2 --config cfg.json "$app"
  ;;

errors)
  expect_error nz "nothere.json" --np 2 --dry-run --config nothere.json "$app"
  expect_error nz "nothere.json" --config nothere.json "$app"
  expect_error nz "$work/missing/c.json" --config "$work/missing/c.json" "$app"
  expect_error nz "is a directory" --config empty "$app"
  expect_error nz "no_such_app" --dry-run --config cfg.json no_such_app
  grep -qF "$bindir" err.txt || fail "unknown APP: the message does not say where it looked: $(cat err.txt)"
  expect_error nz "./no_such_app" --dry-run --config cfg.json ./no_such_app
  expect_error nz "is not an executable" --dry-run --config cfg.json ./cfg.json
  expect_error 2 "--np" --np 0 --config cfg.json "$app"
  expect_error 2 "got 'two'" --np two --config cfg.json "$app"
  expect_error 2 "--np needs a value" --np
  expect_error 2 "--launcher" --launcher mpich --config cfg.json "$app"
  expect_error 2 "--config FILE is required" "$app"
  expect_error 2 "goes before APP" "$app" --config cfg.json
  expect_error 2 "given twice" --config cfg.json "$app" --config=cfg.json
  expect_error 2 "no APP given" --config cfg.json
  expect_error 2 "unknown option '--bogus'" --bogus --config cfg.json "$app"
  E="ENGINE_RUN_CORES=lots"
  expect_error 2 "ENGINE_RUN_CORES" --np 2 --dry-run --config cfg.json "$app"
  ;;

run_np1)
  expect_out "rank_echo rank 0 of 1 from none config $cfg omp unset args x y" --config cfg.json "$app" x y
  # APP's exit status is engine-run's.
  er_run --config cfg.json "$app" --exit-rank 0 --code 7
  [ "$rc" -eq 7 ] || fail "in place, APP exited 7 but engine-run returned $rc"
  ;;

run_np2)
  need_mpirun
  er_run --np 2 --config cfg.json "$app" hello "two words"
  [ "$rc" -eq 0 ] || fail "engine-run --np 2 exited $rc: $(cat err.txt)"
  for r in 0 1; do
    grep -q "^rank_echo rank $r of 2 from mpi config $cfg omp [0-9][0-9]* args hello two words\$" out.txt ||
      fail "rank $r did not run (or got other arguments); stdout: $(cat out.txt) stderr: $(cat err.txt)"
  done
  [ "$(grep -c '^rank_echo' out.txt)" -eq 2 ] || fail "expected 2 ranks, stdout: $(cat out.txt)"
  # A reader that goes away (engine-run ... | head -n 1) ends neither
  # engine-run nor the job: the ranks print on after it left, engine-run
  # drops those lines and exits as the job did (it died of SIGPIPE, 141)
  printf '#!/bin/sh\necho first\nsleep 1\nfor i in 1 2 3 4 5 6 7 8; do echo "line $i"; done\n' \
    >printer.sh
  chmod +x printer.sh
  { "$er" --np 2 --config cfg.json ./printer.sh 2>err.txt; echo $? >rc.txt; } | head -n 1 >/dev/null
  [ "$(cat rc.txt)" -eq 0 ] || fail "engine-run after its reader left: exit $(cat rc.txt), want 0: $(cat err.txt)"
  ;;

rank_dies)
  need_mpirun
  # Rank 1 fails at once; rank 0 would sleep 300 s. mpirun must end the job
  # (rank 0 included) long before: `timeout 60` turns a hang into status 124.
  timeout 60 "$er" --np 2 --config cfg.json "$app" --exit-rank 1 --code 5 --sleep 300 >out.txt 2>err.txt
  rc=$?
  [ "$rc" -eq 124 ] && fail "the job did not end when rank 1 died (killed by timeout after 60 s)"
  [ "$rc" -eq 5 ] || fail "expected the failed rank's status 5, got $rc; stderr: $(cat err.txt)"
  # Any process still holding our config path is a rank mpirun left behind
  # (read from /proc: minimal images have no ps).
  left=""
  for f in /proc/[0-9]*/cmdline; do
    args=$(tr '\000' ' ' <"$f" 2>/dev/null) || continue
    case "$args" in *"$app --config $cfg"*) left="$left [$args]" ;; esac
  done
  [ -z "$left" ] || fail "ranks still running after engine-run returned:$left"
  ;;

dry_nodes)
  # One launcher per node (torchrun-style): the node's mpirun, its place in
  # the job (DS_JOIN_*, forwarded) and the ompi-server node 0 hands out
  # (a placeholder in a dry run, which meets no other node).
  need_mpirun
  join="DS_JOIN_NODE_RANK=1 DS_JOIN_NNODES=2"
  tail="$sigs -x OMP_NUM_THREADS -x DS_JOIN_NODE_RANK -x DS_JOIN_NNODES -x DS_PROGRESS_TTY -x DS_PREEMPT_RELAY --ompi-server URI-FROM-NODE-0 $app --config $cfg a"
  E="ENGINE_RUN_CORES=2"
  expect_out "$join OMP_NUM_THREADS=2 $relay $mpirun -np 1$root --bind-to none $tail" \
    --nnodes 2 --node-rank 1 --master-addr node0 --dry-run --config cfg.json "$app" a
  E="ENGINE_RUN_CORES=2"
  expect_out "$join OMP_NUM_THREADS=1 $relay $mpirun -np 2$root --bind-to none $tail" \
    --nnodes=2 --node_rank=1 --master_addr=node0 --nproc_per_node=2 --dry-run --config cfg.json "$app" a
  # MASTER_ADDR, MASTER_PORT and NODE_RANK stand in for the flags
  E="ENGINE_RUN_CORES=2 MASTER_ADDR=node0 MASTER_PORT=1234 NODE_RANK=1"
  expect_out "$join OMP_NUM_THREADS=2 $relay $mpirun -np 1$root --bind-to none $tail" \
    --nnodes 2 --dry-run --config cfg.json "$app" a
  # one node: --np K, nothing to join
  E="ENGINE_RUN_CORES=2"
  expect_out "OMP_NUM_THREADS=1 $relay $mpirun -np 2$root --bind-to none $sigs -x OMP_NUM_THREADS -x DS_PROGRESS_TTY -x DS_PREEMPT_RELAY $app --config $cfg" \
    --nnodes 1 --nproc-per-node 2 --dry-run --config cfg.json "$app"
  expect_error 2 "--node-rank 2 is out of range: --nnodes 2 numbers the nodes 0..1" \
    --nnodes 2 --node-rank 2 --master-addr node0 --config cfg.json "$app"
  expect_error 2 "--nnodes 2 needs --node-rank R (0..1)" --nnodes 2 --master-addr n --config cfg.json "$app"
  expect_error 2 "--nnodes 2 needs --master-addr A" --nnodes 2 --node-rank 0 --config cfg.json "$app"
  expect_error 2 "--np 2 with --nnodes 2: give one" \
    --np 2 --nnodes 2 --node-rank 0 --master-addr n --config cfg.json "$app"
  expect_error 2 "go with --nnodes N" --node-rank 1 --config cfg.json "$app"
  expect_error 2 "--hostfile with --nnodes" \
    --nnodes 2 --node-rank 0 --master-addr n --hostfile cfg.json --config cfg.json "$app"
  expect_error 2 "--master-port: expected a whole number from 1 to 65535, got '0'" \
    --nnodes 2 --node-rank 0 --master-addr n --master-port 0 --config cfg.json "$app"
  expect_error 2 "--rdzv-timeout: expected seconds > 0, got '-1'" \
    --nnodes 2 --node-rank 0 --master-addr n --rdzv-timeout -1 --config cfg.json "$app"
  expect_error 2 "--launcher srun with --nnodes" \
    --nnodes 2 --node-rank 0 --master-addr n --launcher srun --config cfg.json "$app"
  E="OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2"
  expect_error 2 "--nnodes inside a job mpirun already started (OMPI_COMM_WORLD_SIZE=2)" \
    --nnodes 2 --node-rank 0 --master-addr n --config cfg.json "$app"
  ;;

*)
  echo "unknown case '$tcase'" >&2
  exit 2
  ;;
esac

finish
