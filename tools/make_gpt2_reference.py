#!/usr/bin/env python3
"""Write the GPT-2 reference dump that tests/unit/test_gpt2_parity.c checks the engine against.

The reference is Hugging Face transformers' own GPT2LMHeadModel (not a re-implementation),
run by hand, once; its output is committed as tests/data/gpt2_ref_tiny.bin. Nothing in the
build or in CI runs this script. It is modelled on tools/make_bert_reference.py and writes the
same versioned format (written by tools/ref_dump.py, read by tests/unit/ref_dump.c).

Setup (see make_bert_reference.py; the venv used here is /root/venv):

    /root/venv/bin/python tools/make_gpt2_reference.py tests/data/gpt2_ref_tiny.bin

This writes tests/data/gpt2_ref_tiny.bin (the dump) and tests/data/gpt2_ref_tiny_hf/ (the same
initial weights saved by transformers' save_pretrained in float16: config.json and
model.safetensors), which the loader tests read.

Recorded with torch 2.15.0, transformers 5.24.0, numpy 2.4.6, Python 3.11 (the versions go
into the dump's header too). Two runs give byte-identical files.

What is computed
----------------
Model: GPT2Config(vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=4,
n_inner=None (4 * 32 = 128), activation_function="gelu_new", resid_pdrop=embd_pdrop=attn_pdrop=0
(so training is deterministic), layer_norm_epsilon=1e-5, initializer_range=0.02,
tie_word_embeddings=True, bos/eos_token_id=96, attn_implementation="eager").
lm_head.weight is transformer.wte.weight (one tensor, listed once by named_parameters()).

Weights: not HF's init (std 0.02 makes every activation tiny and most gradients vanish into
rounding); drawn from torch.Generator seeded 20241 in named_parameters() order:
    ln_*.weight, ln_f.weight   1 + 0.1 * N(0,1)
    ln_*.bias, ln_f.bias       0.05 * N(0,1)
    other *.bias               0.05 * N(0,1)
    every other weight         0.1 * N(0,1)    (wte, wpe and Conv1D weights [in, out])

Batch: B=3 rows of T=10, seeded 778: row r has length (10, 7, 4)[r], tokens uniform in
[1, 96]; padding (right) is id 0 with attention_mask 0. Row 0 also has a hole: position 5
keeps its token but has attention_mask 0 (so the later queries of row 0 must skip that key:
with right padding alone no real query ever sees a padded key, and the loss would not depend
on the mask). labels = input_ids with -100 where the mask is 0 and at row 0's first 3
positions (a "prompt": positions that are not scored, to exercise the ignore index apart from
padding). Every query sees at least one real key (position 0 is real in every row): a query
with none (left padding) gets a uniform average over all T keys from HF's additive mask and
zeros from the engine; only such padded positions' logits would differ. Loss: GPT2LMHeadModel's, i.e. transformers'
ForCausalLMLoss: labels shifted left by one (position t is scored on labels[t + 1], the last
position on nothing), mean cross-entropy over the positions whose shifted label is not -100.

The loss is computed here from the model's logits with exactly ForCausalLMLoss's operations
(pad the labels with -100, shift, F.cross_entropy(ignore_index=-100, reduction="mean")), not
by passing labels to the model: ForCausalLMLoss first casts the logits to float32
(logits.float()), which in the float64 run would round the truth to float32 before the
softmax. In the float32 run the two are the same operations, and the script asserts that they
give the same loss.

Training: torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
amsgrad=False), one param group: decay applies to every parameter, biases and LayerNorm
included (what DeepSpeed's AdamW does with a config-only optimizer). Three steps, each on the
SAME batch: zero_grad, forward, backward, step. No scheduler, no gradient clipping.

Everything above runs in float64 (model.double(), the optimizer states too), and is stored
as float32: the dump is the float64 truth rounded once. The same run in float32 is done as
well, and how far PyTorch's own float32 lands from the float64 truth is recorded under
"torch_fp32_vs_fp64" in the header, with the metrics the C test uses, as the yardstick for
the test's tolerances.

Entries whose exact gradient is identically zero: the key third of every attn.c_attn.bias
(elements [n_embd, 2 n_embd)). Adding b_k to every key adds q . b_k to all scores of a query
row, which softmax ignores (masking removes keys, it does not change that), so their float64
gradient is rounding noise (~1e-17), which Adam normalises into steps of +-lr: not
reproducible by any implementation. They are listed as "zero_true_grad": {param: [start,
end)} (element ranges of the flattened tensor; checked here to be below 1e-12 of the largest
gradient), and the float32-vs-float64 metrics leave them out.

File format (version 1, as make_bert_reference.py), all little-endian:
    8 bytes   magic "DSREF\\0\\0\\0"
    u32       version = 1
    u32       reserved = 0
    u64       J = length of the JSON header (padded with spaces to a multiple of 8)
    J bytes   JSON header
    ...       data: each tensor at "offset" bytes from the start of the data, "dtype"
              "f32" (IEEE float32) or "i32" (int32), row-major, "shape" as given
JSON header: {"format", "version", "generator": {...}, "config": {... GPT2Config keys ...},
"batch": {"B", "T"}, "optimizer": {...}, "steps": 3, "param_names": [... in
named_parameters() order ...], "zero_true_grad": {...}, "tensors": {NAME: {"dtype", "shape",
"offset"}}, "torch_fp32_vs_fp64": {...}}.
Tensor names: "input_ids" i32 [B,T], "attention_mask" f32 [B,T], "labels" i32 [B,T],
"logits" f32 [B,T,V] (step 0, before any update, every position padded ones included),
"loss" f32 [1] (step 0), "step_losses" f32 [3] (the loss of the forward of each of the 3
steps), and for every parameter P: "param/P" (initial value), "grad/P" (gradient of the step-0
loss; for transformer.wte.weight the sum of its uses as embedding and output projection),
"after/P" (value after the 3 AdamW steps).
"""


