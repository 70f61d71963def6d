#!/usr/bin/env python3
"""The tables of bench/lm_speed.sh: reads OUT/runs.jsonl (one record per run,
bench_lm's or bench_pytorch_gpt2.py's bench_lm_json line with the run's
conditions) and OUT/env.txt, prints markdown.

    python3 bench/lm_table.py /tmp/lm_speed > /tmp/lm_speed/table.md

Throughput: per configuration the median over the repetitions of each run's
median step, with the range of the runs' medians in brackets. Ratios are
paired: engine / PyTorch within the same repetition (the two ran minutes
apart), then the median over repetitions, against the faster PyTorch
attention of that repetition and layout. "others" is the CPU time other
processes took during the run, in cores (0 on an idle machine, up to 2).
"""
import json, os, statistics, sys

MiB = 1048576.0
QUIET = 0.10  # cores other processes may take for a run to count as undisturbed

LABELS = [
    ("zs0_1x2", "zero-engine, 1 rank x 2 threads, stage 0"),
    ("zs0_2x1", "zero-engine, 2 ranks x 1 thread, stage 0"),
    ("zs1_2x1", "zero-engine, 2 ranks x 1 thread, stage 1"),
    ("zs2_2x1", "zero-engine, 2 ranks x 1 thread, stage 2"),
    ("zs3_2x1", "zero-engine, 2 ranks x 1 thread, stage 3"),
    ("zs0_1x2_ckpt", "zero-engine, 1 rank x 2 threads, stage 0, activation checkpointing"),
    ("zs3_2x1_ckpt", "zero-engine, 2 ranks x 1 thread, stage 3, activation checkpointing"),
    ("pt_1x2_eager", "PyTorch, 1 process x 2 threads, eager attention"),
    ("pt_1x2_sdpa", "PyTorch, 1 process x 2 threads, sdpa attention"),
    ("pt_2x1_eager", "PyTorch DDP, 2 processes x 1 thread, eager attention"),
    ("pt_2x1_sdpa", "PyTorch DDP, 2 processes x 1 thread, sdpa attention"),
]


def load(out):
    runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl")) if l.strip()]
    by = {}
    for r in runs:
        by.setdefault(r["label"], {})[r["rep"]] = r
    return runs, by


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def best_pt(by, layout, rep):
    """The faster PyTorch attention of a layout in one repetition."""
    c = [by.get(f"pt_{layout}_{a}", {}).get(rep) for a in ("eager", "sdpa")]
    c = [r for r in c if r]
    return max(c, key=lambda r: r["tokens_per_s"]) if c else None


