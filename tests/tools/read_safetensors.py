#!/usr/bin/env python3
"""An independent safetensors reader (Python standard library only: struct + json).

It shares no code with engine/io/safetensors.c, so a test that writes a file with the C writer
and reads it here checks the format, not our reading of our own writing.

    read_safetensors.py FILE|DIR            list the tensors (a DIR: its index or model.safetensors)
    read_safetensors.py --check-pattern DIR check DIR/single.safetensors and the sharded
                                            DIR/sharded/ written by `test_safetensors
                                            --write-fixture DIR` against the pattern, byte for
                                            byte, plus the layout rules of the format

Exit status 0 when everything holds, 1 with a message per problem otherwise.
"""

import json
import math
import os
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4,
         "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


class Problem(Exception):
    pass


def read_file(path):
    """(header dict without __metadata__, metadata dict, buffer bytes), after checking the layout
    rules: header length inside the file, 8 + N a multiple of 8 (as HF's writer pads), offsets
    matching shape * dtype, tensors back to back covering the whole buffer."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise Problem(f"{path}: {len(raw)} bytes")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise Problem(f"{path}: header length {n} past the end ({len(raw)} bytes)")
    text = raw[8 : 8 + n]
    if (8 + n) % 8 != 0:
        raise Problem(f"{path}: 8 + header length {n} is not a multiple of 8")
    if text.rstrip(b" ") != text.rstrip():
        raise Problem(f"{path}: header padding is not spaces")
    header = json.loads(text.decode("utf-8"))
    meta = header.pop("__metadata__", {})
    buf = raw[8 + n :]
    spans = []
    for name, e in header.items():
        numel = math.prod(e["shape"])
        b, end = e["data_offsets"]
        if end - b != numel * SIZES[e["dtype"]]:
            raise Problem(f"{path}: {name}: offsets {b},{end} vs shape {e['shape']} {e['dtype']}")
        spans.append((b, end, name))
    spans.sort()
    pos = 0
    for b, end, name in spans:
        if b != pos:
            raise Problem(f"{path}: {name} begins at {b}, previous tensor ends at {pos}")
        pos = end
    if pos != len(buf):
        raise Problem(f"{path}: tensors end at {pos}, buffer has {len(buf)} bytes")
    return header, meta, buf


def bf16(h):
    return struct.unpack("<f", struct.pack("<I", h << 16))[0]


def values(entry, buf):
    """The tensor's elements as Python numbers (floats decoded, integers as stored)."""
    b, end = entry["data_offsets"]
    data = buf[b:end]
    dt = entry["dtype"]
    n = math.prod(entry["shape"])
    fmt = {"F32": "f", "F64": "d", "F16": "e", "I64": "q", "I32": "i", "I16": "h", "I8": "b",
           "U8": "B", "U16": "H", "U32": "I", "U64": "Q", "BOOL": "?"}.get(dt)
    if dt == "BF16":
        return [bf16(h) for h in struct.unpack(f"<{n}H", data)]
    if fmt is None:  # F8: raw bytes
        return list(data)
    return list(struct.unpack(f"<{n}{fmt}", data))


# The pattern test_safetensors.c writes (pattern_float / pattern_byte / pattern_bool there).
def pattern_float(k, i):
    return ((i * 7 + k * 13) % 97 - 48) / 8.0


def pattern_bytes(k, nbytes, dtype):
    if dtype == "BOOL":
        return bytes((j + k) % 2 for j in range(nbytes))
    return bytes((j * 31 + k * 5) & 0xFF for j in range(nbytes))


EXPECTED = [  # name, dtype, shape: the fixture of test_safetensors.c, k = position
    ("t0_f32", "F32", [3, 5]), ("t1_f16", "F16", [2, 3, 4]), ("t2_bf16", "BF16", [17]),
    ("t3_f64", "F64", [4]), ("t4_i64", "I64", [3]), ("t5_i32", "I32", [2, 2]),
    ("t6_u8", "U8", [5]), ("t7_bool", "BOOL", [3]), ("t8_scalar", "F32", []),
    ("t9_empty", "F32", [0, 4]), ("t10_i8", "I8", [4]), ("t11_i16", "I16", [3]),
    ("t12_u16", "U16", [3]), ("t13_u32", "U32", [2]), ("t14_u64", "U64", [2]),
    ("t15_f8e4m3", "F8_E4M3", [4]), ("t16_f8e5m2", "F8_E5M2", [4]),
    ("t17_big_f16", "F16", [300, 111]),
]


