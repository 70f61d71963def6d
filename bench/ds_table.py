#!/usr/bin/env python3
"""The tables of bench/ds_compare.sh: reads OUT/runs.jsonl (one record per
run of bench_train or bench_deepspeed.py with the run's conditions) and
OUT/env.txt, prints markdown.

    python3 bench/ds_table.py /tmp/ds_compare > /tmp/ds_compare/table.md

A pair is an engine run and the DeepSpeed run right after it (same place,
stage and repetition); its ratio is engine samples/s / DeepSpeed samples/s.
Per stage: each side's median samples/s over the repetitions with the range,
every pair's ratio, and the median and range of the ratios, over all pairs
and over the undisturbed ones only (neither run had other processes take
QUIET cores or more while it ran). The goal the issues set is a ratio of at
least 2 at every stage.
"""
import json, os, statistics, sys

QUIET = 0.10  # cores other processes may take for a run to count as undisturbed (lm_table.py)
GOAL = 2.0    # issue 17 item 4, issue 22 item 7: at least 2x DeepSpeed at every stage
PLACES = {"same": "one host (2 ranks x 1 thread, shared memory)",
          "twohost": "two simulated hosts (1 rank x 1 thread each)"}


def fmt_range(xs, f="{:.2f}"):
    return f"{f.format(statistics.median(xs))} [{f.format(min(xs))}-{f.format(max(xs))}]"


def main():
    out = sys.argv[1]
    runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl")) if l.strip()]
    env = open(os.path.join(out, "env.txt")).read().strip()
    print("Conditions (bench/ds_compare.sh's env.txt):\n\n```\n" + env + "\n```\n")
    by = {(r["where"], r["side"], r["stage"], r["rep"]): r for r in runs}
    psi = sorted({(r["side"], r["psi"]) for r in runs})
    loss = {s: [r["loss0"] for r in runs if r["side"] == s] for s in ("engine", "ds")}
    print("Same model: parameters " + ", ".join(f"{s} {p:,}" for s, p in psi) +
          "; first step's loss on rank 0's 16 rows (same rows on both sides, different init): "
          + ", ".join(f"{s} {fmt_range(v, '{:.4f}')}" for s, v in loss.items() if v) +
          " (ln 6 = 1.7918).\n")
    opts = sorted({(r["stage"], r.get("optimizer"), r.get("basic_optimizer"), r.get("overlap_comm"))
                   for r in runs if r["side"] == "ds"})
    print("DeepSpeed's optimizer per stage (engine.optimizer over engine.basic_optimizer; "
          "overlap_comm): " + "; ".join(f"stage {s}: {o} over {b}, overlap_comm {v}"
                                        for s, o, b, v in opts) + ".\n")
    for where in ("same", "twohost"):
        stages = sorted({r["stage"] for r in runs if r["where"] == where})
        if not stages:
            continue
        print(f"{PLACES[where]}: samples/s, median over repetitions [range]; a pair is marked * "
              f"when either run had other processes take >= {QUIET:.2f} cores.\n")
        print("| stage | zero-engine | DeepSpeed | pairs: engine / DeepSpeed (others, cores: "
              "engine, DeepSpeed) | ratio, median [range] | undisturbed pairs: ratio | "
              f">= {GOAL:g}x? |")
        print("| ---: | ---: | ---: | --- | ---: | ---: | :---: |")
        for st in stages:
            reps = sorted({r["rep"] for r in runs if r["where"] == where and r["stage"] == st})
            pairs = [(by.get((where, "engine", st, k)), by.get((where, "ds", st, k))) for k in reps]
            pairs = [(e, d) for e, d in pairs if e and d]
            if not pairs:
                continue
            eng = [e["samples_per_s"] for e, _ in pairs]
            ds = [d["samples_per_s"] for _, d in pairs]
            ratios = [e["samples_per_s"] / d["samples_per_s"] for e, d in pairs]
            quiet = [q for q, (e, d) in zip(ratios, pairs)
                     if e["others_cores"] < QUIET and d["others_cores"] < QUIET]
            cells = []
            for q, (e, d) in zip(ratios, pairs):
                mark = "" if e["others_cores"] < QUIET and d["others_cores"] < QUIET else "*"
                cells.append(f"{q:.2f}{mark} ({e['others_cores']:.2f}, {d['others_cores']:.2f})")
            qcell = fmt_range(quiet) + f" ({len(quiet)})" if quiet else "none"
            met = "yes" if min(ratios) >= GOAL else ("no" if max(ratios) < GOAL else "mixed")
            print(f"| {st} | {fmt_range(eng)} | {fmt_range(ds)} | {'; '.join(cells)} | "
                  f"{fmt_range(ratios)} | {qcell} | {met} |")
        print()


if __name__ == "__main__":
    main()