def main():
    out = sys.argv[1]
    runs, by = load(out)
    env = open(os.path.join(out, "env.txt")).read().strip()
    print("Conditions (bench/lm_speed.sh's env.txt):\n")
    print("```\n" + env + "\n```\n")
    any_r = next((r for r in runs if r["side"] == "engine"), runs[0])
    print(f"Model: GPT-2, {any_r['layers']} layers x {any_r['hidden']}, {any_r['heads']} heads, "
          f"vocab {any_r['vocab']}, Psi = {any_r['psi']:,} parameters; sequence {any_r['seq']}, "
          f"global batch {any_r['batch']} = {any_r['batch'] * any_r['seq']} tokens per step; "
          f"{any_r['steps']} timed steps after {any_r['warmup']} warm-up per run; "
          f"{len({r['rep'] for r in runs})} repetitions. Matmul FLOP per step "
          f"{any_r.get('flop_per_step', 0) / 1e9:.1f} G (bench_lm.c: flops_per_step).\n")

    quiet = {lab: {k: r for k, r in reps.items() if r["others_cores"] < QUIET}
             for lab, reps in by.items()}
    print(f"Undisturbed runs only (other processes took < {QUIET:.2f} cores while it ran): "
          f"median over those runs, and the ratio of the medians against the faster PyTorch "
          f"attention of the same layout:\n")
    print("| run | undisturbed runs | tokens/s, median [range] | vs PyTorch |")
    print("| --- | ---: | ---: | ---: |")
    pt_best = {}
    for layout in ("1x2", "2x1"):
        cands = [med([r["tokens_per_s"] for r in quiet.get(f"pt_{layout}_{att}", {}).values()])
                 for att in ("eager", "sdpa")]
        cands = [c for c in cands if c == c]
        pt_best[layout] = max(cands) if cands else float("nan")
    for lab, name in LABELS:
        q = quiet.get(lab, {})
        if lab not in by:
            continue
        tps = [r["tokens_per_s"] for r in q.values()]
        if not tps:
            print(f"| {name} | 0 | - | - |")
            continue
        ratio = ""
        if lab.startswith("zs"):
            b = pt_best["1x2" if "1x2" in lab else "2x1"]
            ratio = f"{med(tps) / b:.2f}x" if b == b else ""
        print(f"| {name} | {len(tps)} | {med(tps):.1f} [{min(tps):.1f}-{max(tps):.1f}] | "
              f"{ratio} |")
    print("\nAll runs:\n")

    print("| run | tokens/s, median of reps [range] | step s | GFLOP/s | vs PyTorch (same layout, "
          "faster attention, paired by rep) | others (cores) per rep |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for lab, name in LABELS:
        reps = by.get(lab)
        if not reps:
            continue
        tps = [reps[k]["tokens_per_s"] for k in sorted(reps)]
        steps = [reps[k]["median_s"] for k in sorted(reps)]
        gf = [reps[k]["gflops"] for k in sorted(reps)]
        ratio = ""
        if lab.startswith("zs"):
            layout = "1x2" if "1x2" in lab else "2x1"
            rs = []
            for k in sorted(reps):
                p = best_pt(by, layout, k)
                if p:
                    rs.append(reps[k]["tokens_per_s"] / p["tokens_per_s"])
            if rs:
                ratio = f"{med(rs):.2f}x [{min(rs):.2f}-{max(rs):.2f}]"
        others = ", ".join(f"{reps[k]['others_cores']:.2f}" for k in sorted(reps))
        print(f"| {name} | {med(tps):.1f} [{min(tps):.1f}-{max(tps):.1f}] | {med(steps):.2f} | "
              f"{med(gf):.0f} | {ratio} | {others} |")

    print("\nMemory per rank (engine: the accountant, MiB = 2^20 bytes; rank 0 of each run, "
          "first repetition; PyTorch: peak RSS of the largest process):\n")
    print("| run | params | grads | master | optim | model state | ZeRO formula | state / formula "
          "| buffers | activations | peak RSS |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for lab, name in LABELS:
        reps = by.get(lab)
        if not reps:
            continue
        r = reps[min(reps)]
        rss = med([reps[k]["rss_mib"] for k in reps])
        if lab.startswith("zs"):
            print(f"| {name} | {r['params'] / MiB:.1f} | {r['grads'] / MiB:.1f} | "
                  f"{r['master'] / MiB:.1f} | {r['optim'] / MiB:.1f} | {r['state'] / MiB:.1f} | "
                  f"{r['formula'] / MiB:.1f} | {r['state'] / r['formula']:.4f} | "
                  f"{r['buffers'] / MiB:.1f} | {r['activations'] / MiB:.1f} | {rss:.0f} |")
        else:
            print(f"| {name} | | | | | | | | | | {rss:.0f} |")

    print("\nActivation checkpointing (engine, per rank; the plan's bytes computed from the "
          "modules, the measured bytes from the accountant):\n")
    print("| layout | activations without | with | measured without / with | tokens/s without "
          "| with | with / without |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for plain, ck, name in (("zs0_1x2", "zs0_1x2_ckpt", "1 rank x 2 threads, stage 0"),
                            ("zs3_2x1", "zs3_2x1_ckpt", "2 ranks x 1 thread, stage 3")):
        a, b = by.get(plain), by.get(ck)
        if not a or not b:
            continue
        ra, rb = a[min(a)], b[min(b)]
        ta = med([a[k]["tokens_per_s"] for k in a])
        tb = med([b[k]["tokens_per_s"] for k in b])
        paired = [b[k]["tokens_per_s"] / a[k]["tokens_per_s"] for k in b if k in a]
        print(f"| {name} | {ra['act_plain'] / MiB:.1f} MiB | {ra['act_ckpt'] / MiB:.1f} MiB | "
              f"{ra['activations'] / MiB:.1f} / {rb['activations'] / MiB:.1f} MiB | {ta:.1f} | "
              f"{tb:.1f} | {med(paired):.2f}x |")

    print("\nPer run (tokens/s; step seconds sorted; idle % before the run; others' cores "
          "during it):\n")
    print("| run | rep | tokens/s | steps (s) | idle before | others |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    for lab, name in LABELS:
        for k in sorted(by.get(lab, {})):
            r = by[lab][k]
            print(f"| {lab} | {k} | {r['tokens_per_s']:.1f} | "
                  f"{', '.join(f'{t:.2f}' for t in r['step_s'])} | {r['idle_before']}% | "
                  f"{r['others_cores']:.2f} |")


if __name__ == "__main__":
    main()
