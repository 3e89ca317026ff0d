#!/usr/bin/env python3
"""PyTorch reference for `tptrain bench`: the same GPT-2 training step, timed on the CPU or a GPU.

GPT-2 pre-LN blocks, learned position embedding, LayerNorm eps 1e-5, GELU (tanh), causal
attention, LM head tied to the word embedding, mean cross-entropy, fp32, AdamW (lr 3e-4,
betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on 2-D weights only), gradient clipping at 1.0,
synthetic random tokens. A step is `batch` sequences in micro-batches of `micro_batch` (gradients
accumulated, as tptrain does), in `precision`: fp32, or bf16/fp16 under torch.autocast with fp32
weights (tptrain's mixed precision; fp16 with a GradScaler). Times `steps` full steps (forward,
backward, clip, optimizer step) after `warmup` untimed ones and prints one JSON line:
  {"torch": NAME, "torch_version": ..., "threads": T, "tokens_per_s": x, "step_s": x, "parameters": N, ...}

  tptrain check DECK --set ... --json >deck.json
  jobs/bench_torch.py --resolved deck.json --steps 5 --warmup 2 --threads 1   (jobs/bench.sh)
  jobs/bench_torch.py --resolved deck.json --device cuda                       (jobs/device-check.sh)
  jobs/bench_torch.py --layers 4 --hidden 128 --heads 4 --seq 128 --vocab 256 --batch 16
  jobs/bench_torch.py --deck input/bench/small.toml   (the TOML file itself: Python >= 3.11's
                                                       tomllib, or the tomli package)
--resolved is the deck as tptrain runs it (--set overrides applied), so both sides run the same
shape, batch and precision, and the same padded vocabulary: model.vocab_size rounded up to a
multiple of model.vocab_pad_multiple x parallel.tensor, as tptrain allocates it (the padded
logits take part in PyTorch's softmax, as in nanoGPT's 50304; tptrain masks them: the same GEMM
work). It needs no TOML parser (Python 3.8 and later; the device check runs it on 3.10-3.12). On a GPU the fp32
step runs without TF32 (torch.backends.*.allow_tf32 = False), as tptrain's fp32. Shape flags
override the deck. parameters counts each tensor once (tied embedding once, position
embedding included), the same convention as tptrain.
"""
import argparse
import json
import math
import os
import sys
import time

