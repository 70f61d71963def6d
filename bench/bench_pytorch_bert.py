#!/usr/bin/env python3
"""PyTorch's training throughput for the reference BERT-mini, to compare with
bench_train in the same session (issue 3: vocab 21128, hidden 256, 4 layers,
4 heads, intermediate 1024, seq 128, batch 32, 6 classes, dropout 0.1, AdamW,
clip 1.0). The model is tools/pytorch_cls_reference.py's plain-PyTorch BERT.

    /tmp/venv/bin/python bench/bench_pytorch_bert.py --threads 2 --steps 8
    python3 bench/bench_pytorch_bert.py --device cuda --steps 50 --precision bf16

On cuda each step ends with a synchronize, so the timer holds the kernels'
time, as bench_train's (whose loss read-back waits for them) does.
"""
import argparse, os, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: autocast the forward, as DeepSpeed's bf16 computes")
    a = ap.parse_args()
    import torch
    from pytorch_cls_reference import build_model
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    V, C, T, B = 21128, 6, 128, a.batch
    dev = torch.device(a.device)
    model = build_model(torch, V, C).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    ids = torch.randint(4, V, (B, T), device=dev)
    mask = torch.ones(B, T, dtype=torch.float32, device=dev)
    labels = torch.randint(0, C, (B,), device=dev)
    cast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model.train()
    times = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        with cast:
            logits = model(ids, mask)
            loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"bench_pytorch_bert: torch {torch.__version__}, {a.device} {a.precision}, {a.threads} threads, Psi={n_params}, "
          f"seq {T} batch {B}: {B / med:.2f} samples/s (median step {med:.3f} s)")


if __name__ == "__main__":
    main()
