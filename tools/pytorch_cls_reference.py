#!/usr/bin/env python3
"""PyTorch side of the text-classification quality protocol of issue 3.

Run by hand or by bench/quality.sh (needs torch and numpy):

    python3 tools/pytorch_cls_reference.py \
        --data ../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv \
        --class-weight none --metrics /tmp/pt_none.jsonl
    python3 tools/pytorch_cls_reference.py --data ... --dump-split   # no torch needed

The protocol, exactly as the issue states it and as train_cls runs it:

  data     the six classes none/like/disgust/sadness/happiness/anger; every
           row of a text that appears with two different labels is dropped
           (decided on the labels as written, before the class filter);
           rows permuted with a fixed seed (42), first 90% train, last 10% dev.
           The permutation is the one engine/data/dataset.h specifies
           (splitmix64 Fisher-Yates), n_train = int(n * 0.9 + 1e-9), and the
           file is read as text/text.h describes (header names, delimiter
           sniffing, RFC 4180 quoting, labels trimmed, texts kept as written),
           so the rows are the C code's rows: --dump-split prints them in the
           format of bench/dump_split and bench/quality.sh diffs the two.
  vocab    chars: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3, then every character seen
           at least twice in train, by descending count then code point.
           A text is [CLS] + its characters (unknown ones [UNK]) cut to
           max_seq_len - 2 + [SEP]; max_seq_len 64.
  model    BertForSequenceClassification written out in plain PyTorch: word +
           position (512) + token-type embeddings, LayerNorm (eps 1e-12),
           dropout; 4 layers of hidden 256, 4 heads, intermediate 1024, erf
           GELU, post-LayerNorm residuals, dropout 0.1 on embeddings,
           attention probabilities, both residual branches and before the
           classifier; tanh pooler over [CLS]. Hugging Face's init: Linear and
           Embedding N(0, 0.02), the [PAD] row of the word embeddings zero,
           biases 0, LayerNorm 1 and 0. Padding is masked by adding the
           float32 minimum to the attention scores (as transformers does).
  training AdamW lr 5e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on
           every parameter (torch.optim.AdamW over model.parameters(), as
           the engine's AdamW); batch 32, the train rows reshuffled every
           epoch, the last batch of an epoch short; gradients clipped to
           global norm 1.0; 3 epochs = 3 * ceil(11443 / 32) = 1074 steps.
           Learning rate: DeepSpeed's WarmupDecayLR as the engine computes it
           (engine/core/sched.h), warmup_min_lr 0, warmup_max_lr 5e-4, 100
           warmup steps, then linear decay to 0 at the last step: optimizer
           step s (from 0) uses 5e-4 * g(s - 1), g(i) = 0 for i < 0, i / 100
           for i < 100, else max(0, (1074 - i) / (1074 - 100)).
  loss     cross-entropy, plain or class-weighted (--class-weight inverse):
           w_c = (1 / n_c) * C / sum_k (1 / n_k) with n_c the train rows of
           class c, i.e. inverse class frequency normalised to mean 1;
           torch's weighted mean (sum w_y * nll / sum w_y over the batch).
  eval     on dev after the last epoch: accuracy and macro-F1 (the mean of
           the six per-class F1, an F1 with no prediction or no support = 0),
           as metrics/metrics.c.

What differs from the engine's run, by construction: the engine trains on 2
ranks of 16 rows each (DistributedSampler order; the weighted loss is still
normalised by the weight sum of all 32 rows, see ds_set_class_weights), its
random numbers for init and dropout are its own, and it pads every row to 64
tokens where this script pads a batch to its longest row (the same result:
padded keys get exactly zero attention weight).

Output: progress lines on stdout, and with --metrics FILE one JSON line per
50 steps (--log-every) and a last line {"eval": {...}, "wall_s": ..., "torch": ...}.

Diagnostics, not the protocol: --dropout P, --init-from FILE (start from the
weights of a safetensors file with Hugging Face names, e.g. the engine's
initial weights: train_cls --max-steps 1 --save-dir D writes them, since the
first step runs at lr 0), --engine-order W (the batches the engine's
sampler gives W ranks: epoch e permuted by permutation(n, seed + e), wrapped
to equal rank shares, rank r taking every W-th entry, each rank batch/W rows
per step), --engine-dropout (with --engine-order: rows padded to max_seq_len
and dropped out with exactly the masks the engine's ranks draw, from
tools/engine_rng.py), --torch-seed N (torch's generator seeded with N instead
of --seed: with --init-from and --engine-order it draws only the dropout
masks, so two such runs measure how far dropout alone moves a run). With the
engine's init and order and either dropout 0
or --engine-dropout, this script and train_cls compute the same steps, so
their per-step losses (--log-every 1) can be compared directly.
"""
import argparse
import collections
import csv
import json
import math
import os
import sys
import time

