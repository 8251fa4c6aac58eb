"""Sparse storage for ONNX models whose weights hold exact zeros, both formats lossless (zero = all bits zero):

- ONNX `sparse_initializer`s (`to_sparse_initializers`): the standard's container, linear INT64 indices, so a
  float32 tensor only shrinks below 1/3 density; onnxruntime loads such a file directly.
- Bitmask + values (`pack_bitmask` / `unpack_bitmask`): a deflated zip of the model without the packed tensors'
  bytes, one bit per weight and the non-zero values; `unpack_bitmask` restores the exact original bytes.

Only numpy and onnx are imported, so runtimes in their own virtual environments can load these files.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

BITMASK_SUFFIX = ".bitmask.zip"
MIN_ELEMENTS = 64  # tensors smaller than this (biases, scalars) are never worth packing


def _packable(tensor: onnx.TensorProto) -> np.ndarray | None:
    """A fixed-width numeric initializer's elements (in raw_data) as unsigned integers of their own width, so zero
    means all bits zero; None for other tensors and for those too small to be worth packing."""
    if not tensor.HasField("raw_data") or tensor.data_type == onnx.TensorProto.STRING:
        return None
    size = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    bits = np.frombuffer(tensor.raw_data, dtype=np.dtype(f"<u{size}")) if size in (1, 2, 4, 8) else None
    return bits if bits is not None and bits.size >= MIN_ELEMENTS else None


def to_sparse_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` where every initializer that gets smaller as (values, INT64 indices) becomes a
    sparse_initializer of the same name. Only the main graph is converted (no subgraph initializers)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep, sparse = [], []
    for t in out.graph.initializer:
        bits = _packable(t)
        if bits is None or np.count_nonzero(bits) * (bits.itemsize + 8) >= bits.nbytes:  # values + int64 indices
            keep.append(t)
            continue
        nz = np.flatnonzero(bits)
        dense = numpy_helper.to_array(t).reshape(-1)
        values = numpy_helper.from_array(dense[nz], t.name)
        indices = numpy_helper.from_array(nz.astype(np.int64), "")
        sparse.append(helper.make_sparse_tensor(values, indices, list(t.dims)))
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    out.graph.sparse_initializer.extend(sparse)
    return out


def from_sparse_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every sparse_initializer expanded to a dense initializer of the same name."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for sp in out.graph.sparse_initializer:
        values = numpy_helper.to_array(sp.values)
        indices = numpy_helper.to_array(sp.indices).astype(np.int64)
        if indices.ndim == 2:  # [NNZ, rank] coordinate form
            indices = np.ravel_multi_index(tuple(indices.T), tuple(sp.dims))
        dense = np.zeros(int(np.prod(sp.dims)), dtype=values.dtype)
        dense[indices] = values
        out.graph.initializer.append(numpy_helper.from_array(dense.reshape(tuple(sp.dims)), sp.values.name))
    del out.graph.sparse_initializer[:]
    return out


def pack_bitmask(model: onnx.ModelProto) -> bytes:
    """Zip of: the model with packed tensors' raw_data emptied, and per packed tensor a bitmask of its
    non-zero elements plus the non-zero elements themselves. Tensors that would not shrink stay inside
    the model. `unpack_bitmask` restores the exact original serialisation."""
    skeleton = onnx.ModelProto()
    skeleton.CopyFrom(model)
    index: list[dict] = []
    arrays: dict = {}
    for t in skeleton.graph.initializer:
        bits = _packable(t)
        if bits is None or bits.size / 8 + np.count_nonzero(bits) * bits.itemsize >= bits.nbytes:
            continue
        nonzero = bits != 0
        k = len(index)
        index.append({"name": t.name, "n": int(bits.size), "itemsize": bits.itemsize})
        arrays[f"mask_{k}"] = np.packbits(nonzero, bitorder="little")
        arrays[f"values_{k}"] = bits[nonzero]
        t.raw_data = b""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("model.onnx", skeleton.SerializeToString())
        z.writestr("index.json", json.dumps(index))
        for name, arr in arrays.items():
            z.writestr(name, arr.tobytes())
    return buf.getvalue()


def unpack_bitmask(data: bytes) -> onnx.ModelProto:
    """The model packed by `pack_bitmask`, bit for bit."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        model = onnx.load_model_from_string(z.read("model.onnx"))
        index = json.loads(z.read("index.json"))
        by_name = {t.name: t for t in model.graph.initializer}
        for k, entry in enumerate(index):
            dtype = np.dtype(f"<u{entry['itemsize']}")
            nonzero = np.unpackbits(
                np.frombuffer(z.read(f"mask_{k}"), np.uint8), count=entry["n"], bitorder="little"
            ).astype(bool)
            dense = np.zeros(entry["n"], dtype=dtype)
            dense[nonzero] = np.frombuffer(z.read(f"values_{k}"), dtype=dtype)
            by_name[entry["name"]].raw_data = dense.tobytes()
    return model


def load_any(path: str | Path) -> onnx.ModelProto:
    """A dense ModelProto from a plain ONNX file, a sparse-initializer ONNX file or a bitmask zip."""
    path = Path(path)
    if path.name.endswith(BITMASK_SUFFIX):
        return unpack_bitmask(path.read_bytes())
    model = onnx.load(str(path))
    return from_sparse_initializers(model) if len(model.graph.sparse_initializer) else model


def write_sparse_files(dense_path: str | Path) -> dict[str, Path]:
    """Beside `x.onnx`, write `x.sparse.onnx` (sparse_initializers) and `x.bitmask.zip`; return the paths."""
    dense_path = Path(dense_path)
    model = onnx.load(str(dense_path))
    stem = dense_path.with_suffix("")
    sparse_path = stem.with_name(stem.name + ".sparse.onnx")
    onnx.save(to_sparse_initializers(model), str(sparse_path))
    bitmask_path = stem.with_name(stem.name + BITMASK_SUFFIX)
    bitmask_path.write_bytes(pack_bitmask(model))
    return {"dense": dense_path, "sparse_initializer": sparse_path, "bitmask": bitmask_path}


def zlib_size(path: str | Path, level: int = 9) -> int:
    """Bytes of the file under zlib: what a generic compressor makes of the same zeros."""
    import zlib

    return len(zlib.compress(Path(path).read_bytes(), level))
