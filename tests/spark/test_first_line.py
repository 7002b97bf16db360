"""The one line of an error the apply job logs and keeps as a dead letter's reason."""

from __future__ import annotations

from bridge.spark.errors import first_line


def test_first_line_of_a_plain_error() -> None:
    assert first_line(ValueError("bad value\nmore detail")) == "bad value"
    assert first_line(ValueError("")) == "ValueError('')"


def test_first_line_of_a_py4j_error_names_the_java_exception() -> None:
    """py4j's first line says only which call failed; the Java exception is the gist."""
    error = RuntimeError(
        "An error occurred while calling o96689.collectToPython.\n"
        ": java.lang.StackOverflowError\n\tat org.apache.spark.sql.Foo.bar(Foo.scala:1)\n"
    )
    assert first_line(error) == (
        "An error occurred while calling o96689.collectToPython. java.lang.StackOverflowError"
    )