SIX = ["none", "like", "disgust", "sadness", "happiness", "anger"]
LABEL_NAMES = ["label", "labels", "标签"]
TEXT_NAMES = ["text", "sentence", "文本", "review"]
PAD, UNK, CLS, SEP = 0, 1, 2, 3
M64 = 2**64 - 1


# ---------------------------------------------------------------- data ----
def permutation(n, seed):
    """engine/data/dataset.h's ds_permutation, word for word."""
    s, a = seed & M64, list(range(n))
    for i in range(n - 1, 0, -1):
        s = (s + 0x9E3779B97F4A7C15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        j = z % (i + 1)
        a[i], a[j] = a[j], a[i]
    return a


def sniff_delimiter(header):
    """The more frequent of tab and comma outside quotes; a tie is comma."""
    tabs = commas = 0
    quoted = False
    for ch in header:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "\t":
            tabs += 1
        elif not quoted and ch == ",":
            commas += 1
    return "\t" if tabs > commas else ","


def find_column(header, names, what, path):
    for i, h in enumerate(header):
        if h.strip(" \t").lower() in names:  # ASCII case only matters here
            return i
    sys.exit(f"{path}: no {what} column (looked for {', '.join(names)})")


def read_rows(path):
    """[(line, label, text)] of a CSV/TSV file with a header, as text/text.h
    reads it: line = the file line where the record starts (header = 1)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        first = f.readline()
        delim = sniff_delimiter(first)
        f.seek(0)  # utf-8-sig skips a byte-order mark again after the seek
        reader = csv.reader(f, delimiter=delim, quotechar='"', doublequote=True, strict=True)
        header = next(reader)
        li = find_column(header, LABEL_NAMES, "label", path)
        ti = find_column(header, TEXT_NAMES, "text", path)
        rows, prev = [], reader.line_num
        for rec in reader:
            start = prev + 1
            prev = reader.line_num
            if not rec:
                continue  # blank line
            if len(rec) != len(header):
                sys.exit(f"{path}:{start}: {len(rec)} fields, the header has {len(header)}")
            rows.append((start, rec[li].strip(" \t"), rec[ti]))
    return rows


def protocol_data(path, seed=42, dev_ratio=0.1, min_count=2):
    rows = read_rows(path)
    labels_of = collections.defaultdict(set)
    for _, label, text in rows:
        labels_of[text].add(label)
    clean = [r for r in rows if len(labels_of[r[2]]) == 1 and r[1] in SIX]
    classes = sorted({r[1] for r in clean}, key=lambda s: s.encode("utf-8"))
    perm = permutation(len(clean), seed)
    n_train = int(len(clean) * (1 - dev_ratio) + 1e-9)
    train = [clean[i] for i in perm[:n_train]]
    dev = [clean[i] for i in perm[n_train:]]
    counts = collections.Counter(ch for _, _, text in train for ch in text)
    chars = sorted((c for c, k in counts.items() if k >= min_count),
                   key=lambda c: (-counts[c], ord(c)))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + chars
    return classes, train, dev, vocab, len(clean)


def dump_split(path, seed, dev_ratio, min_count):
    classes, train, dev, vocab, n = protocol_data(path, seed, dev_ratio, min_count)
    out = [f"rows {n} train {len(train)} dev {len(dev)} classes {','.join(classes)}"]
    out += [f"train {line} {label}" for line, label, _ in train]
    out += [f"dev {line} {label}" for line, label, _ in dev]
    out += [f"vocab {i} {t}" if i < 4 else f"vocab {i} U+{ord(t):04X}"
            for i, t in enumerate(vocab)]
    sys.stdout.write("\n".join(out) + "\n")


def encode(text, ids_of, max_len):
    ids = [ids_of.get(ch, UNK) for ch in text][: max_len - 2]
    return [CLS] + ids + [SEP]


# --------------------------------------------------------------- model ----
def build_model(torch, V, C, H=256, L=4, nh=4, I=1024, p=0.1, max_pos=512):
    """The model; its attribute engine_masks, when set to a dict (see
    engine_dropout_masks), replaces the random dropout masks of training by
    those: key "emb", ("attn", l), ("ao", l), ("ffn", l) or "pool"."""
    nn, F = torch.nn, torch.nn.functional
    masks = {}  # the current step's, when given

    def drop(x, key, training):
        if training and masks:
            return x * masks[key]
        return F.dropout(x, p, training)  # what nn.Dropout(p) calls

    class Layer(nn.Module):
        def __init__(self, index):
            super().__init__()
            self.index = index
            self.q, self.k, self.v = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)
            self.ao, self.ln1 = nn.Linear(H, H), nn.LayerNorm(H, eps=1e-12)
            self.i, self.o, self.ln2 = nn.Linear(H, I), nn.Linear(I, H), nn.LayerNorm(H, eps=1e-12)

        def forward(self, x, add_mask):
            B, T, _ = x.shape
            d, l, tr = H // nh, self.index, self.training

            def heads(t):
                return t.view(B, T, nh, d).transpose(1, 2)

            s = heads(self.q(x)) @ heads(self.k(x)).transpose(-1, -2) / math.sqrt(d)
            a = drop(torch.softmax(s + add_mask, dim=-1), ("attn", l), tr)
            ctx = (a @ heads(self.v(x))).transpose(1, 2).reshape(B, T, H)
            x = self.ln1(x + drop(self.ao(ctx), ("ao", l), tr))
            return self.ln2(x + drop(self.o(F.gelu(self.i(x))), ("ffn", l), tr))  # erf GELU

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(V, H, padding_idx=PAD)
            self.pos, self.typ = nn.Embedding(max_pos, H), nn.Embedding(2, H)
            self.ln = nn.LayerNorm(H, eps=1e-12)
            self.layers = nn.ModuleList(Layer(l) for l in range(L))
            self.dims = {"H": H, "L": L, "nh": nh}
            self.pool, self.cls = nn.Linear(H, H), nn.Linear(H, C)
            for m in self.modules():  # Hugging Face's _init_weights
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    m.weight.data.normal_(0.0, 0.02)
                if isinstance(m, nn.Linear):
                    m.bias.data.zero_()
                if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                    m.weight.data[m.padding_idx].zero_()
                if isinstance(m, nn.LayerNorm):
                    m.weight.data.fill_(1.0)
                    m.bias.data.zero_()

        def forward(self, tok, mask):
            B, T = tok.shape
            pos = torch.arange(T, device=tok.device).unsqueeze(0)
            x = self.word(tok) + self.pos(pos) + self.typ(torch.zeros_like(tok))
            x = drop(self.ln(x), "emb", self.training)
            add = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
            for layer in self.layers:
                x = layer(x, add)
            return self.cls(drop(torch.tanh(self.pool(x[:, 0])), "pool", self.training))

        def set_masks(self, m):
            masks.clear()
            masks.update(m or {})

    return Bert()


def engine_dropout_masks(torch, seed, step, world, rows, T, p, H, L, nh):
    """The masks the engine's ranks draw in optimizer step `step` (from 0;
    one micro-batch per step), for a global batch of `rows` rows, the first
    rows / world from rank 0 and so on, each padded to T positions; keys as
    build_model's. The engine's modules are numbered embeddings 0, layers
    1..L, pooler L + 1; each encoder layer draws its attention probabilities
    [B, nh, Tq, T] at offset 0, then its attention output [B Tq, H], then its
    feed-forward output [B Tq, H] (models/mod_encoder_layer.c). The last layer
    computes [CLS] alone (Tq = 1), so only query row 0 has engine masks there;
    the other rows, which do not reach the classifier, are kept as they are."""
    import numpy as np
    import engine_rng as R
    B = rows // world
    out = {}

    def put(key, per_rank):
        out[key] = torch.from_numpy(np.concatenate(per_rank, axis=0))

    def draws(module, sizes):
        """Per rank, the consecutive pieces of the module's stream."""
        res = []
        for r in range(world):
            s, off, pieces = R.module_seed(seed, step, module, r), 0, []
            for n in sizes:
                pieces.append(R.keep_mask(s, off, n, p))
                off += n
            res.append(pieces)
        return res

    put("emb", [d[0].reshape(B, T, H) for d in draws(0, [B * T * H])])
    for l in range(L):
        Tq = 1 if l == L - 1 else T
        d = draws(1 + l, [B * nh * Tq * T, B * Tq * H, B * Tq * H])
        if Tq == T:
            put(("attn", l), [x[0].reshape(B, nh, T, T) for x in d])
            put(("ao", l), [x[1].reshape(B, T, H) for x in d])
            put(("ffn", l), [x[2].reshape(B, T, H) for x in d])
            continue
        attn, ao, ffn = [], [], []
        for x in d:
            a = np.ones((B, nh, T, T), np.float32)
            a[:, :, 0, :] = x[0].reshape(B, nh, T)
            h1 = np.ones((B, T, H), np.float32)
            h1[:, 0, :] = x[1].reshape(B, H)
            h2 = np.ones((B, T, H), np.float32)
            h2[:, 0, :] = x[2].reshape(B, H)
            attn.append(a)
            ao.append(h1)
            ffn.append(h2)
        put(("attn", l), attn)
        put(("ao", l), ao)
        put(("ffn", l), ffn)
    put("pool", [d[0].reshape(B, H) for d in draws(1 + L, [B * H])])
    return out


