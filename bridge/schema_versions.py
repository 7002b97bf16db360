"""Comparing a table's schema versions (bridge.schema builds them): which columns were renamed
(by attribute number), and what changed, for the registry's messages. Pure: schema JSON in."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from bridge.schema import ATTNUM, ORIGINAL_NAME, RENAMED_FROM

__all__ = ["carry_renames", "column_changes", "key_renames", "numbered_columns", "row_record"]


def row_record(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The record holding the columns: the envelope's ``Value`` or the ``Key`` itself."""
    if schema.get("name") == "Key":
        return schema
    for f in schema.get("fields", ()):
        if f.get("name") == "before":
            for branch in f["type"]:
                if isinstance(branch, dict) and branch.get("type") == "record":
                    return branch
    return None


def numbered_columns(schema: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(PostgreSQL name, attribute number) of a value schema's columns that have a number, in
    the table's column order."""
    row = row_record(schema)
    return [
        (f.get(ORIGINAL_NAME, f["name"]), int(f[ATTNUM]))
        for f in (row["fields"] if row else ())
        if ATTNUM in f
    ]


def carry_renames(previous: Mapping[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new`` (a value schema of :func:`relation_schemas`) saying which of its columns were
    renamed since ``previous`` (the subject's version before it), by attribute number.

    A column whose ``pgbridge.attnum`` is that of a column of ``previous`` under another name
    was renamed (``ALTER TABLE ... RENAME COLUMN``; a dropped and re-added column gets a new
    number): its field gets Avro ``aliases`` (the old field names, so a reader with the new
    schema reads old records' values under the new name, and the registry finds the change
    compatible) and ``pgbridge.renamed_from`` (the old PostgreSQL names, for the Spark job to
    rename the Delta column). Names from earlier renames are carried forward, except one a
    column of ``new`` now has (a reader would then match it twice). Returns ``new`` itself when
    nothing is to be said, else a copy."""
    old_row, new_row = row_record(previous or {}), row_record(new)
    if old_row is None or new_row is None:
        return new
    by_number = {f[ATTNUM]: f for f in old_row["fields"] if ATTNUM in f}
    if not by_number:
        return new
    taken_fields = {f["name"] for f in new_row["fields"]}
    taken_columns = {f.get(ORIGINAL_NAME, f["name"]) for f in new_row["fields"]}
    renamed: dict[str, tuple[list[str], list[str]]] = {}
    for f in new_row["fields"]:
        old = by_number.get(f.get(ATTNUM))
        if old is None:
            continue
        aliases = list(old.get("aliases", ()))
        columns = list(old.get(RENAMED_FROM, ()))
        if old["name"] != f["name"]:
            aliases.append(old["name"])
        old_column, column = old.get(ORIGINAL_NAME, old["name"]), f.get(ORIGINAL_NAME, f["name"])
        if old_column != column:
            columns.append(old_column)
        aliases = [a for a in dict.fromkeys(aliases) if a not in taken_fields]
        columns = [c for c in dict.fromkeys(columns) if c not in taken_columns]
        if aliases or columns:
            renamed[f["name"]] = (aliases, columns)
    if not renamed:
        return new
    out = copy.deepcopy(new)
    row = row_record(out)
    assert row is not None
    for f in row["fields"]:
        if f["name"] in renamed:
            aliases, columns = renamed[f["name"]]
            if aliases:
                f["aliases"] = aliases
            if columns:
                f[RENAMED_FROM] = columns
    return out


def key_renames(key: Mapping[str, Any], value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A key schema with the ``aliases`` its fields have in ``value`` (the same table version's
    value schema, after :func:`carry_renames`): a renamed key column then reads old keys, and
    the key subject finds the change compatible too. ``key`` itself when none has any."""
    value_row, key_row = row_record(value), row_record(key)
    if value_row is None or key_row is None:
        return key
    aliases = {f["name"]: f["aliases"] for f in value_row["fields"] if f.get("aliases")}
    if not any(f["name"] in aliases for f in key_row["fields"]):
        return key
    out = copy.deepcopy(dict(key))
    for f in out["fields"]:
        if f["name"] in aliases:
            f["aliases"] = list(aliases[f["name"]])
    return out


def _type_key(avro_type: Any) -> Any:
    """A field's type for comparing: a union's branches in any order are one type (a column
    added with a default is ``[T, "null"]`` until a table rewrite clears its missing value,
    then ``["null", T]``: the same column type)."""
    if isinstance(avro_type, list):
        return sorted(json.dumps(branch, sort_keys=True) for branch in avro_type)
    return json.dumps(avro_type, sort_keys=True)


def column_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, change) pairs between two key or value schemas built by this module: ``added``,
    ``removed`` or ``type changed``. Used to name the columns of an incompatible change."""
    old_row, new_row = row_record(old), row_record(new)
    if old_row is None or new_row is None:
        return []
    old_fields = {f["name"]: f for f in old_row["fields"]}
    new_fields = {f["name"]: f for f in new_row["fields"]}
    changes: list[tuple[str, str]] = []
    for name, f in new_fields.items():
        if name not in old_fields:
            changes.append((name, "added"))
        elif _type_key(f["type"]) != _type_key(old_fields[name]["type"]):
            changes.append((name, "type changed"))
    changes.extend((name, "removed") for name in old_fields if name not in new_fields)
    return changes
