#!/usr/bin/python3
"""Per-layer weight statistics of a tptrain checkpoint.

    /usr/bin/python3 io/checkpoint_stats.py FILE.h5 [--optimizer] [--verify]

Prints the checkpoint's attributes (step, tokens_seen, tp/pp/dp, /train), then every dataset
under /model grouped by layer (embedding, layers/0, layers/1, ..., ln_f): shape, mean, std,
min, max and L2 norm, with each group's parameter count and L2 norm. --optimizer does the same
for /optimizer (the AdamW moments). --verify recomputes every dataset's checksum attribute
(checksum_splitmix64_sum, see docs/checkpoints.md) independently of tptrain and reports
mismatches. Datasets are read in blocks of rows, never whole.

Needs Debian's python3-h5py (apt-get install python3-h5py; it brings numpy). Exit status: 0
on success, 1 on a missing or unreadable file, a file that is not a tptrain checkpoint, or a
checksum that does not verify (--verify), 2 on bad arguments.
"""

import argparse
import math
import os
import re
import sys

CHUNK_ELEMENTS = 1 << 20
CHECKSUM_ATTRIBUTE = "checksum_splitmix64_sum"


def fail(message):
    print(f"checkpoint_stats.py: error: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import h5py
    import numpy as np
except ImportError as e:
    fail(f"{e.name or 'h5py'} is missing: install python3-h5py (apt-get install python3-h5py, "
         "which brings numpy) and run this script with /usr/bin/python3")


# ---- checksum (the same function as io/checkpoint_file.cpp) ---------------------------------

U64 = np.uint64


def splitmix64(x):
    """splitmix64 of a uint64 array (wrapping arithmetic)."""
    x = x + U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def checksum_block(values, first):
    """Sum (mod 2**64) of splitmix64(bits ^ splitmix64(i)) over a block of float32 values whose
    row-major indices in the full tensor are first, first + 1, ..."""
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    bits = flat.view(np.uint32).astype(np.uint64)
    index = np.arange(first, first + flat.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(np.sum(splitmix64(bits ^ splitmix64(index)), dtype=np.uint64))


# ---- statistics -----------------------------------------------------------------------------

class Stats:
    """Count, mean, M2 (Chan et al.), min, max, sum of squares, NaN count; float64."""

    def __init__(self):
        self.n, self.mean, self.m2 = 0, 0.0, 0.0
        self.min, self.max, self.sumsq, self.nans = math.inf, -math.inf, 0.0, 0

    def add(self, block):
        x = np.asarray(block, dtype=np.float64).reshape(-1)
        nan = np.isnan(x)
        if nan.any():
            self.nans += int(nan.sum())
            x = x[~nan]
        if x.size == 0:
            return
        n, mean = x.size, float(x.mean())
        m2 = float(((x - mean) ** 2).sum())
        total = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.n * n / total
        self.n = total
        self.min = min(self.min, float(x.min()))
        self.max = max(self.max, float(x.max()))
        self.sumsq += float((x * x).sum())

    @property
    def std(self):
        return math.sqrt(self.m2 / self.n) if self.n else math.nan

    @property
    def norm(self):
        return math.sqrt(self.sumsq)


def scan(dset, verify):
    """Statistics of a dataset, and its checksum when verify; read in blocks of rows."""
    stats, checksum = Stats(), 0
    if dset.shape == ():
        stats.add(dset[()])
        if verify:
            checksum = checksum_block(np.asarray(dset[()]), 0)
        return stats, checksum
    rows = dset.shape[0]
    row_elements = int(np.prod(dset.shape[1:], dtype=np.int64)) if len(dset.shape) > 1 else 1
    if rows == 0 or row_elements == 0:
        return stats, 0
    step = max(1, CHUNK_ELEMENTS // row_elements)
    for lo in range(0, rows, step):
        block = dset[lo:min(rows, lo + step)]
        stats.add(block)
        if verify:
            checksum = (checksum + checksum_block(block, lo * row_elements)) % (1 << 64)
    return stats, checksum


# ---- names ----------------------------------------------------------------------------------

def natural_key(name):
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name)
            if p != ""]


def group_of(relative):
    """Group and rest of a dataset's name: ('layers/3', 'attn/qkv/weight') for
    'layers/3/attn/qkv/weight', ('embedding', 'word'), ('exp_avg/layers/0', 'ln_1/bias')."""
    parts = relative.split("/")
    for k in range(len(parts) - 2):
        if parts[k] == "layers" and parts[k + 1].isdigit():
            return "/".join(parts[:k + 2]), "/".join(parts[k + 2:])
    if len(parts) > 1:
        return "/".join(parts[:-1]), parts[-1]
    return "(top level)", parts[0]


def datasets_under(group):
    found = []
    group.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset)
                     else None)
    return sorted(found, key=lambda n: [natural_key(p) for p in n.split("/")])


