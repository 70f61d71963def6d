#!/usr/bin/env python3
"""PyTorch side of the language-model quality protocol (issue 13), run by
bench/lm_quality.sh or by hand (needs torch, transformers and numpy):

    python3 tools/pytorch_lm_reference.py \
        --data ../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv \
        --seed 42 --max-steps 500 --metrics /tmp/pt_s42.jsonl
    python3 tools/pytorch_lm_reference.py --data ... --check-pack /tmp/pack.bin  # numpy only

The protocol, as train_lm runs it (tools/train_lm.c, text/lm_text.h):

  data     the documents of a CSV/TSV file with a header (delimiter sniffed:
           the more frequent of tab and comma in the header, outside quotes;
           RFC 4180 quoting; the text column the first whose name, trimmed
           of spaces and tabs and ASCII-lowercased, is text, sentence, 文本 or
           review), each record's text as written; empty texts skipped.
           Split by DOCUMENT: ds_permutation(n, seed) (engine/data/dataset.h,
           splitmix64 Fisher-Yates), the first floor(n (1 - dev_ratio) + 1e-9)
           to train, the rest to dev, each part in file order.
  tokens   byte level: the UTF-8 bytes of a text are its ids 0..255, 256 is
           <|endoftext|>; a byte token stands for 1 byte of text, the
           end-of-text for 0.
  packing  each part becomes one stream EOT d1 EOT d2 ... EOT dn EOT, cut into
           rows of seq_len tokens, row k starting at stream position
           k (seq_len - 1), so consecutive rows share one token and every
           token but the first is a target exactly once; the last row padded
           (input EOT, attention_mask 0, label -100).
  order    the engine's sampler for --world ranks (torch's
           DistributedSampler with the splitmix64 permutation): epoch e
           permutes the train rows by permutation(n, seed + e), pads it by
           wrapping to a multiple of world, rank r takes entries r, r + world,
           ...; each step every rank takes its next --micro-batch rows (fewer
           at an epoch's end), and the step's batch is all ranks' rows
           together, the loss their mean over every target token (the
           engine normalises over all ranks' tokens, module.h rule 5).
  model    transformers' GPT2LMHeadModel: vocab 257, n_positions seq_len,
           --layers x --hidden, --heads, gelu_new, dropout --dropout on
           embeddings, attention probabilities and residuals, lm_head tied to
           wte, Hugging Face's init (N(0, 0.02), c_proj N(0, 0.02 /
           sqrt(2 n_layer)), zero biases, LayerNorm 1 and 0) under
           torch.manual_seed(seed). Attention "eager" (GPT-2's own matmul,
           mask, softmax, dropout, matmul: the engine's arithmetic).
  training AdamW (betas 0.9, 0.999, eps 1e-8, weight decay on every
           parameter, torch.optim.AdamW over model.parameters() as the
           engine's), gradients clipped to global norm 1.0, DeepSpeed's
           WarmupDecayLR as engine/core/sched.h computes it: optimizer step s
           (from 0) runs at lr * g(s - 1), g(i) = 0 for i < 0, i / W for
           i < W (W = max(2, warmup)), then max(0, (S - i) / (S - W)) with S
           = --max-steps.
  eval     on every dev row in order, dropout off: nats summed over every
           target (positions 1..T-1 whose label is not -100), loss = nats /
           targets, perplexity e^loss, bits per byte = nats / ln 2 / the
           target tokens' bytes (tools/common/lm_eval.c). Before training and
           after.

--check-pack FILE compares the split, tokens, packing and batch order with
what bench/lm_dump_pack wrote from the C code (same --seed, --dev-ratio,
--seq-len, --world, --micro-batch, --max-steps), element for element, prints
the SHA-256 of both sides' arrays and exits 1 on any difference.

What differs from the engine's run, by construction: the random numbers (init
and dropout masks come from torch's generator, the engine's from its own
Philox streams), so a seed is an independent run on each side, and the
engine runs 2 ranks of --micro-batch rows where this runs one process over
their union.

Diagnostics, not the protocol: --init-from DIR (start from a train_lm
--save-dir folder, e.g. the engine's initial weights from train_lm
--max-steps 0 --save-dir DIR, so that with the same batch order the two runs
differ in their dropout masks only) and --torch-seed N (torch's generator
seeded with N instead of --seed: with --init-from it draws only the masks, a
control of how far other masks alone move a run).

Output: progress on stdout; with --metrics FILE the engine's format: a first
line {"initial_eval": {...}}, one line per --log-every steps {"step", "epoch",
"loss", "lr", "grad_norm"}, a last {"eval": {...}, "train_s", "wall_s",
"torch", ...}.
"""
import argparse
import csv
import hashlib
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_cls_reference import lr_at, permutation, sniff_delimiter  # noqa: E402

