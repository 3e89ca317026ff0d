#!/usr/bin/python3
"""hostile_hf.py SRC_DIR DST_DIR KIND: a copy of an exported Hugging Face folder (config.json +
model.safetensors) damaged or varied one way, for the hostile pass (group_hf and group_hf_llama
in tests/hostile/hostile_pass.sh; the llama_* kinds take a LlamaForCausalLM export) and the
refused imports of tests/cli_hf_tests.cmake (the mixtral_* kinds take a MixtralForCausalLM export
of tests/hf/mixtral_small.toml: 2 layers, 4 experts, top 2; the deepseek_* kinds a
DeepseekV3ForCausalLM export of tests/hf/deepseek_v3_small.toml: 2 layers, the first dense). The
safetensors file is rewritten with json and struct, not with tptrain's writer."""
import json
import os
import shutil
import struct
import sys

src, dst, kind = sys.argv[1:4]
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst)
path = os.path.join(dst, "model.safetensors")
with open(path, "rb") as f:
    blob = f.read()
(n,) = struct.unpack("<Q", blob[:8])
header = json.loads(blob[8:8 + n])
data = bytearray(blob[8 + n:])


def write(header_text, body, length=None):
    """length: the header length to state (None: the true one; "file": the whole file's size)."""
    raw = header_text.encode()
    raw += b" " * (-len(raw) % 8)
    if length == "file":
        length = 8 + len(raw) + len(body)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw) if length is None else length) + raw + bytes(body))


def config(**changes):
    with open(os.path.join(dst, "config.json")) as f:
        c = json.load(f)
    c.update(changes)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(c, f)


def add_tensor(name, shape, payload):
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
    data.extend(payload)


def rewrite(drop=(), add=()):
    """The file without the tensors `drop` and with `add` ((name, shape, payload) ...), packed
    again: a valid file whose model lacks or has more tensors."""
    out, body = {}, bytearray()
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0] if "data_offsets" in kv[1] else -1):
        if name == "__metadata__":
            out[name] = t
            continue
        if name in drop:
            continue
        b, e = t["data_offsets"]
        out[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [len(body), len(body) + e - b]}
        body += data[b:e]
    for name, shape, payload in add:
        out[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(body), len(body) + len(payload)]}
        body += payload
    write(json.dumps(out), body)


def drop_config(*keys):
    with open(os.path.join(dst, "config.json")) as f:
        c = json.load(f)
    for key in keys:
        del c[key]
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(c, f)


wte = header.get("transformer.wte.weight")
moe = "model.layers.%d.block_sparse_moe."
if kind == "truncated":
    write(json.dumps(header), data[:-100])
elif kind == "length_huge":
    write(json.dumps(header), data, length=1 << 62)
elif kind == "length_beyond_file":
    write(json.dumps(header), data, length="file")
elif kind == "not_json":
    write("{" + json.dumps(header)[1:-1], data)
elif kind == "overlap":
    header["transformer.h.0.ln_1.bias"]["data_offsets"] = header["transformer.h.0.ln_1.weight"]["data_offsets"]
    write(json.dumps(header), data)
elif kind == "dtype_i32":
    header["transformer.h.0.ln_1.bias"]["dtype"] = "I32"
    write(json.dumps(header), data)
elif kind == "dtype_unknown":
    header["transformer.h.0.ln_1.bias"]["dtype"] = "F24"
    write(json.dumps(header), data)
elif kind == "duplicate":
    text = json.dumps(header)
    write(text[:-1] + ', "transformer.wte.weight": ' + json.dumps(wte) + "}", data)
elif kind == "renamed_layer":  # a 12th layer's tensor where layer 0's should be
    header["transformer.h.11.ln_1.weight"] = header.pop("transformer.h.0.ln_1.weight")
    write(json.dumps(header), data)
elif kind == "shape_swapped":  # same bytes, another shape
    wte["shape"] = [wte["shape"][1], wte["shape"][0]]
    write(json.dumps(header), data)