# OpenBLAS (Debian's torch BLAS) sizes its thread pool when `import torch` loads it, and
# torch.set_num_threads does not change it: set it from --threads first.
_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--threads", type=int)
os.environ["OPENBLAS_NUM_THREADS"] = str(
    _pre.parse_known_args()[0].threads or os.environ.get("OMP_NUM_THREADS") or 1)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc = nn.Linear(h, ffn)
        self.fc_out = nn.Linear(ffn, h)

    def attention(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
            y = att @ v
        return self.proj(y.transpose(1, 2).reshape(b, s, h))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, heads, ffn, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads, ffn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h, eps=1e-5)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def blas_library():
    """The BLAS shared library this process loaded (Debian's torch uses the libblas.so.3 alternative)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line or "mkl" in line}
    except OSError:
        return "unknown"
    names = sorted(os.path.basename(x) for x in libs)
    best = [n for n in names if "openblas" in n or "mkl" in n] or names
    core = os.environ.get("OPENBLAS_CORETYPE")
    return " ".join(best[:1] + ([core] if core and best and "openblas" in best[0] else [])) or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deck", help="read [model] and [training] from this tptrain deck (TOML)")
    ap.add_argument("--resolved", help="read them from `tptrain check DECK --json` output (a file, - for stdin)")
    ap.add_argument("--name", help="name in the JSON line (default: deck stem or 'custom')")
    for k in ("layers", "hidden", "heads", "ffn", "seq", "vocab", "batch", "micro_batch"):
        ap.add_argument("--" + k.replace("_", "-"), dest=k, type=int)
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS") or 1))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda":  # strict fp32 GEMMs, as tptrain's fp32 path
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    shape = dict(layers=4, hidden=128, heads=4, ffn=None, seq=128, vocab=256, batch=16, micro_batch=None,
                 precision="fp32", vocab_pad=1)
    keys = dict(layers="model.layers", hidden="model.hidden", heads="model.heads", ffn="model.ffn_hidden",
                seq="model.seq_length", vocab="model.vocab_size", batch="training.global_batch",
                micro_batch="training.micro_batch", precision="training.precision")
    if a.resolved:
        with (sys.stdin if a.resolved == "-" else open(a.resolved)) as f:
            d = json.load(f)
        shape.update({ours: d[key] for ours, key in keys.items() if key in d})
        shape["vocab_pad"] = d.get("model.vocab_pad_multiple", 1) * d.get("parallel.tensor", 1)
    elif a.deck:
        try:
            import tomllib  # Python >= 3.11
        except ImportError:
            try:
                import tomli as tomllib
            except ImportError:
                sys.exit("bench_torch.py: --deck needs Python >= 3.11 (tomllib) or the tomli package; "
                         "give --resolved FILE from `tptrain check DECK --json` instead")
        with open(a.deck, "rb") as f:
            d = tomllib.load(f)
        for ours, key in keys.items():
            section, name = key.split(".")
            if name in d.get(section, {}):
                shape[ours] = d[section][name]
    for k in shape:
        if getattr(a, k, None) is not None:
            shape[k] = getattr(a, k)
    if shape["ffn"] is None:
        shape["ffn"] = 4 * shape["hidden"]
    if shape["micro_batch"] is None:
        shape["micro_batch"] = shape["batch"]
    source = a.deck or a.resolved
    name = a.name or (os.path.splitext(os.path.basename(source))[0] if source and source != "-" else "custom")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    L, H, S, V, B = (shape[k] for k in ("layers", "hidden", "seq", "vocab", "batch"))
    Vp = -(-V // shape["vocab_pad"]) * shape["vocab_pad"]  # rows of the embedding and the LM head
    mb, precision = shape["micro_batch"], shape["precision"]
    if B % mb:
        sys.exit(f"bench_torch.py: batch {B} is not a multiple of micro-batch {mb}")
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    model = GPT(L, H, shape["heads"], shape["ffn"], S, Vp).to(dev)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params) - (Vp - V) * H  # the logical vocabulary's rows
    opt = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8)

    # fp16 scales the loss as tptrain does; bf16 and fp32 need no scaler.
    use_scaler = precision == "fp16" and dev.type == "cuda"
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # torch >= 2.3
        scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=use_scaler)

    def sync():  # the GPU's queued work is part of the step: wait for it before reading a clock
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def step():
        total = 0.0
        for _ in range(B // mb):
            idx = torch.randint(0, V, (mb, S + 1), device=dev)  # logical tokens only
            with torch.autocast(device_type=dev.type, dtype=half, enabled=half is not None):
                loss = model(idx[:, :-1], idx[:, 1:]) * (mb / B)
            scaler.scale(loss).backward()
            total += loss.item()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return total

    for _ in range(a.warmup):
        step()
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(a.steps):
        loss = step()
    sync()
    step_s = (time.perf_counter() - t0) / max(a.steps, 1)
    cpu_step_s = (time.process_time() - c0) / max(a.steps, 1)  # < threads * step_s: contention

    flops_per_token = 6 * n_params + 12 * L * S * H
    print(json.dumps({
        "torch": name, "torch_version": torch.__version__, "threads": a.threads, "device": str(dev),
        "tokens_per_s": B * S / step_s, "step_s": step_s, "parameters": n_params,
        "cpu_s_per_step": cpu_step_s,
        "tokens_per_cpu_s": B * S * a.threads / cpu_step_s,  # ~tokens_per_s on an idle machine
        "blas": blas_library(),
        "steps": a.steps, "warmup": a.warmup, "layers": L, "hidden": H, "heads": shape["heads"],
        "ffn_hidden": shape["ffn"], "seq_length": S, "vocab_size": V, "vocab_padded": Vp, "global_batch": B,
        "micro_batch": mb, "precision": precision,
        "model_flops_per_token": flops_per_token,
        "model_flops_per_s": flops_per_token * B * S / step_s, "loss": loss,
        "sdpa": hasattr(F, "scaled_dot_product_attention")}), flush=True)


if __name__ == "__main__":
    main()