def fmt(v):
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def attr_text(value):
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, np.generic):
        value = value.item()
    return str(value)


def report(f, top, verify):
    """Prints the table for /top; returns the names whose checksum fails (verify)."""
    if top not in f:
        print(f"\n/{top}: (absent)")
        return []
    names = datasets_under(f[top])
    print(f"\n/{top}: {len(names)} datasets")
    failed = []
    groups = {}
    for name in names:
        g, rest = group_of(name)
        groups.setdefault(g, []).append((rest, name))
    header = ("dataset", "shape", "mean", "std", "min", "max", "l2_norm") + (
        ("checksum",) if verify else ())
    for g in sorted(groups, key=lambda s: [natural_key(p) for p in s.split("/")]):
        rows, count, sumsq = [], 0, 0.0
        for rest, name in groups[g]:
            dset = f[top][name]
            if dset.dtype.kind not in "fiu":
                rows.append((rest, str(list(dset.shape)), "-", "-", "-", "-", "-") +
                            (("n/a",) if verify else ()))
                continue
            stats, checksum = scan(dset, verify)
            count += dset.size
            sumsq += stats.sumsq
            cells = (rest, str(list(dset.shape)), fmt(stats.mean), fmt(stats.std),
                     fmt(stats.min) if stats.n else "-", fmt(stats.max) if stats.n else "-",
                     fmt(stats.norm))
            if stats.nans:
                cells = cells[:-1] + (f"{fmt(stats.norm)} [{stats.nans} NaN]",)
            if verify:
                stored = dset.attrs.get(CHECKSUM_ATTRIBUTE)
                if dset.dtype.kind != "f":
                    verdict = "n/a"
                elif stored is None:
                    verdict = "MISSING"
                    failed.append(f"/{top}/{name}")
                elif int(stored) == checksum:
                    verdict = "ok"
                else:
                    verdict = f"MISMATCH (stored 0x{int(stored):016x}, computed 0x{checksum:016x})"
                    failed.append(f"/{top}/{name}")
                cells += (verdict,)
            rows.append(cells)
        print(f"\n  {g}: {count:,} parameters, L2 norm {math.sqrt(sumsq):.6g}")
        table = [header] + rows
        widths = [max(len(r[c]) for r in table) for c in range(len(header))]
        for r in table:
            line = "    " + "  ".join(
                (r[c].rjust(widths[c]) if 2 <= c <= 6 else r[c].ljust(widths[c]))
                for c in range(len(header)))
            print(line.rstrip())
    return failed


def main():
    parser = argparse.ArgumentParser(
        description="Per-layer weight statistics of a tptrain checkpoint (h5py).")
    parser.add_argument("file", help="checkpoint file (step_XXXXXXXX.h5)")
    parser.add_argument("--optimizer", action="store_true",
                        help="also the /optimizer datasets (AdamW moments)")
    parser.add_argument("--verify", action="store_true",
                        help="recompute each dataset's checksum and compare with the stored one")
    args = parser.parse_args()

    if not os.path.exists(args.file):
        fail(f"no such file: {args.file}")
    if not os.path.isfile(args.file):
        fail(f"{args.file} is not a regular file")
    if not h5py.is_hdf5(args.file):
        fail(f"{args.file} is not an HDF5 file")
    try:
        f = h5py.File(args.file, "r")
    except OSError as e:
        fail(f"cannot open {args.file}: {e} (the file is truncated or corrupt)")

    with f:
        fmt_attr = attr_text(f.attrs.get("format", ""))
        if fmt_attr != "tptrain-checkpoint":
            fail(f"{args.file} is not a tptrain checkpoint (format attribute: {fmt_attr!r})")
        a = f.attrs
        print(f"checkpoint {args.file}")
        print(f"  format_version {attr_text(a.get('format_version'))}, step "
              f"{attr_text(a.get('step'))}, tokens_seen {attr_text(a.get('tokens_seen'))}, "
              f"saved with tp {attr_text(a.get('tp'))} x pp {attr_text(a.get('pp'))} x dp "
              f"{attr_text(a.get('dp'))}")
        if "train" in f:
            train = ", ".join(f"{k} {attr_text(v)}" for k, v in sorted(f["train"].attrs.items()))
            print(f"  /train: {train or '(no attributes)'}")
        failed = report(f, "model", args.verify)
        if args.optimizer:
            failed += report(f, "optimizer", args.verify)

    if args.verify:
        if failed:
            print(f"\nFAILED: {len(failed)} dataset(s) do not verify: {', '.join(failed[:5])}"
                  + (" ..." if len(failed) > 5 else ""))
            sys.exit(1)
        print("\nchecksums: all verify")


if __name__ == "__main__":
    main()
