#!/usr/bin/env python3
"""Write the BERT reference dump that tests/unit/test_bert_parity.c checks the engine against.

The reference is Hugging Face transformers' own BertForSequenceClassification (not a
re-implementation), run by hand, once; its output is committed as
tests/data/bert_ref_tiny.bin. Nothing in the build or in CI runs this script.

Setup (PyPI is the only index reachable here; the PyPI torch wheel for Linux x86-64 is the
CUDA build, 539 MB plus about 3 GB of nvidia-* wheels, and it runs on the CPU as is):

    python3 -m venv /tmp/venv
    /tmp/venv/bin/pip install torch numpy transformers
    /tmp/venv/bin/python tools/make_bert_reference.py tests/data/bert_ref_tiny.bin

This writes tests/data/bert_ref_tiny.bin (the dump) and tests/data/bert_ref_tiny_hf/ (the same
initial weights saved by transformers' save_pretrained in float16: config.json and
model.safetensors), which the loader tests read.

Recorded with torch 2.15.0, transformers 5.23.0, numpy 2.4.6, Python 3.11 (the versions go
into the dump's header too). Two runs give byte-identical files.

What is computed
----------------
Model: BertConfig(vocab_size=99, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
intermediate_size=128, max_position_embeddings=32, type_vocab_size=2, hidden_act="gelu" (erf),
hidden_dropout_prob=0, attention_probs_dropout_prob=0 (so training is deterministic),
layer_norm_eps=1e-12, num_labels=3, pad_token_id=0, attn_implementation="eager").

Weights: not HF's init (std 0.02 makes every activation tiny and most gradients vanish into
rounding); drawn from torch.Generator seeded 20240 in named_parameters() order:
    *LayerNorm.weight   1 + 0.1 * N(0,1)
    *LayerNorm.bias     0.05 * N(0,1)
    other *.bias        0.05 * N(0,1)
    every other weight  0.1 * N(0,1)      (embeddings and nn.Linear weights [out, in])

Batch: B=4 rows of T=12, seeded 777: row r has length (12, 9, 5, 7)[r]; position 0 is 2
([CLS]), position len-1 is 3 ([SEP]), the others uniform in [4, 98]; padding is id 0 with
mask 0 and type 0 (id 0 appears only at padding, so nn.Embedding's padding_idx=0 changes
nothing: padded positions get exactly zero gradient anyway). token_type_ids: rows 1 and 3
have type 1 on their second half of real tokens (positions >= len // 2), rows 0 and 2 are
all type 0. labels (0, 2, 1, 2). Loss: mean cross-entropy over the 4 rows (HF's
single_label_classification).

Training: torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
amsgrad=False), one param group: decay applies to every parameter, biases and LayerNorm
included (what DeepSpeed's AdamW does with a config-only optimizer). Three steps, each on the
SAME batch: zero_grad, forward, backward, step. No scheduler, no gradient clipping.

Everything above runs in float64 (model.double(), the optimizer states too), and is stored
as float32: the dump is the float64 truth rounded once, so a float32 engine is compared
against the exact answer, not against another float32 rounding pattern. The same run in
float32 is done as well, and how far PyTorch's own float32 lands from the float64 truth is
recorded under "torch_fp32_vs_fp64" in the header, with the metrics the C test uses, as the
yardstick for the test's tolerances.

File format (version 1), all little-endian:
    8 bytes   magic "DSREF\\0\\0\\0"
    u32       version = 1
    u32       reserved = 0
    u64       J = length of the JSON header (padded with spaces to a multiple of 8)
    J bytes   JSON header
    ...       data: each tensor at "offset" bytes from the start of the data, "dtype"
              "f32" (IEEE float32) or "i32" (int32), row-major, "shape" as given
JSON header: {"format", "version", "generator": {...}, "config": {... HF config keys ...,
"n_classes"}, "batch": {"B", "T"}, "optimizer": {...}, "steps": 3, "param_names": [...
in named_parameters() order ...], "zero_true_grad_params": [...], "tensors": {NAME: {"dtype", "shape", "offset"}},
"torch_fp32_vs_fp64": {...}}. zero_true_grad_params lists the parameters whose exact gradient
is identically zero (the attention key biases, see zero_true_grad below); the float32-vs-float64
metrics leave them out.
Tensor names: "input_ids" i32 [B,T], "token_type_ids" i32 [B,T], "attention_mask" f32 [B,T],
"labels" i32 [B], "logits" f32 [B,3] (step 0, before any update), "loss" f32 [1] (step 0),
"step_losses" f32 [3] (the loss of the forward of each of the 3 steps), and for every
parameter P: "param/P" (initial value), "grad/P" (gradient of the step-0 loss), "after/P"
(value after the 3 AdamW steps).
"""