TEXT_NAMES = ["text", "sentence", "文本", "review"]
EOT, VOCAB, IGNORE = 256, 257, -100


# ---------------------------------------------------------------- data ----
def read_docs(path, column=None):
    """The documents of a CSV/TSV file as text/lm_docs.c reads them."""
    names = [column.lower()] if column else TEXT_NAMES
    with open(path, encoding="utf-8-sig", newline="") as f:
        first = f.readline()
        delim = sniff_delimiter(first)
        f.seek(0)
        reader = csv.reader(f, delimiter=delim, quotechar='"', doublequote=True, strict=True)
        header = next(reader)
        col = next((i for i, h in enumerate(header)
                    if h.strip(" \t\r").lower() in names), None)
        if col is None:
            sys.exit(f"{path}: no text column (looked for {', '.join(names)})")
        docs, n_empty, prev = [], 0, reader.line_num
        for rec in reader:
            start, prev = prev + 1, reader.line_num
            if not rec:
                continue  # a blank line
            if len(rec) != len(header):
                sys.exit(f"{path}:{start}: {len(rec)} fields, the header has {len(header)}")
            if rec[col] == "":
                n_empty += 1
                continue
            docs.append(rec[col])
    return docs, n_empty


def split_docs(docs, dev_ratio, seed):
    n = len(docs)
    n_train = min(n, int(math.floor(n * (1.0 - dev_ratio) + 1e-9)))
    perm = permutation(n, seed)
    return ([docs[i] for i in sorted(perm[:n_train])],
            [docs[i] for i in sorted(perm[n_train:])])


def pack(np, docs, T):
    """(ids, labels, mask, token_bytes) [rows, T] of text/lm_pack.c."""
    stream, nbytes = [], []
    for d in docs:
        b = d.encode("utf-8")
        stream.append(EOT)
        nbytes.append(0)
        stream.extend(b)
        nbytes.extend([1] * len(b))
    if docs:
        stream.append(EOT)
        nbytes.append(0)
    s = np.array(stream, dtype=np.int32)
    sb = np.array(nbytes, dtype=np.int32)
    stride = T - 1
    rows = (len(s) - 1 + stride - 1) // stride if len(s) > 1 else 0
    ids = np.full((rows, T), EOT, np.int32)
    labels = np.full((rows, T), IGNORE, np.int32)
    mask = np.zeros((rows, T), np.float32)
    tb = np.zeros((rows, T), np.int32)
    for r in range(rows):
        seg = s[r * stride: r * stride + T]
        n = len(seg)
        ids[r, :n] = seg
        labels[r, :n] = seg
        mask[r, :n] = 1.0
        tb[r, :n] = sb[r * stride: r * stride + n]
    return ids, labels, mask, tb


