"""One serialiser for every result type: typed, frozen dataclasses to JSON-ready values and back, and their JSON Schema.

- :func:`to_dict` writes any result object as plain JSON values, field for field (``dataclasses.fields``), nested
  objects included; infinite numbers become the strings ``"inf"`` / ``"-inf"`` / ``"nan"``
  (:func:`json_number`), tuples and numpy arrays become lists, numpy scalars Python numbers. A class
  may list properties to write beside its fields in ``__json_computed__`` (a tuple of names: derived figures a
  reader of the file wants, such as an accounting result's headline ``epsilon``); they are ignored when read back.
- :func:`from_dict` rebuilds a typed object from such values: types checked and coerced from the type hints
  (``"inf"`` back to ``float('inf')``, lists to tuples), nested types included, and the class's own
  ``__post_init__`` validation run; a bad file is one :class:`~dpaudit.errors.DataError` naming the field.
- :func:`json_schema` is the JSON Schema of a type, generated from the same type hints.

Reading and the schema are done by pydantic v2's ``TypeAdapter`` over the standard-library dataclasses (imported
lazily, on the first read, so ``import dpaudit`` stays fast); the result types themselves import nothing of it.
A class whose old files need a change before they fit today's fields derives from :class:`JsonUpgrade` and defines
the classmethod ``__json_upgrade__(data) -> data``. DP events (:mod:`dpaudit.accountants.events`) keep their tagged
``{"type": NAME, ...}`` form (a field of type ``DpEvent`` may hold any event); :func:`to_dict` writes any object
with a ``to_dict()`` method through it.

To serialise a new result type: make it a frozen dataclass with precise type hints (``float | None``,
``tuple[X, ...]``, ``Mapping[str, Any]``, ``FloatArray`` / ``IntArray`` / ``BoolArray`` for numpy arrays) and call
:func:`to_dict` / :func:`from_dict`; if a file dpaudit writes holds it, add it to that file's schema in
:mod:`dpaudit.auditing.json_schemas` and regenerate ``dpaudit/schemas/`` (CONTRIBUTING.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any, Annotated, Mapping, TypeVar

import numpy as np

from dpaudit.errors import DataError, ParameterError

__all__ = ["to_dict", "UnwritableError", "from_dict", "json_schema", "json_number", "parse_json_number", "JsonUpgrade", "FloatArray",
           "IntArray", "BoolArray", "JsonValue", "NUMBER_SCHEMA"]

T = TypeVar("T")

#: A JSON number as dpaudit writes it: a number, or one of the strings "inf", "-inf", "nan".
NUMBER_SCHEMA: dict[str, Any] = {"anyOf": [{"type": "number"}, {"enum": ["inf", "-inf", "nan"]}]}


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def json_number(x: Any) -> Any:
    """A number as strict JSON can hold it: ``inf``/``-inf``/``nan`` become the strings "inf"/"-inf"/"nan",
    numpy scalars become Python numbers, anything else is returned unchanged (``None`` included).
    (Also importable as ``dpaudit._io.json_number``.)"""
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    return x


def parse_json_number(x: Any) -> Any:
    """Inverse of :func:`json_number`: the strings "inf"/"-inf"/"nan" become floats; anything else unchanged."""
    if isinstance(x, str) and x in ("inf", "-inf", "nan"):
        return float(x)
    return x


class UnwritableError(ParameterError, TypeError):
    """What :func:`to_dict` raises for an object it cannot write as JSON (a :class:`~dpaudit.errors.ParameterError`,
    and a ``TypeError`` as before for callers that catch that)."""


#: The largest integer :func:`to_dict` writes (as many bits as Python's default limit of 4,300 digits allows
#: ``json.dumps`` to print): beyond it, one error here instead of a ValueError in the writer.
_MAX_INT_BITS = 14_000


def to_dict(obj: Any) -> Any:
    """``obj`` as plain JSON values (dicts, lists, str, int, float, bool, None); see the module docstring. Anything
    else (a type it does not know, a cycle, nesting deeper than Python's recursion limit, an integer of more than
    4,300 digits) is one :class:`UnwritableError`."""
    try:
        return _to_dict(obj)
    except RecursionError:
        raise UnwritableError("dpaudit.serial.to_dict cannot write a cyclic or too deeply nested object.") from None


def _to_dict(obj: Any) -> Any:
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, int):
        if obj.bit_length() > _MAX_INT_BITS:
            raise UnwritableError(f"dpaudit.serial.to_dict writes integers of at most {_MAX_INT_BITS} bits. Got one of "
                                  f"{obj.bit_length()} bits instead.")
        return obj
    if isinstance(obj, float):
        return json_number(obj)
    legacy = getattr(obj, "to_dict", None)
    if callable(legacy) and not isinstance(obj, type):  # DP events: their tagged {"type": ...} form
        return _to_dict(legacy())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: _to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        for name in getattr(type(obj), "__json_computed__", ()):
            out[name] = _to_dict(getattr(obj, name))
        return out
    if isinstance(obj, Mapping):
        return {k if isinstance(k, str) else str(_to_dict(k)): _to_dict(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biu" or (obj.dtype.kind == "f" and np.isfinite(obj).all()):
            return obj.tolist()
        return _to_dict(obj.tolist())       # non-finite floats as strings; object / other dtypes element by element
    if isinstance(obj, (list, tuple)):
        return [_to_dict(v) for v in obj]
    if isinstance(obj, np.generic):
        return _to_dict(obj.item())
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        items = [_to_dict(v) for v in obj]
        try:
            return sorted(items)
        except TypeError:                   # mixed types: a stable order all the same
            return sorted(items, key=lambda v: (type(v).__name__, repr(v)))
    raise UnwritableError(f"dpaudit.serial.to_dict cannot write a {type(obj).__name__}.")


# --------------------------------------------------------------------------------------------------
# Reading (pydantic, imported on first use)
# --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _adapter(tp: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(tp)


def from_dict(tp: type[T] | Any, data: Any, *, what: str | None = None) -> T:
    """A ``tp`` rebuilt from :func:`to_dict`'s output (or a file holding it); types checked from the type hints.

    ``what`` names the data for the error message (``"report.json"``); a value that does not fit is a
    :class:`~dpaudit.errors.DataError` naming the field path, what was expected and what was found."""
    from pydantic import ValidationError

    try:
        return _adapter(tp).validate_python(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        where = ".".join(str(p) for p in first["loc"]) or "the top level"
        got = repr(first.get("input"))
        got = got if len(got) <= 80 else got[:77] + "..."
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        name = what or getattr(tp, "__name__", str(tp))
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise DataError(f"{name}: field {where}: {msg}; got {got}{more}.") from None


class JsonUpgrade:
    """Mixin of a result type whose older files need a change before they fit today's fields: the subclass
    defines the classmethod ``__json_upgrade__(data) -> data`` (it gets the raw dict, wherever the type is
    nested, before the fields are read)."""

    __slots__ = ()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        upgrade = getattr(cls, "__json_upgrade__")
        return core_schema.no_info_before_validator_function(upgrade, handler(source))


class _FloatArrayMarker:
    """pydantic metadata of :data:`FloatArray`: a JSON list of numbers ("inf" allowed) <-> a float ndarray."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(_float_array)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict[str, Any]:
        return {"type": "array", "items": NUMBER_SCHEMA}