elif kind == "nan":
    begin = header["transformer.h.1.attn.c_attn.weight"]["data_offsets"][0]
    data[begin + 40:begin + 44] = struct.pack("<f", float("nan"))
    write(json.dumps(header), data)
elif kind == "empty":
    open(path, "wb").close()
elif kind == "no_prefix":  # as Hugging Face's own gpt2 names them
    write(json.dumps({k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in header.items()}), data)
elif kind == "mask_buffers":  # the causal-mask buffers older exports carry
    add_tensor("transformer.h.0.attn.bias", [1, 1, 2, 2], struct.pack("<4f", 1, 0, 1, 1))
    add_tensor("transformer.h.0.attn.masked_bias", [], struct.pack("<f", -1e4))
    write(json.dumps(header), data)
elif kind == "more_positions":  # a longer context than the deck's: rows past seq_length are never used
    wpe = header["transformer.wpe.weight"]
    rows, width = wpe["shape"]
    out, body = {}, bytearray()
    for name, t in header.items():
        if name == "__metadata__":
            out[name] = t
            continue
        b, e = t["data_offsets"]
        payload = bytes(data[b:e]) + (struct.pack("<f", 0.25) * (8 * width) if name == "transformer.wpe.weight" else b"")
        shape = [rows + 8, width] if name == "transformer.wpe.weight" else t["shape"]
        out[name] = {"dtype": t["dtype"], "shape": shape, "data_offsets": [len(body), len(body) + len(payload)]}
        body += payload
    write(json.dumps(out), body)
    config(n_positions=rows + 8, n_ctx=rows + 8)
elif kind == "lm_head_tied":
    b, e = wte["data_offsets"]
    add_tensor("lm_head.weight", wte["shape"], bytes(data[b:e]))
    write(json.dumps(header), data)
elif kind == "lm_head_untied":
    b, e = wte["data_offsets"]
    payload = bytearray(data[b:e])
    payload[0:4] = struct.pack("<f", 0.5)
    add_tensor("lm_head.weight", wte["shape"], bytes(payload))
    write(json.dumps(header), data)
elif kind == "bf16":  # the same model stored in bfloat16 (truncated, as bf16 storage rounds anyway)
    out, body = {}, bytearray()
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0] if "data_offsets" in kv[1] else -1):
        if name == "__metadata__":
            out[name] = t
            continue
        b, e = t["data_offsets"]
        halves = bytearray()
        for i in range(b, e, 4):
            halves += data[i + 2:i + 4]
        out[name] = {"dtype": "BF16", "shape": t["shape"], "data_offsets": [len(body), len(body) + len(halves)]}
        body += halves
    write(json.dumps(out), body)
elif kind == "config_gelu_erf":
    config(activation_function="gelu")
elif kind == "config_wider":
    config(n_embd=64)
elif kind == "config_not_gpt2":
    config(model_type="llama")
elif kind == "llama_no_prefix":  # a base LlamaModel's names: no "model." (lm_head keeps its own)
    write(json.dumps({k[len("model."):] if k.startswith("model.") else k: v for k, v in header.items()}), data)
elif kind == "llama_inv_freq":  # the rotary buffers older transformers saved with the weights
    for layer in range(2):
        add_tensor("model.layers.%d.self_attn.rotary_emb.inv_freq" % layer, [2], struct.pack("<2f", 1, 0.5))
    write(json.dumps(header), data)
elif kind == "llama_k_proj_missing":
    del header["model.layers.1.self_attn.k_proj.weight"]
    write(json.dumps(header), data)  # leaves a gap: refused as a file, or as a model
elif kind == "llama_k_proj_as_q":  # k_proj with q_proj's rows (multi-head attention's shape)
    k = header["model.layers.0.self_attn.k_proj.weight"]
    k["shape"] = [k["shape"][0] * 2, k["shape"][1]]
    write(json.dumps(header), data)
elif kind == "llama_lm_head_missing":  # an untied model without its output layer
    del header["lm_head.weight"]
    write(json.dumps(header), data)
