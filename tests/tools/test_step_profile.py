#!/usr/bin/env python3
"""Check bench/step_profile.py on a `perf script` text written here:

    test_step_profile.py REPO_ROOT

Ten samples: four in OpenBLAS's kernel, two in the bf16 dot product's tile
and packs (cpu_gemm_dot.c, a GEMM too), a memset under OpenBLAS (sgemm_beta's
tail call: clearing C, a GEMM), a memset under the engine (not a GEMM), the
GELU backward and one in the operating system: GEMM 70.0%, non-GEMM 30.0%,
22.2% (2 of 9) without the operating system. The step's matmul FLOPs must be
bench_train's executed count (its formula, repeated here: 66.19 GFLOP), and
at 100 GFLOP/s for every shape a step of 1,000 ms runs at 66.2% of its
GEMMs' rate. A file without samples must fail. Exit 0 when all hold, 1 with
a line per problem."""
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "bench"))
import step_profile  # noqa: E402

OB = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblasp-r0.3.21.so"
ZE = "/work/build/libzero-engine.so.0.1.0"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


def sample(frames):
    out = "bench_train 25714 68017.331541:    1001001 cpu-clock:pppH: \n"
    for i, (sym, dso) in enumerate(frames):
        out += "\t%16x %s+0x%x (%s)\n" % (0x1000 + i, sym, 0x40 + i, dso)
    return out + "\n"


fails = []
SAMPLES = ([[("sgemm_kernel_SKYLAKEX", OB), ("sgemm_tn", OB)]] * 4 +
           [[("dot_tile", ZE), ("dot_one._omp_fn.0", ZE)],
            [("pair_row", ZE), ("pack_a", ZE)],
            [("__memset_avx512_unaligned_erms", LIBC), ("sgemm_tn", OB)],
            [("__memset_avx512_unaligned_erms", LIBC), ("ds_step", ZE)],
            [("act_bwd_dispatch", ZE), ("GOMP_parallel", "/usr/lib/libgomp.so.1")],
            [("handle_softirqs", "[kernel.kallsyms]")]])
B, T, H, I, L, C = 32, 128, 256, 1024, 4, 6  # bench_train's count, bench/bench_train.c
full = 2.0 * (4.0 * H * H + 2.0 * H * I) * T + 4.0 * T * T * H
last = 2.0 * (2.0 * H * H) * T + 2.0 * (2.0 * H * H + 2.0 * H * I) + 4.0 * T * H
executed = 3.0 * ((L - 1) * full + last + 2.0 * (H * H + H * C)) * B / 1e9
got = sum(g for _, g in step_profile.gemm_shapes())
if abs(got - executed) > 1e-9 * executed:  # the same sums of integers in double
    fails.append("gemm_shapes: %.6f GFLOP, bench_train counts %.6f" % (got, executed))
with tempfile.TemporaryDirectory() as d:
    good = os.path.join(d, "script.txt")
    with open(good, "w") as f:
        f.write("".join(sample(s) for s in SAMPLES))
    kern = os.path.join(d, "kernels.txt")
    with open(kern, "w") as f:
        f.write("| GEMM | m x n x k (batch) | backend GFLOP/s | OpenBLAS sgemm GFLOP/s | ratio |\n"
                "| --- | --- | ---: | ---: | ---: |\n")
        for name, _ in step_profile.gemm_shapes():
            f.write("| %s | 1 x 1 x 1 (1) | 50.0 | 100.0 | 0.50 |\n" % name)
    out = subprocess.run([sys.executable, os.path.join(root, "bench", "step_profile.py"), good,
                          "--kernels", kern, "--step-ms", "1000"], capture_output=True, text=True)
    text = out.stdout
    if out.returncode != 0 or not text.startswith(
            "10 samples of the timed steps: GEMM 70.0%, non-GEMM 30.0% (22.2% without"):
        fails.append("summary line: %r (exit %d)" % (text.splitlines()[:1], out.returncode))
    for row in ("| OpenBLAS clearing C (beta, its memset) | yes | 1 | 10.00 |",
                "| bf16 dot product (tile, packs: cpu_gemm_dot.c) | yes | 2 | 20.00 |",
                "| memset / memcpy outside GEMMs | no | 1 | 10.00 |",
                "| bias + activation (GELU) fwd / bwd | no | 1 | 10.00 |",
                "| operating system | no | 1 | 10.00 |"):
        if row not in text:
            fails.append("row missing: %s" % row)
    if "661.9 ms at OpenBLAS's rates; the step 1000.0 ms of CPU: 66.2% of its GEMMs' rate" not in text:
        fails.append("rate line: %r" % [l for l in text.splitlines() if l.startswith("matmul")])
    empty = os.path.join(d, "empty.txt")
    open(empty, "w").close()
    out = subprocess.run([sys.executable, os.path.join(root, "bench", "step_profile.py"), empty],
                         capture_output=True, text=True)
    if out.returncode == 0:
        fails.append("a file without samples passed")
for m in fails:
    print("test_step_profile: " + m)
print("test_step_profile: " + ("FAILED" if fails else "ok"))
sys.exit(1 if fails else 0)
