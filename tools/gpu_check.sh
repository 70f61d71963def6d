#!/usr/bin/env bash
# tools/gpu_check.sh: what to run on a machine with an NVIDIA GPU, against a
# DS_CUDA=ON build with its tests (CI has no GPU; this is the GPU's share):
#
#   cmake -S . -B build-gpu -DDS_CUDA=ON -DCMAKE_BUILD_TYPE=Release && cmake --build build-gpu -j
#   tools/gpu_check.sh build-gpu DATA.tsv [OUT_DIR] [PHASE...]
#
# or, on a machine without Debian's packages, a bundle of that build
# (tools/bundle.sh build-gpu gpu.tar.xz; there: tar xJf gpu.tar.xz &&
# . gpu/env.sh && tools/gpu_check.sh gpu DATA.tsv).
#
# Phases (default all but sanitize and ncu, which are slow):
#   ctest     the cuda tests: every kernel slot against the cpu backend, the
#             NCCL communicator at one rank per visible GPU, the staged MPI
#             one at two ranks on GPU 0; test_sparse_grads on cuda at two
#             ranks (sparse_gradients against dense, stages 0-3)
#   train     train_cls (BERT 4 x 256, seq 64, 80 steps, seed 42) on cuda and
#             on cpu at ZeRO stages 0-3, bf16, fp16, optimizer / parameter
#             offload to cpu and NVMe, two ranks sharing the GPU at stages
#             0-3 (zero_engine.comm "mpi") against two cpu ranks, the engine
#             on NCCL at one rank, a stage-3 checkpoint converted by
#             zero_to_fp32, 1-bit Adam and 0/1 Adam past their warm-up at
#             one rank and at two ranks sharing the GPU (the compressed
#             all-reduce's records staged through MPI) against cpu;
#             bench/gpu_compare.py prints each cuda run's losses
#             against the cpu's (the arithmetic is shared: equal to ~1e-6)
#   lm        train_lm (GPT-2 4 x 256, byte tokens) 30 steps on cpu and cuda
#   bench     bench_train on cuda at stages 0 and 3, fp32 and bf16, batch 32
#             and 256, and PyTorch eager on the same GPU in the same run
#             (bench/bench_pytorch_bert.py), where python3 has torch; bf16's
#             steps with fp32 against bf16 tensor-core GEMMs, paired
#   sanitize  compute-sanitizer memcheck on the cuda tests and a short
#             training run (one rank, and two staged ranks on GPU 0),
#             racecheck on test_backend_cuda
#   ncu       every kernel's GPU time over 2 steps of bench_train at batch
#             256, fp32 and bf16 (Nsight Compute), summed by
#             bench/ncu_summary.py (slow, a minute or two each)
# DATA.tsv: a labelled text file train_cls reads (the README's dataset). Each
# run's output is in OUT_DIR (default /tmp/gpu_check); the summary on stdout.
# bench/RESULTS.md "The cuda backend on an H100" shows what one run gave.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -lt 2 ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
B=$1 D=$2 W=${3:-/tmp/gpu_check}
shift $(($# < 3 ? $# : 3))
phases=${*:-ctest train lm bench}
has() { [[ " $phases " == *" $1 "* ]]; }
[ -x "$B/bin/train_cls" ] || { echo "gpu_check: $B/bin/train_cls not found: build $B first" >&2; exit 2; }
[ -f "$D" ] || { echo "gpu_check: data file '$D' not found" >&2; exit 2; }
mkdir -p "$W/cfg"
T0=$SECONDS
log() { echo "== [$((SECONDS - T0)) s] $*"; }
status=0

log "the GPU and what the build can use"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
"$B/bin/engine-run" --report 2>&1 | grep -E "^(backends| +cuda|cuda|nccl|openblas|cpu )"

if has ctest && [ -f "$B/CTestTestfile.cmake" ]; then
  log "ctest -L cuda"
  (cd "$B" && ctest -L cuda --output-on-failure --timeout 240) > "$W/ctest_cuda.log" 2>&1 || status=1
  grep -E "Test +#|tests passed|FAIL" "$W/ctest_cuda.log"
elif has ctest; then # a bundle (tools/bundle.sh): the cuda tests' programs, as ctest runs them
  log "the cuda tests of the bundle"
  run_test() { # name command...: its log in $W/name.log, its exit status on stdout
    local name=$1 rc
    shift
    timeout 240 "$@" > "$W/$name.log" 2>&1
    rc=$?
    echo "  $name: exit $rc"
    [ $rc -eq 0 ] || status=1
  }
  run_test test_backend_cuda "$B/tests/test_backend_cuda"
  run_test test_nn_cuda "$B/tests/test_nn_cuda"
  run_test test_comm_nccl mpirun -n 1 "$B/tests/test_comm_nccl"
  run_test test_comm_staged_cuda mpirun -n 2 "$B/tests/test_comm_staged_cuda"
fi
if has ctest && [ -x "$B/tests/test_sparse_grads" ]; then
  # sparse_gradients on cuda: two ranks sharing the GPU (the staged MPI
  # path), the bundled BERT (the user's model of the test is host code);
  # each run trains dense then sparse and wants the same bits
  log "sparse_gradients on cuda, 2 ranks: the same bits as dense"
  i=0
  for a in "--stage 0" "--stage 0 --precision fp16" "--stage 1 --precision bf16 --gas 2" \
           "--stage 2 --precision bf16" "--stage 3"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # the words of $a are the arguments
    mpirun -n 2 "$B/tests/test_sparse_grads" --model bert --vocab 2000 $a \
      --engine '"backend": "cuda", "comm": "mpi"' > "$W/sparse_$i.log" 2>&1
    rc=$?
    echo "  test_sparse_grads --model bert $a: exit $rc"
    [ $rc -eq 0 ] || { status=1; grep -m5 -E "FAIL|error" "$W/sparse_$i.log"; }
  done
fi

# One config per run: configs/ds_config.json with the stage, the backend and
# the section that run needs.
python3 - "$W/cfg" <<'EOF'
import copy, json, os, sys
base = json.load(open('configs/ds_config.json'))
def w(name, stage, backend, comm='auto', **sec):
    c = copy.deepcopy(base)
    c['zero_optimization'] = {'stage': stage}
    c['zero_engine'] = {'backend': backend, 'comm': comm}
    for k, v in sec.items():
        (c['zero_optimization'] if k.startswith('offload') else c)[k] = v
    json.dump(c, open(f'{sys.argv[1]}/{name}.json', 'w'), indent=1)
# 1-bit Adam and 0/1 Adam past their warm-up within 80 steps: the compressed
# momentum, the variance frozen, 0/1 Adam's local steps and synchronisations.
# Frozen at step 40 with beta2 0.95 (1 - 0.95^40 = 0.87 of the variance, no
# bias correction) the runs stay stable, so cuda and cpu stay close: on cpu
# alone, OpenBLAS's Haswell against its SkylakeX kernels part by at most
# 3.7e-5 (1-bit) and 5.8e-4 (0/1, two ranks) at step 80, where a freeze at
# step 10 with beta2 0.98 parted them by up to 0.39 (bench/RESULTS.md)
onebit = {'type': 'OneBitAdam', 'params': {'lr': 5e-4, 'freeze_step': 40, 'betas': [0.9, 0.95]}}
zeroone = {'type': 'ZeroOneAdam', 'params': {'lr': 5e-4, 'weight_decay': 0.01,
           'var_freeze_step': 40, 'var_update_scaler': 2, 'local_step_scaler': 4,
           'local_step_clipper': 4, 'betas': [0.9, 0.95]}}
nvme = {'device': 'nvme', 'nvme_path': os.path.join(os.path.dirname(sys.argv[1]), 'nvme')}
for b in ('cpu', 'cuda'):
    for s in range(4):
        w(f's{s}_{b}', s, b)
    w(f's2_bf16_{b}', 2, b, bf16={'enabled': True})
    w(f's2_fp16_{b}', 2, b, fp16={'enabled': True})
# two ranks on the one GPU: MPI staged through host memory (NCCL refuses
# two ranks on one GPU); and NCCL itself at one rank, through the engine
for s in range(4):
    w(f's{s}_mpi2_cuda', s, 'cuda', comm='mpi')
w('s2_nccl1_cuda', 2, 'cuda', comm='nccl')
w('s2_offload_cuda', 2, 'cuda', offload_optimizer={'device': 'cpu', 'pin_memory': True})
w('s3_offparam_cuda', 3, 'cuda', offload_optimizer={'device': 'cpu', 'pin_memory': True},
  offload_param={'device': 'cpu', 'pin_memory': True})
w('s3_nvme_cuda', 3, 'cuda', offload_optimizer=nvme, offload_param=nvme)
for b in ('cpu', 'cuda'):
    w(f'onebit_{b}', 0, b, optimizer=onebit)
    w(f'zeroone_{b}', 0, b, optimizer=zeroone)
    w(f'onebit_fp16_{b}', 0, b, optimizer=onebit, fp16={'enabled': True})
for o in ('onebit', 'zeroone'): # two ranks on the GPU: the records staged through MPI
    w(f'{o}_mpi2_cuda', 0, 'cuda', comm='mpi', optimizer=onebit if o == 'onebit' else zeroone)
EOF

cls() { # run-name config-name [train_cls args]; NP=2 for two ranks
  local name=$1 cfg=$2
  shift 2
  local t=$SECONDS
  "$B/bin/engine-run" --np "${NP:-1}" --config "$W/cfg/$cfg.json" train_cls --data "$D" --seed 42 \
    --max-seq-len 64 --max-steps 80 --metrics "$W/$name.jsonl" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  echo "  $name: exit $rc, $((SECONDS - t)) s"
  [ $rc -eq 0 ] || { status=1; tail -5 "$W/$name.log"; }
}
if has train; then
  log "train_cls, 80 steps: cuda against cpu"
  mkdir -p "$W/nvme"
  for s in 0 1 2 3; do cls "s${s}_cuda" "s${s}_cuda"; done
  cls s0_cpu s0_cpu
  cls s3_cpu s3_cpu
  for p in bf16 fp16; do cls "s2_${p}_cuda" "s2_${p}_cuda"; cls "s2_${p}_cpu" "s2_${p}_cpu"; done
  for r in s2_offload_cuda s3_offparam_cuda s3_nvme_cuda s2_nccl1_cuda; do cls $r $r; done
  for s in 0 1 2 3; do NP=2 cls "s${s}_mpi2_cuda" "s${s}_mpi2_cuda"; done
  NP=2 cls s0_cpu2 s0_cpu
  NP=2 cls s3_cpu2 s3_cpu
  for r in onebit zeroone onebit_fp16; do cls "${r}_cuda" "${r}_cuda"; cls "${r}_cpu" "${r}_cpu"; done
  for o in onebit zeroone; do NP=2 cls "${o}_mpi2_cuda" "${o}_mpi2_cuda"; NP=2 cls "${o}_cpu2" "${o}_cpu"; done
  rm -rf "$W/ck3"
  cls s3_ckpt_cuda s3_cuda --save-steps 40 --ckpt-dir "$W/ck3"
  "$B/bin/zero_to_fp32" "$W/ck3" "$W/ck3.safetensors" || status=1
  python3 bench/gpu_compare.py "$W" || status=1
fi

if has lm; then
  log "train_lm, 30 steps: cuda against cpu"
  for b in cpu cuda; do
    "$B/bin/engine-run" --np 1 --config "$W/cfg/s2_$b.json" train_lm --data "$D" --seq-len 128 \
      --max-steps 30 --seed 42 > "$W/lm_$b.log" 2>&1 || status=1
    echo "  $b: $(grep 'dev after training' "$W/lm_$b.log" || tail -1 "$W/lm_$b.log")"
  done
fi

if has bench; then
  log "bench_train on cuda and PyTorch eager on the same GPU (BERT-mini, seq 128)"
  torch_ok=$(python3 -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
  for bs in 32 256; do
    for p in fp32 bf16; do
      for s in 0 3; do
        "$B/bench/bench_train" --backend cuda --stage $s --precision $p --batch $bs --steps 50 \
          --warmup 5 2>&1 | grep "samples/s" | sed 's/, [0-9.]* GFLOP.*//'
      done
      [ "$torch_ok" = 1 ] && python3 bench/bench_pytorch_bert.py --device cuda --precision $p \
        --batch $bs --steps 50 --warmup 5 2>&1 | tail -1
    done
    # bf16 with fp32 GEMMs and with tensor cores, step by step in one process
    "$B/bench/bench_train" --backend cuda --stage 0 --precision bf16 --batch $bs --steps 50 \
      --warmup 5 --gemm ab 2>&1 | grep "paired steps"
  done
fi

if has sanitize; then
  log "compute-sanitizer"
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for t in test_backend_cuda test_nn_cuda; do
    # test_backend_cuda asks for a device that does not exist on purpose (the
    # error path): memcheck reports that one cudaSetDevice error and no other
    "$cs" --tool memcheck --leak-check full "$B/tests/$t" > "$W/memcheck_$t.log" 2>&1
    echo "  memcheck $t: $(grep -E 'ERROR SUMMARY' "$W/memcheck_$t.log")"
  done
  "$cs" --tool memcheck --error-exitcode 9 "$B/bin/train_cls" --config "$W/cfg/s3_cuda.json" \
    --data "$D" --max-steps 3 --max-seq-len 32 --layers 2 --hidden 64 --heads 2 \
    --intermediate 128 > "$W/memcheck_train.log" 2>&1 || status=1
  echo "  memcheck train_cls stage 3: $(grep -E 'ERROR SUMMARY' "$W/memcheck_train.log")"
  # the staged MPI path at two ranks on one GPU: the collectives, then training
  mpirun -n 2 "$cs" --tool memcheck --error-exitcode 9 "$B/tests/test_comm_staged_cuda" \
    > "$W/memcheck_staged.log" 2>&1 || status=1
  echo "  memcheck test_comm_staged_cuda, 2 ranks: $(grep -c 'ERROR SUMMARY: 0 errors' \
    "$W/memcheck_staged.log") of 2 ranks with 0 errors"
  mpirun -n 2 "$cs" --tool memcheck --error-exitcode 9 "$B/bin/train_cls" \
    --config "$W/cfg/s3_mpi2_cuda.json" --data "$D" --max-steps 3 --max-seq-len 32 --layers 2 \
    --hidden 64 --heads 2 --intermediate 128 > "$W/memcheck_train_mpi2.log" 2>&1 || status=1
  echo "  memcheck train_cls stage 3, 2 ranks staged: $(grep -c 'ERROR SUMMARY: 0 errors' \
    "$W/memcheck_train_mpi2.log") of 2 ranks with 0 errors"
  "$cs" --tool racecheck "$B/tests/test_backend_cuda" > "$W/racecheck.log" 2>&1
  echo "  racecheck test_backend_cuda: $(grep -E 'RACECHECK SUMMARY' "$W/racecheck.log")"
fi
if has ncu; then
  log "ncu: each kernel's GPU time, bench_train stage 0 batch 256, 2 steps"
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for p in fp32 bf16; do
    "$ncu" --metrics gpu__time_duration.sum --csv --print-units base "$B/bench/bench_train" \
      --backend cuda --stage 0 --precision $p --batch 256 --steps 1 --warmup 1 \
      > "$W/ncu_$p.csv" 2> "$W/ncu_$p.err" || status=1
    python3 bench/ncu_summary.py "$W/ncu_$p.csv" --steps 2 || status=1
  done
fi
log "done (exit $status)"
exit $status
