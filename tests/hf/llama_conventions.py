#!/usr/bin/python3
"""llama_conventions.py: the rotate-half convention of llama_reference.py (Hugging Face's) is
Meta's original Llama after HF's q/k row permutation. A random small model (grouped-query
attention) is evaluated by llama_reference.forward_loss with HF-ordered weights, and by Meta's
formulation -- adjacent feature pairs rotated as complex numbers, q and k rows in Meta's order
(the inverse of transformers' convert_llama_weights_to_hf permute), kv heads repeat_interleave'd
-- written here independently: the two losses must agree to 1e-9 (float64). This is what
docs/checkpoints.md states: HF's q_proj/k_proj are used as they are, and Meta checkpoints need
HF's permutation. Exit status 77 without PyTorch (ctest SKIP_RETURN_CODE)."""
import math
import sys

try:
    import torch
except ImportError as e:
    print("llama_conventions.py: skipped: %s (Debian: python3-torch)" % e, file=sys.stderr)
    sys.exit(77)

import llama_reference as reference

torch.manual_seed(0)
H, nh, nkv, F, L, V, T = 32, 4, 2, 48, 2, 50, 12
d = H // nh
config = dict(hidden_size=H, num_attention_heads=nh, num_key_value_heads=nkv, rms_norm_eps=1e-6,
              rope_theta=500000.0, num_hidden_layers=L, tie_word_embeddings=False)


def randn(*shape, scale=0.3, offset=0.0):
    return offset + scale * torch.randn(*shape, dtype=torch.float64)


w = {"embed_tokens.weight": randn(V, H, scale=1.0), "norm.weight": randn(H, scale=0.1, offset=1.0),
     "lm_head.weight": randn(V, H)}
for layer in range(L):
    p = "layers.%d." % layer
    w[p + "input_layernorm.weight"] = randn(H, scale=0.1, offset=1.0)
    w[p + "post_attention_layernorm.weight"] = randn(H, scale=0.1, offset=1.0)
    w[p + "self_attn.q_proj.weight"] = randn(nh * d, H)
    w[p + "self_attn.k_proj.weight"] = randn(nkv * d, H)
    w[p + "self_attn.v_proj.weight"] = randn(nkv * d, H)
    w[p + "self_attn.o_proj.weight"] = randn(H, nh * d)
    w[p + "mlp.gate_proj.weight"] = randn(F, H)
    w[p + "mlp.up_proj.weight"] = randn(F, H)
    w[p + "mlp.down_proj.weight"] = randn(H, F)
tokens, targets = torch.randint(0, V, (T,)), torch.randint(0, V, (T,))


def meta_order(x, heads):
    """HF's q/k row order -> Meta's: convert_llama_weights_to_hf's permute,
    view(heads, d/2, 2, H).transpose(1, 2), undone."""
    return x.view(heads, 2, d // 2, H).transpose(1, 2).reshape(heads * d, H)


def meta_loss():
    inv_freq = 1.0 / (config["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    cis = torch.polar(torch.ones_like(angles), angles)  # [T, d/2]

    def rope(x):  # [T, heads, d]: features 2i, 2i+1 are one complex number
        xc = torch.view_as_complex(x.reshape(T, x.shape[1], d // 2, 2).contiguous())
        return torch.view_as_real(xc * cis[:, None, :]).reshape(T, x.shape[1], d)

    def rms(x, g):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + config["rms_norm_eps"]) * g

    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    x = w["embed_tokens.weight"][tokens]
    for layer in range(L):
        p = "layers.%d." % layer
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope((h @ meta_order(w[p + "self_attn.q_proj.weight"], nh).T).view(T, nh, d))
        k = rope((h @ meta_order(w[p + "self_attn.k_proj.weight"], nkv).T).view(T, nkv, d))
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, nkv, d)
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d) + mask
        y = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(T, H)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    logits = rms(x, w["norm.weight"]) @ w["lm_head.weight"].T
    return torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()


with torch.no_grad():
    hf, meta = reference.forward_loss(w, config, tokens, targets), meta_loss()
    # The permutation matters: without it Meta's pairing gives another model.
    unpermuted = dict(w)
    for layer in range(L):
        for name, heads in (("q_proj", nh), ("k_proj", nkv)):
            key = "layers.%d.self_attn.%s.weight" % (layer, name)
            unpermuted[key] = meta_order(w[key], heads)
    wrong = reference.forward_loss(unpermuted, config, tokens, targets)
print("rotate-half (HF order) %.12f, Meta's adjacent pairs (Meta order) %.12f; Meta order read as HF's %.6f"
      % (hf, meta, wrong))
if abs(hf - meta) > 1e-9 or abs(hf - wrong) < 1e-3:
    sys.exit("llama_reference.py's RoPE is not Hugging Face's rotate-half convention")
