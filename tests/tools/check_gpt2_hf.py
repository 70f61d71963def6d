#!/usr/bin/env python3
"""Check that transformers loads the engine's GPT-2 export as it is.

    check_gpt2_hf.py DIR      (DIR written by tests/unit/gpt2_hf_export.c)

GPT2LMHeadModel.from_pretrained(DIR) must build the model from the engine's config.json and
load its model.safetensors with nothing missing, unexpected or mis-shaped (lm_head.weight is
not in the file: transformers ties it to transformer.wte.weight and does not report it), and
its logits on the same batch must match the engine's: both are float32 with different
summation orders, each within ~4e-7 of the float64 truth (test_gpt2_parity), so 1e-5 of the
largest logit leaves a 10x margin while a wrong layout (a transposed Conv1D weight, another
GELU, an untied head) moves them by 1e-4 or far more.

Exit 0: loaded and equal; 1: a failure (printed); 77: no torch/transformers here (CTest reads
it as skipped: CI has no Python ML stack).
"""

import json
import os
import sys

try:
    import numpy as np
    import torch
    from transformers import GPT2LMHeadModel
except ImportError as e:  # not an error: the check needs the ML stack
    print(f"skipped: {e}")
    sys.exit(77)

TOL_LOGITS = 1e-5


def main():
    d = sys.argv[1]
    meta = json.load(open(os.path.join(d, "batch.json")))
    B, T, V = meta["B"], meta["T"], meta["V"]
    model, info = GPT2LMHeadModel.from_pretrained(
        d, output_loading_info=True, attn_implementation="eager", dtype=torch.float32
    )
    print("loading info:", {k: v for k, v in info.items()})
    fails = []
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            fails.append(f"{key}: {sorted(info[key])}")
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        fails.append("lm_head.weight is not tied to transformer.wte.weight")
    cfg = model.config
    if cfg.activation_function != "gelu_new" or not cfg.tie_word_embeddings:
        fails.append(f"config: activation {cfg.activation_function}, tie {cfg.tie_word_embeddings}")
    ids = np.fromfile(os.path.join(d, meta["input_ids"]), dtype="<i4").reshape(B, T)
    mask = np.fromfile(os.path.join(d, meta["attention_mask"]), dtype="<f4").reshape(B, T)
    ours = np.fromfile(os.path.join(d, meta["logits"]), dtype="<f4").reshape(B, T, V)
    model.eval()
    with torch.no_grad():
        logits = model(
            input_ids=torch.from_numpy(ids.astype(np.int64)),
            attention_mask=torch.from_numpy(mask.astype(np.int64)),
        ).logits.numpy()
    rel = float(np.abs(logits - ours).max() / np.abs(logits).max())
    print(f"logits: max|engine - transformers| / max|transformers| = {rel:.2e} (tol {TOL_LOGITS})")
    if not rel <= TOL_LOGITS:
        fails.append(f"logits differ by {rel:.3e} relative")
    for f in fails:
        print("FAIL", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