class _IntArrayMarker:
    """pydantic metadata of :data:`IntArray`: a JSON list of integers <-> an int64 ndarray."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(_int_array)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict[str, Any]:
        return {"type": "array", "items": {"type": "integer"}}


class _BoolArrayMarker:
    """pydantic metadata of :data:`BoolArray`: a JSON list of booleans <-> a bool ndarray."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(_bool_array)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict[str, Any]:
        return {"type": "array", "items": {"type": "boolean"}}


def _int_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        return value.astype(np.int64)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError("expected a list of integers")
    try:
        return np.asarray(value, dtype=np.int64).reshape(len(value))
    except OverflowError:
        raise ValueError("expected a list of 64-bit integers") from None


def _bool_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype == bool:
        return value
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, bool) for v in value):
        raise ValueError("expected a list of booleans")
    return np.asarray(value, dtype=bool).reshape(len(value))


def _float_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value.astype(float)
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of numbers, got {type(value).__name__}")
    try:
        return np.asarray([parse_json_number(v) for v in value], dtype=float)
    except (TypeError, ValueError):
        raise ValueError("expected a list of numbers") from None


class _JsonValueMarker:
    """pydantic metadata of :data:`JsonValue`: any JSON value, with the strings "inf"/"-inf"/"nan" read back as
    floats at any depth (for free-form figures such as a statement's ``details``)."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(_numbers_back)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict[str, Any]:
        return {}


def _numbers_back(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _numbers_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_back(v) for v in value]
    return parse_json_number(value)


#: A numpy float array field: written as a list of numbers (non-finite ones as strings), read back as an ndarray.
FloatArray = Annotated[np.ndarray, _FloatArrayMarker]
#: An integer array field (indices, labels): a list of integers, read back as an int64 ndarray.
IntArray = Annotated[np.ndarray, _IntArrayMarker]
#: A boolean array field (membership): a list of booleans, read back as a bool ndarray.
BoolArray = Annotated[np.ndarray, _BoolArrayMarker]
#: A free-form JSON value whose "inf"/"-inf"/"nan" strings are read back as floats.
JsonValue = Annotated[Any, _JsonValueMarker]


# --------------------------------------------------------------------------------------------------
# JSON Schema
# --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _generator() -> type:
    from pydantic.json_schema import GenerateJsonSchema

    class Generator(GenerateJsonSchema):
        """pydantic's generator with dpaudit's conventions: numbers may be "inf"/"-inf"/"nan"; an object holds
        exactly its fields and ``__json_computed__`` properties, all required (:func:`to_dict` writes them all); no
        defaults, titles or docstrings (they would make the committed schema change with every docstring edit)."""

        def float_schema(self, schema: Any) -> dict[str, Any]:
            return dict(NUMBER_SCHEMA)

        def field_title_should_be_set(self, schema: Any) -> bool:
            return False

        def default_schema(self, schema: Any) -> dict[str, Any]:
            return self.generate_inner(schema["schema"])   # every field is written, so no defaults (and no NaN)

        def dataclass_schema(self, schema: Any) -> dict[str, Any]:
            out = super().dataclass_schema(schema)
            cls = schema["cls"]
            target = out
            target.pop("title", None)
            target.pop("description", None)
            props = target.setdefault("properties", {})
            for name in getattr(cls, "__json_computed__", ()):
                props[name] = {**self.generate_inner(_adapter(_return_type(cls, name)).core_schema), "readOnly": True}
            target["required"] = list(props)  # to_dict writes every field and computed property
            target["additionalProperties"] = False
            return out

    return Generator


def _return_type(cls: type, name: str) -> Any:
    """The return type hint of the property ``cls.name`` (``Any`` when it has none)."""
    import sys
    import typing

    prop = getattr(cls, name)
    if not isinstance(prop, property):
        raise TypeError(f"{cls.__name__}.__json_computed__ names {name!r}, which is not a property")
    module = sys.modules[cls.__module__]
    return typing.get_type_hints(prop.fget, globalns=vars(module), localns={cls.__name__: cls}).get("return", Any)


def json_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of what :func:`to_dict` writes for ``tp``, generated from its type hints."""
    return _adapter(tp).json_schema(mode="validation", schema_generator=_generator())
