#!/usr/bin/python3
"""An independent Mixtral for `tptrain export --format hf` of a mixtral model (docs/checkpoints.md).

Reads a Hugging Face MixtralForCausalLM folder itself -- config.json and model.safetensors
(hf_files.py) -- and computes, in float64 with PyTorch, the mean next-token loss over the
evaluation windows `tptrain eval` uses (window j: tokens [j*S, j*S+S], S = max_position_embeddings).
The model is written from transformers' modeling_mixtral, not from tptrain: Llama's attention
(RMSNorm x * rsqrt(mean(x^2) + eps) * weight, rotary embeddings in the rotate-half convention --
dimension i of a head pairs with i + d/2 --, grouped-query attention by repeat_kv, no biases) and,
as each block's MLP, MixtralSparseMoeBlock: router logits gate(x) over the E = num_local_experts
experts, their softmax, the top k = num_experts_per_tok probabilities renormalised to sum to 1, and
the sum of those experts' w2(silu(w1 x) * w3 x) weighted by them (each expert a
MixtralBlockSparseTop2MLP, tokens gathered per expert and added back with index_add_, as HF does);
untied lm_head (or the embedding when tie_word_embeddings). An export whose expert numbering,
w1|w3 split, router rows or renormalisation were wrong would give another loss.

    mixtral_reference.py MODEL_DIR DATA (.txt: byte b is token b; .bin: llm.c shard) --windows N
Prints one JSON line {"loss": ..., "windows": N, "tokens": N*S, "top_k_margin": m}: m is the
smallest gap, over every token and block, between the k-th and the (k+1)-th router probability;
a gap near fp32's rounding (1e-7) would let tptrain's fp32 router choose another expert than this
float64 one, a difference that is not an error of the export. Exit status 77 when PyTorch is not
installed (ctest SKIP_RETURN_CODE).
"""
import argparse
import json
import math
import sys

try:
    import numpy as np  # noqa: F401 (hf_files needs it)
    import torch
except ImportError as e:
    print("mixtral_reference.py: skipped: %s (Debian: python3-torch, which brings numpy)" % e, file=sys.stderr)
    sys.exit(77)

from hf_files import mean_window_loss, read_safetensors, read_tokens


def rms_norm(x, weight, eps):  # MixtralRMSNorm (LlamaRMSNorm's)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half(x):  # (x1, x2) -> (-x2, x1), halves of the head dimension
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary_cos_sin(T, d, theta):  # MixtralRotaryEmbedding: angle p * theta^(-2i/d), unscaled
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, d/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [T, d]
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):  # [nkv, T, d] -> [nkv * n_rep, T, d], each kv head repeated n_rep times in place
    nkv, T, d = x.shape
    return x[:, None, :, :].expand(nkv, n_rep, T, d).reshape(nkv * n_rep, T, d)


class Margins:
    """The smallest gap between the k-th and the (k+1)-th routing probability seen."""

    def __init__(self):
        self.smallest = math.inf

    def see(self, probabilities, k):
        if probabilities.shape[-1] > k:
            top = torch.topk(probabilities, k + 1, dim=-1).values
            self.smallest = min(self.smallest, (top[:, k - 1] - top[:, k]).min().item())


def sparse_moe(h, w, p, E, k, margins):
    """MixtralSparseMoeBlock.forward on h [T, H], block prefix p ("layers.0.")."""
    router_logits = h @ w[p + "block_sparse_moe.gate.weight"].T  # [T, E]
    routing_weights = torch.softmax(router_logits, dim=1)
    margins.see(routing_weights, k)
    routing_weights, selected_experts = torch.topk(routing_weights, k, dim=-1)  # [T, k]
    routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    final = torch.zeros_like(h)
    expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=E).permute(2, 1, 0)  # [E, k, T]
    for e in range(E):
        idx, top_x = torch.where(expert_mask[e])  # which of its k choices, which token
        if top_x.numel() == 0:
            continue
        x = h[top_x]
        q = p + "block_sparse_moe.experts.%d." % e
        gate, up = x @ w[q + "w1.weight"].T, x @ w[q + "w3.weight"].T
        out = (torch.nn.functional.silu(gate) * up) @ w[q + "w2.weight"].T  # MixtralBlockSparseTop2MLP
        final.index_add_(0, top_x, out * routing_weights[top_x, idx, None])
    return final


def forward_loss(w, config, tokens, targets, margins):
    """Summed cross-entropy of one window."""
    T = tokens.shape[0]
    H, nh = config["hidden_size"], config["num_attention_heads"]
    nkv = config["num_key_value_heads"] if "num_key_value_heads" in config else 8  # MixtralConfig's default
    nkv = nkv or nh  # null: multi-head attention
    d = config.get("head_dim") or H // nh
    eps = config.get("rms_norm_eps", 1e-5)
    E, k = config["num_local_experts"], config["num_experts_per_tok"]
    cos, sin = rotary_cos_sin(T, d, config.get("rope_theta", 1e6))

    def linear(x, name):  # nn.Linear without bias: weight [out, in]
        return x @ w[name + ".weight"].T

    x = w["embed_tokens.weight"][tokens]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for layer in range(config["num_hidden_layers"]):
        p = "layers.%d." % layer
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(h, p + "self_attn.q_proj").view(T, nh, d).transpose(0, 1)
        k_ = linear(h, p + "self_attn.k_proj").view(T, nkv, d).transpose(0, 1)
        v = linear(h, p + "self_attn.v_proj").view(T, nkv, d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin  # apply_rotary_pos_emb
        k_ = k_ * cos + rotate_half(k_) * sin
        k_, v = repeat_kv(k_, nh // nkv), repeat_kv(v, nh // nkv)
        scores = (q @ k_.transpose(1, 2)) / math.sqrt(d)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, nh * d)
        x = x + linear(y, p + "self_attn.o_proj")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + sparse_moe(h, w, p, E, k, margins)
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
    assert config["model_type"] == "mixtral" and config.get("hidden_act", "silu") == "silu"
    assert config.get("rope_scaling") is None, "rope_scaling is not modelled here"
    window = config.get("sliding_window")
    assert window is None or window >= config["max_position_embeddings"], "a sliding window is not modelled here"
    assert 1 <= config["num_experts_per_tok"] <= config["num_local_experts"]
    # MixtralForCausalLM's base-model keys carry "model."; lm_head's does not.
    w = read_safetensors(args.model_dir + "/model.safetensors", "model.")
    margins = Margins()
    result = json.loads(mean_window_loss(read_tokens(args.data), config["max_position_embeddings"], args.windows,
                                         lambda tokens, targets: forward_loss(w, config, tokens, targets, margins)))
    result["top_k_margin"] = margins.smallest
    print(json.dumps(result))


if __name__ == "__main__":
    main()
