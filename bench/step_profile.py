#!/usr/bin/env python3
"""Where the BERT-mini training step's CPU time goes, steady state only
(bench/step_profile.sh records it: `perf record -g` of bench_train's timed
steps alone, through --perf-ctl).

usage: bench/step_profile.py PERF_SCRIPT.txt [--kernels BENCH_KERNELS.txt]
                             [--step-ms MS] [--top K]

PERF_SCRIPT.txt is `perf script` of the recording (a sample header line,
then its frames, leaf first). Each sample is put in one row by its leaf
function: the GEMMs (OpenBLAS's kernel, its packing, its clearing of C for
beta = 0, the rest of OpenBLAS, the engine's own small GEMM of
cpu_gemm_small.c, and the bf16 dot-product kernel of cpu_gemm_dot.c with its
packs) or the rest (the model and optimizer kernels by kind,
memset / memcpy outside a GEMM, OpenMP's runtime, the operating system).
A libc memset counts as OpenBLAS clearing C when the frame under it is in
OpenBLAS (sgemm_beta calls it as a tail call, so its caller's frame is the
one after memset's), else as the engine's (gradient zeroing).

With --kernels (the output of `bench_kernels --model bert --threads 1`) and
--step-ms (CPU ms per step, perf stat's task-clock of the same steps), it also
prints the time the step's matmul FLOPs take at OpenBLAS's rates at the same
shapes (the OpenBLAS column of that table) and the step's rate against it:
issue 17's goal of >= 85%; and the same at the backend's rates (the
column of what the models call: OpenBLAS or the engine's own kernels)."""
import argparse
import collections
import re
import sys

# BERT-mini as bench_train runs it: batch, sequence, hidden, intermediate,
# heads, layers (the last computes the [CLS] row only, keys and values for
# all positions), classes.
B, T, H, I, NH, L, C = 32, 128, 256, 1024, 4, 4, 6

ROWS = [  # (row, is GEMM), in print order
    ("OpenBLAS sgemm kernel", True),
    ("OpenBLAS packing (*copy)", True),
    ("OpenBLAS clearing C (beta, its memset)", True),
    ("OpenBLAS other", True),
    ("own small GEMM (gs_*, attention products)", True),
    ("bf16 dot product (tile, packs: cpu_gemm_dot.c)", True),
    ("bias + activation (GELU) fwd / bwd", False),
    ("dropout, softmax, Philox multipliers", False),
    ("dropout + residual + layer norm (one pass)", False),
    ("layer norm", False),
    ("AdamW", False),
    ("gradient norm (sumsq)", False),
    ("bias gradients (column sums)", False),
    ("embedding", False),
    ("other engine kernels", False),
    ("memset / memcpy outside GEMMs", False),
    ("OpenMP runtime (libgomp)", False),
    ("operating system", False),
    ("other", False),
]

ENGINE_KINDS = [  # (pattern on the leaf symbol, row)
    (r"^dot_|gemm_dot|^pair_|^pack_[ab]|^ahead_", "bf16 dot product (tile, packs: cpu_gemm_dot.c)"),
    (r"^gs_|gemm_small|gemm_entry|round_pack", "own small GEMM (gs_*, attention products)"),
    (r"act_bwd|bias_act|act_fwd", "bias + activation (GELU) fwd / bwd"),
    (r"dropout_ln", "dropout + residual + layer norm (one pass)"),
    (r"dropout|softmax|philox", "dropout, softmax, Philox multipliers"),
    (r"layernorm|ln_row", "layer norm"),
    (r"adam", "AdamW"),
    (r"sumsq", "gradient norm (sumsq)"),
    (r"bcast_add_bwd", "bias gradients (column sums)"),
    (r"embedding", "embedding"),
]


def samples(lines):
    """Yields (frames) per sample: a list of (symbol, dso), leaf first."""
    frames = None
    for line in lines:
        if not line.strip():
            if frames:
                yield frames
            frames = None
            continue
        if not line[0].isspace():  # header: comm pid time: period event:
            if frames:
                yield frames
            frames = []
            continue
        if frames is None:
            continue
        m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
        if m:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(1))
            frames.append((sym, m.group(2)))
    if frames:
        yield frames


def classify(frames):
    sym, dso = frames[0]
    low = sym.lower()
    if "openblas" in dso:
        if "_kernel_" in low:
            return "OpenBLAS sgemm kernel"
        if "copy" in low:
            return "OpenBLAS packing (*copy)"
        if "beta" in low:
            return "OpenBLAS clearing C (beta, its memset)"
        return "OpenBLAS other"
    if "libc" in dso and ("memset" in low or "memmove" in low or "memcpy" in low):
        if "memset" in low and len(frames) > 1 and "openblas" in frames[1][1]:
            return "OpenBLAS clearing C (beta, its memset)"
        return "memset / memcpy outside GEMMs"
    if "zero-engine" in dso or "bench_train" in dso:
        for pat, row in ENGINE_KINDS:
            if re.search(pat, low):
                return row
        return "other engine kernels"
    if "libgomp" in dso:
        return "OpenMP runtime (libgomp)"
    if "kernel" in dso:
        return "operating system"
    return "other"


