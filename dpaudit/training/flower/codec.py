"""dpaudit objects to Flower records and back, without pickling.

What a party task sends and replies (see :mod:`dpaudit.training.parties`) is encoded by
:func:`dpaudit.training.engine.encode_state`: a JSON tree (numbers, strings, lists, mappings, DP events and
dpaudit objects with ``to_dict``) whose arrays are numbered apart. In a Flower message the tree travels as a
``ConfigRecord`` (one JSON string) and the arrays as an ``ArrayRecord`` (numpy's ``.npy`` format, read with
``allow_pickle=False`` by Flower); a received message is decoded with the same checks as an engine checkpoint
(only dpaudit classes already imported are rebuilt).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

__all__ = ["HEADER", "to_records", "from_records", "has_records", "header_record", "read_header"]

HEADER = "dpaudit.header"


def has_records(records: Any, prefix: str) -> bool:
    """Whether ``records`` holds an object :func:`to_records` wrote under ``prefix``."""
    return f"{prefix}.tree" in records


def to_records(obj: Any, records: Any = None, prefix: str = "dpaudit") -> Any:
    """``obj`` into a Flower ``RecordDict`` (a new one, or ``records`` updated in place), as the records
    ``PREFIX.tree`` and ``PREFIX.arrays``."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    from dpaudit.training.engine import encode_state

    tree, arrays = encode_state(obj)
    out = RecordDict() if records is None else records
    out[f"{prefix}.tree"] = ConfigRecord({"json": json.dumps(tree, allow_nan=False)})
    out[f"{prefix}.arrays"] = ArrayRecord({k: Array(np.ascontiguousarray(v.detach().cpu().numpy())) for k, v in arrays.items()})
    return out


def from_records(records: Any, what: str = "a Flower message", prefix: str = "dpaudit") -> Any:
    """The object :func:`to_records` put into ``records`` (None when ``records`` holds none under ``prefix``
    and ``what`` allows it: see :func:`has_records`)."""
    import torch

    from dpaudit.errors import DataError
    from dpaudit.training.engine import decode_state

    tree_key, arrays_key = f"{prefix}.tree", f"{prefix}.arrays"
    if tree_key not in records:
        raise DataError(f"{what} holds no dpaudit payload (record {tree_key!r}).")
    tree = json.loads(str(records[tree_key]["json"]))
    arrays = {}
    if arrays_key in records:
        for k, a in records[arrays_key].items():
            arrays[k] = torch.from_numpy(np.array(a.numpy(), copy=True))
    return decode_state(tree, arrays)


def header_record(header: dict) -> Any:
    """A JSON header (task, method, configuration tables, seed) as a ``ConfigRecord``."""
    from flwr.app import ConfigRecord

    return ConfigRecord({"json": json.dumps(header, allow_nan=False, sort_keys=True)})


def read_header(records: Any) -> dict:
    from dpaudit.errors import DataError

    if HEADER not in records:
        raise DataError(f"A Flower message without a dpaudit header (record {HEADER!r}).")
    out = json.loads(str(records[HEADER]["json"]))
    if not isinstance(out, dict):
        raise DataError("A dpaudit header must be a JSON object.")
    return out
