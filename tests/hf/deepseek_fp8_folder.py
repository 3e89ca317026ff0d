#!/usr/bin/python3
"""deepseek_fp8_folder.py SRC FP8_DIR F32_DIR [--drop-scale NAME]: a DeepseekV3ForCausalLM export
(SRC: config.json + model.safetensors, float32) rewritten the way DeepSeek publishes DeepSeek-V3,
and the float32 folder that holds exactly what it stores.

FP8_DIR: shards (model-0000k-of-00003.safetensors) named by model.safetensors.index.json; every
linear weight of the blocks (the *_proj weights, the router's gate excepted) F8_E4M3 with its
"<name>_scale_inv" F32, one scale per 128 x 128 block (amax / 448), beside it in its shard; the
other tensors BF16 (e_score_correction_bias F32); a multi-token prediction module as
model.layers.<num_hidden_layers>.* (num_nextn_predict_layers 1); config.json with DeepSeek's
quantization_config, rope_scaling's older "type" and no rope_interleave (true by default: the
rotary rows in adjacent-pair order, as the export writes them).
F32_DIR: one model.safetensors of float32: each F8_E4M3 weight as fp8 value x its block scale (the
float32 product, rounded once), each BF16 one widened; its rotary rows in rotate-half order with
rope_interleave false; no prediction module. Importing the two must give the same checkpoint bit
for bit. --drop-scale NAME leaves NAME's scales out of FP8_DIR (import must refuse, naming NAME).

E4M3 and bfloat16 are encoded here with numpy from the formats' definitions (PyTorch 1.13 has no
float8), not with tptrain's writer."""
import argparse
import json
import os
import re
import shutil
import struct

import numpy as np

BLOCK = 128
QUANTISED = re.compile(r"model\.layers\.\d+\.(self_attn|mlp)\..*_proj(_with_mqa)?\.weight$")


def e4m3_values():
    """float32 value of each E4M3FN byte 0x00..0x7E (the non-negative finite ones), in byte order:
    exponent e (bias 7), mantissa m: 2^(e-7) (1 + m/8), or 2^-6 (m/8) for e = 0."""
    out = []
    for b in range(0x7F):
        e, m = b >> 3, b & 7
        out.append(2.0 ** -6 * (m / 8) if e == 0 else 2.0 ** (e - 7) * (1 + m / 8))
    return np.array(out, dtype=np.float32)  # increasing with the byte


E4M3 = e4m3_values()


def to_e4m3(x):
    """Bytes of the E4M3 values nearest to x (|x| <= 448), and those values as float32."""
    a = np.abs(x)
    hi = np.clip(np.searchsorted(E4M3, a), 1, len(E4M3) - 1)
    byte = np.where(a - E4M3[hi - 1] <= E4M3[hi] - a, hi - 1, hi).astype(np.uint8)
    value = np.where(x < 0, -E4M3[byte], E4M3[byte]).astype(np.float32)
    return (byte | np.where(x < 0, 0x80, 0).astype(np.uint8)).astype(np.uint8), value