def gemm_shapes():
    """[(bench_kernels row, GFLOP per step)] of the step's matmuls, each under
    the bench_kernels shape it runs at (dP, dQ those of the scores and the
    context; dK that of dV; both feed-forward weight gradients under the
    1024 x 256 x 4096 row, the down layer's being its transpose). The last
    layer's [CLS]-only products are counted at the shape of the full one
    (0.2 of 66.2 GFLOP)."""
    N, Nq = B * T, B  # rows of a full layer, of the last one's queries
    g = collections.defaultdict(float)
    for layer in range(L):
        q = N if layer < L - 1 else Nq
        g["proj (q, k, v, out)"] += 2.0 * H * H * (2 * N + 2 * q)
        g["dX = dY W (proj)"] += 2.0 * H * H * (2 * N + 2 * q)
        g["dW = X^T dY (proj)"] += 2.0 * H * H * (2 * N + 2 * q)
        g["ffn up"] += 2.0 * q * H * I
        g["dX = dY W (ffn up)"] += 2.0 * q * H * I
        g["ffn down"] += 2.0 * q * H * I
        g["dX = dY W (ffn down)"] += 2.0 * q * H * I
        g["dW = X^T dY (ffn)"] += 2 * 2.0 * q * H * I
        tq = T if layer < L - 1 else 1
        prod = 2.0 * B * NH * tq * T * (H // NH)
        g["attn scores Q K^T"] += 2 * prod   # scores, dP
        g["attn context P V"] += 2 * prod    # context, dQ
        g["attn dV = P^T dC"] += 2 * prod    # dV, dK
    g["proj (q, k, v, out)"] += 3 * 2.0 * B * (H * H + H * C)  # pooler, classifier
    return [(k, v / 1e9) for k, v in g.items()]


def gemm_rates(lines):
    """({GEMM row: OpenBLAS GFLOP/s}, {GEMM row: backend GFLOP/s}) from
    bench_kernels' BERT-mini GEMM table."""
    blas, backend = {}, {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.match(r"^[0-9.]+$", cells[3]) and " x " in cells[1]:
            blas.setdefault(cells[0], float(cells[3]))
            backend.setdefault(cells[0], float(cells[2]))
    return blas, backend


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("script")
    ap.add_argument("--kernels", help="bench_kernels --model bert output")
    ap.add_argument("--step-ms", type=float, help="CPU ms per step (perf stat task-clock)")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args(argv)
    rows = collections.Counter()
    syms = collections.Counter()
    with open(a.script, errors="replace") as f:
        for fr in samples(f):
            if not fr:
                continue
            rows[classify(fr)] += 1
            syms[fr[0][0]] += 1
    total = sum(rows.values())
    if not total:
        print("step_profile: no samples in %s" % a.script, file=sys.stderr)
        return 1
    gemm = sum(n for r, n in rows.items() if dict(ROWS)[r])
    osys = rows["operating system"]
    print("%d samples of the timed steps: GEMM %.1f%%, non-GEMM %.1f%% (%.1f%% without the "
          "operating system, whose share follows the machine's load)"
          % (total, 100.0 * gemm / total, 100.0 * (total - gemm) / total,
             100.0 * (total - gemm - osys) / (total - osys)))
    print("\n| share of the step's CPU samples | GEMM | samples | % |\n| --- | --- | ---: | ---: |")
    for r, is_gemm in ROWS:
        if rows[r]:
            print("| %s | %s | %d | %.2f |" % (r, "yes" if is_gemm else "no", rows[r],
                                               100.0 * rows[r] / total))
    print("\n| leaf symbol | % |\n| --- | ---: |")
    for s, n in syms.most_common(a.top):
        print("| %s | %.2f |" % (s, 100.0 * n / total))
    if a.kernels and a.step_ms:
        with open(a.kernels, errors="replace") as f:
            rates, own = gemm_rates(f)
        ms, own_ms, flops = 0.0, 0.0, 0.0
        print("\n| GEMM shape | GFLOP per step | OpenBLAS GFLOP/s | ms | backend GFLOP/s | ms |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, gf in gemm_shapes():
            if name not in rates:
                print("step_profile: no OpenBLAS rate for %r in %s" % (name, a.kernels),
                      file=sys.stderr)
                return 1
            ms += 1e3 * gf / rates[name]
            own_ms += 1e3 * gf / own[name]
            flops += gf
            print("| %s | %.2f | %.1f | %.1f | %.1f | %.1f |"
                  % (name, gf, rates[name], 1e3 * gf / rates[name], own[name],
                     1e3 * gf / own[name]))
        print("\nmatmul %.1f GFLOP per step: %.1f ms at OpenBLAS's rates; the step %.1f ms of CPU:"
              " %.1f%% of its GEMMs' rate (goal >= 85%%); GEMMs inside the step %.1f ms"
              % (flops, ms, a.step_ms, 100.0 * ms / a.step_ms, a.step_ms * gemm / total))
        print("at the backend's rates (its own kernels where it runs them): %.1f ms, the step at"
              " %.1f%% of them" % (own_ms, 100.0 * own_ms / a.step_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
