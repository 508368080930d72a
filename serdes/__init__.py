"""Serdes: turn Kafka bytes into named, typed tuple fields (and back).

Bytes, text (``StringSerde``), JSON (``JsonSerde``) and Avro (``AvroSerde``,
``ConfluentAvroSerde``; these need ``pip install kstorm[avro]``).

Every serde follows :class:`serdes.base.Serde`; ``deserialize_batch`` returns an Arrow
batch of the good records plus a :class:`serdes.base.DecodeFailure` for each bad one.
"""

from serdes.avro import AvroSerde, ConfluentAvroSerde
from serdes.base import DecodeFailure, DecodeResult, Serde
from serdes.bytes import BytesSerde
from serdes.json import JsonSerde
from serdes.string import StringSerde

__all__ = [
    "AvroSerde",
    "ConfluentAvroSerde",
    "BytesSerde",
    "DecodeFailure",
    "DecodeResult",
    "JsonSerde",
    "Serde",
    "StringSerde",
]
