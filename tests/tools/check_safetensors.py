#!/usr/bin/env python3
"""Check zero_to_fp32's output with an independent reader (read_safetensors.py: Python standard
library only, no code shared with engine/io).

    check_safetensors.py DIR

DIR is what tests/multirank/test_ckpt_z2f.c leaves behind:
    ref.safetensors   ds_save_weights of the trained engine (the gathered fp32 parameters)
    z2f.safetensors   zero_to_fp32 into one file, fp32
    z2f_sharded/      zero_to_fp32 into a folder with a small --max-shard-size, fp32
    z2f_fp16/         one model.safetensors in fp16
    z2f_bf16/         shards in bf16
Checks: every file follows the format's layout rules (read_safetensors.read_file); the tensors
are the reference's, in its order, with its shapes; fp32 bytes are identical; fp16 and bf16 are
the round-to-nearest-even of the fp32 values; a sharded folder has files named
model-0000i-of-0000N.safetensors, an index whose weight_map names every tensor's file and whose
total_size is the sum of the tensor bytes, and shards in tensor order.
Exit 0 when everything holds, 1 with a line per problem.
"""

import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_safetensors as rs  # noqa: E402


def bf16_bits(f32_bits):
    """Round-to-nearest-even of an fp32 bit pattern to bf16 (NaN kept a quiet NaN)."""
    if (f32_bits & 0x7F800000) == 0x7F800000 and (f32_bits & 0x007FFFFF):
        return (f32_bits >> 16) | 0x40
    lsb = (f32_bits >> 16) & 1
    return ((f32_bits + 0x7FFF + lsb) >> 16) & 0xFFFF


def expected_bytes(ref_entry, ref_buf, dtype):
    b, e = ref_entry["data_offsets"]
    raw = ref_buf[b:e]
    if dtype == "F32":
        return raw
    n = len(raw) // 4
    words = struct.unpack(f"<{n}I", raw)
    if dtype == "BF16":
        return struct.pack(f"<{n}H", *(bf16_bits(w) for w in words))
    floats = struct.unpack(f"<{n}f", raw)
    return struct.pack(f"<{n}e", *floats)  # Python packs half floats rounding to nearest even


def check_tensors(where, header, buf, ref_header, ref_buf, names, dtype, problems):
    for name in header:
        entry = header[name]
        if name not in ref_header:
            problems.append(f"{where}: tensor {name} is not in the reference")
            continue
        if entry["dtype"] != dtype or entry["shape"] != ref_header[name]["shape"]:
            problems.append(f"{where}: {name}: {entry['dtype']} {entry['shape']}, want {dtype} "
                            f"{ref_header[name]['shape']}")
            continue
        b, e = entry["data_offsets"]
        if buf[b:e] != expected_bytes(ref_header[name], ref_buf, dtype):
            problems.append(f"{where}: {name}: bytes differ from the reference's {dtype} values")
        names.append(name)


def check_file(path, ref_header, ref_buf, dtype, problems):
    header, meta, buf = rs.read_file(path)
    if meta.get("format") != "pt":
        problems.append(f"{path}: __metadata__ {meta} lacks format pt")
    names = []
    check_tensors(path, header, buf, ref_header, ref_buf, names, dtype, problems)
    if names != list(ref_header):
        problems.append(f"{path}: tensors {names[:3]}... differ from the reference's order")


def check_folder(folder, ref_header, ref_buf, dtype, problems):
    ipath = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(ipath):
        check_file(os.path.join(folder, "model.safetensors"), ref_header, ref_buf, dtype, problems)
        return 1
    with open(ipath) as f:
        index = json.load(f)
    wm = index["weight_map"]
    files = sorted(set(wm.values()))
    n = len(files)
    want = [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    if files != want:
        problems.append(f"{ipath}: files {files}, want {want}")
    if set(wm) != set(ref_header):
        problems.append(f"{ipath}: weight_map names differ from the reference's tensors")
    names, total = [], 0
    for fname in files:
        path = os.path.join(folder, fname)
        header, meta, buf = rs.read_file(path)
        for name, entry in header.items():
            if wm.get(name) != fname:
                problems.append(f"{path}: holds {name}, the index says {wm.get(name)}")
            total += entry["data_offsets"][1] - entry["data_offsets"][0]
        check_tensors(path, header, buf, ref_header, ref_buf, names, dtype, problems)
    if names != list(ref_header):
        problems.append(f"{folder}: tensors across the shards are not the reference's, in order")
    if index["metadata"]["total_size"] != total:
        problems.append(f"{ipath}: total_size {index['metadata']['total_size']}, shards hold {total}")
    return n


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    problems = []
    try:
        ref_header, _, ref_buf = rs.read_file(os.path.join(root, "ref.safetensors"))
        check_file(os.path.join(root, "z2f.safetensors"), ref_header, ref_buf, "F32", problems)
        ns = check_folder(os.path.join(root, "z2f_sharded"), ref_header, ref_buf, "F32", problems)
        check_folder(os.path.join(root, "z2f_fp16"), ref_header, ref_buf, "F16", problems)
        nb = check_folder(os.path.join(root, "z2f_bf16"), ref_header, ref_buf, "BF16", problems)
    except (rs.Problem, OSError, ValueError, KeyError) as e:
        problems.append(str(e))
    for p in problems:
        print("FAIL", p)
    if problems:
        return 1
    print(f"check_safetensors: {len(ref_header)} tensors equal the reference in one fp32 file, "
          f"{ns} fp32 shards, fp16 and {nb} bf16 shards")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
