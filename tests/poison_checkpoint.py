#!/usr/bin/env python3
"""Copies a tptrain checkpoint with one weight set to NaN and its checksum recomputed, so that
the file is intact as a file (every checksum verifies) but holds a non-finite weight: what a
diverged run would have published before tptrain refused to write such checkpoints.

usage: poison_checkpoint.py IN.h5 OUT.h5 [DATASET]
"""
import os
import shutil
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io"))
from checkpoint_stats import CHECKSUM_ATTRIBUTE, checksum_block  # noqa: E402

source, target = sys.argv[1], sys.argv[2]
name = sys.argv[3] if len(sys.argv) > 3 else "model/ln_f/weight"
shutil.copyfile(source, target)
with h5py.File(target, "r+") as f:
    dset = f[name]
    values = dset[...].astype(np.float32)
    values.flat[0] = np.nan
    dset[...] = values
    dset.attrs[CHECKSUM_ATTRIBUTE] = np.uint64(checksum_block(values.reshape(-1), 0))
print(f"{target}: {name}[0] = NaN, checksum updated")
