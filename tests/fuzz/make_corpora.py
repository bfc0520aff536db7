#!/usr/bin/env python3
"""Seeds the fuzzers' corpora (scripts/fuzz.sh) from the ONNX conformance data; nothing is committed to the repo.

    make_corpora.py BACKEND_DATA_DIR CORPUS_DIR

CORPUS_DIR/model   the model.onnx of every case of node/ and simple/ (light/ is large and slow to run)
CORPUS_DIR/tensor  the input and output TensorProtos of those cases (up to 64 KiB), plus tensors with external data naming each
                   file of the directory tests/fuzz/fuzz_tensor.cc prepares (regular, link out, hard link, FIFO...)
CORPUS_DIR/plugin_report  a few inputs naming the harness's plugin directories

Existing corpus files (what earlier runs found) are kept; seeds are rewritten under names that start with "seed-".
"""
import hashlib
import pathlib
import shutil
import sys

# The few larger tensors (3-D pooling data) add no code path, only slower mutations (libFuzzer's -max_len follows
# the largest seed).
MAX_TENSOR_SEED = 64 * 1024


def copy_seed(src: pathlib.Path, dst_dir: pathlib.Path, prefix: str) -> None:
    data = src.read_bytes()
    digest = hashlib.sha1(data).hexdigest()[:12]  # identical files (many outputs are) become one seed
    (dst_dir / f"seed-{prefix}-{digest}").write_bytes(data)


def external_tensor_seeds(dst_dir: pathlib.Path) -> int:
    try:
        from onnx import TensorProto
    except ImportError:
        print("make_corpora: python onnx is missing; no external-data seeds", file=sys.stderr)
        return 0
    count = 0
    # (location, offset, length, dims, type): valid reads, reads past the end, and every kind of file.
    cases = [
        ("data.bin", None, None, [4, 4], TensorProto.FLOAT),
        ("data.bin", "64", "64", [16], TensorProto.FLOAT),
        ("data.bin", "4090", None, [2], TensorProto.FLOAT),
        ("sub/inner.bin", None, "256", [256], TensorProto.UINT8),
        ("sub/inner.bin", "0", None, [3, 5], TensorProto.INT4),
        ("empty.bin", None, None, [0], TensorProto.FLOAT),
        ("link_in", "8", None, [2, 2], TensorProto.INT64),
        ("link_out", None, None, [4], TensorProto.FLOAT),
        ("hard", None, None, [4], TensorProto.FLOAT),
        ("fifo", None, None, [4], TensorProto.FLOAT),
        ("sub", None, None, [4], TensorProto.FLOAT),
        ("../outside.bin", None, None, [4], TensorProto.FLOAT),
        ("/etc/passwd", None, None, [4], TensorProto.UINT8),
        ("data.bin", "-1", None, [4], TensorProto.FLOAT),
        ("data.bin", "18446744073709551615", None, [4], TensorProto.FLOAT),
        ("data.bin", None, None, [3, 7], TensorProto.FLOAT6E2M3 if hasattr(TensorProto, "FLOAT6E2M3") else 27),
        ("data.bin", None, None, [5], TensorProto.BFLOAT16),
        ("data.bin", None, None, [2], TensorProto.STRING),
    ]
    for location, offset, length, dims, dtype in cases:
        t = TensorProto()
        t.name = "t"
        t.data_type = dtype
        t.dims.extend(dims)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", offset), ("length", length)):
            if value is not None:
                entry = t.external_data.add()
                entry.key, entry.value = key, value
        (dst_dir / f"seed-external-{count:02d}").write_bytes(t.SerializeToString())
        count += 1
    return count


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    data = pathlib.Path(sys.argv[1])
    out = pathlib.Path(sys.argv[2])
    model_dir, tensor_dir, plugin_dir = out / "model", out / "tensor", out / "plugin_report"
    for d in (model_dir, tensor_dir, plugin_dir):
        d.mkdir(parents=True, exist_ok=True)
    models = tensors = 0
    for suite in ("node", "simple"):
        for case in sorted((data / suite).glob("*")):
            model = case / "model.onnx"
            if not model.is_file():
                continue
            copy_seed(model, model_dir, case.name)
            models += 1
            for pb in sorted(case.glob("test_data_set_*/*.pb")):
                if pb.stat().st_size <= MAX_TENSOR_SEED:
                    copy_seed(pb, tensor_dir, case.name)
                    tensors += 1
    if models == 0:
        print(f"make_corpora: no models under {data}/node or {data}/simple", file=sys.stderr)
        return 1
    tensors += external_tensor_seeds(tensor_dir)
    # FuzzedDataProvider takes strings from the front and numbers from the back; these give a plugin path list and
    # file names that name the harness's directories.
    for i, text in enumerate([b"real", b"real:odd:fuzz", b"libfuzz.so\\\x00fuzz:real\\::real/libtest_no_entry.so",
                              b"..:/:real/../odd:::", b"\x7fELF\\\x00fuzz"]):
        (plugin_dir / f"seed-{i}").write_bytes(text + b"\x01\x02\x03\x04")
    print(f"make_corpora: {models} models, {tensors} tensors -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