def engine_order(n, seed, world, micro, steps):
    """Per optimizer step, the train rows of every rank's micro-batch
    (engine_step.c's loader over ds_sampler, epochs rolled over)."""
    out, epoch, cursor, shares, per_rank = [], 0, 0, None, -(-n // world)

    def epoch_shares(e):
        perm = permutation(n, seed + e)
        ext = [perm[i % n] for i in range(per_rank * world)]
        return [ext[r::world] for r in range(world)]

    shares = epoch_shares(0)
    for _ in range(steps):
        if cursor >= per_rank:
            epoch, cursor = epoch + 1, 0
            shares = epoch_shares(epoch)
        count = min(micro, per_rank - cursor)
        out.append(([sh[cursor: cursor + count] for sh in shares], epoch))
        cursor += count
    return out


def protocol_data(np, a):
    docs, n_empty = read_docs(a.data, a.column)
    train, dev = split_docs(docs, a.dev_ratio, a.seed)
    return docs, n_empty, pack(np, train, a.seq_len), pack(np, dev, a.seq_len)


def check_pack(np, a):
    """Compare with bench/lm_dump_pack's file; exit 1 on any difference."""
    docs, _, tr, dv = protocol_data(np, a)
    raw = open(a.check_pack, "rb").read()
    if raw[:8] != b"DSLMPACK" or int.from_bytes(raw[8:12], "little") != 1:
        sys.exit(f"{a.check_pack}: not a version-1 lm_dump_pack file")
    off, bad = 12, []

    def take(dtype, count):
        nonlocal off
        arr = np.frombuffer(raw, dtype=dtype, count=count, offset=off)
        off += arr.nbytes
        return arr

    for part, ours in (("train", tr), ("dev", dv)):
        rows = int(take("<u8", 1)[0])
        T = int(take("<u4", 1)[0])
        theirs = [take(dt, rows * T).reshape(rows, T)
                  for dt in ("<i4", "<i4", "<f4", "<i4")]
        for name, x, y in zip(("input_ids", "labels", "attention_mask", "token_bytes"),
                              ours, theirs):
            hx = hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16]
            hy = hashlib.sha256(np.ascontiguousarray(y).tobytes()).hexdigest()[:16]
            same = x.shape == y.shape and np.array_equal(x, y)
            print(f"check-pack: {part} {name} {x.shape[0]} x {x.shape[1]}: python sha256 {hx}, "
                  f"C {hy} ({y.shape[0]} x {y.shape[1]}): {'identical' if same else 'DIFFERENT'}")
            if not same:
                bad.append(f"{part} {name}")
    world, micro, steps = (int(v) for v in take("<u4", 3))
    order = engine_order(len(tr[0]), a.seed, world, micro, steps)
    h_ours, h_c, first_diff = hashlib.sha256(), hashlib.sha256(), None
    for k, (ranks, _) in enumerate(order):
        for r in range(world):
            count = int(take("<u4", 1)[0])
            c_rows = take("<u8", count).tolist()
            h_c.update(np.array(c_rows, np.uint64).tobytes())
            h_ours.update(np.array(ranks[r], np.uint64).tobytes())
            if c_rows != ranks[r] and first_diff is None:
                first_diff = (k, r, c_rows[:4], ranks[r][:4])
    print(f"check-pack: batch order, {steps} steps of {world} ranks x {micro} rows: python "
          f"sha256 {h_ours.hexdigest()[:16]}, C {h_c.hexdigest()[:16]}: "
          f"{'identical' if first_diff is None else f'DIFFERENT from step {first_diff}'}")
    if first_diff is not None:
        bad.append("batch order")
    if off != len(raw):
        bad.append(f"{len(raw) - off} bytes left over in the file")
    if bad:
        sys.exit("check-pack: differs: " + "; ".join(bad))
    print(f"check-pack: identical ({len(docs)} documents; train {tr[0].shape[0]} rows, dev "
          f"{dv[0].shape[0]} rows of {a.seq_len})")


# --------------------------------------------------------------- model ----
def build_model(torch, a):
    from transformers import GPT2Config, GPT2LMHeadModel
    if a.init_from:
        # diagnostic: a train_lm --save-dir folder (config.json, model.safetensors)
        model = GPT2LMHeadModel.from_pretrained(
            a.init_from, attn_implementation="eager", resid_pdrop=a.dropout,
            embd_pdrop=a.dropout, attn_pdrop=a.dropout)
        c = model.config
        if (c.vocab_size, c.n_positions, c.n_embd, c.n_layer, c.n_head) != \
                (VOCAB, a.seq_len, a.hidden, a.layers, a.heads):
            sys.exit(f"{a.init_from}: config.json is not the protocol's model")
        assert model.lm_head.weight is model.transformer.wte.weight  # tied
        return model
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=a.seq_len, n_embd=a.hidden,
                     n_layer=a.layers, n_head=a.heads, resid_pdrop=a.dropout,
                     embd_pdrop=a.dropout, attn_pdrop=a.dropout, bos_token_id=EOT,
                     eos_token_id=EOT)
    cfg._attn_implementation = "eager"
    model = GPT2LMHeadModel(cfg)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied
    return model


