"""Minimal .safetensors reader/writer for torch tensors, for the PyTorch differential tests.

There is no `safetensors` package on the test machines, so this writes and reads the format
directly: an 8-byte little-endian header length N, N bytes of JSON header
({"name": {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__"}), then the
little-endian data buffer. Supports float32 (F32), float16 (F16), bfloat16 (BF16) and float64 (F64); reading
returns F64 as float64. Depends only on torch, numpy and the standard library.

    save(path, {"W_query": torch.randn(3, 2)}, metadata={"format": "pt"})
    tensors = load(path)            # {"W_query": tensor(...)}
    metadata = load_metadata(path)  # {"format": "pt"}
"""

import json
import os
import struct

import numpy as np
import torch

__all__ = ["save", "load", "load_metadata", "dumps", "loads"]

# torch dtype -> (safetensors dtype, numpy dtype of the stored bits)
_TO_FILE = {
    torch.float32: ("F32", "<f4"),
    torch.float16: ("F16", "<f2"),
    torch.bfloat16: ("BF16", "<i2"),  # numpy has no bfloat16: move the raw 16-bit patterns
    torch.float64: ("F64", "<f8"),
}
# safetensors dtype -> (numpy dtype of the stored bits, element size, torch dtype to view as)
_FROM_FILE = {
    "F32": ("<f4", 4, None),
    "F16": ("<f2", 2, None),
    "BF16": ("<i2", 2, torch.bfloat16),
    "F64": ("<f8", 8, None),
}


def _tensor_bytes(name, tensor):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor {name!r} is a {type(tensor).__name__}, not a torch.Tensor")
    if tensor.dtype not in _TO_FILE:
        supported = ", ".join(str(d) for d in _TO_FILE)
        raise ValueError(f"tensor {name!r} has dtype {tensor.dtype}; supported: {supported}")
    dtype, np_dtype = _TO_FILE[tensor.dtype]
    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return dtype, t.numpy().astype(np_dtype, copy=False).tobytes()


def dumps(tensors, metadata=None):
    """The bytes of a safetensors file holding `tensors` (a dict name -> tensor), in dict order."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    offset = 0
    for name, tensor in tensors.items():
        if name == "__metadata__":
            raise ValueError("'__metadata__' is reserved and cannot name a tensor")
        dtype, data = _tensor_bytes(name, tensor)
        header[name] = {
            "dtype": dtype,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad the header to a multiple of 8 bytes, as the reference does
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def save(path, tensors, metadata=None):
    """Writes `tensors` (dict name -> float32/float16/bfloat16 tensor) to `path`, atomically."""
    data = dumps(tensors, metadata)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _parse(data, where):
    if len(data) < 8:
        raise ValueError(f"{where}: file is {len(data)} bytes, too short for safetensors")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{where}: header length {n} runs past the end of the file (truncated?)")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError(f"{where}: header is not a JSON object")
    buffer = memoryview(data)[8 + n:]
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, entry in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        dtype = entry["dtype"]
        if dtype not in _FROM_FILE:
            raise ValueError(f"{where}: tensor {name!r} has unsupported dtype {dtype!r}")
        np_dtype, size, view_as = _FROM_FILE[dtype]
        shape = [int(d) for d in entry["shape"]]
        begin, end = (int(x) for x in entry["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not 0 <= begin <= end <= len(buffer) or end - begin != count * size:
            raise ValueError(f"{where}: tensor {name!r} has bad data_offsets [{begin}, {end}]")
        array = np.frombuffer(buffer[begin:end], dtype=np_dtype, count=count).copy()
        tensor = torch.from_numpy(array.astype(np_dtype[1:], copy=False))  # to native order
        if view_as is not None:
            tensor = tensor.view(view_as)
        tensors[name] = tensor.reshape(shape)
    return tensors, metadata


def loads(data, where="<bytes>"):
    """(tensors, metadata) from the bytes of a safetensors file."""
    return _parse(bytes(data), where)


def load(path):
    """dict name -> tensor (float32, float16, bfloat16 or float64 as stored), in data order."""
    with open(path, "rb") as f:
        return _parse(f.read(), path)[0]


def load_metadata(path):
    """The file's "__metadata__" dict (empty if it has none)."""
    with open(path, "rb") as f:
        return _parse(f.read(), path)[1]
