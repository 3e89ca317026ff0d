#!/usr/bin/python3
"""An independent DeepSeek-V3 for `tptrain export --format hf` of a deepseek_v3 model (docs/checkpoints.md).

Reads a Hugging Face DeepseekV3ForCausalLM folder itself -- config.json and model.safetensors
(hf_files.py) -- and computes, in float64 with PyTorch, the mean next-token loss over the
evaluation windows `tptrain eval` uses (window j: tokens [j*S, j*S+S]). The model is written from
transformers' modeling_deepseek_v3, not from tptrain:
  * DeepseekV3Attention, multi-head latent attention: the query through q_a_proj, q_a_layernorm and
    q_b_proj (or q_proj when q_lora_rank is null), each head's qk_nope_head_dim features then its
    qk_rope_head_dim rotary ones; kv_a_proj_with_mqa gives the latent (kv_lora_rank) and one rotary
    key all heads share; the latent through kv_a_layernorm and kv_b_proj gives each head's key
    (qk_nope_head_dim) and value (v_head_dim). The latent norms are DeepseekV3RMSNorm with its
    default epsilon 1e-6, whatever rms_norm_eps says. Rotate-half rotary embeddings on the rotary
    parts, after reordering adjacent pairs (2i, 2i+1) into halves when rope_interleave (true by
    default); scores scaled by qk_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2
    when rope_scaling gives mscale_all_dim; causal softmax; o_proj.
  * The first first_k_dense_replace blocks a SwiGLU MLP of intermediate_size; the others
    DeepseekV3MoE: router scores sigmoid(x gate^T), e_score_correction_bias added for choosing only;
    the experts in n_group groups, each group scored by the sum of its two best biased scores, the
    topk_group best groups kept (the others' scores set to 0, as DeepseekV3TopkRouter masks them),
    the top num_experts_per_tok of those chosen; their unbiased scores renormalised when
    norm_topk_prob, times routed_scaling_factor, weight the experts' outputs (index_add_ per
    expert); the shared experts' SwiGLU of n_shared_experts * moe_intermediate_size added.
  * RMSNorm x * rsqrt(mean(x^2) + eps) * weight, pre-norm blocks, a final norm, untied lm_head (or
    the embedding when tie_word_embeddings). rope_scaling of type yarn as llama_reference.py
    computes it (_compute_yarn_parameters) on the rotary part's qk_rope_head_dim features.
An export whose names, rotary pair order, latent split, expert numbering, bias or group choice
were wrong would give another loss.

    deepseek_v3_reference.py MODEL_DIR DATA (.txt: byte b is token b; .bin: llm.c shard) --windows N [--seq-length S]
Prints one JSON line {"loss": ..., "windows": N, "tokens": N*S, "top_k_margin": m, "group_margin": g}:
m is the smallest gap, over every token and mixture block, between the k-th and the (k+1)-th biased
score of the kept groups' experts, g the smallest between the topk_group-th and the next group's
score; a gap near fp32's rounding (1e-7) would let tptrain's fp32 router choose otherwise than this
float64 one, a difference that is not an error of the export. Exit status 77 when PyTorch is not
installed (ctest SKIP_RETURN_CODE).
"""
import json
import math
import sys

try:
    import numpy as np  # noqa: F401 (hf_files needs it)
    import torch
except ImportError as e:
    print("deepseek_v3_reference.py: skipped: %s (Debian: python3-torch, which brings numpy)" % e, file=sys.stderr)
    sys.exit(77)

from hf_files import mean_window_loss, read_safetensors, read_tokens, reference_arguments
from llama_reference import rms_norm, rotary_cos_sin, rotate_half

LATENT_NORM_EPS = 1e-6  # DeepseekV3RMSNorm's default: q_a_layernorm and kv_a_layernorm are built without eps


def smallest_gap(values, k):
    """The smallest gap between the k-th and (k+1)-th largest of each row of `values` (inf if k = width)."""
    if values.shape[-1] <= k:
        return math.inf
    top = torch.topk(values, k + 1, dim=-1).values
    return (top[:, k - 1] - top[:, k]).min().item()


