#!/usr/bin/env python3
"""PyTorch half of the dropout-expectation diagnostic (bench/dropout_expectation.c).

At fixed trained weights and one fixed batch, the training-mode loss and
gradients are random (dropout). If the engine's dropout is PyTorch's in
distribution, the means over K draws agree up to Monte Carlo noise. This
script writes the batch, then runs K draws in PyTorch for two or more seeds and
compares the mean gradients with the engine's, next to the difference between
two PyTorch seeds (the noise floor):

    python3 bench/dropout_expectation.py --model DIR --data DATA --write-batch B.bin
    build/bench/dropout_expectation --model DIR --batch B.bin --out E.safetensors --draws 300
    python3 bench/dropout_expectation.py --model DIR --batch B.bin --engine E.safetensors \\
        --draws 300 [--seeds 1,2] [--threads 2]

DIR is a train_cls --save-dir folder: config.json (its id2label gives the
class order, so label ids mean the same on both sides), model.safetensors and
vocab.txt. The batch is --batch-size train rows from --first-row of the issue-3
protocol split (tools/pytorch_cls_reference.py's protocol_data, seed
--split-seed), encoded with the model's vocab.txt as the protocol encodes
(char ids, [CLS] ... [SEP]) and padded to max_seq_len (config.json's
zero_engine.max_seq_len, else --max-seq-len). The model is
tools/pytorch_cls_reference.py's build_model with the config's sizes.

Batch file (little-endian): b"DXBATCH\\0", int32 version 1, int32 B, T, C,
int32 tokens[B*T], float32 mask[B*T], int32 labels[B].
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import pytorch_cls_reference as R  # noqa: E402

MAGIC, VERSION = b"DXBATCH\0", 1
# Eval losses (no dropout) must agree this closely: both sides compute the
# same fp32 forward of the same weights and differ only in summation order,
# which moves a loss near 1 by about 1e-7 (measured 1e-7 on 1-epoch weights).
# 1e-5 flags any real mismatch (a wrong class order or vocab moves it by 0.1+).
EVAL_TOL = 1e-5


def fail(msg):
    sys.exit(f"dropout_expectation.py: {msg}")


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    id2label = cfg.get("id2label")
    if not isinstance(id2label, dict) or not id2label:
        fail(f"{path}: no id2label: the class order must come from the model")
    try:
        classes = [id2label[str(i)] for i in range(len(id2label))]
    except KeyError:
        fail(f"{path}: id2label keys are not 0 .. {len(id2label) - 1}")
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings"):
        if not isinstance(cfg.get(key), int):
            fail(f"{path}: {key} missing or not an integer")
    if cfg.get("hidden_act", "gelu") != "gelu":
        fail(f"{path}: hidden_act {cfg['hidden_act']}: build_model has the erf GELU only")
    if cfg.get("type_vocab_size", 2) != 2:
        fail(f"{path}: type_vocab_size {cfg['type_vocab_size']}: build_model has 2")
    if abs(cfg.get("layer_norm_eps", 1e-12) - 1e-12) > 1e-15:
        fail(f"{path}: layer_norm_eps {cfg['layer_norm_eps']}: build_model has 1e-12")
    p = cfg.get("hidden_dropout_prob", 0.1)
    if cfg.get("attention_probs_dropout_prob", 0.1) != p:
        fail(f"{path}: attention and hidden dropout differ: build_model has one rate")
    return cfg, classes


def read_vocab(model_dir, size):
    path = os.path.join(model_dir, "vocab.txt")
    try:
        with open(path, encoding="utf-8") as f:
            vocab = f.read().split("\n")
    except OSError as e:
        fail(f"{path}: {e}")
    if vocab and vocab[-1] == "":
        vocab.pop()
    if len(vocab) != size:
        fail(f"{path}: {len(vocab)} tokens, config.json's vocab_size is {size}")
    return {t: i for i, t in enumerate(vocab) if i >= 4}  # ids 0-3: [PAD] [UNK] [CLS] [SEP]


def write_batch(a):
    cfg, classes = read_config(a.model)
    ids_of = read_vocab(a.model, cfg["vocab_size"])
    T = a.max_seq_len or cfg.get("zero_engine", {}).get("max_seq_len") or 0
    if T < 3:
        fail("no max_seq_len in config.json's zero_engine section: pass --max-seq-len")
    if T > cfg["max_position_embeddings"]:
        fail(f"max_seq_len {T} exceeds max_position_embeddings {cfg['max_position_embeddings']}")
    _, train, _, _, _ = R.protocol_data(a.data, a.split_seed)
    rows = train[a.first_row: a.first_row + a.batch_size]
    if len(rows) != a.batch_size:
        fail(f"--first-row {a.first_row} --batch-size {a.batch_size}: the train split has "
             f"{len(train)} rows")
    label_id = {c: i for i, c in enumerate(classes)}
    B = len(rows)
    tok = np.zeros((B, T), np.int32)
    mask = np.zeros((B, T), np.float32)
    lab = np.zeros(B, np.int32)
    for b, (line, label, text) in enumerate(rows):
        if label not in label_id:
            fail(f"{a.data}:{line}: label {label!r} is not in the model's id2label {classes}")
        s = R.encode(text, ids_of, T)
        tok[b, : len(s)] = s
        mask[b, : len(s)] = 1.0
        lab[b] = label_id[label]
    with open(a.write_batch, "wb") as f:
        f.write(MAGIC + np.array([VERSION, B, T, len(classes)], "<i4").tobytes())
        f.write(tok.astype("<i4").tobytes() + mask.astype("<f4").tobytes()
                + lab.astype("<i4").tobytes())
    counts = ", ".join(f"{c} {n}" for c, n in zip(classes, np.bincount(lab, minlength=len(classes))))
    print(f"wrote {a.write_batch}: {B} x {T}, train rows {a.first_row}..{a.first_row + B - 1} "
          f"of the seed-{a.split_seed} split; labels {counts}")


def read_batch(path, n_classes):
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        fail(f"{path}: {e}")
    if raw[:8] != MAGIC:
        fail(f"{path}: not a batch file of this script")
    version, B, T, C = np.frombuffer(raw[8:24], "<i4").tolist()
    if version != VERSION:
        fail(f"{path}: version {version}, this script reads {VERSION}")
    if len(raw) != 24 + 4 * (2 * B * T + B):
        fail(f"{path}: {len(raw)} bytes, a {B} x {T} batch has {24 + 4 * (2 * B * T + B)}")
    if C != n_classes:
        fail(f"{path}: {C} classes, the model's config.json has {n_classes}")
    o = 24
    tok = np.frombuffer(raw[o: o + 4 * B * T], "<i4").reshape(B, T)
    o += 4 * B * T
    mask = np.frombuffer(raw[o: o + 4 * B * T], "<f4").reshape(B, T)
    o += 4 * B * T
    lab = np.frombuffer(raw[o:], "<i4")
    return tok, mask, lab


def read_safetensors(path):
    """{name: float32 array}, metadata of an F32 safetensors file."""
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        fail(f"{path}: {e}")
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8: 8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            fail(f"{path}: {name}: dtype {t['dtype']}, expected F32")
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + lo: 8 + n + hi], "<f4").reshape(t["shape"])
    return out, meta


def module_name(hf_name):
    """tools/pytorch_cls_reference.py's parameter name for a Hugging Face name."""
    ours = hf_name
    for hf, mod in R.HF_TO_MODULE:
        ours = ours.replace(hf, mod)
    return ours


