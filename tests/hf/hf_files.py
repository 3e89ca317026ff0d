"""What the independent references (gpt2_reference.py, llama_reference.py) read, parsed here from
the formats' own descriptions, sharing no code with tptrain: a safetensors file (8-byte header
length, a JSON header, little-endian data) as float64 tensors, and the token windows `tptrain eval`
uses. The caller has imported numpy and torch (it exits 77, skipped, when they are absent)."""
import argparse
import json
import struct

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read_safetensors(path, prefix):
    """name -> float64 tensor; `prefix` (the base model's, "transformer." or "model.") is taken off
    the names that have it, as Hugging Face's own base-model files leave it out."""
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
        out[name[len(prefix):] if name.startswith(prefix) else name] = torch.from_numpy(
            array.astype(np.float64).reshape(entry["shape"]))
    return out


def reference_arguments(doc):
    """The references' command line, MODEL_DIR DATA --windows N [--seq-length S], and MODEL_DIR's
    config.json: (arguments, config, S), S the window's tokens (max_position_embeddings unless given;
    a YaRN config's is the scaled context, not the trained one)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("data")
    parser.add_argument("--windows", type=int, required=True)
    parser.add_argument("--seq-length", type=int, help="the window's tokens (default max_position_embeddings, "
                        "which a YaRN config sets to the scaled context)")
    args = parser.parse_args()
    with open(args.model_dir + "/config.json") as f:
        config = json.load(f)
    return args, config, args.seq_length or config["max_position_embeddings"]


def read_tokens(path):
    with open(path, "rb") as f:
        blob = f.read()
    if path.endswith(".bin"):  # llm.c: 256 int32 header (magic 20240520, version, count), then uint16
        header = np.frombuffer(blob[:1024], dtype="<i4")
        assert header[0] == 20240520, "not an llm.c token shard"
        return np.frombuffer(blob[1024:], dtype="<u2")[: header[2]].astype(np.int64)
    return np.frombuffer(blob, dtype=np.uint8).astype(np.int64)


def mean_window_loss(data, S, windows, window_loss):
    """The mean next-token loss over `windows` windows of S inputs: window j is tokens [j*S, j*S+S]
    of the data (each of its first S tokens predicts the next), as `tptrain eval` takes them.
    `window_loss(inputs, targets)` returns the window's summed cross-entropy."""
    total = 0.0
    with torch.no_grad():
        for j in range(windows):
            window = torch.from_numpy(data[j * S: j * S + S + 1].copy())
            assert window.shape[0] == S + 1, "the data holds fewer than %d windows" % windows
            total += window_loss(window[:-1], window[1:])
    return json.dumps({"loss": total / (windows * S), "windows": windows, "tokens": windows * S})
