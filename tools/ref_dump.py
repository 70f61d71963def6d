"""What tools/make_bert_reference.py and tools/make_gpt2_reference.py share: the DSREF dump
writer, the training run both record, and the float32-vs-float64 yardstick.

Each script's docstring documents its dump (the file format, model, batch, header keys,
tensors); this module holds only what is the same for both, so the two dumps keep one format,
one optimizer and one set of metrics. The C reader is tests/unit/ref_dump.c. Not a product
file: imported only by the two scripts (run by hand with torch and transformers, never by
the build).
"""

import copy
import json
import struct

import numpy as np
import torch
import transformers

VERSION = 1
MAGIC = b"DSREF\0\0\0"
# Both dumps train with this: one param group, decay on every parameter (what DeepSpeed's
# AdamW does with a config-only optimizer), STEPS steps on the same batch.
OPTIM = dict(type="AdamW", lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01)
STEPS = 3


def seed_torch():
    """The model's own init is seeded (then overwritten), kernels deterministic and on one
    thread: two runs give byte-identical files."""
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def init_weights(model, seed, is_norm_weight):
    """Not HF's init (std 0.02 makes every activation tiny and most gradients vanish into
    rounding): in named_parameters() order from torch.Generator(seed), LayerNorm weights
    1 + 0.1 N(0,1), biases 0.05 N(0,1), every other weight 0.1 N(0,1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if is_norm_weight(name):
                v = 1.0 + 0.1 * noise
            elif name.endswith("bias"):
                v = 0.05 * noise
            else:
                v = 0.1 * noise
            p.copy_(v.to(p.dtype))


def train(model, dtype, forward, batch):
    """A copy of model in dtype trained STEPS AdamW steps on batch; forward(model, batch)
    gives (logits, loss). Returns the step-0 logits and grads, the loss of each step, and
    the parameters before and after."""
    model = copy.deepcopy(model).to(dtype)
    model.train()  # dropout is 0: train and eval agree; train is what the engine runs
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
        logits, loss = forward(model, batch)
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            logits0 = logits.detach().clone()
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


def compare(r32, r64, skip, excluded):
    """How far float32 PyTorch is from the float64 truth, in the test's metrics.

    skip: {param: (start, end)}, element ranges of the flattened tensors whose exact gradient
    is zero, left out of the metrics (a parameter skipped whole is left out altogether);
    excluded: how the header lists them."""
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
        keep = np.ones(r64["grads"][n].numel(), dtype=bool)
        if n in skip:
            keep[skip[n][0]:skip[n][1]] = False
        if not keep.any():
            continue
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
        excluded=excluded,
    )
    return out


class Dump:
    """The tensors of a dump, in the order added; their offsets go into the header."""

    def __init__(self):
        self.tensors = {}
        self.blobs = []
        self.nbytes = 0

    def add(self, name, array, dtype):
        a = np.ascontiguousarray(np.asarray(array), dtype="<f4" if dtype == "f32" else "<i4")
        self.tensors[name] = {"dtype": dtype, "shape": list(a.shape), "offset": self.nbytes}
        self.blobs.append(a.tobytes())
        self.nbytes += a.nbytes

    def add_run(self, r64):
        """What both dumps store after their inputs: logits, loss, step_losses, then param/,
        grad/ and after/ of every parameter."""
        self.add("logits", r64["logits"].numpy(), "f32")
        self.add("loss", np.array([r64["losses"][0]]), "f32")
        self.add("step_losses", np.array(r64["losses"]), "f32")
        for kind, key in (("param", "init"), ("grad", "grads"), ("after", "after")):
            for n in r64["names"]:
                self.add(kind + "/" + n, r64[key][n].numpy(), "f32")


def header(fmt, script, model, config, B, T, r64, zero_true_grad, tensors, yardstick):
    """The JSON header, keys in the order both dumps write them; zero_true_grad is one
    (key, value) pair, each dump's own way of listing them."""
    return {
        "format": fmt,
        "version": VERSION,
        "generator": {
            "script": script,
            "model": model,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
            "computed_in": "float64, stored as float32",
        },
        "config": config,
        "batch": {"B": B, "T": T},
        "optimizer": dict(OPTIM, weight_decay_on="all parameters", same_batch_each_step=True),
        "steps": STEPS,
        "param_names": r64["names"],
        zero_true_grad[0]: zero_true_grad[1],
        "tensors": tensors,
        "torch_fp32_vs_fp64": yardstick,
    }


def write(path, dump, hdr, model, r64):
    """Writes the dump to path, and beside it (path less ".bin", plus "_hf") the same
    initial weights as a Hugging Face checkpoint folder; prints what was written."""
    text = json.dumps(hdr, indent=None, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<IIQ", VERSION, 0, len(text)))
        f.write(text)
        for b in dump.blobs:
            f.write(b)
    total = 24 + len(text) + dump.nbytes
    # The checkpoint folder is written by transformers' own save_pretrained: an independent
    # writer for the C reader and loader tests. float16 halves its size; the tests compare
    # against param/* rounded to fp16.
    hf_dir = path[: -len(".bin")] + "_hf" if path.endswith(".bin") else path + "_hf"
    copy.deepcopy(model).half().save_pretrained(hf_dir, safe_serialization=True)
    print(f"wrote {hf_dir}/config.json and model.safetensors (float16)")
    print(f"wrote {path}: {total} bytes, {len(r64['names'])} parameters "
          f"({sum(v.numel() for v in r64['init'].values())} elements)")
    print("loss per step (float64):", r64["losses"])
    print("torch float32 vs float64:", json.dumps(hdr["torch_fp32_vs_fp64"], indent=1))
