#!/usr/bin/python3
"""Multiple-choice evaluation (`tptrain eval --tasks`, training.tasks) against an independent
computation (tests/cli_multiple_choice_tests.cmake).

  multiple_choice_eval.py CASE EXE WORK_DIR SOURCE_DIR MPIEXEC...

CASE is one of
  bytes   a byte-level GPT-2 and a byte-level Llama;
  bpe     a GPT-2 BPE model (tokens from tiktoken's own core, @dqbd/tiktoken under node);
  in-loop training.tasks: metrics.jsonl's mc_accuracy equals `tptrain eval --tasks` on the
          checkpoints of the same steps; bad task files refused naming the line, on 2 ranks.

For bytes and bpe: a tiny model is trained, a task file generated here (20 examples of 4 endings:
contexts longer than the window, contexts ending in white space, non-ASCII text, an empty
context), and `tptrain eval --tasks --tasks-scores` run on 1 rank and on 2 (tensor 2, pipeline 2,
data 2). The checkpoint is exported (`tptrain export --format hf`) and every ending scored here in
float64 with PyTorch (tests/hf/gpt2_reference.py, llama_reference.py: a forward sharing no code
with tptrain), the tokens split by lm-evaluation-harness's rule written out below from its source
(`_encode_pair`, `_loglikelihood_tokens`). Checked: each ending's scored tokens equal this
script's, each log-likelihood agrees to 1e-5 (relative, at least 1e-5 absolute; fp32 against
float64), and mc_accuracy, mc_accuracy_norm and the counts equal those computed here.
Exit 77 (skipped) without PyTorch, or for bpe without GPT-2's vocabulary or node.
"""
import json
import os
import random
import shutil
import subprocess
import sys

from cli_script import fail, json_line, output, run

try:
    import numpy as np  # noqa: F401 (hf_files needs it)
    import torch
except ImportError as e:
    print("multiple_choice_eval.py: skipped: %s (Debian: python3-torch)" % e)
    sys.exit(77)

case, exe, work, src = sys.argv[1:5]
mpi = sys.argv[5:]
sys.path.insert(0, os.path.join(src, "tests", "hf"))
import gpt2_reference  # noqa: E402
import llama_reference  # noqa: E402
from hf_files import read_safetensors  # noqa: E402

shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
TOL = 1e-5


