#!/usr/bin/python3
"""Fixture maker for tests/hostile/hostile_pass.sh (damaged checkpoints, token shards).

    hostile_fixtures.py offsets SEED N_HEAD N_TOTAL FILE      print N_TOTAL "offset xor" lines:
                                                              N_HEAD in the first 4 KiB, the rest
                                                              anywhere in FILE (seeded, distinct)
    hostile_fixtures.py flip IN OUT OFFSET XOR                 copy IN with one byte XOR-ed
    hostile_fixtures.py truncate IN OUT LENGTH                 first LENGTH bytes of IN
    hostile_fixtures.py mutate IN OUT KIND                     copy IN and damage it with h5py
    hostile_fixtures.py kinds                                  list the KINDs
    hostile_fixtures.py sealed IN                              the attributes the metadata checksum
                                                               seals in IN ("step", "train/seed")
    hostile_fixtures.py reseal IN OUT PATH                     copy IN with sealed attribute PATH
                                                               changed alone (an integer + 1, the
                                                               deck with one byte changed)
    hostile_fixtures.py foreign OUT                            a valid HDF5 file, not tptrain's
    hostile_fixtures.py shard OUT KIND                         an llm.c .bin token shard variant
    hostile_fixtures.py shards                                 list the shard KINDs
    hostile_fixtures.py scale IN OUT DATASET FACTOR            copy IN with DATASET * FACTOR (its
                                                              checksum updated): finite, but it may
                                                              overflow fp16 (ln_f weight * 1e6)
    hostile_fixtures.py loss_scale IN OUT SCALE                copy IN with the fp16 loss scaler's
                                                              /train state set to SCALE (nan, inf,
                                                              0, 1e300, ...) and the metadata
                                                              checksum updated

Needs Debian's python3-h5py (run with /usr/bin/python3).
"""
import os
import random
import shutil
import struct
import sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
CHECKSUM = "checksum_splitmix64_sum"


def checksum(values):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "io"))
    from checkpoint_stats import checksum_block  # noqa: E402
    import numpy as np
    return np.uint64(checksum_block(np.asarray(values, dtype=np.float32).reshape(-1), 0))


def splitmix64_int(x):
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def metadata_checksum(f):
    """io/checkpoint_checksum.cpp's metadata_checksum of an open checkpoint (format_version 2)."""
    a = f.attrs
    text = "format_version=2\n" + "".join(f"{k}={int(a[k])}\n" for k in ("step", "tokens_seen", "tp", "pp", "dp"))
    train = f["train"].attrs if "train" in f else {}
    text += "".join(f"train.{k}={int(train[k])}\n" for k in sorted(train))
    if "train/blend" in f:  # data.train's record (io/checkpoint_blend.hpp)
        import struct
        b = f["train/blend"].attrs
        text += f"train.blend.sequences={int(b['sequences'])}\n"
        i = 0
        while f"path_{i}" in b:
            path = b[f"path_{i}"]
            bits = struct.unpack("<Q", struct.pack("<d", float(b[f"weight_{i}"])))[0]
            text += (f"train.blend.path_{i}={path.decode() if isinstance(path, bytes) else str(path)}\n"
                     f"train.blend.tokens_{i}={int(b[f'tokens_{i}'])}\ntrain.blend.weight_{i}={bits:016x}\n"
                     f"train.blend.drawn_{i}={int(b[f'drawn_{i}'])}\n")
            i += 1
    deck = a["deck"]
    text += "deck=" + (deck.decode() if isinstance(deck, bytes) else str(deck))
    data = text.encode()
    h = 0
    for i in range(0, len(data), 8):
        h = splitmix64_int(h ^ int.from_bytes(data[i:i + 8].ljust(8, b"\0"), "little"))
    return splitmix64_int(h ^ len(data))


def set_loss_scale(f, scale):
    """The fp16 loss scaler's /train state (src/train/training_run.cpp) with the scale `scale`."""
    import numpy as np
    train = f.require_group("train")
    train.attrs["loss_scale_bits"] = np.array(float(scale), dtype="<f8").view("<i8")[()]
    train.attrs["loss_scale_growth_tracker"] = np.int64(0)
    train.attrs["loss_scale_hysteresis_tracker"] = np.int64(2)
    f.attrs["metadata_checksum_splitmix64"] = np.uint64(metadata_checksum(f))


def set_value(f, name, index, value, fix_checksum):
    import numpy as np
    d = f[name]
    v = d[...].astype(np.float32)
    v.flat[index] = value
    d[...] = v
    if fix_checksum:
        d.attrs[CHECKSUM] = checksum(v)


