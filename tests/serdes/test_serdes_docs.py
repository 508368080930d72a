"""The serdes package's public names and docstring examples are what users get."""

from __future__ import annotations

import doctest
import importlib

import pytest

import serdes

MODULES = ["serdes.bytes", "serdes.string", "serdes.json", "serdes.avro", "serdes.confluent_avro"]


def test_exported_members():
    assert sorted(serdes.__all__) == [
        "AvroSerde",
        "BytesSerde",
        "ConfluentAvroSerde",
        "DecodeFailure",
        "DecodeResult",
        "JsonSerde",
        "Serde",
        "StringSerde",
    ]
    for name in serdes.__all__:
        assert getattr(serdes, name).__module__.startswith("serdes.")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