def write(name, text):
    path = os.path.join(work, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def make_tasks(name, seed, long_context):
    """20 examples of 4 endings; a few contexts longer than `long_context` characters."""
    rng = random.Random(seed)
    words = ("the cat sat on a mat while rain fell over old roofs and we wrote tests for every rank "
             "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \u00fcber r\u00e9sum\u00e9 \U0001f600 ok").split()
    examples = []
    for i in range(20):
        n = rng.randint(2, 6) if i % 4 else rng.randint(long_context // 3, long_context)
        context = " ".join(rng.choice(words) for _ in range(n))
        if i % 5 == 1:
            context += " "          # moves to the endings (lm-eval)
        if i % 7 == 3:
            context += "\u00a0\n"  # white space to Python's str.isspace, not ASCII only
        if i == 10:
            context = ""            # scored after the end-of-text token
        endings = []
        while len(endings) < 4:
            e = (" " if rng.random() < 0.7 else "") + " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))
            if e.strip() and e not in endings:
                endings.append(e)
        examples.append({"context": context, "endings": endings, "label": rng.randrange(4), "ind": i})
    path = write(name, "".join(json.dumps(e) + "\n" for e in examples))
    return path, examples


def lm_eval_rows(examples, encode, end_of_text, S):
    """lm-evaluation-harness's requests, token by token: _encode_pair moves the context's trailing
    white space (str.rstrip) onto the continuation and takes the continuation as
    encode(context + continuation)[len(encode(context)):]; an empty context is [eot];
    _loglikelihood_tokens keeps the last max_length + 1 tokens."""
    rows = []
    for ex in examples:
        for cont in ex["endings"]:
            context = ex["context"]
            if context == "":
                context_enc, cont_enc = [end_of_text], encode(cont)
            else:
                n_spaces = len(context) - len(context.rstrip())
                if n_spaces > 0:
                    cont = context[-n_spaces:] + cont
                    context = context[:-n_spaces]
                whole = encode(context + cont)
                context_enc = encode(context)
                cont_enc = whole[len(context_enc):]
            rows.append(((context_enc + cont_enc)[-(S + 1):], len(cont_enc)))
    return rows


def reference_scores(model_dir, rows):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    if config["model_type"] == "gpt2":
        w, forward = read_safetensors(os.path.join(model_dir, "model.safetensors"), "transformer."), gpt2_reference
    else:
        w, forward = read_safetensors(os.path.join(model_dir, "model.safetensors"), "model."), llama_reference
    scores = []
    with torch.no_grad():
        for tokens, n in rows:
            t = torch.tensor(tokens, dtype=torch.int64)
            targets = t[1:].clone()
            targets[: len(tokens) - 1 - n] = -100  # cross_entropy's ignore_index: the ending's tokens only
            scores.append(-forward.forward_loss(w, config, t[:-1], targets))
    return scores


def accuracies(examples, scores):
    right = right_norm = 0
    at = 0
    for ex in examples:
        s = scores[at: at + len(ex["endings"])]
        at += len(ex["endings"])
        norm = [x / len(e.encode("utf-8")) for x, e in zip(s, ex["endings"])]
        right += int(np.argmax(s)) == ex["label"]
        right_norm += int(np.argmax(norm)) == ex["label"]
    return right / len(examples), right_norm / len(examples)


def check_layouts(deck, ck, tasks, examples, rows, ranks_layouts):
    hf = os.path.join(work, os.path.basename(deck) + ".hf")
    run([exe, "export", ck, "--format", "hf", "--out", hf])
    want = reference_scores(hf, rows)
    acc, acc_norm = accuracies(examples, want)
    print(f"{os.path.basename(deck)}: reference mc_accuracy {acc}, mc_accuracy_norm {acc_norm}")
    for ranks, layout in ranks_layouts:
        scores_file = os.path.join(work, "scores.jsonl")
        launcher = mpi + ["-n", str(ranks)] if ranks > 1 else []
        got = json_line(run(launcher + [exe, "eval", deck, "--checkpoint", ck, "--tasks", tasks,
                                        "--tasks-scores", scores_file] + layout).stdout.decode())
        with open(scores_file) as f:
            lines = [json.loads(l) for l in f]
        endings = [e for line in lines for e in line["endings"]]
        worst = 0.0
        for i, (e, (tokens, n), ref) in enumerate(zip(endings, rows, want)):
            if e["tokens"] != tokens or e["continuation"] != n:
                fail(f"row {i}: tptrain scored {e['tokens']} ({e['continuation']} of the ending), "
                     f"lm-eval's rule gives {tokens} ({n})")
            err = abs(e["log_likelihood"] - ref) / max(1.0, abs(ref))
            worst = max(worst, err)
            if err > TOL:
                fail(f"row {i}: log-likelihood {e['log_likelihood']}, reference {ref}")
        cut = sum(1 for tokens, n in rows if len(tokens) == S_of[deck] + 1)
        print(f"  {ranks} rank(s) {' '.join(layout) or '(deck layout)'}: {got}; worst relative difference "
              f"{worst:.2e} over {len(endings)} endings")
        if len(lines) != len(examples) or [l["line"] for l in lines] != list(range(1, len(examples) + 1)):
            fail(f"scores file holds lines {[l['line'] for l in lines]}")
        if (got["examples"], got["endings"]) != (len(examples), len(rows)) or got["truncated"] < 1:
            fail(f"counts {got}, expected {len(examples)} examples, {len(rows)} endings, some truncated")
        if got["truncated"] > cut:
            fail(f"{got['truncated']} truncated rows, but only {cut} fill the window")
        if abs(got["mc_accuracy"] - acc) > 1e-9 or abs(got["mc_accuracy_norm"] - acc_norm) > 1e-9:
            fail(f"mc_accuracy {got['mc_accuracy']} / {got['mc_accuracy_norm']}, reference {acc} / {acc_norm}")


S_of = {}


def make_deck(name, S, architecture="gpt2", data='train = "train.txt"', vocab=256):
    """A 2-layer model of `name`.toml trained 12 steps; checkpoints in ck_<name>."""
    path = write(name + ".toml", f"""
[model]
architecture = "{architecture}"
layers = 2
hidden = 32
heads = 4
seq_length = {S}
vocab_size = {vocab}
[training]
global_batch = 4
micro_batch = 2
steps = 12
[optimizer]
warmup_steps = 1
lr = 1e-2
[data]
{data}
[run]
dir = "run_{name}"
[checkpoint]
dir = "ck_{name}"
resume = false
""")
    S_of[path] = S
    return path


shutil.copy(os.path.join(src, "README.md"), os.path.join(work, "train.txt"))
layouts = [(1, []), (2, ["--set", "parallel.tensor=2"]), (2, ["--set", "parallel.pipeline=2"]),
           (2, ["--set", "parallel.data=2"])]

if case == "bytes":
    S = 48
    tasks, examples = make_tasks("tasks.jsonl", 5, 30)
    rows = lm_eval_rows(examples, lambda s: list(s.encode("utf-8")), 10, S)
    for arch in ("gpt2", "llama"):
        deck = make_deck(arch, S, arch)
        run([exe, "train", deck])
        check_layouts(deck, os.path.join(work, f"ck_{arch}", "step_00000012.h5"), tasks, examples, rows, layouts)

elif case == "bpe":
    vocab_dir = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ["HOME"], ".cache"),
                             "tptrain", "gpt2")
    if not os.path.isfile(os.path.join(vocab_dir, "encoder.json")):
        print(f"GPT-2's vocabulary is not in {vocab_dir}: skipped")
        sys.exit(77)
    if shutil.which("node") is None or shutil.which("npm") is None:
        print("node or npm not found: skipped (the reference tokens come from @dqbd/tiktoken)")
        sys.exit(77)
    modules = run([os.path.join(src, "tests", "text", "setup-js-tiktoken.sh")]).stdout.decode().strip()
    S = 16
    tasks, examples = make_tasks("tasks.jsonl", 7, 24)
    # Every string lm-eval's rule encodes (the context without its trailing white space, the
    # context with the ending, the ending alone), tokenized at once by tiktoken's core.
    wanted = set()
    for ex in examples:
        for c in ex["endings"]:
            wanted.update({ex["context"].rstrip(), ex["context"] + c, c})
    wanted = sorted(wanted)
    script = ("const {get_encoding} = require(require('path').join(process.argv[1], '@dqbd', 'tiktoken'));"
              "const enc = get_encoding('gpt2');"
              "const texts = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "console.log(JSON.stringify(texts.map(t => Array.from(enc.encode_ordinary(t)))));")
    p = subprocess.run(["node", "-e", script, modules], input=json.dumps(wanted).encode(), capture_output=True,
                       timeout=120)
    if p.returncode != 0:
        sys.exit(f"node failed: {p.stderr.decode(errors='replace')}")
    table = dict(zip(wanted, json.loads(p.stdout)))
    rows = lm_eval_rows(examples, lambda s: table[s], 50256, S)
    run([exe, "tokenize", os.path.join(work, "train.txt"), "--out", os.path.join(work, "shards"),
         "--tokenizer", "gpt2"])
    deck = make_deck("bpe", S, data='train = "shards/train_000000.bin"\ntokenizer = "gpt2"', vocab=50257)
    run(mpi + ["-n", "2", exe, "train", deck, "--set", "parallel.tensor=2"])
    check_layouts(deck, os.path.join(work, "ck_bpe", "step_00000012.h5"), tasks, examples, rows, layouts)

elif case == "in-loop":
    S = 24
    tasks, examples = make_tasks("tasks.jsonl", 11, 30)
    deck = make_deck("loop", S)
    # training.tasks in the [training] table, every 5 steps and the last (12)
    sets = ["--set", f"training.tasks={tasks}", "--set", "training.tasks_interval=5", "--set", "checkpoint.interval=5",
            "--set", "checkpoint.keep=5", "--set", "parallel.tensor=2"]
    out = run(mpi + ["-n", "2", exe, "train", deck] + sets).stdout.decode()
    with open(os.path.join(work, "run_loop", "metrics.jsonl")) as f:
        records = [json.loads(l) for l in f]
    scored = {r["step"]: r for r in records if "mc_accuracy" in r}
    if sorted(scored) != [5, 10, 12]:
        fail(f"mc_accuracy at steps {sorted(scored)}, expected 5, 10 and 12")
    for step, r in sorted(scored.items()):
        ck = os.path.join(work, "ck_loop", f"step_{step:08d}.h5")
        got = json_line(run(mpi + ["-n", "2", exe, "eval", deck, "--checkpoint", ck, "--tasks", tasks,
                                   "--set", "parallel.tensor=2"]).stdout.decode())
        print(f"step {step}: metrics.jsonl mc_accuracy {r['mc_accuracy']}, mc_accuracy_norm {r['mc_accuracy_norm']}, "
              f"mc_examples {r['mc_examples']}; eval --tasks {got}")
        if (abs(r["mc_accuracy"] - got["mc_accuracy"]) > 1e-9 or
                abs(r["mc_accuracy_norm"] - got["mc_accuracy_norm"]) > 1e-9 or r["mc_examples"] != got["examples"]):
            fail(f"step {step}: the run's record {r} differs from eval --tasks {got}")
    if "mc accuracy" not in out:
        fail("the progress line does not show the accuracy")
    # Bad files: refused naming the line, on both ranks at once (no hang), before training starts.
    good = open(tasks, encoding="utf-8").read().splitlines()
    bad_cases = [
        ('{"context": "a", "endings": [], "label": 0}', 'tasks_bad.jsonl:3: "endings" is an empty list'),
        ('{"context": "a", "endings": ["x", "y"], "label": 2}', 'tasks_bad.jsonl:3: "label" = 2: expected an '
                                                                "ending's index, 0 to 1"),
        ('{"context": "a", "endings": ["x", 5], "label": 0}', "tasks_bad.jsonl:3: ending 1 = 5: expected a string"),
        ('{"context": "a", "endings": ["' + "x" * 30 + '"], "label": 0}',
         "tasks_bad.jsonl:3: ending 0 has 30 tokens, more than the model's window (model.seq_length = 24)"),
    ]
    for line, message in bad_cases:
        bad = write("tasks_bad.jsonl", "\n".join(good[:2] + [line] + good[2:]) + "\n")
        for args in ([exe, "eval", deck, "--checkpoint", os.path.join(work, "ck_loop", "step_00000012.h5"),
                      "--tasks", bad, "--set", "parallel.tensor=2"],
                     [exe, "train", deck, "--set", f"training.tasks={bad}", "--set", "training.tasks_interval=5",
                      "--set", "parallel.tensor=2", "--set", f"run.dir={work}/run_bad",
                      "--set", f"checkpoint.dir={work}/ck_bad"]):
            p = run(mpi + ["-n", "2"] + args, ok=False)
            text = output(p)
            if p.returncode != 1 or message not in text:
                fail(f"{args[1]} with {line}: exit {p.returncode}, expected 1 and {message!r} in:\n{text}")
            if args[1] == "train" and "step      1/" in text:
                fail("training started before the task file was refused")
        print(f"refused: {message}")
else:
    sys.exit(f"unknown case {case}")
print("ok")
