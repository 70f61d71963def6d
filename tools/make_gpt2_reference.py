#!/usr/bin/env python3
"""Write the GPT-2 reference dump that tests/unit/test_gpt2_parity.c checks the engine against.

The reference is Hugging Face transformers' own GPT2LMHeadModel (not a re-implementation),
run by hand, once; its output is committed as tests/data/gpt2_ref_tiny.bin. Nothing in the
build or in CI runs this script. It is modelled on tools/make_bert_reference.py and writes the
same versioned format (read by tests/unit/bert_ref.c).

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

import copy
import json
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

VERSION = 1
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
OPTIM = dict(type="AdamW", lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01)
STEPS = 3


def make_model():
    cfg = GPT2Config(attn_implementation="eager", **CONFIG)
    model = GPT2LMHeadModel(cfg)
    assert model.lm_head.weight is model.transformer.wte.weight, "lm_head is not tied"
    g = torch.Generator().manual_seed(20241)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if name.endswith(".weight") and name.split(".")[-2].startswith("ln_"):
                v = 1.0 + 0.1 * noise
            elif name.endswith("bias"):
                v = 0.05 * noise
            else:
                v = 0.1 * noise
            p.copy_(v.to(p.dtype))
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


def run(model, dtype, batch):
    """Step-0 logits, loss, grads; the loss of each step; parameters after STEPS steps."""
    model = copy.deepcopy(model).to(dtype)
    model.train()  # dropout is 0: train and eval agree; train is what the engine runs
    ids, mask, labels = batch
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
        out = model(input_ids=ids, attention_mask=mask)
        loss = causal_lm_loss(out.logits, labels)
        if dtype == torch.float32:
            hf = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            assert hf.item() == loss.item(), (hf.item(), loss.item())
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            logits0 = out.logits.detach().clone()
            grads0 = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    return dict(names=names, init=init, logits=logits0, losses=losses, grads=grads0, after=after)


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


def keep_mask(n, shape, skip):
    """Flattened boolean mask of the entries the metrics use (all but skip's range)."""
    m = np.ones(int(np.prod(shape)), dtype=bool)
    if n in skip:
        m[skip[n][0]:skip[n][1]] = False
    return m


def norm_rel(a, ref):
    """||a - ref|| / ||ref||, the metric the C test applies per tensor."""
    a = np.asarray(a, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(a - ref) / den) if den > 0 else float(np.linalg.norm(a - ref))


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
        keep = keep_mask(n, r64["grads"][n].shape, skip)
        g = norm_rel(r32["grads"][n].double().numpy().ravel()[keep],
                     r64["grads"][n].numpy().ravel()[keep])
        if g > worst_g:
            worst_g, worst_gn = g, n
        d32 = (r32["after"][n].double() - r32["init"][n].double()).numpy().ravel()[keep]
        d64 = (r64["after"][n] - r64["init"][n]).numpy().ravel()[keep]
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
        excluded={n: r for n, r in sorted(skip.items())},
    )
    return out


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUT.bin", file=sys.stderr)
        return 2
    torch.manual_seed(0)  # GPT2LMHeadModel's own init, overwritten but seeded
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = make_model()
    batch = make_batch()
    r64 = run(model, torch.float64, batch)
    r32 = run(model, torch.float32, batch)
    skip = zero_true_grad(r64)

    tensors = {}
    blobs = []
    offset = 0

    def add(name, array, dtype):
        nonlocal offset
        a = np.ascontiguousarray(np.asarray(array), dtype="<f4" if dtype == "f32" else "<i4")
        tensors[name] = {"dtype": dtype, "shape": list(a.shape), "offset": offset}
        blobs.append(a.tobytes())
        offset += a.nbytes

    ids, mask, labels = batch
    add("input_ids", ids.numpy(), "i32")
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
        "format": "zero-engine GPT-2 reference",
        "version": VERSION,
        "generator": {
            "script": "tools/make_gpt2_reference.py",
            "model": "transformers.GPT2LMHeadModel (eager attention)",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
            "computed_in": "float64, stored as float32",
        },
        "config": dict(CONFIG, n_inner=4 * CONFIG["n_embd"]),
        "batch": {"B": B, "T": T},
        "optimizer": dict(OPTIM, weight_decay_on="all parameters", same_batch_each_step=True),
        "steps": STEPS,
        "param_names": r64["names"],
        "zero_true_grad": skip,
        "tensors": tensors,
        "torch_fp32_vs_fp64": compare(r32, r64, skip),
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
    # own save_pretrained: an independent writer for the C loader tests. float16 halves its
    # size; the test compares against param/* rounded to fp16.
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