import sys

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

import ref_dump

CONFIG = dict(
    vocab_size=97,
    n_positions=16,
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_inner=None,
    activation_function="gelu_new",
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    layer_norm_epsilon=1e-5,
    initializer_range=0.02,
    tie_word_embeddings=True,
    bos_token_id=96,
    eos_token_id=96,
)
B, T = 3, 10
LENGTHS = (10, 7, 4)
PROMPT = 3  # row 0's first PROMPT labels are -100
HOLE = 5  # row 0's attention_mask is 0 there


def is_norm_weight(name):
    return name.endswith(".weight") and name.split(".")[-2].startswith("ln_")


def make_model():
    cfg = GPT2Config(attn_implementation="eager", **CONFIG)
    model = GPT2LMHeadModel(cfg)
    assert model.lm_head.weight is model.transformer.wte.weight, "lm_head is not tied"
    ref_dump.init_weights(model, 20241, is_norm_weight)
    return model


def make_batch():
    g = torch.Generator().manual_seed(778)
    ids = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for r, n in enumerate(LENGTHS):
        ids[r, :n] = torch.randint(1, 97, (n,), generator=g)
        mask[r, :n] = 1
    mask[0, HOLE] = 0
    labels = ids.clone()
    labels[mask == 0] = -100
    labels[0, :PROMPT] = -100
    return ids, mask, labels


def causal_lm_loss(logits, labels):
    """transformers' ForCausalLMLoss (loss/loss_utils.py) without its logits.float()."""
    labels = F.pad(labels, (0, 1), value=-100)
    shift = labels[..., 1:].contiguous()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), shift.reshape(-1),
                           ignore_index=-100, reduction="mean")


def forward(model, batch):
    """Logits and the causal LM loss; in float32 also checked against the model's own."""
    ids, mask, labels = batch
    out = model(input_ids=ids, attention_mask=mask)
    loss = causal_lm_loss(out.logits, labels)
    if out.logits.dtype == torch.float32:
        hf = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        assert hf.item() == loss.item(), (hf.item(), loss.item())
    return out.logits, loss


def zero_true_grad(r64):
    """The key bias entries of every layer (see the docstring), checked to be noise."""
    E = CONFIG["n_embd"]
    top = max(float(g.abs().max()) for g in r64["grads"].values())
    out = {}
    for n in r64["names"]:
        if n.endswith("attn.c_attn.bias"):
            noise = float(r64["grads"][n][E:2 * E].abs().max())
            assert noise < 1e-12 * top, f"{n}: key-bias gradient {noise} is not ~0 (top {top})"
            out[n] = [E, 2 * E]
    return out


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUT.bin", file=sys.stderr)
        return 2
    ref_dump.seed_torch()  # GPT2LMHeadModel's own init, overwritten but seeded
    model = make_model()
    batch = make_batch()
    r64 = ref_dump.train(model, torch.float64, forward, batch)
    r32 = ref_dump.train(model, torch.float32, forward, batch)
    skip = zero_true_grad(r64)

    dump = ref_dump.Dump()
    ids, mask, labels = batch
    dump.add("input_ids", ids.numpy(), "i32")
    dump.add("attention_mask", mask.numpy(), "f32")
    dump.add("labels", labels.numpy(), "i32")
    dump.add_run(r64)
    excluded = {n: r for n, r in sorted(skip.items())}
    hdr = ref_dump.header(
        "zero-engine GPT-2 reference",
        "tools/make_gpt2_reference.py",
        "transformers.GPT2LMHeadModel (eager attention)",
        dict(CONFIG, n_inner=4 * CONFIG["n_embd"]),
        B, T, r64,
        ("zero_true_grad", skip),
        dump.tensors,
        ref_dump.compare(r32, r64, skip, excluded),
    )
    ref_dump.write(sys.argv[1], dump, hdr, model, r64)
    return 0


if __name__ == "__main__":
    sys.exit(main())
