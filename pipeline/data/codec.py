"""Frozen dataclasses to JSON and back, checked against their annotations.

Every record that crosses a file between stages (shard metadata, launch settings in the ledger) is a
frozen dataclass whose fields are JSON scalars, other records, tuples of them, or mappings of
string keys. ``encode`` gives its plain JSON values; ``decode`` builds it from them, checking every
field against its annotation (an int is an int and not a bool, a float is a finite number, a tuple
is a list, None only where the annotation allows it, a ``Literal`` one of its values) before the
record's own ``__post_init__`` rules run, so a record read back is valid exactly when it
constructs. A :class:`RecordError` names the field (``shape.windows``) and what was wrong with it.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache
from typing import Any, Literal, Self, TypeVar, Union

T = TypeVar("T")


class RecordError(ValueError):
    """JSON that does not construct the record; the message names the field and why."""


class JsonRecord:
    """A frozen dataclass that is its own JSON object: :func:`encode` there, :func:`decode` back."""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = encode(self)
        return out

    @classmethod
    def from_json(cls, data: object) -> Self:
        return decode(cls, data)


def encode(value: Any) -> Any:
    """A record (or a tuple, list or mapping of them) as plain JSON values; a record's class may name
    properties to write beside its fields in ``JSON_PROPERTIES``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in getattr(value, "JSON_PROPERTIES", ()):
            out[name] = encode(getattr(value, name))
        return out
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(cls: type[T], data: object, where: str = "") -> T:
    """``cls`` built from JSON ``data``; ``where`` is the field path for messages (``""`` at the top).
    Keys that name no field are ignored (properties written by ``encode``)."""
    if not isinstance(data, dict):
        raise RecordError(f"{where or 'the record'} must be an object, got {_short(data)}")
    hints = _hints(cls)  # type: ignore[arg-type]  # dataclass types are hashable
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        path = f"{where}.{f.name}" if where else f.name
        if f.name not in data:
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                continue
            raise RecordError(f"{path} is missing")
        values[f.name] = _value(hints[f.name], data[f.name], path)
    try:  # the fields are built: what fails here is this record's own rule
        return cls(**values)
    except ValueError as err:
        raise RecordError(f"{where}: {err}" if where else str(err)) from None


@cache
def _hints(cls: Any) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _value(hint: Any, data: object, path: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return decode(hint, data, path)  # type: ignore[arg-type]
    if origin is Literal:
        return _chosen(hint, data, path)
    if origin in (tuple, list):
        if not isinstance(data, list):
            raise RecordError(f"{path} must be a list, got {_short(data)}")
        return origin(_value(args[0], item, f"{path}[{i}]") for i, item in enumerate(data))
    if origin is dict:
        if not isinstance(data, dict):
            raise RecordError(f"{path} must be an object, got {_short(data)}")
        if args[1] is Any:
            return data
        return {k: _value(args[1], v, f"{path}.{k}") for k, v in data.items()}
    if hint is Any or _is(hint, data):
        return data
    raise RecordError(f"{path} must be {_name(hint)}, got {_short(data)}")


def check_choices(record: object) -> None:
    """Refuse (:class:`RecordError`) a field of ``record`` whose annotation is a ``Literal`` and whose
    value is none of its values: a record built in code, not decoded, is held to its choices too."""
    hints = _hints(type(record))  # type: ignore[arg-type]  # dataclass types are hashable
    for f in dataclasses.fields(record):  # type: ignore[arg-type]
        hint = hints[f.name]
        value = getattr(record, f.name)
        if typing.get_origin(hint) in (Union, types.UnionType) and value is not None:
            hint = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
        if typing.get_origin(hint) is Literal:
            _chosen(hint, value, f.name)


def _chosen(hint: Any, data: object, path: str) -> object:
    """``data`` when it is one of the ``Literal`` ``hint``'s values; a RecordError names it and them."""
    allowed = typing.get_args(hint)
    if any(data == a and type(data) is type(a) for a in allowed):
        return data
    raise RecordError(f"{path} {_short(data)} is not allowed; allowed: {', '.join(map(str, allowed))}")


def _is(hint: type, data: object) -> bool:
    if hint is bool:
        return isinstance(data, bool)
    if hint is int:
        return isinstance(data, int) and not isinstance(data, bool)
    if hint is float:
        return isinstance(data, int | float) and not isinstance(data, bool) and math.isfinite(data)
    return isinstance(data, hint)


def _name(hint: type) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a finite number", str: "a string"}
    return names.get(hint, hint.__name__)


def _short(data: object) -> str:
    return f"{data!r:.80}"