def lr_at(step, max_lr, warmup, total):
    """DeepSpeed WarmupDecayLR (linear, min 0) at optimizer step `step`
    (from 0), as engine/core/sched.c: get_lr at last_batch_iteration step-1."""
    it = step - 1
    W = max(2, warmup)
    if it < 0:
        g = 0.0
    elif it < W:
        g = it / W
    else:
        g = max(0.0, (total - it) / max(1.0, total - W))
    return max_lr * g


HF_TO_MODULE = [("bert.embeddings.word_embeddings.", "word."),
                ("bert.embeddings.position_embeddings.", "pos."),
                ("bert.embeddings.token_type_embeddings.", "typ."),
                ("bert.embeddings.LayerNorm.", "ln."),
                ("attention.self.query.", "q."), ("attention.self.key.", "k."),
                ("attention.self.value.", "v."), ("attention.output.dense.", "ao."),
                ("attention.output.LayerNorm.", "ln1."), ("intermediate.dense.", "i."),
                ("output.dense.", "o."), ("output.LayerNorm.", "ln2."),
                ("bert.encoder.layer.", "layers."), ("bert.pooler.dense.", "pool."),
                ("classifier.", "cls.")]


def load_hf_weights(torch, model, path):
    """Diagnostic: copy a safetensors file's tensors (HF names) into model."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8: 8 + n])
    params = dict(model.named_parameters())
    done = set()
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            sys.exit(f"{path}: {name}: dtype {meta['dtype']}, only F32 is read here")
        ours = name
        for hf, mod in HF_TO_MODULE:
            ours = ours.replace(hf, mod)
        if ours not in params:
            sys.exit(f"{path}: {name}: no such parameter ({ours})")
        lo, hi = meta["data_offsets"]
        arr = np.frombuffer(raw[8 + n + lo: 8 + n + hi], dtype=np.float32).reshape(meta["shape"])
        with torch.no_grad():
            params[ours].copy_(torch.from_numpy(arr.copy()))
        done.add(ours)
    missing = sorted(set(params) - done)
    if missing:
        sys.exit(f"{path}: lacks {missing}")


def engine_batches(n, seed, world, batch):
    """Diagnostic: the global batches of one epoch as the engine's sampler
    cuts them for `world` ranks of batch / world rows (engine/data/dataset.h:
    padded by wrapping, rank r takes entries r, r + world, ...)."""
    perm = permutation(n, seed)
    per_rank = -(-n // world)
    ext = [perm[i % n] for i in range(per_rank * world)]
    shares = [ext[r::world] for r in range(world)]
    micro = batch // world
    return [sum((sh[k: k + micro] for sh in shares), [])
            for k in range(0, per_rank, micro)]


def batch_tensors(torch, seqs, rows, T=0):
    """Token ids and mask of `rows`, padded to T (0: the longest row)."""
    T = T or max(len(seqs[r]) for r in rows)
    tok = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.float32)
    for b, r in enumerate(rows):
        s = seqs[r]
        tok[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[b, : len(s)] = 1.0
    return tok, mask


def report(conf):
    C = len(conf)
    total = sum(map(sum, conf))
    acc = sum(conf[c][c] for c in range(C)) / total
    f1s, per = [], []
    for c in range(C):
        tp = conf[c][c]
        pred = sum(conf[k][c] for k in range(C))
        sup = sum(conf[c])
        p = tp / pred if pred else 0.0
        r = tp / sup if sup else 0.0
        f = 2 * p * r / (p + r) if p + r > 0 else 0.0
        f1s.append(f)
        per.append({"precision": p, "recall": r, "f1": f, "support": sup})
    return acc, sum(f1s) / C, per


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--seed", type=int, default=42, help="split, init, dropout, shuffling")
    ap.add_argument("--dev-ratio", type=float, default=0.1)
    ap.add_argument("--min-count", type=int, default=2)
    ap.add_argument("--dump-split", action="store_true",
                    help="print the rows and vocab as bench/dump_split does, and stop")
    ap.add_argument("--class-weight", choices=["none", "inverse"], default="none")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=0, help="stop early (for a smoke test)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--metrics", help="JSON lines: progress, each epoch's mean loss, then the evaluation")
    ap.add_argument("--log-every", type=int, default=50, help="steps between progress lines")
    ap.add_argument("--dropout", type=float, default=0.1, help="diagnostic: not the protocol")
    ap.add_argument("--init-from", help="diagnostic: initial weights (safetensors, HF names)")
    ap.add_argument("--engine-order", type=int, default=0, metavar="W",
                    help="diagnostic: the engine's batch order for W ranks")
    ap.add_argument("--torch-seed", type=int, default=None,
                    help="diagnostic: seed torch's generator with this instead of --seed (with "
                         "--init-from and --engine-order it then draws the dropout masks only)")
    ap.add_argument("--engine-dropout", action="store_true",
                    help="diagnostic: the dropout masks the engine draws (needs --engine-order)")
    a = ap.parse_args()
    if a.engine_dropout and not a.engine_order:
        sys.exit("--engine-dropout needs --engine-order W (the masks follow the engine's ranks)")
    if a.dump_split:
        dump_split(a.data, a.seed, a.dev_ratio, a.min_count)
        return

    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed if a.torch_seed is None else a.torch_seed)
    max_len, batch, max_lr, warmup = 64, 32, 5e-4, 100
    classes, train, dev, vocab, _ = protocol_data(a.data, a.seed, a.dev_ratio, a.min_count)
    ids_of = {t: i for i, t in enumerate(vocab) if i >= 4}
    cidx = {c: i for i, c in enumerate(classes)}
    C = len(classes)
    tr_seq = [encode(t, ids_of, max_len) for _, _, t in train]
    tr_y = torch.tensor([cidx[l] for _, l, _ in train])
    dv_seq = [encode(t, ids_of, max_len) for _, _, t in dev]
    dv_y = [cidx[l] for _, l, _ in dev]

    weight = None
    if a.class_weight == "inverse":
        n_c = collections.Counter(tr_y.tolist())
        inv = [1.0 / n_c[c] if n_c[c] else 0.0 for c in range(C)]
        weight = torch.tensor([w * C / sum(inv) for w in inv], dtype=torch.float32)

    model = build_model(torch, len(vocab), C, p=a.dropout)
    if a.init_from:
        load_hf_weights(torch, model, a.init_from)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=max_lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    per_epoch = math.ceil(len(train) / batch)
    total = per_epoch * a.epochs
    if a.max_steps:
        total = min(total, a.max_steps)
    print(f"pytorch_cls_reference: torch {torch.__version__}, {len(train)} train / {len(dev)} dev "
          f"rows, {C} classes, vocab {len(vocab)}, {n_params} parameters, {total} steps "
          f"({per_epoch} per epoch), class weights {a.class_weight}"
          + (f" {[round(w, 4) for w in weight.tolist()]}" if weight is not None else ""),
          flush=True)
    mf = open(a.metrics, "w") if a.metrics else None
    gen = torch.Generator().manual_seed(a.seed)
    t0 = time.time()
    step = 0
    model.train()
    for epoch in range(a.epochs):
        if a.engine_order:
            batches = engine_batches(len(train), a.seed + epoch, a.engine_order, batch)
        else:
            order = torch.randperm(len(train), generator=gen).tolist()
            batches = [order[i: i + batch] for i in range(0, len(order), batch)]
        loss_sum, loss_n = 0.0, 0
        for rows in batches:
            if step >= total:
                break
            tok, mask = batch_tensors(torch, tr_seq, rows, max_len if a.engine_dropout else 0)
            if a.engine_dropout:
                model.set_masks(engine_dropout_masks(torch, a.seed, step, a.engine_order,
                                                     len(rows), max_len, a.dropout, **model.dims))
            for g in opt.param_groups:
                g["lr"] = lr_at(step, max_lr, warmup, total)
            loss = torch.nn.functional.cross_entropy(model(tok, mask), tr_y[rows], weight=weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            if step % a.log_every == 0 or step == total:
                rec = {"step": step, "epoch": epoch, "loss": loss.item(),
                       "lr": opt.param_groups[0]["lr"], "grad_norm": gnorm.item(),
                       "elapsed_s": time.time() - t0}
                print(json.dumps(rec), flush=True)
                if mf:
                    mf.write(json.dumps(rec) + "\n")
                    mf.flush()
        if loss_n:  # every step's loss counts here, not only the logged ones
            rec = {"epoch_end": epoch, "mean_loss": loss_sum / loss_n, "steps_in_epoch": loss_n}
            print(json.dumps(rec), flush=True)
            if mf:
                mf.write(json.dumps(rec) + "\n")
                mf.flush()
    train_s = time.time() - t0

    model.eval()
    conf = [[0] * C for _ in range(C)]
    with torch.no_grad():
        for i in range(0, len(dev), 64):
            rows = list(range(i, min(i + 64, len(dev))))
            tok, mask = batch_tensors(torch, dv_seq, rows)
            pred = model(tok, mask).argmax(dim=-1).tolist()
            for r, p in zip(rows, pred):
                conf[dv_y[r]][p] += 1
    acc, macro_f1, per = report(conf)
    res = {"eval": {"accuracy": acc, "macro_f1": macro_f1, "total": len(dev),
                    "per_class": dict(zip(classes, per))},
           "train_s": train_s, "wall_s": time.time() - t0, "steps": step,
           "torch": torch.__version__, "threads": a.threads, "class_weight": a.class_weight}
    print(json.dumps(res), flush=True)
    if mf:
        mf.write(json.dumps(res) + "\n")
        mf.close()


if __name__ == "__main__":
    main()