def draws(torch, model, T, M, Y, names, K, seed):
    """Mean training-mode loss, its sample sd, and the mean gradients of
    `names` over K dropout draws from torch seed `seed`."""
    F = torch.nn.functional
    P = dict(model.named_parameters())
    acc = {n: torch.zeros_like(P[n]) for n in names}
    losses = np.zeros(K)
    model.train()
    torch.manual_seed(seed)
    for k in range(K):
        model.zero_grad()
        loss = F.cross_entropy(model(T, M), Y)
        loss.backward()
        losses[k] = loss.item()
        for n in names:
            acc[n] += P[n].grad
    return losses.mean(), losses.std(ddof=1), {n: (acc[n] / K).numpy().ravel() for n in names}


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def compare(a):
    import torch
    torch.set_num_threads(a.threads)
    cfg, classes = read_config(a.model)
    tok, mask, lab = read_batch(a.batch, len(classes))
    eng, meta = read_safetensors(a.engine)
    if int(meta.get("draws", 0)) <= 1:
        fail(f"{a.engine}: no draws count in its metadata: not written by bench/dropout_expectation")
    model = R.build_model(torch, cfg["vocab_size"], len(classes), H=cfg["hidden_size"],
                          L=cfg["num_hidden_layers"], nh=cfg["num_attention_heads"],
                          I=cfg["intermediate_size"], p=cfg.get("hidden_dropout_prob", 0.1),
                          max_pos=cfg["max_position_embeddings"])
    R.load_hf_weights(torch, model, os.path.join(a.model, "model.safetensors"))
    params = dict(model.named_parameters())
    names = {}
    for hf in eng:
        ours = module_name(hf)
        if ours not in params or tuple(params[ours].shape) != eng[hf].shape:
            fail(f"{a.engine}: {hf}: no parameter of that name and shape {eng[hf].shape} in the model")
        names[hf] = ours
    T = torch.from_numpy(tok.astype(np.int64))
    M = torch.from_numpy(mask.copy())
    Y = torch.from_numpy(lab.astype(np.int64))
    model.eval()
    with torch.no_grad():
        pt_eval = torch.nn.functional.cross_entropy(model(T, M), Y).item()

    runs = []
    for s in a.seeds:
        t0 = time.time()
        mean, sd, grads = draws(torch, model, T, M, Y, list(names.values()), a.draws, s)
        runs.append((s, mean, sd, grads))
        print(f"PyTorch seed {s}: {a.draws} draws in {time.time() - t0:.0f} s", flush=True)

    B, L = tok.shape
    e_eval, e_mean, e_sd = (float(meta[k]) for k in ("eval_loss", "train_loss_mean", "train_loss_sd"))
    e_k = int(meta["draws"])
    print(f"\ntorch {torch.__version__}, {a.threads} threads; batch {B} x {L}, {len(classes)} classes "
          f"({','.join(classes)}); engine {e_k} draws (seed {meta.get('seed', '?')}), "
          f"PyTorch {a.draws} draws per seed")
    print(f"eval loss (no dropout): engine {e_eval:.7f}  PyTorch {pt_eval:.7f}  "
          f"difference {e_eval - pt_eval:+.1e}")
    print(f"E[train loss] +- s.e. (sd):  engine {e_mean:.5f} +- {e_sd / math.sqrt(e_k):.5f} "
          f"({e_sd:.4f})" + "".join(f"  PyTorch seed {s} {m:.5f} +- {sd / math.sqrt(a.draws):.5f} "
                                    f"({sd:.4f})" for s, m, sd, _ in runs))
    s0, _, _, g0 = runs[0]
    head = f"{'tensor':50s} {'engine vs PT seed ' + str(s0):>22s}"
    for s, _, _, _ in runs[1:]:
        head += f" {'PT seed %d vs seed %d' % (s, s0):>22s}"
    print("\nmean gradient, relative difference |a - b| / |b| (b: PyTorch seed "
          f"{s0}); the PyTorch-vs-PyTorch column is the Monte Carlo noise floor")
    print(head)
    for hf, ours in names.items():
        e = eng[hf].ravel().astype(np.float64)
        line = f"{hf:50s} {rel(e, g0[ours]):22.4f}"
        for _, _, _, g in runs[1:]:
            line += f" {rel(g[ours], g0[ours]):22.4f}"
        print(line)
    if abs(e_eval - pt_eval) > EVAL_TOL:
        fail(f"eval losses differ by {abs(e_eval - pt_eval):.1e} > {EVAL_TOL}: the two sides do not "
             "run the same model on the same batch, the comparison above means nothing")


