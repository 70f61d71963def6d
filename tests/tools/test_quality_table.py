#!/usr/bin/env python3
"""Check bench/quality_table.py, which turns bench/quality.sh's run files into
the quality sections of bench/RESULTS.md, on a work folder written here with
figures chosen so that every statistic the same-start section reports can be
worked out by hand:

    test_quality_table.py REPO_ROOT

Seeds 42, 1 and 2, plain cross-entropy only. Engine (ours), PyTorch from the
engine's start (pt_same) and the control with other masks (pt_ctl) finish on
seeds 42 and 1; PyTorch's own run (pt) finishes on 42, is cut off on 1 (no
evaluation line) and never started on 2. Exit 0 when every expected line is
in the section, 1 with a line per problem.
"""

import json
import os
import subprocess
import sys
import tempfile

# (accuracy, macro-F1, mean training loss of each epoch) per side and seed
RUNS = {
    ("ours", 42): (0.60, 0.20, [1.25, 1.15]),
    ("ours", 1): (0.62, 0.24, [1.05, 0.95]),
    ("ours", 2): (0.61, 0.22, [1.10, 1.00]),
    ("pt", 42): (0.61, 0.22, [1.20, 1.10]),
    ("pt_same", 42): (0.60, 0.21, [1.20, 1.10]),
    ("pt_same", 1): (0.63, 0.26, [1.00, 0.90]),
    ("pt_ctl", 42): (0.61, 0.23, [1.10, 1.00]),
    ("pt_ctl", 1): (0.60, 0.22, [1.00, 0.80]),
}

# What the figures above give; the arithmetic is in the comments. Figures are
# printed with 4 decimals (1 for standard errors), and every expected value
# is exact at that precision, so the strings are compared as they are.
EXPECTED = [
    # the protocol table: pt cut off on seed 1 (a file without evaluation),
    # never started on seed 2 (no file)
    "| plain CE | 1 | 100 / 10, 3 | 0.6200 | 0.2400 | not finished | not finished | - / - |",
    "| plain CE | 2 | 100 / 10, 3 | 0.6100 | 0.2200 | not run | not run | - / - |",
    # control columns beside the engine's and the same start's
    "| plain CE | 42 | 0.6000 | 0.2000 | 0.6000 | 0.2100 | 0.6100 | 0.2300 | 0.2200 |",
    "| plain CE | 1 | 0.6200 | 0.2400 | 0.6300 | 0.2600 | 0.6000 | 0.2200 | - |",
    # engine - same start: accuracy 0.00, -0.01 (mean -0.005, sd 0.00707,
    # s.e. 0.005: 1.0); macro-F1 -0.01, -0.02 (mean -0.015, sd 0.00707, 3.0)
    "| plain CE | zero-engine - same start, mean of 2 | -0.0050 (1.0 s.e.) | -0.0150 (3.0 s.e.) "
    "| | | | | |",
    # control - same start: accuracy +0.01, -0.03 (mean -0.01, sd 0.02828,
    # s.e. 0.02: 0.5); macro-F1 +0.02, -0.04 (mean -0.01, sd 0.04243, 0.3)
    "| plain CE | other masks - same start, mean of 2 | | | | | -0.0100 (0.5 s.e.) "
    "| -0.0100 (0.3 s.e.) | |",
    # root mean square: control sqrt((0.02^2 + 0.04^2) / 2) = 0.0316, engine
    # sqrt((0.01^2 + 0.02^2) / 2) = 0.0158
    "- plain CE, seeds 42, 1: macro-F1 moves by 0.0316 (root mean square) when PyTorch only "
    "draws other dropout masks, and by 0.0158 from PyTorch to zero-engine on the same seeds.",
    # epoch losses, control against the same start: epoch 1 -0.10, 0.00
    # (mean -0.05, sd 0.0707, s.e. 0.05: 1.0); epoch 2 -0.10, -0.10 (no
    # spread: no standard error)
    "| plain CE | the control (other masks) | 2 | 1.0500 +- 0.0707 | 0.9000 +- 0.1414 |",
    "| plain CE | difference, paired by seed | 2 | -0.0500 (1.0 s.e.) | -0.1000 |",
    # engine against the same start: +0.05, +0.05 in both epochs
    "| plain CE | difference, paired by seed | 2 | +0.0500 | +0.0500 |",
]


def write_run(work, side, seed, acc, f1, epoch_loss, finished=True):
    with open(f"{work}/{side}_none_s{seed}.jsonl", "w", encoding="utf-8") as f:
        for e, loss in enumerate(epoch_loss):
            f.write(json.dumps({"epoch_end": e, "mean_loss": loss}) + "\n")
        if finished:
            per_class = {"a": {"f1": f1}, "b": {"f1": f1}}
            f.write(json.dumps({"eval": {"accuracy": acc, "macro_f1": f1,
                                         "per_class": per_class}}) + "\n")


def main():
    repo = sys.argv[1]
    with tempfile.TemporaryDirectory() as work:
        for (side, seed), (acc, f1, losses) in RUNS.items():
            write_run(work, side, seed, acc, f1, losses)
        write_run(work, "pt", 1, 0, 0, [1.0], finished=False)  # cut off in epoch 2
        for seed in (42, 1, 2):
            with open(f"{work}/split_c_s{seed}.txt", "w", encoding="utf-8") as f:
                f.write("rows 110 train 100 dev 10 classes a,b\n"
                        + "".join(f"vocab {c}\n" for c in "xyz"))
        out = f"{work}/section.md"
        subprocess.run([sys.executable, f"{repo}/bench/quality_table.py", "--work", work,
                        "--out", out, "--seeds", "42 1 2", "--losses", "none",
                        "--heading", "Quality table test"], check=True,
                       stdout=subprocess.DEVNULL)
        text = open(out, encoding="utf-8").read()
    problems = [f"missing: {line}" for line in EXPECTED if line not in text]
    if not text.startswith("## Quality table test\n"):
        problems.append("the section does not start with the --heading given")
    for p in problems:
        print(p)
    if problems:
        print("--- the section written:\n" + text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
