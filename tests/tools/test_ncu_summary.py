#!/usr/bin/env python3
"""Check bench/ncu_summary.py on an ncu CSV written here (CI has no GPU):

    test_ncu_summary.py REPO_ROOT

Three kernels over two steps, with the program's own lines around the CSV
and ncu's thousands separators: a cuBLAS GEMM (600 + 600 ns), ds_k_fill
(200 + 200 ns) and ds_k_embedding_bwd (400 ns). Per step 1,000 ns = 0.001
ms, GEMM 60.0%, the GEMM first with 2 calls of 600 ns. A file without the
header must fail. Exit 0 when all hold, 1 with a line per problem."""
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "bench"))
import ncu_summary  # noqa: E402

HEAD = ('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n')
ROWS = [("sm80_xmma_gemm_f32f32_tn(float *)", "600"), ("ds_k_fill(float *, unsigned long)", "200"),
        ("ds_k_embedding_bwd(float *, int)", "400"), ("sm80_xmma_gemm_f32f32_tn(float *)", "600"),
        ("ds_k_fill(float *, unsigned long)", "200")]
fails = []
with tempfile.TemporaryDirectory() as d:
    good = os.path.join(d, "k.csv")
    with open(good, "w") as f:
        f.write("==PROF== Connected to process 1\nbench_train: 6.29 samples/s\n" + HEAD)
        for i, (k, v) in enumerate(ROWS):
            f.write('"%d","%s","gpu__time_duration.sum","ns","%s"\n' % (i, k, v))
        f.write("==PROF== Disconnected from process 1\n")
    with open(good) as f:
        t = ncu_summary.kernel_times(f)
    want = {"sm80_xmma_gemm_f32f32_tn": [1200.0, 2], "ds_k_fill": [400.0, 2],
            "ds_k_embedding_bwd": [400.0, 1]}
    if dict(t) != want:
        fails.append("kernel_times: %s, want %s" % (dict(t), want))
    out = subprocess.run([sys.executable, os.path.join(root, "bench", "ncu_summary.py"), good,
                          "--steps", "2"], capture_output=True, text=True)
    lines = out.stdout.splitlines()
    if out.returncode != 0 or not lines or "0.001 ms of GPU time per step, GEMM 60.0%" not in lines[0]:
        fails.append("summary line: %r (exit %d)" % (lines[:1], out.returncode))
    elif len(lines) < 2 or not lines[1].split()[0].startswith("sm80_xmma_gemm") or "2 calls" not in lines[1]:
        fails.append("first kernel line: %r" % lines[1:2])
    bad = os.path.join(d, "bad.csv")
    with open(bad, "w") as f:
        f.write("==PROF== no kernels profiled\n")
    out = subprocess.run([sys.executable, os.path.join(root, "bench", "ncu_summary.py"), bad],
                         capture_output=True, text=True)
    if out.returncode == 0:
        fails.append("a file without ncu's header passed")
for m in fails:
    print("test_ncu_summary: " + m)
print("test_ncu_summary: " + ("FAILED" if fails else "ok"))
sys.exit(1 if fails else 0)
