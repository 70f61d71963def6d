#!/usr/bin/env python3
"""DeepSpeed's training throughput on CPU for the BERT-mini that bench_train
runs, to compare with it in the same session (issue 17 item 4, issue 22 item 7).

    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 /root/venv/bin/torchrun \
        --nproc_per_node 2 bench/bench_deepspeed.py --stage 2

bench/ds_compare.sh pairs it with bench_train run for run. What is the same
as bench_train (bench/bench_train.c), so that samples/s compare:

  model    transformers' BertForSequenceClassification: vocab 21128, hidden
           256, 4 layers, 4 heads, intermediate 1024, 512 positions, 2 token
           types, dropout 0.1 (hidden and attention), 6 labels; fp32.
  config   the ds_config bench_train gives the engine, key for key:
           train_batch_size 32 (16 rows per rank at 2 ranks), AdamW lr 1e-4
           weight decay 0.01, gradient_clipping 1.0, zero_optimization stage S
           with stage3_param_persistence_threshold 0 and reduce_bucket_size
           5e8, fp16 off, bf16 off unless --bf16 1; overlap_comm left to DeepSpeed's default
           as bench_train leaves it to the engine's (the same default).
  data     bench_train's synthetic rows: the same LCG (s = s * 1103515245 +
           12345 mod 2^32, token 4 + (s >> 8) % 21124), all 128 positions
           attended, label = row % 6; step i takes global rows [32 i, 32 i +
           32), rank r the r-th 16 of them.
  timing   --warmup 2 then --steps 8 steps, each timed on rank 0 from the
           forward to the end of the optimizer step (engine(...), backward,
           step; no barrier, as bench_train); samples/s = 32 / median.

Not the same, by construction: the initial weights (both draw N(0, 0.02),
from different generators) and the dropout masks. The first step's loss on
rank 0's rows is printed to show that both train the same function (about
ln 6 = 1.79 for either). Rank 0 prints one line "bench_deepspeed_json: {...}"
with the figures, versions and the parameter count.

DeepSpeed's first start on a machine JIT-compiles its CPU optimizer op
(about a minute, cached in ~/.cache/torch_extensions); run it once before
timing (ds_compare.sh does). The process group is gloo (--backend), the one
DeepSpeed falls back to on CPU without oneCCL; --attn picks transformers'
attention (sdpa, its default, or eager).
"""
import argparse, json, math, os, statistics, sys, time

V, H, L, NH, I, C = 21128, 256, 4, 4, 1024, 6


def synthetic_rows(n_rows, T):
    """bench_train's rows: its LCG over 32-bit unsigned ints, row-major."""
    ids, s = [], 1
    for _ in range(n_rows):
        row = []
        for _ in range(T):
            s = (s * 1103515245 + 12345) & 0xFFFFFFFF
            row.append(4 + (s >> 8) % (V - 4))
        ids.append(row)
    labels = [i % C for i in range(n_rows)]
    return ids, labels


def ds_config(stage, global_batch, bucket=500000000, overlap=None, bf16=False):
    zero = {"stage": stage, "stage3_param_persistence_threshold": 0,
            "reduce_bucket_size": bucket}
    if overlap is not None:  # else DeepSpeed's default for the stage
        zero["overlap_comm"] = bool(overlap)
    return {
        "train_batch_size": global_batch,
        "steps_per_print": 1000000,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "fp16": {"enabled": False},
        "bf16": {"enabled": bool(bf16)},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, default=0)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32, help="global batch")
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--bucket", type=int, default=500000000,
                    help="zero_optimization.reduce_bucket_size")
    ap.add_argument("--overlap", type=int, choices=[0, 1], default=None,
                    help="zero_optimization.overlap_comm (default: DeepSpeed's)")
    ap.add_argument("--bf16", type=int, choices=[0, 1], default=0,
                    help="bf16.enabled (bench_train --precision bf16 on the engine's side)")
    a = ap.parse_args()
    if os.environ.get("DS_ACCELERATOR") != "cpu":
        sys.exit("bench_deepspeed: set DS_ACCELERATOR=cpu (DeepSpeed would pick a GPU if it found one)")
    if a.steps < 1 or a.warmup < 0:
        sys.exit("bench_deepspeed: --steps must be at least 1, --warmup at least 0")

    import torch
    import deepspeed
    import transformers
    from transformers import BertConfig, BertForSequenceClassification

    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    deepspeed.init_distributed(dist_backend=a.backend)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    if a.batch % world:
        sys.exit(f"bench_deepspeed: --batch {a.batch} is not a multiple of the {world} ranks")
    micro = a.batch // world

    torch.manual_seed(0)  # every rank the same weights, as DeepSpeed expects
    cfg = BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=NH,
                     intermediate_size=I, max_position_embeddings=512, type_vocab_size=2,
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, num_labels=C)
    cfg._attn_implementation = a.attn
    model = BertForSequenceClassification(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds_config(a.stage, a.batch, a.bucket, a.overlap,
                                                            a.bf16))
    engine.train()

    n_steps = a.warmup + a.steps
    ids, labels = synthetic_rows(a.batch * n_steps, a.seq)
    ids = torch.tensor(ids, dtype=torch.long)
    labels = torch.tensor(labels, dtype=torch.long)
    mask = torch.ones(a.seq, dtype=torch.long).expand(micro, a.seq)

    times, loss0 = [], None
    for i in range(n_steps):
        r0 = i * a.batch + rank * micro
        x, y = ids[r0:r0 + micro], labels[r0:r0 + micro]
        t0 = time.perf_counter()
        loss = engine(input_ids=x, attention_mask=mask, labels=y).loss
        engine.backward(loss)
        engine.step()
        dt = time.perf_counter() - t0
        if i == 0:
            loss0 = float(loss.detach())
        if i >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    if rank == 0:
        r = dict(prog="bench_deepspeed", stage=a.stage, world=world, threads=threads,
                 backend=a.backend, attn=a.attn, seq=a.seq, batch=a.batch, psi=n_params,
                 samples_per_s=a.batch / med, step_s=med, step_min_s=min(times),
                 step_max_s=max(times), steps=a.steps, warmup=a.warmup, loss0=loss0,
                 torch=torch.__version__, deepspeed=deepspeed.__version__,
                 transformers=transformers.__version__,
                 cpu_capability=torch.backends.cpu.get_cpu_capability(),
                 optimizer=type(engine.optimizer).__name__,
                 basic_optimizer=type(getattr(engine, "basic_optimizer", None)).__name__,
                 overlap_comm=bool(engine.zero_overlap_comm()) if a.stage else None)
        print(f"bench_deepspeed: BERT-mini Psi={n_params} stage {a.stage} fp32 world {world} x "
              f"{threads} thread(s) {a.backend} seq {a.seq} batch {a.batch}: "
              f"{a.batch / med:.2f} samples/s (median step {med:.3f} s, min {min(times):.3f}, "
              f"max {max(times):.3f}); first step loss {loss0:.4f} (rank 0's {micro} rows; "
              f"ln {C} = {math.log(C):.4f}); optimizer {r['optimizer']} over {r['basic_optimizer']}",
              flush=True)
        print("bench_deepspeed_json: " + json.dumps(r), flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
