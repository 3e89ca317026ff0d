#!/usr/bin/python3
"""same_weights.py A.h5 B.h5: the /model datasets of two tptrain checkpoints are the same names,
shapes and float32 bit patterns (exit 1 naming the first difference). The export -> import round
trip test (tests/hf/hf_round_trip.cmake) holds an imported checkpoint to the one exported."""
import sys

import h5py
import numpy as np


def model_datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f["model"].visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


a, b = model_datasets(sys.argv[1]), model_datasets(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit("different datasets under /model: %s vs %s" % (sorted(set(a) ^ set(b)), ""))
for name in sorted(a):
    if a[name].shape != b[name].shape or a[name].dtype != np.float32 or b[name].dtype != np.float32:
        sys.exit("model/%s: %s %s vs %s %s" % (name, a[name].shape, a[name].dtype, b[name].shape, b[name].dtype))
    differ = np.flatnonzero(a[name].view(np.uint32) != b[name].view(np.uint32))
    if differ.size:
        sys.exit("model/%s: %d elements differ, the first at flat index %d (%r vs %r)"
                 % (name, differ.size, differ[0], a[name].flat[differ[0]], b[name].flat[differ[0]]))
print("same weights, bit for bit: %d datasets under /model" % len(a))