def main():
    ap = argparse.ArgumentParser(
        description="Dropout expectation, PyTorch side: write the batch, or compare with the engine.",
        usage="%(prog)s --model DIR (--data DATA --write-batch FILE | --batch FILE --engine FILE) [...]")
    ap.add_argument("--model", required=True, help="train_cls --save-dir folder")
    ap.add_argument("--write-batch", metavar="FILE", help="write the batch file and stop")
    ap.add_argument("--data", help="the protocol's data file (with --write-batch)")
    ap.add_argument("--split-seed", type=int, default=42, help="the protocol split's seed")
    ap.add_argument("--first-row", type=int, default=0, help="first train row of the batch")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-seq-len", type=int, default=0,
                    help="default: config.json's zero_engine.max_seq_len")
    ap.add_argument("--batch", metavar="FILE", help="the batch file (to compare)")
    ap.add_argument("--engine", metavar="FILE", help="bench/dropout_expectation's --out file")
    ap.add_argument("--draws", type=int, default=300, help="dropout draws per PyTorch seed")
    ap.add_argument("--seeds", default="1,2", help="PyTorch seeds, comma-separated (two or more)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.write_batch:
        if not a.data:
            ap.error("--write-batch needs --data")
        if a.batch or a.engine:
            ap.error("--write-batch writes the batch; compare in a second run with --batch and --engine")
        if a.batch_size < 1 or a.first_row < 0:
            ap.error("--batch-size must be positive and --first-row not negative")
        write_batch(a)
        return
    if not (a.batch and a.engine):
        ap.error("give --data and --write-batch, or --batch and --engine")
    try:
        a.seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds {a.seeds}: want integers separated by commas")
    if len(a.seeds) < 2 or len(set(a.seeds)) != len(a.seeds):
        ap.error("--seeds: two or more different seeds (the second gives the noise floor)")
    if a.draws < 2:
        ap.error("--draws: at least 2")
    compare(a)


if __name__ == "__main__":
    main()
