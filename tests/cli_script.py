"""What the command-line test scripts share (data_blend_train.py, async_checkpoint.py,
llama_o200k_end_to_end.py, bpe_generate_eval.py): running tptrain, failing with a message, its
one JSON line."""
import json
import subprocess
import sys


def fail(message):
    """Ends the test: exit 1 after the mismatch, for ctest's log."""
    print("MISMATCH:", message)
    sys.exit(1)


def output(p):
    """stdout and stderr of a finished command, as text."""
    return p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")


def run(args, ok=True, timeout=280):
    """Runs `args` to the end (a subprocess.CompletedProcess). ok=True: a failure ends the test;
    ok=False: so does a success (the command was expected to refuse); None: either is fine."""
    p = subprocess.run(args, capture_output=True, timeout=timeout)
    if ok is True and p.returncode != 0:
        fail(f"FAILED ({p.returncode}): {' '.join(args)}\n{output(p)}")
    if ok is False and p.returncode == 0:
        fail(f"expected a failure: {' '.join(args)}\n{output(p)}")
    return p


def json_line(text):
    """The one line of `text` that is a JSON object, parsed."""
    lines = [l for l in text.splitlines() if l.startswith("{")]
    if len(lines) != 1:
        fail(f"expected one JSON line, got {len(lines)} in:\n{text}")
    return json.loads(lines[0])
