"""Spark's ``xxhash64`` in pure Python: the task a fields grouping gives a spout's raw row.

On Spark, a fields grouping reading a spout's typed columns assigns
``__task = pmod(xxhash64(fields...), n)`` (``kstorm/_spark/compiler.py``). The Spark-free test
driver (``kstorm.testdriver``) computes the same task for the same row, so a bolt task sees
the same tuples on both runtimes.

Spark's ``XxHash64`` expression starts from seed 42 and folds each non-null column in, by its
Spark type: ``IntegerType``-like values (and booleans, as 1/0) through ``hashInt``, longs
through ``hashLong``, floats and doubles as their IEEE bits (``-0.0`` as ``0.0``), strings as
UTF-8 bytes and binaries through ``hashUnsafeBytes`` (standard XXH64).

Example:
    >>> spark_task([7], [pa.int64()], 4) == spark_task([7], [pa.int64()], 4)
    True
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from kstorm.errors import TopologyError

_M = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


def _round(acc: int, value: int) -> int:
    acc = (acc + value * _P2) & _M
    return (_rotl(acc, 31) * _P1) & _M


def hash_int(value: int, seed: int) -> int:
    """Spark's ``XXH64.hashInt`` (unsigned 64-bit result)."""
    h = (seed + _P5 + 4) & _M
    h ^= ((value & 0xFFFFFFFF) * _P1) & _M
    h = (_rotl(h, 23) * _P2 + _P3) & _M
    return _fmix(h)


def hash_long(value: int, seed: int) -> int:
    """Spark's ``XXH64.hashLong`` (unsigned 64-bit result)."""
    h = (seed + _P5 + 8) & _M
    h ^= (_rotl((value * _P2) & _M, 31) * _P1) & _M
    h = (_rotl(h, 27) * _P1 + _P4) & _M
    return _fmix(h)


def hash_bytes(data: bytes, seed: int) -> int:
    """Spark's ``XXH64.hashUnsafeBytes``: standard XXH64 (unsigned 64-bit result)."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        while i <= n - 32:
            a, b, c, d = struct.unpack_from("<4Q", data, i)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        for v in (v1, v2, v3, v4):
            h ^= _round(0, v)
            h = (h * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i <= n - 8:
        (k,) = struct.unpack_from("<Q", data, i)
        h ^= _round(0, k)
        h = (_rotl(h, 27) * _P1 + _P4) & _M
        i += 8
    if i <= n - 4:
        (k,) = struct.unpack_from("<I", data, i)
        h ^= (k * _P1) & _M
        h = (_rotl(h, 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        i += 1
    return _fmix(h)


def _fold(value: Any, kind: pa.DataType, seed: int) -> int:
    if value is None:
        return seed
    if pa.types.is_boolean(kind):
        return hash_int(1 if value else 0, seed)
    if pa.types.is_integer(kind):
        if kind.bit_width <= 32 and not (pa.types.is_unsigned_integer(kind)
                                         and kind.bit_width == 32):
            return hash_int(int(value), seed)
        return hash_long(int(value), seed)
    if pa.types.is_float32(kind):
        bits = struct.unpack("<I", struct.pack("<f", 0.0 if value == 0 else value))[0]
        return hash_int(bits, seed)
    if pa.types.is_floating(kind):
        bits = struct.unpack("<Q", struct.pack("<d", 0.0 if value == 0 else value))[0]
        return hash_long(bits, seed)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return hash_bytes(str(value).encode(), seed)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return hash_bytes(bytes(value), seed)
    msg = f"cannot compute Spark's xxhash64 of a {kind} column in the test driver"
    raise TopologyError(msg, hint="group on string, integer, float, boolean or binary fields")


def spark_xxhash64(values: Sequence[Any], kinds: Sequence[pa.DataType]) -> int:
    """``xxhash64(values...)`` as Spark computes it (a signed 64-bit integer)."""
    h = SEED
    for value, kind in zip(values, kinds, strict=True):
        h = _fold(value, kind, h)
    return h - (1 << 64) if h >= 1 << 63 else h


def spark_task(values: Sequence[Any], kinds: Sequence[pa.DataType], n: int) -> int:
    """``pmod(xxhash64(values...), n)``: the task Spark gives a raw row."""
    return spark_xxhash64(values, kinds) % n
