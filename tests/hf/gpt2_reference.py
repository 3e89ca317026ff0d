#!/usr/bin/python3
"""An independent GPT-2 for `tptrain export --format hf` (docs/checkpoints.md).

Reads a Hugging Face GPT2LMHeadModel folder itself -- config.json and model.safetensors, whose
header is parsed with json, its tensors taken with numpy (hf_files.py) -- and computes, in float64 with
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
import sys

try:
    import numpy as np  # noqa: F401 (hf_files needs it)
    import torch
except ImportError as e:
    print("gpt2_reference.py: skipped: %s (Debian: python3-torch, which brings numpy)" % e, file=sys.stderr)
    sys.exit(77)

from hf_files import mean_window_loss, read_safetensors, read_tokens


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward_loss(w, config, tokens, targets):
    """Summed cross-entropy of one window: GPT-2 as Radford et al. 2019 and transformers' modeling_gpt2."""
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
    # lm_head: tied to wte, or (tie_word_embeddings = false) a tensor of its own.
    head = w["wte.weight"] if config.get("tie_word_embeddings", True) else w["lm_head.weight"]
    logits = ln(x, "ln_f") @ head.T
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
    # Hugging Face's own gpt2 names its tensors without the "transformer." prefix.
    w = read_safetensors(args.model_dir + "/model.safetensors", "transformer.")
    print(mean_window_loss(read_tokens(args.data), config["n_positions"], args.windows,
                           lambda tokens, targets: forward_loss(w, config, tokens, targets)))


if __name__ == "__main__":
    main()
