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


import sys

import torch
from transformers import BertConfig, BertForSequenceClassification

import ref_dump

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


def make_model():
    cfg = BertConfig(num_labels=N_CLASSES, attn_implementation="eager", **CONFIG)
    model = BertForSequenceClassification(cfg)
    ref_dump.init_weights(model, 20240, lambda name: name.endswith("LayerNorm.weight"))
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


def forward(model, batch):
    """Logits and HF's own classification loss."""
    ids, types, mask, labels = batch
    out = model(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels)
    return out.logits, out.loss


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


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUT.bin", file=sys.stderr)
        return 2
    ref_dump.seed_torch()  # BertForSequenceClassification's own init, overwritten but seeded
    model = make_model()
    batch = make_batch()
    r64 = ref_dump.train(model, torch.float64, forward, batch)
    r32 = ref_dump.train(model, torch.float32, forward, batch)
    zero_grad = zero_true_grad(r64)

    dump = ref_dump.Dump()
    ids, types, mask, labels = batch
    dump.add("input_ids", ids.numpy(), "i32")
    dump.add("token_type_ids", types.numpy(), "i32")
    dump.add("attention_mask", mask.numpy(), "f32")
    dump.add("labels", labels.numpy(), "i32")
    dump.add_run(r64)
    skip = {n: (0, r64["grads"][n].numel()) for n in zero_grad}  # whole parameters
    hdr = ref_dump.header(
        "zero-engine BERT reference",
        "tools/make_bert_reference.py",
        "transformers.BertForSequenceClassification (eager attention)",
        dict(CONFIG, n_classes=N_CLASSES),
        B, T, r64,
        ("zero_true_grad_params", zero_grad),
        dump.tensors,
        ref_dump.compare(r32, r64, skip, sorted(zero_grad)),
    )
    ref_dump.write(sys.argv[1], dump, hdr, model, r64)
    return 0


if __name__ == "__main__":
    sys.exit(main())
