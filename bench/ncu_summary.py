#!/usr/bin/env python3
"""Per-kernel GPU time from an Nsight Compute CSV (tools/gpu_check.sh's ncu
phase: `ncu --metrics gpu__time_duration.sum --csv --print-units base`).

usage: bench/ncu_summary.py FILE.csv [--steps N] [--top K]

Sums every kernel's duration by name (the text before its argument list),
counts the cuBLAS kernels (gemm, cutlass, xmma, nvjet in the name) as GEMM,
and prints the total per step (all launches / N), the GEMM share and the K
kernels that take most, with their calls and mean duration. The lines ncu and
the program print around the CSV are skipped."""
import argparse
import collections
import csv
import sys

GEMM_MARKS = ("gemm", "cutlass", "xmma", "nvjet")


def kernel_times(lines):
    """{name: [total ns, calls]} of the CSV rows in lines."""
    rows = csv.reader(l for l in lines if l.startswith('"'))
    header = next(rows, None)
    if not header or "Kernel Name" not in header or "Metric Value" not in header:
        raise ValueError("no ncu CSV header (Kernel Name, Metric Value) found")
    ki, vi = header.index("Kernel Name"), header.index("Metric Value")
    out = collections.defaultdict(lambda: [0.0, 0])
    for r in rows:
        if len(r) <= max(ki, vi):
            continue
        name = r[ki].split("(")[0].strip()
        out[name][0] += float(r[vi].replace(",", ""))
        out[name][1] += 1
    return out


def is_gemm(name):
    low = name.lower()
    return any(m in low for m in GEMM_MARKS)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=1, help="launches of how many steps the file holds")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args(argv)
    with open(a.csv, errors="replace") as f:
        times = kernel_times(f)
    total = sum(t for t, _ in times.values())
    if total <= 0:
        print("ncu_summary: no kernel durations in %s" % a.csv, file=sys.stderr)
        return 1
    gemm = sum(t for n, (t, _) in times.items() if is_gemm(n))
    print("%s: %.3f ms of GPU time per step, GEMM %.1f%%" % (a.csv, total / 1e6 / a.steps,
                                                             100 * gemm / total))
    for n, (t, c) in sorted(times.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print("  %-60s %5.1f%%  %8.3f ms/step  %5d calls  %8.1f us each"
              % (n[:60], 100 * t / total, t / 1e6 / a.steps, c, t / c / 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
