"""Flat protocol records and their typed readers.

A record is a ``dict`` of ``str`` to ``int``, ``float``, ``str``, ``bytes``
or ``bool`` (what a Flower ``ConfigRecord`` holds, so the Flower adapters
wrap it unchanged). The readers check presence and type the way Flower's
SecAgg+ ``check_configs`` does (``type(x) is int``, so a ``bool`` is not an
int) and raise :class:`fedleak.errors.ProtocolError` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ProtocolError
from ..protocol import pack_ids, unpack_ids

__all__ = [
    "Record",
    "Value",
    "get_bytes",
    "get_ids",
    "get_int",
    "get_str",
    "pack_ids",
    "unpack_ids",
]

Value = int | float | str | bytes | bool
Record = dict[str, Value]


def _get(record: Mapping[str, Any], key: str, kind: str) -> Any:
    if key not in record:
        raise ProtocolError(f"secure-aggregation record lacks {kind} {key!r}")
    return record[key]


def get_int(record: Mapping[str, Any], key: str) -> int:
    """Return ``record[key]`` if it is an ``int`` (not a ``bool``)."""
    value = _get(record, key, "integer")
    if type(value) is not int:
        raise ProtocolError(
            f"secure-aggregation record: {key!r} must be an integer, got "
            f"{type(value).__name__}"
        )
    return value


def get_bytes(record: Mapping[str, Any], key: str) -> bytes:
    """Return ``record[key]`` if it is ``bytes``."""
    value = _get(record, key, "bytes")
    if type(value) is not bytes:
        raise ProtocolError(
            f"secure-aggregation record: {key!r} must be bytes, got "
            f"{type(value).__name__}"
        )
    return value


def get_str(record: Mapping[str, Any], key: str) -> str:
    """Return ``record[key]`` if it is a ``str``."""
    value = _get(record, key, "string")
    if type(value) is not str:
        raise ProtocolError(
            f"secure-aggregation record: {key!r} must be a string, got "
            f"{type(value).__name__}"
        )
    return value


def get_ids(record: Mapping[str, Any], key: str) -> list[int]:
    """Return the node ids packed in ``record[key]`` (:func:`pack_ids`)."""
    data = get_bytes(record, key)
    try:
        return unpack_ids(data)
    except ValueError as err:
        raise ProtocolError(f"secure-aggregation record: {key!r}: {err}") from None
