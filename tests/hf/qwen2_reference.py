#!/usr/bin/python3
"""An independent Qwen2 for `tptrain export --format hf` of a qwen2 model (docs/checkpoints.md).

Reads a Hugging Face Qwen2ForCausalLM folder itself -- config.json and model.safetensors
(hf_files.py) -- and computes, in float64 with PyTorch, the mean next-token loss over the
evaluation windows `tptrain eval` uses (window j: tokens [j*S, j*S+S], S = max_position_embeddings).
The model is written from transformers' modeling_qwen2, not from tptrain: Qwen2RMSNorm, rotary
embeddings in the rotate-half convention (Qwen2RotaryEmbedding, apply_rotary_pos_emb: dimension
i of a head pairs with i + d/2, base rope_theta), grouped-query attention by repeat_kv,
Qwen2Attention's q_proj, k_proj and v_proj WITH biases and o_proj without, Qwen2MLP's
down(silu(gate(x)) * up(x)) without biases, untied lm_head (or the embedding when
tie_word_embeddings), no sliding window. An export whose q/k/v biases were missing, misplaced
between q, k and v, or split over the wrong heads would give another loss.

    qwen2_reference.py MODEL_DIR DATA (.txt: byte b is token b; .bin: llm.c shard) --windows N
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
    print("qwen2_reference.py: skipped: %s (Debian: python3-torch, which brings numpy)" % e, file=sys.stderr)
    sys.exit(77)

from hf_files import mean_window_loss, read_safetensors, read_tokens


def rms_norm(x, weight, eps):  # Qwen2RMSNorm
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):  # modeling_qwen2.rotate_half
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward_loss(w, config, tokens, targets):
    """Summed cross-entropy of one window."""
    T = tokens.shape[0]
    H, nh = config["hidden_size"], config["num_attention_heads"]
    nkv = config.get("num_key_value_heads") or nh
    d = H // nh
    eps = config["rms_norm_eps"]
    # Qwen2RotaryEmbedding without scaling: angle p * theta^(-2i/d), duplicated over both halves.
    inv_freq = 1.0 / (config.get("rope_theta", 1000000.0) ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()

    def proj(x, name, bias):  # nn.Linear(bias=bias): weight [out, in]
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    x = w["embed_tokens.weight"][tokens]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for layer in range(config["num_hidden_layers"]):
        p = "layers.%d." % layer
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = proj(h, p + "self_attn.q_proj", True).view(T, nh, d).transpose(0, 1)
        k = proj(h, p + "self_attn.k_proj", True).view(T, nkv, d).transpose(0, 1)
        v = proj(h, p + "self_attn.v_proj", True).view(T, nkv, d).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=0)  # repeat_kv: kv head j serves q heads j*g ... j*g+g-1
        v = v.repeat_interleave(nh // nkv, dim=0)
        probs = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d) + mask, dim=-1)
        x = x + proj((probs @ v).transpose(0, 1).reshape(T, nh * d), p + "self_attn.o_proj", False)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = proj(h, p + "mlp.gate_proj", False), proj(h, p + "mlp.up_proj", False)
        x = x + proj(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj", False)
    head = w["embed_tokens.weight"] if config.get("tie_word_embeddings", False) else w["lm_head.weight"]
    logits = rms_norm(x, w["norm.weight"], eps) @ head.T
    return torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("data")
    parser.add_argument("--windows", type=int, required=True)
    args = parser.parse_args()
    with open(args.model_dir + "/config.json") as f:
        config = json.load(f)
    assert config["model_type"] == "qwen2" and config.get("hidden_act", "silu") == "silu"
    assert config.get("architectures") == ["Qwen2ForCausalLM"], config.get("architectures")
    assert not config.get("use_sliding_window", False), "sliding-window attention is not modelled here"
    assert config.get("rope_scaling") is None, "rope_scaling is not modelled here"
    # Qwen2ForCausalLM's base-model keys carry "model."; lm_head's does not.
    w = read_safetensors(args.model_dir + "/model.safetensors", "model.")
    print(mean_window_loss(read_tokens(args.data), config["max_position_embeddings"], args.windows,
                           lambda tokens, targets: forward_loss(w, config, tokens, targets)))


if __name__ == "__main__":
    main()