elif kind == "llama_config_kv_heads":
    config(num_key_value_heads=4)
elif kind == "llama_config_rope_theta":
    config(rope_theta=500000.0)  # the fixture deck has the default 10000
elif kind == "llama_config_rope_scaling":  # Llama 3.1's scaled RoPE: another function
    config(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192})
elif kind == "llama_config_bias":
    config(attention_bias=True)
elif kind == "llama_config_tied":
    config(tie_word_embeddings=True)
elif kind == "mixtral_config_no_experts":  # MixtralConfig would take Mixtral-8x7B's 8
    drop_config("num_local_experts")
elif kind == "mixtral_config_no_top_k":
    drop_config("num_experts_per_tok")
elif kind == "mixtral_config_top_k_above_experts":
    config(num_experts_per_tok=5)  # of 4
elif kind == "mixtral_config_experts":  # another mixture than the deck's (and the file's tensors)
    config(num_local_experts=8)
elif kind == "mixtral_config_top_k":
    config(num_experts_per_tok=1)
elif kind == "mixtral_config_sliding_window":  # a window shorter than the deck's 16 positions
    config(sliding_window=8)
elif kind == "mixtral_config_wide_window":  # a window the deck's sequences never reach: the same model
    config(sliding_window=4096)
elif kind == "mixtral_config_not_mixtral":
    config(model_type="llama", architectures=["LlamaForCausalLM"])
elif kind == "mixtral_expert_missing":  # the file stays valid; the model lacks expert 3's w2 in block 1
    rewrite(drop=[moe % 1 + "experts.3.w2.weight"])
elif kind == "mixtral_expert_extra":  # a fifth expert in block 0
    rewrite(add=[(moe % 0 + "experts.4.w1.weight", [24, 32], struct.pack("<f", 0.01) * (24 * 32))])
elif kind == "mixtral_router_transposed":  # the gate as [H, E]
    g = header[moe % 0 + "gate.weight"]
    g["shape"] = [g["shape"][1], g["shape"][0]]
    write(json.dumps(header), data)
elif kind == "mixtral_dense_mlp":  # a LlamaForCausalLM's MLP names where the mixture's are
    rewrite(drop=[name for name in header if ".block_sparse_moe." in name and name.startswith(moe % 1)],
            add=[("model.layers.1.mlp.%s_proj.weight" % p, shape, struct.pack("<f", 0.01) * (shape[0] * shape[1]))
                 for p, shape in (("gate", [24, 32]), ("up", [24, 32]), ("down", [32, 24]))])
elif kind == "deepseek_config_softmax":  # DeepSeek-V2's scores: HF's DeepseekV3 would compute sigmoid anyway
    config(scoring_func="softmax")
elif kind == "deepseek_config_rope_dynamic":
    config(rope_scaling={"type": "dynamic", "factor": 2.0})
elif kind == "deepseek_config_kv_heads":
    config(num_key_value_heads=2)
elif kind == "deepseek_config_groups":  # another grouping than the deck's (the tensors are the same)
    config(n_group=4)
elif kind == "deepseek_config_q_lora_null":  # queries projected at once: another model
    config(q_lora_rank=None)
elif kind == "deepseek_bias_missing":  # the file stays valid; the router lacks its expert bias
    rewrite(drop=["model.layers.1.mlp.gate.e_score_correction_bias"])
elif kind == "deepseek_prediction_layer_undeclared":  # a block after the model's without num_nextn_predict_layers
    rewrite(add=[("model.layers.2.enorm.weight", [32], struct.pack("<f", 1.0) * 32)])
elif kind == "safetensors_missing":
    os.remove(path)
elif kind == "safetensors_directory":
    os.remove(path)
    os.mkdir(path)
elif kind == "config_missing":
    os.remove(os.path.join(dst, "config.json"))
elif kind == "config_garbage":
    with open(os.path.join(dst, "config.json"), "w") as f:
        f.write("{\"model_type\": \"gpt2\", ")
else:
    sys.exit("unknown kind " + kind)