import copy
import json
import struct
import sys

import numpy as np
import torch
import transformers
from transformers import BertConfig, BertForSequenceClassification

VERSION = 1
CONFIG = dict(
    vocab_size=99,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=32,
    type_vocab_size=2,
    hidden_act="gelu",
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    layer_norm_eps=1e-12,
    initializer_range=0.02,
    pad_token_id=0,
)
N_CLASSES = 3
B, T = 4, 12
LENGTHS = (12, 9, 5, 7)
LABELS = (0, 2, 1, 2)
OPTIM = dict(type="AdamW", lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01)
STEPS = 3


def make_model():
    cfg = BertConfig(num_labels=N_CLASSES, attn_implementation="eager", **CONFIG)
    model = BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(20240)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if name.endswith("LayerNorm.weight"):
                v = 1.0 + 0.1 * noise
            elif name.endswith("bias"):
                v = 0.05 * noise
            else:
                v = 0.1 * noise
            p.copy_(v.to(p.dtype))
    return model


def make_batch():
    g = torch.Generator().manual_seed(777)
    ids = torch.zeros(B, T, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for r, n in enumerate(LENGTHS):
        ids[r, :n] = torch.randint(4, 99, (n,), generator=g)
        ids[r, 0] = 2
        ids[r, n - 1] = 3
        mask[r, :n] = 1
        if r in (1, 3):
            types[r, n // 2 : n] = 1
    labels = torch.tensor(LABELS, dtype=torch.long)
    return ids, types, mask, labels


def run(model, dtype, batch):
    """Step-0 logits, loss, grads; the loss of each step; parameters after STEPS steps."""
    model = copy.deepcopy(model).to(dtype)
    model.train()  # dropout is 0: train and eval agree; train is what the engine runs
    ids, types, mask, labels = batch
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=OPTIM["lr"],
        betas=tuple(OPTIM["betas"]),
        eps=OPTIM["eps"],
        weight_decay=OPTIM["weight_decay"],
        foreach=False,
    )
    names = [n for n, _ in model.named_parameters()]
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    losses = []
    logits0 = grads0 = None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels)
        out.loss.backward()
        losses.append(out.loss.item())
        if step == 0:
            logits0 = out.logits.detach().clone()
            grads0 = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    return dict(names=names, init=init, logits=logits0, losses=losses, grads=grads0, after=after)


def norm_rel(a, ref):
    """||a - ref|| / ||ref||, the metric the C test applies per tensor."""
    a = np.asarray(a, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(a - ref) / den) if den > 0 else float(np.linalg.norm(a - ref))


def zero_true_grad(r64):
    """Parameters whose exact gradient is identically zero, whatever the weights.

    In BERT these are the attention key biases: adding b_k to every key adds q . b_k to all
    scores of a query, which softmax ignores, so d loss / d b_k = 0 exactly; the float64
    gradient is ~1e-17, rounding noise. Adam normalises that noise to steps of +-lr, so their
    values after a step are not reproducible by any implementation and the test checks them
    against bounds instead. Found numerically: gradient norm below 1e-12 of the largest."""
    norms = {n: float(r64["grads"][n].norm()) for n in r64["names"]}
    top = max(norms.values())
    return [n for n in r64["names"] if norms[n] < 1e-12 * top]


