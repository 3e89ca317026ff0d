#!/usr/bin/python3
"""An independent Llama for `tptrain export --format hf` of a llama model (docs/checkpoints.md).

Reads a Hugging Face LlamaForCausalLM folder itself -- config.json and model.safetensors
(hf_files.py) -- and computes, in float64 with PyTorch, the mean next-token loss over the
evaluation windows `tptrain eval` uses (window j: tokens [j*S, j*S+S], S = max_position_embeddings).
The model is written from transformers' modeling_llama, not from tptrain: RMSNorm
(x * rsqrt(mean(x^2) + eps) * weight), rotary embeddings in the rotate-half convention of
LlamaRotaryEmbedding and apply_rotary_pos_emb (dimension i of a head pairs with i + d/2),
rope_scaling of type llama3 (_compute_llama3_parameters) or yarn (_compute_yarn_parameters:
interpolated frequencies by a ramp, cos and sin times the attention factor), grouped-query
attention by repeat_kv (kv head j serves q heads j*nh/nkv ... (j+1)*nh/nkv - 1),
the SwiGLU MLP down(silu(gate(x)) * up(x)), no biases, untied lm_head (or the embedding when
tie_word_embeddings). An export whose names, q|k|v or gate|up split, head order or RoPE pairing
were wrong would give another loss.

    llama_reference.py MODEL_DIR DATA (.txt: byte b is token b; .bin: llm.c shard) --windows N [--seq-length S]
Prints one JSON line {"loss": ..., "windows": N, "tokens": N*S}. Exit status 77 when PyTorch is
not installed (ctest SKIP_RETURN_CODE).
"""
import math
import sys

try:
    import numpy as np  # noqa: F401 (hf_files needs it)
    import torch
except ImportError as e:
    print("llama_reference.py: skipped: %s (Debian: python3-torch, which brings numpy)" % e, file=sys.stderr)
    sys.exit(77)

from hf_files import mean_window_loss, read_safetensors, read_tokens, reference_arguments


def rms_norm(x, weight, eps):  # LlamaRMSNorm
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half(x):  # modeling_llama.rotate_half: (x1, x2) -> (-x2, x1), halves of the head dimension
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama3_inv_freq(inv_freq, r):  # modeling_rope_utils._compute_llama3_parameters
    factor, low, high = r["factor"], r["low_freq_factor"], r["high_freq_factor"]
    old_context = r["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_context / high) & ~(wavelen > old_context / low)
    return torch.where(medium, smoothed, scaled)


def yarn_inv_freq(d, theta, r, max_positions):  # _compute_yarn_parameters: (inv_freq, attention factor)
    factor = r["factor"]
    original = r.get("original_max_position_embeddings") or max_positions

    def get_mscale(scale, mscale=1):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    if r.get("mscale") and r.get("mscale_all_dim"):
        attention_factor = get_mscale(factor, r["mscale"]) / get_mscale(factor, r["mscale_all_dim"])
    else:
        attention_factor = get_mscale(factor)

    def correction_dim(rotations):
        return (d * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(r.get("beta_fast") or 32)), 0)
    high = min(math.ceil(correction_dim(r.get("beta_slow") or 1)), d - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    pos_freqs = theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    extrapolation_factor = 1 - ramp
    return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor, attention_factor


def rotary_cos_sin(T, d, config):  # LlamaRotaryEmbedding: angle p * inv_freq_i, cos and sin times the attention factor
    theta = config.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    attention_factor = 1.0
    r = config.get("rope_scaling")
    rope_type = r and (r.get("rope_type") or r.get("type"))
    if rope_type == "llama3":
        inv_freq = llama3_inv_freq(inv_freq, r)
    elif rope_type == "yarn":
        inv_freq, attention_factor = yarn_inv_freq(d, theta, r, config["max_position_embeddings"])
    else:
        assert r is None, "rope_scaling %s is not modelled here" % rope_type
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, d/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [T, d]
    return emb.cos() * attention_factor, emb.sin() * attention_factor


def repeat_kv(x, n_rep):  # [nkv, T, d] -> [nkv * n_rep, T, d], each kv head repeated n_rep times in place
    nkv, T, d = x.shape
    return x[:, None, :, :].expand(nkv, n_rep, T, d).reshape(nkv * n_rep, T, d)


def forward_loss(w, config, tokens, targets):
    """Summed cross-entropy of one window."""
    T = tokens.shape[0]
    H, nh = config["hidden_size"], config["num_attention_heads"]
    nkv = config.get("num_key_value_heads") or nh
    d = config.get("head_dim") or H // nh
    eps = config["rms_norm_eps"]
    cos, sin = rotary_cos_sin(T, d, config)

    def linear(x, name):  # nn.Linear without bias: weight [out, in]
        return x @ w[name + ".weight"].T

    x = w["embed_tokens.weight"][tokens]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for layer in range(config["num_hidden_layers"]):
        p = "layers.%d." % layer
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(h, p + "self_attn.q_proj").view(T, nh, d).transpose(0, 1)
        k = linear(h, p + "self_attn.k_proj").view(T, nkv, d).transpose(0, 1)
        v = linear(h, p + "self_attn.v_proj").view(T, nkv, d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin  # apply_rotary_pos_emb
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, nh // nkv), repeat_kv(v, nh // nkv)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(d)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, nh * d)
        x = x + linear(y, p + "self_attn.o_proj")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = linear(h, p + "mlp.gate_proj"), linear(h, p + "mlp.up_proj")
        x = x + linear(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj")
    head = w["embed_tokens.weight"] if config.get("tie_word_embeddings", False) else w["lm_head.weight"]
    logits = rms_norm(x, w["norm.weight"], eps) @ head.T
    return torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()


def main():
    args, config, S = reference_arguments(__doc__)
    assert config["model_type"] == "llama" and config.get("hidden_act", "silu") == "silu"
    assert not config.get("attention_bias", False) and not config.get("mlp_bias", False)
    # LlamaForCausalLM's base-model keys carry "model."; lm_head's does not.
    w = read_safetensors(args.model_dir + "/model.safetensors", "model.")
    print(mean_window_loss(read_tokens(args.data), S, args.windows,
                           lambda tokens, targets: forward_loss(w, config, tokens, targets)))


if __name__ == "__main__":
    main()
