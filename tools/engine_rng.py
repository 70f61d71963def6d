"""The engine's dropout masks in numpy, for diagnostics that make PyTorch drop
exactly what the engine drops (tools/pytorch_cls_reference.py --engine-dropout).

What is reproduced, from the C sources named:
  * engine/backend/math.h: element j of the uniform stream of `seed` is word
    j % 4 of Philox4x32-10 with counter (lo32(j / 4), hi32(j / 4), 0, 0) and
    key (lo32(seed), hi32(seed)); its top 24 bits times 2^-24 are u in [0, 1).
  * engine/backend/nn_math.h: an element is kept when u >= p, then scaled by
    1 / (1 - p).
  * engine/engine_step.c: micro-batch m (counted from 0 over the whole run)
    draws from fwd = mix64(seed ^ mix64(m + 0x5151)); module i on rank r from
    mix64(fwd ^ mix64((i << 20) ^ r)).
The sites of each BERT module and their offsets are in models/ (see
bert_sites in pytorch_cls_reference.py). Needs numpy only.
"""
import numpy as np

M64 = 2**64 - 1
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LO = np.uint64(0xFFFFFFFF)


def mix64(x):
    """splitmix64's finaliser after its increment, as engine_step.c's mix64."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def module_seed(seed, micro_step, module, rank):
    fwd = mix64(seed ^ mix64(micro_step + 0x5151))
    return mix64(fwd ^ mix64(((module << 20) & M64) ^ rank))


def philox_words(seed, blocks):
    """The 4 words of each counter block in `blocks` (uint64 array) for
    `seed`, tag 0: an array [len(blocks), 4] of uint32."""
    c0 = blocks & _LO
    c1 = blocks >> np.uint64(32)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0, k1 = seed & 0xFFFFFFFF, seed >> 32
    for r in range(10):
        if r:
            k0 = (k0 + _W0) & 0xFFFFFFFF
            k1 = (k1 + _W1) & 0xFFFFFFFF
        p0 = _M0 * c0
        p1 = _M1 * c2
        n0 = (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0)
        n2 = (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1)
        c0, c1, c2, c3 = n0, p1 & _LO, n2, p0 & _LO
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


def keep_mask(seed, offset, n, p):
    """The multipliers (0 or 1 / (1 - p)) of elements offset .. offset + n - 1
    of the dropout stream `seed`, as float32."""
    first, last = offset // 4, (offset + n - 1) // 4
    words = philox_words(seed, np.arange(first, last + 1, dtype=np.uint64)).reshape(-1)
    words = words[offset - 4 * first: offset - 4 * first + n]
    u = (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    p32 = np.float32(p)  # the engine keeps p and 1 / (1 - p) in float
    inv_keep = np.float32(1.0) / (np.float32(1.0) - p32)
    return np.where(u >= p32, inv_keep, np.float32(0.0)).astype(np.float32)