def check_tensor(where, k, entry, buf, problems):
    name, dtype, shape = EXPECTED[k]
    if entry["dtype"] != dtype or entry["shape"] != shape:
        problems.append(f"{where}: {name}: {entry['dtype']} {entry['shape']}, want {dtype} {shape}")
        return
    if dtype in ("F32", "F16", "BF16", "F64"):
        got = values(entry, buf)
        for i, v in enumerate(got):
            if v != pattern_float(k, i):
                problems.append(f"{where}: {name}[{i}] = {v}, want {pattern_float(k, i)}")
                return
    else:
        b, end = entry["data_offsets"]
        if buf[b:end] != pattern_bytes(k, end - b, dtype):
            problems.append(f"{where}: {name}: bytes differ from the pattern")


def check_pattern(root):
    problems = []
    single = os.path.join(root, "single.safetensors")
    header, meta, buf = read_file(single)
    if meta != {"format": "pt", "written_by": "test_safetensors"}:
        problems.append(f"{single}: metadata {meta}")
    if list(header) != [e[0] for e in EXPECTED]:
        problems.append(f"{single}: tensors {list(header)}")
    for k, (name, _, _) in enumerate(EXPECTED):
        if name in header:
            check_tensor(single, k, header[name], buf, problems)

    sdir = os.path.join(root, "sharded")
    ipath = os.path.join(sdir, "model.safetensors.index.json")
    with open(ipath) as f:
        index = json.load(f)
    wm = index["weight_map"]
    if sorted(wm) != sorted(e[0] for e in EXPECTED):
        problems.append(f"{ipath}: weight_map keys {sorted(wm)}")
    files = sorted(set(wm.values()))
    nshards = len(files)
    want_files = [f"model-{i:05d}-of-{nshards:05d}.safetensors" for i in range(1, nshards + 1)]
    if files != want_files:
        problems.append(f"{ipath}: files {files}, want {want_files}")
    total = 0
    seen = {}
    for fname in files:
        path = os.path.join(sdir, fname)
        header, meta, buf = read_file(path)
        if meta != {"format": "pt"}:
            problems.append(f"{path}: metadata {meta}")
        for name, entry in header.items():
            if wm.get(name) != fname:
                problems.append(f"{path}: holds {name}, the index says {wm.get(name)}")
            seen[name] = fname
            k = [e[0] for e in EXPECTED].index(name)
            check_tensor(path, k, entry, buf, problems)
            total += entry["data_offsets"][1] - entry["data_offsets"][0]
    if set(seen) != set(wm):
        problems.append(f"{sdir}: tensors in no shard: {sorted(set(wm) - set(seen))}")
    if index["metadata"]["total_size"] != total:
        problems.append(f"{ipath}: total_size {index['metadata']['total_size']}, shards hold {total}")
    # shards follow tensor order: the declaration order never goes back to an earlier shard
    order = [wm[e[0]] for e in EXPECTED]
    if order != sorted(order):
        problems.append(f"{ipath}: shards out of tensor order: {order}")
    return problems, nshards


def list_tensors(path):
    if os.path.isdir(path):
        ipath = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(ipath):
            with open(ipath) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
            paths = [os.path.join(path, f) for f in files]
        else:
            paths = [os.path.join(path, "model.safetensors")]
    else:
        paths = [path]
    for p in paths:
        header, meta, buf = read_file(p)
        print(f"{p}: {len(header)} tensors, metadata {meta}")
        for name, e in header.items():
            v = values(e, buf)[:4]
            print(f"  {name} {e['dtype']} {e['shape']} {v}")


def main(argv):
    try:
        if len(argv) == 3 and argv[1] == "--check-pattern":
            problems, nshards = check_pattern(argv[2])
            for p in problems:
                print("FAIL", p)
            if problems:
                return 1
            print(f"read_safetensors: single file and {nshards} shards match the pattern")
            return 0
        if len(argv) == 2:
            list_tensors(argv[1])
            return 0
    except (Problem, OSError, ValueError, KeyError) as e:
        print("FAIL", e)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