def quantise(w):
    """(fp8 bytes, scale_inv [ceil(r/128), ceil(c/128)] float32, dequantised float32) of a 2-D weight."""
    rows, cols = w.shape
    scales = np.ones(((rows + BLOCK - 1) // BLOCK, (cols + BLOCK - 1) // BLOCK), dtype=np.float32)
    q = np.zeros(w.shape, dtype=np.uint8)
    deq = np.zeros(w.shape, dtype=np.float32)
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            block = (slice(i * BLOCK, (i + 1) * BLOCK), slice(j * BLOCK, (j + 1) * BLOCK))
            amax = np.abs(w[block]).max()
            scale = np.float32(amax / 448.0) if amax > 0 else np.float32(1.0)
            scales[i, j] = scale
            q[block], value = to_e4m3(np.clip(w[block] / scale, -448, 448))
            deq[block] = value * scale  # float32 x float32, rounded once
    return q, scales, deq


def bf16(w):
    """(bfloat16 bytes, the values as float32): the float32's upper 16 bits."""
    upper = (np.ascontiguousarray(w, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return upper, (upper.astype(np.uint32) << 16).view(np.float32).reshape(w.shape)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            b, e = t["data_offsets"]
            out[name] = np.frombuffer(blob[8 + n + b:8 + n + e], dtype="<f4").reshape(t["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype name, shape, bytes)."""
    header, body = {}, bytearray()
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(body), len(body) + len(payload)]}
        body += payload
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(body))


def rotate_half_order(w, period, offset, width):
    """Rows in adjacent-pair rotary order -> rotate-half order: in every `period` rows, the `width`
    from `offset` on go from (x0, x1, x2, x3, ...) to (x0, x2, ..., x1, x3, ...)."""
    w = w.copy()
    for start in range(0, w.shape[0], period):
        part = w[start + offset:start + offset + width].copy()
        w[start + offset:start + offset + width] = np.concatenate((part[0::2], part[1::2]))
    return w


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("fp8_dir")
    parser.add_argument("f32_dir")
    parser.add_argument("--drop-scale", default="")
    args = parser.parse_args()
    with open(os.path.join(args.src, "config.json")) as f:
        config = json.load(f)
    weights = read_safetensors(os.path.join(args.src, "model.safetensors"))
    L, H = config["num_hidden_layers"], config["hidden_size"]
    d_r, d_q = config["qk_rope_head_dim"], config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    latent = config["kv_lora_rank"] + d_r
    rng = np.random.default_rng(0)
    # DeepSeek-V3's prediction module: its own embedding, norms, projection and block, all skipped.
    mtp = "model.layers.%d." % L
    extra = {mtp + "enorm.weight": np.ones(H, dtype=np.float32),
             mtp + "eh_proj.weight": rng.standard_normal((H, 2 * H)).astype(np.float32) * 0.02,
             mtp + "self_attn.kv_a_proj_with_mqa.weight": rng.standard_normal((latent, H)).astype(np.float32) * 0.02,
             mtp + "shared_head.head.weight": rng.standard_normal(weights["lm_head.weight"].shape).astype(np.float32)}

    shards, stored = [{}, {}, {}], {}
    for name, w in list(weights.items()) + list(extra.items()):
        m = re.match(r"model\.layers\.(\d+)\.", name)
        shard = shards[0 if m is None else 1 + int(m.group(1)) % 2]  # a block's tensors together
        if QUANTISED.search(name) and w.ndim == 2:
            q, scales, deq = quantise(w)
            shard[name] = ("F8_E4M3", w.shape, q.tobytes())
            if name != args.drop_scale:
                shard[name + "_scale_inv"] = ("F32", scales.shape, scales.astype("<f4").tobytes())
            stored[name] = deq
        elif name.endswith("e_score_correction_bias"):
            shard[name] = ("F32", w.shape, w.astype("<f4").tobytes())
            stored[name] = w
        else:
            upper, value = bf16(w)
            shard[name] = ("BF16", w.shape, upper.astype("<u2").tobytes())
            stored[name] = value

    for d in (args.fp8_dir, args.f32_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    weight_map = {}
    for k, shard in enumerate(shards):
        file = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards))
        write_safetensors(os.path.join(args.fp8_dir, file), shard)
        weight_map.update({name: file for name in shard})
    total = sum(len(payload) for shard in shards for (_, _, payload) in shard.values())
    with open(os.path.join(args.fp8_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    published = dict(config, num_nextn_predict_layers=1, torch_dtype="bfloat16",
                     quantization_config={"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                          "weight_block_size": [BLOCK, BLOCK]})
    del published["rope_interleave"]
    if published.get("rope_scaling"):
        published["rope_scaling"] = dict(published["rope_scaling"])
        published["rope_scaling"]["type"] = published["rope_scaling"].pop("rope_type")
    with open(os.path.join(args.fp8_dir, "config.json"), "w") as f:
        json.dump(published, f, indent=2)

    original = {}
    for name, w in stored.items():
        if name.startswith(mtp):
            continue
        if name.endswith("self_attn.q_b_proj.weight") or name.endswith("self_attn.q_proj.weight"):
            w = rotate_half_order(w, d_q, d_q - d_r, d_r)
        elif name.endswith("self_attn.kv_a_proj_with_mqa.weight"):
            w = rotate_half_order(w, latent, latent - d_r, d_r)
        original[name] = ("F32", w.shape, np.ascontiguousarray(w, dtype="<f4").tobytes())
    write_safetensors(os.path.join(args.f32_dir, "model.safetensors"), original)
    with open(os.path.join(args.f32_dir, "config.json"), "w") as f:
        json.dump(dict(config, rope_interleave=False), f, indent=2)
    print("%s: %d tensors in %d shards (%d F8_E4M3); %s: float32, rotate-half order"
          % (args.fp8_dir, len(weight_map), len(shards), sum(1 for name in weight_map if QUANTISED.search(name)),
             args.f32_dir))


if __name__ == "__main__":
    main()
