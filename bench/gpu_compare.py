#!/usr/bin/env python3
"""tools/gpu_check.sh's table: each cuda training run's losses against the cpu
run of the same config (train_cls --metrics files in one folder).

    python3 bench/gpu_compare.py WORK_DIR

Exits 1 when a run is missing, has a non-finite loss, or its first loss is
further from the cpu's than 1e-4 relative. Why that bound: step 1 starts from
the same weights on the same rows, and the backends differ only in the order
of their sums (GEMMs of up to 1024 terms, column sums over the batch); fp32
sums of n terms in two orders differ by at most about n * 2^-24 relative to
the sum of magnitudes, 6e-5 for n = 1024, and the loss is a mean over rows of
such terms. Later steps are reported, not judged: a rounding difference grows
with training, as between any two machines (80 steps on an H100 stayed within
1e-6 in fp32, 5e-5 in bf16)."""
import json, math, os, sys

PAIRS = [('s0_cuda', 's0_cpu'), ('s1_cuda', 's0_cpu'), ('s2_cuda', 's0_cpu'),
         ('s3_cuda', 's3_cpu'), ('s2_bf16_cuda', 's2_bf16_cpu'),
         ('s2_fp16_cuda', 's2_fp16_cpu'), ('s2_offload_cuda', 's0_cpu'),
         ('s3_offparam_cuda', 's3_cpu'), ('s3_nvme_cuda', 's3_cpu'), ('s3_ckpt_cuda', 's3_cpu'),
         ('s2_nccl1_cuda', 's0_cpu'),
         # two ranks sharing the GPU (zero_engine.comm "mpi") against two cpu ranks
         ('s0_mpi2_cuda', 's0_cpu2'), ('s1_mpi2_cuda', 's0_cpu2'), ('s2_mpi2_cuda', 's0_cpu2'),
         ('s3_mpi2_cuda', 's3_cpu2'),
         # 1-bit Adam and 0/1 Adam past their warm-up (the codec and the passes on the GPU)
         ('onebit_cuda', 'onebit_cpu'), ('zeroone_cuda', 'zeroone_cpu'),
         ('onebit_fp16_cuda', 'onebit_fp16_cpu'), ('onebit_mpi2_cuda', 'onebit_cpu2'),
         ('zeroone_mpi2_cuda', 'zeroone_cpu2')]


def load(work, name):
    path = os.path.join(work, name + '.jsonl')
    if not os.path.exists(path):
        return None
    steps = {}
    for line in open(path):
        r = json.loads(line)
        if 'step' in r and 'loss' in r and 'eval' not in r:
            steps[r['step']] = r
    return steps


def main():
    work = sys.argv[1]
    bad = 0
    print('%-17s %-12s %10s %10s %10s %10s %12s %10s' %
          ('run', 'against', 'loss 1', 'cpu', 'last loss', 'cpu', 'max |diff|', 'samples/s'))
    for run, ref in PAIRS:
        a, b = load(work, run), load(work, ref)
        if not a or not b:
            print('%-17s missing (%s)' % (run, ref if a else run))
            bad += 1
            continue
        common = sorted(k for k in a if k in b)
        first, last = common[0], common[-1]
        la, lb = a[first]['loss'], b[first]['loss']
        diff = max(abs(a[k]['loss'] - b[k]['loss']) for k in common)
        rate = sorted(a[k].get('samples_per_s', 0) for k in a)[len(a) // 2]
        ok = all(math.isfinite(a[k]['loss']) for k in a) and abs(la - lb) <= 1e-4 * abs(lb)
        bad += not ok
        print('%-17s %-12s %10.6f %10.6f %10.6f %10.6f %12.3g %10.1f%s' %
              (run, ref, la, lb, a[last]['loss'], b[last]['loss'], diff, rate,
               '' if ok else '  <- FAILS'))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
