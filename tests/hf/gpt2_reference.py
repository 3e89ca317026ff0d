#!/usr/bin/python3
"""An independent GPT-2 for `tptrain export --format hf` (docs/checkpoints.md).

Reads a Hugging Face GPT2LMHeadModel folder itself -- config.json and model.safetensors, whose
header is parsed here with json, its tensors taken with numpy -- and computes, in float64 with
PyTorch, the mean next-token loss over the evaluation windows `tptrain eval` uses: window j is
tokens [j*S, j*S+S] of the data file (S inputs, each predicting the next token). It shares no
code with tptrain, so an export whose names, orientation or q|k|v order were wrong would give
another loss.

    gpt2_reference.py MODEL_DIR DATA (.txt: byte b is token b; .bin: llm.c shard) --windows N
Prints one JSON line {"loss": ..., "windows": N, "tokens": N*S}. Exit status 77 when PyTorch is
not installed (ctest SKIP_RETURN_CODE).
"""
import argparse
import json
import math
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print("gpt2_reference.py: skipped: %s (Debian: python3-torch, which brings numpy)" % e, file=sys.stderr)
    sys.exit(77)

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read_safetensors(path):
    """name -> float64 tensor, from the format's own description (8-byte length, JSON, data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        if entry["dtype"] == "BF16":  # numpy has no bfloat16: its 16 bits are a float32's upper half
            raw = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
            array = raw.view(np.float32)
        else:
            array = np.frombuffer(data[begin:end], dtype=np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<"))
        out[name] = torch.from_numpy(array.astype(np.float64).reshape(entry["shape"]))
    # Hugging Face's own gpt2 names its tensors without the "transformer." prefix.
    return {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in out.items()}


def read_tokens(path):
    with open(path, "rb") as f:
        blob = f.read()
    if path.endswith(".bin"):  # llm.c: 256 int32 header (magic 20240520, version, count), then uint16
        header = np.frombuffer(blob[:1024], dtype="<i4")
        assert header[0] == 20240520, "not an llm.c token shard"
        return np.frombuffer(blob[1024:], dtype="<u2")[: header[2]].astype(np.int64)
    return np.frombuffer(blob, dtype=np.uint8).astype(np.int64)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward_loss(w, config, tokens, targets):
    """Mean cross-entropy of one window: GPT-2 as Radford et al. 2019 and transformers' modeling_gpt2."""
    T = tokens.shape[0]
    H, nh = config["n_embd"], config["n_head"]
    d = H // nh
    eps = config["layer_norm_epsilon"]

    def ln(x, name):
        return torch.nn.functional.layer_norm(x, (H,), w[name + ".weight"], w[name + ".bias"], eps)

    def conv1d(x, name):  # Conv1D: weight [in, out]
        return x @ w[name + ".weight"] + w[name + ".bias"]

    x = w["wte.weight"][tokens] + w["wpe.weight"][:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for layer in range(config["n_layer"]):
        p = "h.%d." % layer
        qkv = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (t.view(T, nh, d).transpose(0, 1) for t in qkv.split(H, dim=1))
        scores = (q @ k.transpose(1, 2)) / math.sqrt(d)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, H)
        x = x + conv1d(y, p + "attn.c_proj")
        x = x + conv1d(gelu_tanh(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    logits = ln(x, "ln_f") @ w["wte.weight"].T  # lm_head tied to wte
    return torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("data")
    parser.add_argument("--windows", type=int, required=True)
    args = parser.parse_args()
    with open(args.model_dir + "/config.json") as f:
        config = json.load(f)
    assert config["model_type"] == "gpt2" and config["activation_function"] in ("gelu_new", "gelu_pytorch_tanh")
    assert config.get("tie_word_embeddings", True)
    w = read_safetensors(args.model_dir + "/model.safetensors")
    data = read_tokens(args.data)
    S = config["n_positions"]
    total = 0.0
    with torch.no_grad():
        for j in range(args.windows):
            window = torch.from_numpy(data[j * S: j * S + S + 1].copy())
            assert window.shape[0] == S + 1, "the data holds fewer than %d windows" % args.windows
            total += forward_loss(w, config, window[:-1], window[1:])
    print(json.dumps({"loss": total / (args.windows * S), "windows": args.windows, "tokens": args.windows * S}))


if __name__ == "__main__":
    main()