def compare(r32, r64, skip):
    """How far float32 PyTorch is from the float64 truth, in the test's metrics."""
    l32, l64 = r32["logits"].double().numpy(), r64["logits"].numpy()
    out = {
        "logits_max_abs_over_max_abs": float(np.abs(l32 - l64).max() / np.abs(l64).max()),
        "loss_rel": abs(r32["losses"][0] - r64["losses"][0]) / abs(r64["losses"][0]),
        "step_losses_rel_max": max(
            abs(a - b) / abs(b) for a, b in zip(r32["losses"], r64["losses"])
        ),
    }
    worst_g, worst_gn = 0.0, ""
    worst_d, worst_dn = 0.0, ""
    worst_a, worst_an = 0.0, ""
    for n in r64["names"]:
        if n in skip:
            continue
        g = norm_rel(r32["grads"][n].double(), r64["grads"][n])
        if g > worst_g:
            worst_g, worst_gn = g, n
        d32 = (r32["after"][n].double() - r32["init"][n].double()).numpy()
        d64 = (r64["after"][n] - r64["init"][n]).numpy()
        d = norm_rel(d32, d64)
        if d > worst_d:
            worst_d, worst_dn = d, n
        a = float(np.abs(d32 - d64).max()) / OPTIM["lr"]
        if a > worst_a:
            worst_a, worst_an = a, n
    out.update(
        grad_norm_rel_max=worst_g,
        grad_norm_rel_worst=worst_gn,
        update_norm_rel_max=worst_d,
        update_norm_rel_worst=worst_dn,
        after_max_abs_over_lr=worst_a,
        after_max_abs_over_lr_worst=worst_an,
        excluded=sorted(skip),
    )
    return out


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUT.bin", file=sys.stderr)
        return 2
    torch.manual_seed(0)  # BertForSequenceClassification's own init, overwritten but seeded
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = make_model()
    batch = make_batch()
    r64 = run(model, torch.float64, batch)
    r32 = run(model, torch.float32, batch)
    zero_grad = zero_true_grad(r64)

    tensors = {}
    blobs = []
    offset = 0

    def add(name, array, dtype):
        nonlocal offset
        a = np.ascontiguousarray(np.asarray(array), dtype="<f4" if dtype == "f32" else "<i4")
        tensors[name] = {"dtype": dtype, "shape": list(a.shape), "offset": offset}
        blobs.append(a.tobytes())
        offset += a.nbytes

    ids, types, mask, labels = batch
    add("input_ids", ids.numpy(), "i32")
    add("token_type_ids", types.numpy(), "i32")
    add("attention_mask", mask.numpy(), "f32")
    add("labels", labels.numpy(), "i32")
    add("logits", r64["logits"].numpy(), "f32")
    add("loss", np.array([r64["losses"][0]]), "f32")
    add("step_losses", np.array(r64["losses"]), "f32")
    for n in r64["names"]:
        add("param/" + n, r64["init"][n].numpy(), "f32")
    for n in r64["names"]:
        add("grad/" + n, r64["grads"][n].numpy(), "f32")
    for n in r64["names"]:
        add("after/" + n, r64["after"][n].numpy(), "f32")

    header = {
        "format": "zero-engine BERT reference",
        "version": VERSION,
        "generator": {
            "script": "tools/make_bert_reference.py",
            "model": "transformers.BertForSequenceClassification (eager attention)",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
            "computed_in": "float64, stored as float32",
        },
        "config": dict(CONFIG, n_classes=N_CLASSES),
        "batch": {"B": B, "T": T},
        "optimizer": dict(OPTIM, weight_decay_on="all parameters", same_batch_each_step=True),
        "steps": STEPS,
        "param_names": r64["names"],
        "zero_true_grad_params": zero_grad,
        "tensors": tensors,
        "torch_fp32_vs_fp64": compare(r32, r64, zero_grad),
    }
    text = json.dumps(header, indent=None, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(sys.argv[1], "wb") as f:
        f.write(b"DSREF\0\0\0")
        f.write(struct.pack("<IIQ", VERSION, 0, len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    total = 24 + len(text) + offset
    # The same initial weights as a Hugging Face checkpoint folder, written by transformers'
    # own save_pretrained (safetensors from PyPI): an independent writer for the C reader and
    # loader tests. float16 halves its size; the test compares against param/* rounded to fp16.
    hf_dir = sys.argv[1][: -len(".bin")] + "_hf" if sys.argv[1].endswith(".bin") else sys.argv[1] + "_hf"
    copy.deepcopy(model).half().save_pretrained(hf_dir, safe_serialization=True)
    print(f"wrote {hf_dir}/config.json and model.safetensors (float16)")
    print(f"wrote {sys.argv[1]}: {total} bytes, {len(r64['names'])} parameters "
          f"({sum(v.numel() for v in r64['init'].values())} elements)")
    print("loss per step (float64):", r64["losses"])
    print("torch float32 vs float64:", json.dumps(header["torch_fp32_vs_fp64"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
