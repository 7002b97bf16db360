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


# -- a burst of DDL: the catalog moved on since the message (inferred_numbers) -------------------

#: The previous version of a table: id 1, m 2, a 3, l 4, note 5, n 6, extra 7.
PREVIOUS = [("id", 1), ("m", 2), ("a", 3), ("l", 4), ("note", 5), ("n", 6), ("extra", 7)]


def catalog_of(*columns: tuple[str, int]) -> list[tuple[str, int, int, None]]:
    return [(name, number, TEXT, None) for name, number in columns]


def test_a_rename_in_a_burst_is_told_by_the_catalog_number_of_the_new_name() -> None:
    """RENAME note TO remark, then (before the stream decodes the next change) n's type
    changed and l dropped: the catalog no longer matches the message, but it has remark under
    note's number, and note is gone."""
    now = catalog_of(("id", 1), ("m", 2), ("a", 3), ("remark", 5), ("n", 6), ("extra", 7))
    message = ["id", "m", "a", "l", "remark", "n", "extra"]
    assert from_catalog_now(message, now)["remark"] == 5


def from_catalog_now(message: list[str], now: list[tuple[str, int, int, None]]) -> dict[str, int]:
    from bridge.source.column_numbers import inferred_numbers

    return inferred_numbers(PREVIOUS, message, now)


def test_a_column_renamed_twice_since_is_told_by_its_place_between_unchanged_columns() -> None:
    """note became remark (the message) and then memo (the catalog): remark sits where note
    sat, between a and n, and it is the only column that went there."""
    now = catalog_of(("id", 1), ("m", 2), ("a", 3), ("l", 4), ("memo", 5), ("n", 6), ("extra", 7))
    numbers = from_catalog_now(["id", "m", "a", "l", "remark", "n", "extra"], now)
    assert numbers == {"id": 1, "m": 2, "a": 3, "l": 4, "remark": 5, "n": 6, "extra": 7}


def test_a_dropped_and_an_added_column_are_not_a_rename() -> None:
    """DROP note, ADD remark: remark comes last (a new number), and the catalog says 8."""
    now = catalog_of(("id", 1), ("m", 2), ("a", 3), ("l", 4), ("n", 6), ("extra", 7), ("remark", 8))
    numbers = from_catalog_now(["id", "m", "a", "l", "n", "extra", "remark"], now)
    assert "remark" not in numbers and numbers["extra"] == 7


def test_a_last_column_renamed_is_told_only_by_the_catalog() -> None:
    """After the last unchanged column, a new name may be an added column: only the catalog
    tells (extra renamed to more, or extra dropped and more added)."""
    message = ["id", "m", "a", "l", "note", "n", "more"]
    renamed = catalog_of(("id", 1), ("m", 2), ("a", 3), ("note", 5), ("n", 6), ("more", 7))
    assert from_catalog_now(message, renamed)["more"] == 7
    replaced = catalog_of(("id", 1), ("m", 2), ("a", 3), ("note", 5), ("n", 6), ("more", 8))
    assert "more" not in from_catalog_now(message, replaced)
    moved_on = catalog_of(("id", 1), ("m", 2), ("a", 3), ("note", 5), ("n", 6), ("most", 7))
    assert "more" not in from_catalog_now(message, moved_on)


def test_what_cannot_be_proved_gets_no_number() -> None:
    # Two columns went from between a and n, one new name came: which one was renamed?
    now = catalog_of(("id", 1), ("m", 2), ("a", 3), ("n", 6), ("extra", 7))
    assert "x" not in from_catalog_now(["id", "m", "a", "x", "n", "extra"], now)
    # The catalog has the new name under a number that cannot sit there: a reused name.
    now = catalog_of(("id", 1), ("m", 2), ("a", 3), ("l", 4), ("n", 6), ("extra", 7), ("x", 9))
    assert "x" not in from_catalog_now(["id", "m", "a", "l", "x", "n", "extra"], now)
    # The old name is still a column (a publication's column list changed): not a rename.
    now = catalog_of(*PREVIOUS, ("x", 9))
    assert "x" not in from_catalog_now(["id", "m", "a", "l", "x", "n", "extra"], now)
    # Unchanged columns out of their order: nothing is trusted.
    assert from_catalog_now(["id", "a", "m"], catalog_of(("id", 1))) == {}
