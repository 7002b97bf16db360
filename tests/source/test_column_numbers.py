"""Attribute numbers from the catalog, trusted only where the catalog still describes the table
as the Relation message does (bridge.source.column_numbers)."""

from __future__ import annotations

from bridge.pgoutput.messages import RelationColumn
from bridge.source.column_numbers import matching_numbers

TEXT, INT = 25, 23


def col(name: str, type_oid: int = TEXT) -> RelationColumn:
    return RelationColumn(0, name, type_oid, -1)


def test_columns_as_the_catalog_has_them_get_its_numbers() -> None:
    catalog = [
        ("id", 1, INT, None),
        ("vc", 2, TEXT, None),
        ("n", 4, INT, None),
    ]  # attnum 3 was dropped
    assert matching_numbers([col("id", INT), col("vc"), col("n", INT)], catalog) == {
        "id": 1,
        "vc": 2,
        "n": 4,
    }


def test_a_publication_column_list_leaves_columns_out() -> None:
    catalog = [("id", 1, INT, None), ("secret", 2, TEXT, None), ("vc", 3, TEXT, None)]
    assert matching_numbers([col("id", INT), col("vc")], catalog) == {"id": 1, "vc": 3}


def test_a_table_changed_since_the_message_gives_no_numbers() -> None:
    # Renamed since: the message's name is gone.
    assert (
        matching_numbers(
            [col("id", INT), col("vc")], [("id", 1, INT, None), ("vc2", 2, TEXT, None)]
        )
        == {}
    )
    # Dropped and re-added with another type since.
    assert (
        matching_numbers(
            [col("id", INT), col("n", INT)], [("id", 1, INT, None), ("n", 3, TEXT, None)]
        )
        == {}
    )
    # Two columns swapped by renames since: the order no longer matches.
    assert (
        matching_numbers([col("a"), col("b")], [("b", 1, TEXT, None), ("a", 2, TEXT, None)]) == {}
    )


def test_a_table_without_columns_has_no_numbers_to_give() -> None:
    assert matching_numbers([], [("id", 1, INT, None)]) == {}
    assert matching_numbers([col("id", INT)], []) == {}