def replace(f, name, data, fix_checksum=True, **kw):
    import numpy as np
    del f[name]
    d = f.create_dataset(name, data=data, **kw)
    if fix_checksum:
        d.attrs[CHECKSUM] = checksum(np.asarray(data, dtype=np.float32))


def mutate(f, kind):
    import h5py
    import numpy as np
    w = "model/ln_f/weight"
    if kind == "rename_model":
        f.move("model", "model_renamed")
    elif kind == "delete_dataset":
        del f[w]
    elif kind == "delete_optimizer":
        del f["optimizer"]
    elif kind == "delete_train":
        del f["train"]
    elif kind == "no_format_attr":
        del f.attrs["format"]
    elif kind == "format_wrong":
        f.attrs["format"] = "not-a-tptrain-checkpoint"
    elif kind == "format_version_99":
        f.attrs["format_version"] = np.int32(99)
    elif kind == "format_version_string":
        f.attrs["format_version"] = "1"
    elif kind == "step_negative":
        f.attrs["step"] = np.int64(-1)
    elif kind == "step_huge":
        f.attrs["step"] = np.int64(2**62)
    elif kind == "optimizer_step_mismatch":
        f["optimizer"].attrs["step"] = np.int64(3)
    elif kind == "train_attr_string":
        f["train"].attrs["seed"] = "not a number"
    elif kind == "tp_zero":
        f.attrs["tp"] = np.int32(0)
    elif kind == "deck_garbage":
        f.attrs["deck"] = "\x01\x02 [[[ not toml\n"
    elif kind == "no_checksum":
        del f[w].attrs[CHECKSUM]
    elif kind == "checksum_wrong_type":
        f[w].attrs[CHECKSUM] = "0x1234"
    elif kind == "nan_stale_checksum":
        set_value(f, w, 0, np.nan, False)
    elif kind == "nan_good_checksum":
        set_value(f, w, 0, np.nan, True)
    elif kind == "inf_good_checksum":
        set_value(f, "model/layers/0/mlp/fc/weight", 5, np.inf, True)
    elif kind == "optimizer_nan_good_checksum":
        set_value(f, "optimizer/exp_avg_sq/ln_f/weight", 0, np.nan, True)
    elif kind == "shape_word_255":
        replace(f, "model/embedding/word", f["model/embedding/word"][:255, :])
    elif kind == "shape_transposed":
        replace(f, "model/layers/0/attn/proj/weight",
                f["model/layers/0/attn/proj/weight"][...].reshape(16, 64))
    elif kind == "float64_bias":
        replace(f, "model/ln_f/bias", f["model/ln_f/bias"][...].astype(np.float64))
    elif kind == "int32_weight":
        replace(f, w, np.ones(f[w].shape, dtype=np.int32))
    elif kind == "dataset_is_group":
        del f[w]
        f.create_group(w)
    elif kind == "scalar_dataset":
        replace(f, w, np.float32(1.0))
    elif kind == "external_link":
        del f["model/ln_f"]
        f["model/ln_f"] = h5py.ExternalLink("/nonexistent/missing.h5", "/ln_f")
    elif kind == "softlink_loop":
        del f[w]
        f[w] = h5py.SoftLink("/" + w)
    elif kind == "extra_dataset":
        f.create_dataset("model/extra_tensor", data=np.zeros(3, dtype=np.float32))
    elif kind == "chunked_gzip":
        replace(f, w, f[w][...], chunks=(8,), compression="gzip")
    else:
        sys.exit(f"unknown mutation {kind}")


KINDS = ["rename_model", "delete_dataset", "delete_optimizer", "delete_train", "no_format_attr",
         "format_wrong", "format_version_99", "format_version_string", "step_negative", "step_huge",
         "optimizer_step_mismatch", "train_attr_string", "tp_zero", "deck_garbage", "no_checksum",
         "checksum_wrong_type", "nan_stale_checksum", "nan_good_checksum", "inf_good_checksum",
         "optimizer_nan_good_checksum", "shape_word_255", "shape_transposed", "float64_bias",
         "int32_weight", "dataset_is_group", "scalar_dataset", "external_link", "softlink_loop",
         "extra_dataset", "chunked_gzip"]


# Root attributes the metadata checksum leaves out (io/checkpoint_file.hpp); every other root and
# /train attribute is sealed (tests/io/test_metadata_checksum.cpp holds the C++ side to this).
UNSEALED = {"format", "format_version", "precision", "metadata_checksum_splitmix64"}