def evaluate(torch, model, dev, batch):
    ids, labels, mask, tb = (torch.from_numpy(x) for x in dev)
    nats, targets, nbytes = 0.0, 0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, ids.shape[0], batch):
            sl = slice(i, i + batch)
            logits = model(input_ids=ids[sl].long(), attention_mask=mask[sl]).logits
            y = labels[sl][:, 1:].long()
            nats += torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]).double(), y.reshape(-1),
                ignore_index=IGNORE, reduction="sum").item()
            keep = y != IGNORE
            targets += int(keep.sum())
            nbytes += int(tb[sl][:, 1:][keep].sum())
    model.train()
    loss = nats / targets if targets else float("nan")
    return {"loss": loss, "perplexity": math.exp(loss),
            "bits_per_byte": nats / math.log(2) / nbytes if nbytes else float("nan"),
            "nats": nats, "tokens": targets, "bytes": nbytes, "rows": int(ids.shape[0])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--column", help="the CSV text column (default: text, sentence, 文本, review)")
    ap.add_argument("--seed", type=int, default=42, help="split, batch order, init, dropout")
    ap.add_argument("--dev-ratio", type=float, default=0.1)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--world", type=int, default=2, help="the engine's ranks (batch order)")
    ap.add_argument("--micro-batch", type=int, default=16, help="rows per rank per step")
    ap.add_argument("--max-steps", type=int, default=500)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--eval-batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--metrics", help="JSON lines, train_lm's format")
    ap.add_argument("--log-every", type=int, default=1)
    ap.add_argument("--init-from", metavar="DIR",
                    help="diagnostic: start from a train_lm --save-dir folder's weights (e.g. "
                         "the engine's initial ones, train_lm --max-steps 0 --save-dir DIR) "
                         "instead of torch's init")
    ap.add_argument("--torch-seed", type=int, default=None,
                    help="diagnostic: seed torch's generator with this instead of --seed (with "
                         "--init-from it then draws only the dropout masks)")
    ap.add_argument("--check-pack", metavar="FILE",
                    help="compare with bench/lm_dump_pack's FILE and stop (no torch needed)")
    a = ap.parse_args()
    import numpy as np
    if a.check_pack:
        check_pack(np, a)
        return

    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed if a.torch_seed is None else a.torch_seed)
    t_start = time.time()
    docs, n_empty, tr, dv = protocol_data(np, a)
    order = engine_order(tr[0].shape[0], a.seed, a.world, a.micro_batch, a.max_steps)
    model = build_model(torch, a)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.weight_decay)
    print(f"pytorch_lm_reference: torch {torch.__version__}, {len(docs)} documents, train "
          f"{tr[0].shape[0]} / dev {dv[0].shape[0]} rows of {a.seq_len} bytes, {n_params} "
          f"parameters, {a.max_steps} steps of {a.world} x {a.micro_batch} rows, lr {a.lr}, "
          f"warmup {a.warmup}, {a.threads} threads", flush=True)
    mf = open(a.metrics, "w") if a.metrics else None

    def emit(rec):
        line = json.dumps(rec)
        print(line, flush=True)
        if mf:
            mf.write(line + "\n")
            mf.flush()

    emit({"initial_eval": evaluate(torch, model, dv, a.eval_batch)})
    ids_all, labels_all, mask_all = (torch.from_numpy(x) for x in tr[:3])
    t0 = time.time()
    model.train()
    for step, (ranks, epoch) in enumerate(order):
        rows = torch.tensor(sum(ranks, []), dtype=torch.long)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.warmup, a.max_steps)
        out = model(input_ids=ids_all[rows].long(), attention_mask=mask_all[rows],
                    labels=labels_all[rows].long())
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % a.log_every == 0 or step + 1 == a.max_steps:
            emit({"step": step + 1, "epoch": epoch, "loss": out.loss.item(),
                  "lr": opt.param_groups[0]["lr"], "grad_norm": gnorm.item(),
                  "elapsed_s": round(time.time() - t0, 3)})
    train_s = time.time() - t0
    ev = evaluate(torch, model, dv, a.eval_batch)
    import transformers
    emit({"eval": ev, "train_s": train_s, "wall_s": time.time() - t_start, "steps": a.max_steps,
          "torch": torch.__version__, "transformers": transformers.__version__,
          "threads": a.threads, "params": n_params})
    if mf:
        mf.close()


if __name__ == "__main__":
    main()
