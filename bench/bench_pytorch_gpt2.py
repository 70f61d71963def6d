#!/usr/bin/env python3
"""PyTorch's training throughput for GPT-2 (transformers' GPT2LMHeadModel), to
compare with bench/bench_lm in the same session (bench/lm_speed.sh runs both).

Same model and step as bench_lm: GPT-2 small by default (12 layers, 768 wide,
12 heads, vocab 50257, n_positions 1024, dropout 0.1 at the three sites,
gelu_new, tied lm_head), sequence 256, global batch 8, synthetic token ids
uniform over the vocabulary with labels = input_ids (the model shifts them),
AdamW (lr 1e-4, weight decay 0.01), gradient clipping 1.0.

    # 1 process x 2 threads
    /root/venv/bin/python bench/bench_pytorch_gpt2.py --procs 1 --threads 2
    # 2 processes x 1 thread: DistributedDataParallel over gloo (mp.spawn), each
    # process a micro batch of batch / 2, gradients averaged by DDP's all-reduce
    /root/venv/bin/python bench/bench_pytorch_gpt2.py --procs 2 --threads 1

--attn eager|sdpa picks transformers' attention implementation: "eager" is
GPT-2's own code (matmul, mask, softmax, dropout, matmul: the same arithmetic
as the engine's); "sdpa" is torch.nn.functional.scaled_dot_product_attention
(transformers' default when available). bench/lm_speed.sh runs both and
compares the engine with the faster one.

Prints tokens/s over the median timed step and the peak RSS per process; the
last line, "bench_lm_json: {...}", is what bench/lm_table.py reads.
"""
import argparse, json, os, resource, statistics, sys, time


def build(torch, a):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=a.vocab, n_positions=a.positions, n_embd=a.hidden,
                     n_layer=a.layers, n_head=a.heads, resid_pdrop=a.dropout,
                     embd_pdrop=a.dropout, attn_pdrop=a.dropout)
    # transformers 5 takes the attention implementation from the config
    cfg._attn_implementation = a.attn
    model = GPT2LMHeadModel(cfg)
    assert model.config._attn_implementation == a.attn, model.config._attn_implementation
    return model


def flops_per_step(L, E, I, V, T, B):
    """bench_lm.c's flops_per_step: 3 x the forward's matmul FLOPs (Conv1D
    projections, tied head, full T x T attention GEMMs)."""
    per_token = 2.0 * (L * (4.0 * E * E + 2.0 * E * I) + E * V)
    return 3.0 * (B * T * per_token + B * L * 4.0 * T * T * E)


def profile_step(torch, model, opt, ids, rows):
    """One training step under torch.profiler: the ops by self CPU time."""
    from torch.profiler import ProfilerActivity, profile
    for i in range(2):  # the first step warms up; the second is profiled
        with profile(activities=[ProfilerActivity.CPU]) if i else _null() as prof:
            out = model(input_ids=ids, labels=ids)
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows),
          file=sys.stderr, flush=True)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def worker(rank, a, world, port, q):
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    torch.set_num_threads(a.threads)
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world)
    torch.manual_seed(0)
    model = build(torch, a)
    n_params = sum(p.numel() for p in model.parameters())  # the tie counts once
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    micro = a.batch // world
    g = torch.Generator().manual_seed(1 + rank)
    batches = [torch.randint(0, a.vocab, (micro, a.seq), generator=g)
               for _ in range(a.warmup + a.steps)]
    model.train()
    times, losses = [], []
    if a.profile and rank == 0:
        profile_step(torch, model, opt, batches[0], a.profile)
    for i, ids in enumerate(batches):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if world > 1:
            dist.barrier()
        dt = time.perf_counter() - t0
        losses.append(out.loss.item())
        if rank == 0:
            print(f"bench_pytorch_gpt2: step {i + 1}{' (warm-up)' if i < a.warmup else ''} "
                  f"{dt:.3f} s loss {losses[-1]:.4f}", file=sys.stderr, flush=True)
        if i >= a.warmup:
            times.append(dt)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if world > 1:
        t = torch.tensor([rss], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        rss = float(t)
        dist.destroy_process_group()
    if rank == 0:
        q.put((times, losses, n_params, rss, torch.__version__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="eager")
    ap.add_argument("--batch", type=int, default=8, help="global batch")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="first profile one step (torch.profiler, after one unprofiled step) "
                         "and print its N most expensive ops by self CPU time to stderr")
    a = ap.parse_args()
    if a.batch % a.procs:
        sys.exit("bench_pytorch_gpt2: --batch must be a multiple of --procs")
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    if a.procs == 1:
        worker(0, a, 1, a.port, q)
    else:
        mp.spawn(worker, args=(a, a.procs, a.port, q), nprocs=a.procs, join=True)
    times, losses, n_params, rss, version = q.get()
    med = statistics.median(times)
    tokens = a.batch * a.seq
    fl = flops_per_step(a.layers, a.hidden, 4 * a.hidden, a.vocab, a.seq, a.batch)
    print(f"bench_pytorch_gpt2: torch {version}, attn {a.attn}, {a.procs} process(es) x "
          f"{a.threads} thread(s), Psi={n_params}, seq {a.seq} batch {a.batch}: "
          f"{tokens / med:.1f} tokens/s (median step {med:.3f} s of {len(times)}, "
          f"min {min(times):.3f}, max {max(times):.3f}), {fl / med / 1e9:.1f} GFLOP/s matmul, "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, peak RSS {rss:.0f} MiB per process")
    rec = {"side": "pytorch", "attn": a.attn, "procs": a.procs, "threads": a.threads,
           "torch": version, "layers": a.layers, "hidden": a.hidden, "heads": a.heads,
           "vocab": a.vocab, "seq": a.seq, "batch": a.batch, "psi": n_params,
           "steps": a.steps, "warmup": a.warmup, "step_s": sorted(round(t, 4) for t in times),
           "median_s": round(med, 4), "tokens_per_s": round(tokens / med, 2),
           "gflops": round(fl / med / 1e9, 2), "rss_mib": round(rss, 1),
           "loss_first": losses[0], "loss_last": losses[-1]}
    print("bench_lm_json: " + json.dumps(rec))


if __name__ == "__main__":
    main()
