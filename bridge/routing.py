"""Many tables into one topic: Debezium's ``ByLogicalTableRouter`` (``topic.regex``,
``topic.replacement``, ``key.enforce.uniqueness``, ``key.field.name``, ``key.field.regex``,
``key.field.replacement``), with its semantics.

A table whose topic name (``<prefix>.<schema>.<table>``) matches ``topic.regex`` as a whole
publishes to ``topic.replacement`` instead (Java's ``$1`` / ``${name}`` groups), under that
topic's subjects, with its record names taken from it (``<topic>.Key``, ``<topic>.Value``,
``<topic>.Envelope``), as the router renames them. Rows of sharded or per-tenant tables can
share a key, so with ``key.enforce.uniqueness`` (the default) the key gets one more field,
last: ``key.field.name`` (``__dbz__physicalTableIdentifier``), a string naming the table the
row came from: its own topic name, or ``key.field.regex`` replaced by
``key.field.replacement`` in it. A table without a key keeps a null key, as with Debezium.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bridge.errors import ConfigError

__all__ = ["DEFAULT_KEY_FIELD", "TopicRouter", "avro_string"]

DEFAULT_KEY_FIELD = "__dbz__physicalTableIdentifier"

# Java's replacement syntax: $n, ${name}, and \x for a literal x.
_JAVA_GROUP = re.compile(r"\\(.)|\$\{([A-Za-z][A-Za-z0-9]*)\}|\$(\d+)")


def _python_template(key: str, replacement: str) -> str:
    """A Java ``Matcher`` replacement as a :meth:`re.Match.expand` template."""
    out: list[str] = []
    position = 0
    for match in [*_JAVA_GROUP.finditer(replacement), None]:
        text = replacement[position : len(replacement) if match is None else match.start()]
        if "$" in text or text.endswith("\\"):
            raise ConfigError(key, f"{replacement!r}: a '$' must name a group ($1, ${{name}})")
        out.append(text.replace("\\", "\\\\"))
        if match is None:
            break
        literal, name, number = match.groups()
        out.append(literal.replace("\\", "\\\\") if literal else f"\\g<{name or number}>")
        position = match.end()
    return "".join(out)


def _compile(key: str, pattern: str) -> re.Pattern[str]:
    """A Java regex as Python's: named groups ``(?<name>...)`` are spelled ``(?P<name>...)``."""
    try:
        return re.compile(re.sub(r"(?<!\\)\(\?<(?=[A-Za-z])", "(?P<", pattern))
    except re.error as exc:
        raise ConfigError(key, f"{pattern!r} is not a regular expression: {exc}") from None


def avro_string(text: str) -> bytes:
    """The Avro binary encoding of a string: zig-zag varint length, then UTF-8."""
    data = text.encode()
    n = len(data) << 1  # zig-zag of a non-negative length
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + data


@dataclass
class TopicRouter:
    topic_regex: str
    topic_replacement: str
    key_enforce_uniqueness: bool = True
    key_field_name: str = DEFAULT_KEY_FIELD
    key_field_regex: str | None = None
    key_field_replacement: str | None = None
    _topic: re.Pattern[str] = field(init=False, repr=False)
    _topic_template: str = field(init=False, repr=False)
    _key: re.Pattern[str] | None = field(init=False, repr=False)
    _key_template: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._topic = _compile("topic.regex", self.topic_regex)
        self._topic_template = _python_template("topic.replacement", self.topic_replacement)
        if (self.key_field_regex is None) != (self.key_field_replacement is None):
            raise ConfigError(
                "key.field.regex", "key.field.regex and key.field.replacement go together"
            )
        self._key = (
            None
            if self.key_field_regex is None
            else _compile("key.field.regex", self.key_field_regex)
        )
        self._key_template = _python_template(
            "key.field.replacement", self.key_field_replacement or ""
        )
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.key_field_name):
            raise ConfigError("key.field.name", f"{self.key_field_name!r} is not an Avro name")

    def route(self, topic: str) -> str | None:
        """The topic a table whose own topic is ``topic`` publishes to, or ``None`` (its own)."""
        match = self._topic.fullmatch(topic)
        if match is None:
            return None
        routed = match.expand(self._topic_template)
        if not routed or not re.fullmatch(r"[A-Za-z0-9._\-]+", routed):
            raise ConfigError(
                "topic.replacement", f"{topic!r} is routed to {routed!r}, not a valid topic name"
            )
        return routed

    def identifier(self, topic: str) -> str:
        """The key field's value for the rows of the table whose own topic is ``topic``."""
        if self._key is not None:
            match = self._key.fullmatch(topic)
            if match is not None:
                return match.expand(self._key_template)
        return topic
