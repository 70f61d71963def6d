#!/usr/bin/env python3
"""The section of bench/lm_quality.sh: per-seed dev loss and bits per byte of
zero-engine (train_lm) and PyTorch (tools/pytorch_lm_reference.py), their
means and sample standard deviations over the seeds, the paired (same seed,
hence same split and batch order) differences, a verdict, and the engine's
generated samples.

    python3 bench/lm_quality_table.py --work DIR --seeds "42 1 2" --steps 500 \
        [--cpu NAME] [--ncpu N] [--heading TITLE] > section.md

Reads DIR/{ours,pt}_sSEED.{jsonl,log,wall} and DIR/pack_sSEED.txt.
"""
import argparse
import json
import math
import os
import statistics


def load(work, side, seed):
    base = os.path.join(work, f"{side}_s{seed}")
    if not os.path.exists(base + ".jsonl"):
        return None
    recs = [json.loads(l) for l in open(base + ".jsonl") if l.strip()]
    init = next((r["initial_eval"] for r in recs if "initial_eval" in r), None)
    final = recs[-1] if recs and "eval" in recs[-1] else None
    steps = [r for r in recs if "step" in r and "loss" in r]
    wall = None
    if os.path.exists(base + ".wall"):
        wall = float(open(base + ".wall").read().strip())
    log = open(base + ".log", errors="replace").read() if os.path.exists(base + ".log") else ""
    return {"init": init, "eval": final["eval"] if final else None, "final": final,
            "steps": steps, "wall": wall, "log": log}


def sample_of(log):
    """The text after train_lm's 'train_lm: sample (...):' line."""
    key = "train_lm: sample ("
    i = log.find(key)
    if i < 0:
        return None, None
    j = log.index("\n", i)
    return log[i + len("train_lm: "): j].rstrip(":"), log[j + 1:].rstrip("\n")


def mean_sd(xs):
    if not xs:
        return float("nan"), float("nan")
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else float("nan"))


def fmt_wall(s):
    if s is None:
        return "-"
    s = int(round(s))
    return f"{s // 60} min {s % 60:02d} s"