def sealed(f):
    names = [n for n in sorted(f.attrs) if n not in UNSEALED]
    return names + ["train/" + n for n in sorted(f["train"].attrs)]


def reseal(f, path):
    import numpy as np
    group, _, name = path.rpartition("/")
    attrs = f[group].attrs if group else f.attrs
    value = attrs[name]
    if isinstance(value, (bytes, str)):
        text = value.decode() if isinstance(value, bytes) else value
        i = len(text) // 2
        attrs[name] = text[:i] + chr(ord(text[i]) ^ 1) + text[i + 1:]
    else:
        attrs[name] = (value + 1).astype(value.dtype)


def shard(path, kind):
    n = 1000
    tokens = [(i * 7 + 3) % 200 for i in range(n)]  # < 256
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = MAGIC, VERSION, n
    tail = b""
    if kind == "valid":
        pass
    elif kind == "odd_length":
        tail = b"\x01"
    elif kind == "truncated":
        tokens = tokens[:500]
    elif kind == "longer":
        tokens = tokens + [1, 2, 3]
    elif kind == "count_zero":
        header[2], tokens = 0, []
    elif kind == "count_negative":
        header[2] = -5
    elif kind == "count_int_max":
        header[2] = 2**31 - 1
    elif kind == "bad_magic":
        header[0] = 12345
    elif kind == "version_2":
        header[1] = 2
    elif kind == "token_ge_vocab":
        tokens[500] = 300
    elif kind == "token_65535":
        tokens[-1] = 65535
    elif kind == "short_header":
        with open(path, "wb") as f:
            f.write(struct.pack("<25i", MAGIC, VERSION, n, *([0] * 22)))
        return
    else:
        sys.exit(f"unknown shard kind {kind}")
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
        f.write(tail)


SHARDS = ["valid", "odd_length", "truncated", "longer", "count_zero", "count_negative",
          "count_int_max", "bad_magic", "version_2", "token_ge_vocab", "token_65535", "short_header"]


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "offsets":
        seed, n_head, n_total, path = int(argv[2]), int(argv[3]), int(argv[4]), argv[5]
        size = os.path.getsize(path)
        rng = random.Random(seed)
        head = rng.sample(range(min(4096, size)), n_head)
        rest = set()
        while len(rest) < n_total - n_head:
            o = rng.randrange(4096, size)
            if o not in head:
                rest.add(o)
        for o in head + sorted(rest):
            print(o, rng.randrange(1, 256))
    elif cmd == "flip":
        src, dst, offset, xor = argv[2], argv[3], int(argv[4]), int(argv[5])
        data = bytearray(open(src, "rb").read())
        data[offset] ^= xor
        open(dst, "wb").write(data)
    elif cmd == "truncate":
        src, dst, length = argv[2], argv[3], int(argv[4])
        open(dst, "wb").write(open(src, "rb").read()[:length])
    elif cmd == "mutate":
        import h5py
        src, dst, kind = argv[2], argv[3], argv[4]
        shutil.copyfile(src, dst)
        with h5py.File(dst, "r+") as f:
            mutate(f, kind)
    elif cmd == "kinds":
        print("\n".join(KINDS))
    elif cmd == "sealed":
        import h5py
        with h5py.File(argv[2], "r") as f:
            print("\n".join(sealed(f)))
    elif cmd == "reseal":
        import h5py
        src, dst, path = argv[2], argv[3], argv[4]
        shutil.copyfile(src, dst)
        with h5py.File(dst, "r+") as f:
            reseal(f, path)
    elif cmd == "foreign":
        import h5py
        import numpy as np
        with h5py.File(argv[2], "w") as f:
            f.create_dataset("x", data=np.arange(10, dtype=np.float32))
            f.attrs["format"] = "something-else"
    elif cmd == "shard":
        shard(argv[2], argv[3])
    elif cmd == "shards":
        print("\n".join(SHARDS))
    elif cmd == "scale":
        import h5py
        import numpy as np
        src, dst, name, factor = argv[2], argv[3], argv[4], float(argv[5])
        shutil.copyfile(src, dst)
        with h5py.File(dst, "r+") as f:
            v = f[name][...].astype(np.float32) * np.float32(factor)
            f[name][...] = v
            f[name].attrs[CHECKSUM] = checksum(v)
    elif cmd == "loss_scale":
        import h5py
        src, dst, scale = argv[2], argv[3], argv[4]
        shutil.copyfile(src, dst)
        with h5py.File(dst, "r+") as f:
            set_loss_scale(f, scale)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