class Router:
    """DeepseekV3TopkRouter with the margins it saw."""

    def __init__(self, config):
        self.E, self.k = config["n_routed_experts"], config["num_experts_per_tok"]
        self.G, self.g = config.get("n_group", 8), config.get("topk_group", 4)
        self.normalise = config.get("norm_topk_prob", True)
        self.scale = config.get("routed_scaling_factor", 2.5)
        self.top_k_margin = self.group_margin = math.inf

    def route(self, h, weight, bias):
        """(chosen experts [T, k], their weights [T, k]) of tokens h [T, H]."""
        scores = torch.sigmoid(h @ weight.T)  # [T, E]
        biased = scores + bias[None, :]
        per_group = biased.view(-1, self.G, self.E // self.G)
        group_scores = torch.topk(per_group, 2, dim=-1).values.sum(dim=-1)  # [T, G]
        self.group_margin = min(self.group_margin, smallest_gap(group_scores, self.g))
        kept = torch.zeros_like(group_scores)
        kept.scatter_(1, torch.topk(group_scores, self.g, dim=-1).indices, 1.0)
        mask = kept[:, :, None].expand(-1, self.G, self.E // self.G).reshape(-1, self.E).bool()
        candidates = biased.masked_fill(~mask, 0.0)
        self.top_k_margin = min(self.top_k_margin, smallest_gap(candidates, self.k))
        chosen = torch.topk(candidates, self.k, dim=-1).indices
        weights = scores.gather(1, chosen)
        if self.normalise:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return chosen, weights * self.scale


def swiglu(x, w, p):  # DeepseekV3MLP at prefix p: down(silu(gate(x)) * up(x))
    gate, up = x @ w[p + "gate_proj.weight"].T, x @ w[p + "up_proj.weight"].T
    return (torch.nn.functional.silu(gate) * up) @ w[p + "down_proj.weight"].T


def mixture(h, w, p, router):
    """DeepseekV3MoE.forward on h [T, H], block prefix p ("layers.1.")."""
    chosen, weights = router.route(h, w[p + "mlp.gate.weight"], w[p + "mlp.gate.e_score_correction_bias"])
    out = torch.zeros_like(h)
    mask = torch.nn.functional.one_hot(chosen, num_classes=router.E).permute(2, 0, 1)  # [E, T, k]
    for e in range(router.E):
        tokens, slot = torch.where(mask[e])
        if tokens.numel() == 0:
            continue
        y = swiglu(h[tokens], w, p + "mlp.experts.%d." % e)
        out.index_add_(0, tokens, y * weights[tokens, slot, None])
    return out + swiglu(h, w, p + "mlp.shared_experts.")


def deinterleave(x):  # adjacent pairs (2i, 2i+1) -> halves (i, i + d/2), as apply_rotary_pos_emb_interleave does
    d = x.shape[-1]
    return x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(*x.shape[:-1], d)


def softmax_scale(config):
    d_q = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    scale = d_q ** -0.5
    r = config.get("rope_scaling")
    if r is not None and r.get("mscale_all_dim"):
        factor, m = r["factor"], r["mscale_all_dim"]
        mscale = 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0  # yarn_get_mscale
        scale *= mscale * mscale
    return scale


def attention(h, w, p, config, cos, sin):
    """DeepseekV3Attention.forward on h [T, H]."""
    T = h.shape[0]
    nh, d_nope, d_r, d_v = (config["num_attention_heads"], config["qk_nope_head_dim"], config["qk_rope_head_dim"],
                            config["v_head_dim"])
    r_kv = config["kv_lora_rank"]
    a = p + "self_attn."
    if config.get("q_lora_rank") is None:
        q = h @ w[a + "q_proj.weight"].T
    else:
        latent = rms_norm(h @ w[a + "q_a_proj.weight"].T, w[a + "q_a_layernorm.weight"], LATENT_NORM_EPS)
        q = latent @ w[a + "q_b_proj.weight"].T
    q = q.view(T, nh, d_nope + d_r).transpose(0, 1)  # [nh, T, d_q]
    q_pass, q_rot = q[..., :d_nope], q[..., d_nope:]
    compressed = h @ w[a + "kv_a_proj_with_mqa.weight"].T  # [T, r_kv + d_R]
    kv = rms_norm(compressed[:, :r_kv], w[a + "kv_a_layernorm.weight"], LATENT_NORM_EPS) @ w[a + "kv_b_proj.weight"].T
    kv = kv.view(T, nh, d_nope + d_v).transpose(0, 1)  # [nh, T, d_nope + d_v]
    k_pass, v = kv[..., :d_nope], kv[..., d_nope:]
    k_rot = compressed[None, :, r_kv:]  # [1, T, d_R]: one rotary key for every head
    if config.get("rope_interleave", True):
        q_rot, k_rot = deinterleave(q_rot), deinterleave(k_rot)
    q_rot = q_rot * cos + rotate_half(q_rot) * sin
    k_rot = k_rot * cos + rotate_half(k_rot) * sin
    query = torch.cat((q_pass, q_rot), dim=-1)
    key = torch.cat((k_pass, k_rot.expand(nh, T, d_r)), dim=-1)
    scores = (query @ key.transpose(1, 2)) * softmax_scale(config)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    scores = scores.masked_fill(~causal, float("-inf"))
    y = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, nh * d_v)
    return y @ w[a + "o_proj.weight"].T


def forward_loss(w, config, tokens, targets, router):
    """Summed cross-entropy of one window."""
    T = tokens.shape[0]
    eps = config.get("rms_norm_eps", 1e-6)
    cos, sin = rotary_cos_sin(T, config["qk_rope_head_dim"], config)
    x = w["embed_tokens.weight"][tokens]
    for layer in range(config["num_hidden_layers"]):
        p = "layers.%d." % layer
        x = x + attention(rms_norm(x, w[p + "input_layernorm.weight"], eps), w, p, config, cos, sin)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        dense = layer < config.get("first_k_dense_replace", 3)
        x = x + (swiglu(h, w, p + "mlp.") if dense else mixture(h, w, p, router))
    head = w["embed_tokens.weight"] if config.get("tie_word_embeddings", False) else w["lm_head.weight"]
    logits = rms_norm(x, w["norm.weight"], eps) @ head.T
    return torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()


def main():
    args, config, S = reference_arguments(__doc__)
    assert config["model_type"] == "deepseek_v3" and config.get("hidden_act", "silu") == "silu"
    assert not config.get("attention_bias", False)
    assert config.get("scoring_func", "sigmoid") == "sigmoid" and config.get("topk_method", "noaux_tc") == "noaux_tc"
    # DeepseekV3ForCausalLM's base-model keys carry "model."; lm_head's does not.
    w = read_safetensors(args.model_dir + "/model.safetensors", "model.")
    router = Router(config)
    result = json.loads(mean_window_loss(read_tokens(args.data), S, args.windows,
                                         lambda tokens, targets: forward_loss(w, config, tokens, targets, router)))
    result["top_k_margin"], result["group_margin"] = router.top_k_margin, router.group_margin
    print(json.dumps(result))


if __name__ == "__main__":
    main()