def tail_loss(steps, n=50):
    xs = [r["loss"] for r in steps[-n:] if r.get("loss") is not None]
    return statistics.mean(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--seeds", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--cpu", default="")
    ap.add_argument("--ncpu", default="")
    ap.add_argument("--heading", default="Language model quality (issue 13)")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split()]
    date = open(os.path.join(a.work, "date")).read().strip() \
        if os.path.exists(os.path.join(a.work, "date")) else "?"
    runs = {(side, s): load(a.work, side, s) for side in ("ours", "pt") for s in seeds}
    pt_any = next((r for (side, _), r in runs.items() if side == "pt" and r and r["final"]), None)
    torch_v = pt_any["final"].get("torch", "?") if pt_any else "?"
    tf_v = pt_any["final"].get("transformers", "?") if pt_any else "?"

    print(f"## {a.heading}\n")
    print(f"Measured {date} by `bench/lm_quality.sh --seeds \"{a.seeds}\" --steps {a.steps}` on "
          f"{a.ncpu} cores ({a.cpu}). Data: NLPCC 2013 ({os.path.basename('Nlpcc2013Train.tsv')}, "
          f"read in place), the text column only, byte level (vocabulary 257, <|endoftext|> "
          f"256), documents split 90/10 by the seed, packed into rows of 128 bytes that overlap "
          f"by one. Model: GPT-2, 4 layers x 256, 4 heads, n_positions 128, dropout 0.1, tied "
          f"head (3,258,112 parameters). AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight "
          f"decay 0.01, clip 1.0, 100 warm-up steps then linear decay to 0, 32 rows (4,096 "
          f"tokens) a step in the engine's 2-rank sampler order, {a.steps} steps. zero-engine: "
          f"`train_lm` on 2 ranks x 1 thread, ZeRO stage 2; PyTorch {torch_v} with transformers "
          f"{tf_v} (GPT2LMHeadModel, eager attention): `tools/pytorch_lm_reference.py`, 1 process "
          f"x 2 threads. Each seed sets the split, batch order, init and dropout on both sides; "
          f"init and dropout come from each side's own generator, so a seed is an independent "
          f"run on each side.\n")

    print("Same data on both sides, per seed (bench/lm_dump_pack against the reference's "
          "--check-pack: every train and dev token, label, mask and byte count, and every "
          "step's rows, identical):\n")
    print("| seed | train rows | dev rows | dev target tokens / bytes | check |")
    print("| ---: | ---: | ---: | --- | --- |")
    for s in seeds:
        p = os.path.join(a.work, f"pack_s{s}.txt")
        if not os.path.exists(p):
            print(f"| {s} | | | | not run |")
            continue
        txt = open(p).read()
        tr = next((l for l in txt.splitlines() if l.startswith("train:")), "")
        dv = next((l for l in txt.splitlines() if l.startswith("dev:")), "")

        def field(line, name):  # "train: 11925 docs, 963859 tokens, ..., 7590 rows, ..."
            for part in line.split(":", 1)[-1].split(","):
                words = part.split()
                if words and " ".join(words[1:]) == name:
                    return words[0]
            return "?"
        ok = "identical" if "check-pack: identical" in txt else "DIFFERENT"
        print(f"| {s} | {field(tr, 'rows')} | {field(dv, 'rows')} | "
              f"{field(dv, 'targets')} / {field(dv, 'target bytes')} | {ok} |")

    print("\nPer seed (dev, after training; before training both sides start at ln 257 = "
          "5.549 nats, 8.01 bits per byte):\n")
    print("| seed | zero-engine dev loss | zero-engine bits/byte | PyTorch dev loss | PyTorch "
          "bits/byte | train loss, last 50 steps, engine / PyTorch | wall time engine / PyTorch |")
    print("| ---: | ---: | ---: | ---: | ---: | --- | --- |")
    ours_l, ours_b, pt_l, pt_b, diffs_l, diffs_b = [], [], [], [], [], []
    for s in seeds:
        o, p = runs[("ours", s)], runs[("pt", s)]
        oe = o["eval"] if o and o["eval"] else None
        pe = p["eval"] if p and p["eval"] else None
        cell = lambda e, k: f"{e[k]:.4f}" if e else "not run"  # noqa: E731
        print(f"| {s} | {cell(oe, 'loss')} | {cell(oe, 'bits_per_byte')} | {cell(pe, 'loss')} | "
              f"{cell(pe, 'bits_per_byte')} | "
              f"{tail_loss(o['steps']) if o else float('nan'):.4f} / "
              f"{tail_loss(p['steps']) if p else float('nan'):.4f} | "
              f"{fmt_wall(o['wall'] if o else None)} / {fmt_wall(p['wall'] if p else None)} |")
        if oe and pe:
            ours_l.append(oe["loss"])
            ours_b.append(oe["bits_per_byte"])
            pt_l.append(pe["loss"])
            pt_b.append(pe["bits_per_byte"])
            diffs_l.append(oe["loss"] - pe["loss"])
            diffs_b.append(oe["bits_per_byte"] - pe["bits_per_byte"])

    n = len(ours_b)
    print(f"\nOver the {n} seeds where both sides finished (mean +- sample standard deviation; "
          f"the paired difference is engine - PyTorch on the same seed, i.e. the same split and "
          f"batch order, with its standard error):\n")
    print("| | dev loss (nats/byte token) | dev bits per byte |")
    print("| --- | ---: | ---: |")
    ml, sl = mean_sd(ours_l)
    mb, sb = mean_sd(ours_b)
    print(f"| zero-engine | {ml:.4f} +- {sl:.4f} | {mb:.4f} +- {sb:.4f} |")
    pml, psl = mean_sd(pt_l)
    pmb, psb = mean_sd(pt_b)
    print(f"| PyTorch | {pml:.4f} +- {psl:.4f} | {pmb:.4f} +- {psb:.4f} |")
    dl, dsl = mean_sd(diffs_l)
    db, dsb = mean_sd(diffs_b)
    sel = dsl / math.sqrt(n) if n > 1 else float("nan")
    seb = dsb / math.sqrt(n) if n > 1 else float("nan")
    print(f"| engine - PyTorch, paired | {dl:+.4f} +- {sel:.4f} (s.e.) | {db:+.4f} +- {seb:.4f} "
          f"(s.e.) |")
    if n:
        within = abs(mb - pmb) <= psb if n > 1 else False
        side = "below (better than)" if mb < pmb else "above (worse than)"
        print(f"\n- Dev bits per byte over {n} seeds: zero-engine {mb:.4f}, PyTorch {pmb:.4f}: the "
              f"engine's mean is {abs(mb - pmb):.4f} {side} PyTorch's, "
              f"{'within' if within else 'OUTSIDE'} PyTorch's seed-to-seed spread "
              f"(sd {psb:.4f}); paired by seed the difference is {db:+.4f} bits per byte, "
              f"{abs(db) / seb if seb and seb == seb and seb > 0 else float('nan'):.1f} standard "
              f"errors.")

    print("\nSamples from the engine's trained models (`train_lm --generate N --temperature 0.8 "
          "--top-k 40 --sample-seed SEED` after training, from an empty prompt: the model starts "
          "a new document after <|endoftext|>; bytes that do not form UTF-8 print as U+FFFD):\n")
    for s in seeds:
        o = runs[("ours", s)]
        head, text = sample_of(o["log"]) if o else (None, None)
        if text is None:
            continue
        print(f"seed {s}, {head}:\n\n```\n{text}\n```\n")


if __name__ == "__main__":
    main()
