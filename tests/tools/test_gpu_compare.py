#!/usr/bin/env python3
"""Check bench/gpu_compare.py, the judge of tools/gpu_check.sh (which needs a
GPU, so CI never runs it), on metrics files written here:

    test_gpu_compare.py REPO_ROOT

Every pair gpu_compare.py knows gets a cuda and a cpu run. All equal: exit 0.
Then one change at a time must make it exit 1 and mark or name the run: a
first loss 2e-4 relative off (over its 1e-4 bound), a NaN later loss, a
missing run. A first loss 5e-5 relative off (inside the bound) and a later
loss far off (reported, not judged) keep exit 0. Exit 0 when every case
behaves, 1 with a line per problem."""

import json
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
script = os.path.join(root, "bench", "gpu_compare.py")
sys.path.insert(0, os.path.join(root, "bench"))
import gpu_compare  # noqa: E402  (its PAIRS: the runs a folder must hold)


def write(work, name, losses):
    with open(os.path.join(work, name + ".jsonl"), "w") as f:
        for i, loss in enumerate(losses, 1):
            f.write(json.dumps({"step": i, "loss": loss, "samples_per_s": 100.0}) + "\n")
        f.write(json.dumps({"eval": {"accuracy": 0.5}}) + "\n")


def run(case, edit):
    with tempfile.TemporaryDirectory() as work:
        names = {n for pair in gpu_compare.PAIRS for n in pair}
        for n in names:
            write(work, n, [2.0, 1.5, 1.0])
        edit(work)
        p = subprocess.run([sys.executable, script, work], capture_output=True, text=True)
        return p.returncode, p.stdout


problems = []
cases = [
    ("all equal", lambda w: None, 0, None),
    ("first loss 5e-5 off", lambda w: write(w, "s2_cuda", [2.0001, 1.5, 1.0]), 0, None),
    ("later loss far off", lambda w: write(w, "s2_cuda", [2.0, 1.7, 0.5]), 0, None),
    ("first loss 2e-4 off", lambda w: write(w, "s2_cuda", [2.0004, 1.5, 1.0]), 1, "FAILS"),
    ("NaN loss", lambda w: write(w, "s3_cuda", [2.0, float("nan"), 1.0]), 1, "FAILS"),
    ("missing run", lambda w: os.remove(os.path.join(w, "s3_nvme_cuda.jsonl")), 1,
     "missing (s3_nvme_cuda)"),
]
for name, edit, want_rc, want_text in cases:
    rc, out = run(name, edit)
    if rc != want_rc:
        problems.append(f"{name}: exit {rc}, want {want_rc}\n{out}")
    if want_text and want_text not in out:
        problems.append(f"{name}: no '{want_text}' in\n{out}")
for p in problems:
    print("FAIL", p)
print("test_gpu_compare:", "ok" if not problems else f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
