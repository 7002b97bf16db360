"""Capture type test vectors from a real PostgreSQL server: for each (type, literal), the
column's type OID and typmod, the value's text form (the output function) and its binary form
(the send function) — the two things pgoutput sends. Run by hand against a scratch server:

    python -m tests.types.capture_vectors "host=/tmp user=postgres" > tests/types/vectors.json

The session uses DateStyle ISO, IntervalStyle postgres and TimeZone UTC, as the replication
connection does. The unit tests read vectors.json; they need no server.
"""

from __future__ import annotations

import json
import sys

import psycopg

# (column type, SQL literal) — edge values of every family.
CASES: list[tuple[str, str]] = [
    ("smallint", "-32768"),
    ("smallint", "32767"),
    ("integer", "-2147483648"),
    ("integer", "2147483647"),
    ("bigint", "-9223372036854775808"),
    ("bigint", "9223372036854775807"),
    ("oid", "4294967295"),
    ("real", "3.4028235e38"),
    ("real", "'NaN'"),
    ("real", "'-Infinity'"),
    ("real", "1.5e-45"),
    ("double precision", "'Infinity'"),
    ("double precision", "-1.7976931348623157e308"),
    ("double precision", "'NaN'"),
    ("double precision", "0.1"),
    ("numeric(10,2)", "12.5"),
    ("numeric(10,2)", "-99999999.99"),
    ("numeric(10,2)", "0"),
    ("numeric(38,10)", "1234567890123456789012345678.0123456789"),
    ("numeric(5,0)", "-12345"),
    ("numeric(10,2)", "'NaN'"),
    ("numeric", "3.14159265358979323846264338327950288419716939937510"),
    ("numeric", "-0.000000000000000000001"),
    ("numeric", "1e30"),
    ("numeric", "'NaN'"),
    ("numeric", "'Infinity'"),
    ("numeric", "'-Infinity'"),
    ("numeric", "0"),
    ("numeric(50,5)", "123456789012345678901234567890123456789012345.12345"),
    ("money", "-92233720368547758.08"),
    ("money", "1234.56"),
    ("money", "0"),
    ("boolean", "true"),
    ("boolean", "false"),
    ("text", "''"),
    ("text", "'héllo wörld ✓ 😀'"),
    ("text", "E'tab\\there\\nnewline \\\\ \"q\"'"),
    ("varchar(5)", "'abc'"),
    ("char(5)", "'ab'"),
    ("name", "'pg_class'"),
    ('"char"', "'x'"),
    ("bytea", "'\\x'"),
    ("bytea", "'\\x00ff10'"),
    ("bytea", "convert_to('ünï', 'UTF8')"),
    ("uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
    ("json", '\'{"a": [1, 2.5, null], "é": "x"}\''),
    ("jsonb", '\'{"a": [1, 2.5, null], "é": "x"}\''),
    ("jsonb", "'[]'"),
    ("jsonb", "'\"just a string\"'"),
    ("jsonpath", "'$.a[*] ? (@ > 1)'"),
    ("xml", "'<a x=\"1\">t&amp;</a>'"),
    ("date", "'2024-02-29'"),
    ("date", "'infinity'"),
    ("date", "'-infinity'"),
    ("date", "'4713-01-01 BC'"),
    ("date", "'5874897-12-31'"),
    ("date", "'1970-01-01'"),
    ("date", "'0001-01-01'"),
    ("time", "'00:00:00'"),
    ("time", "'23:59:59.999999'"),
    ("time", "'24:00:00'"),
    ("time(3)", "'12:34:56.789'"),
    ("timetz", "'12:00:00+05:30'"),
    ("timetz", "'00:30:00.5-02'"),
    ("timetz", "'23:59:59+14:59'"),
    ("timestamp", "'2024-01-02 03:04:05.678901'"),
    ("timestamp", "'infinity'"),
    ("timestamp", "'-infinity'"),
    ("timestamp", "'0044-03-15 12:00:00 BC'"),
    ("timestamp", "'294276-12-31 23:59:59.999999'"),
    ("timestamp", "'1969-12-31 23:59:59.999999'"),
    ("timestamp(0)", "'2000-01-01 00:00:00'"),
    ("timestamptz", "'2024-01-02 03:04:05.678901+05:30'"),
    ("timestamptz", "'infinity'"),
    ("timestamptz", "'-infinity'"),
    ("timestamptz", "'1000-06-01 00:00:00+00 BC'"),
    ("timestamptz", "'12345-01-01 00:00:00+00'"),
    ("interval", "'1 year 2 mons 3 days 04:05:06.789'"),
    ("interval", "'-1 year -2 mons +3 days -04:05:06'"),
    ("interval", "'0'"),
    ("interval", "'-0.5 seconds'"),
    ("interval", "'178000000 years'"),
    ("interval", "'1 day -00:00:01'"),
    ("inet", "'192.168.0.1'"),
    ("inet", "'192.168.0.1/24'"),
    ("inet", "'::1'"),
    ("inet", "'2001:db8::1/64'"),
    ("cidr", "'10.0.0.0/8'"),
    ("cidr", "'2001:db8::/32'"),
    ("macaddr", "'08:00:2b:01:02:03'"),
    ("macaddr8", "'08:00:2b:01:02:03:04:05'"),
    ("bit(1)", "B'1'"),
    ("bit(1)", "B'0'"),
    ("bit(10)", "B'1000000001'"),
    ("bit(16)", "B'0000000100000010'"),
    ("varbit", "B''"),
    ("varbit(20)", "B'101'"),
    ("tsvector", "to_tsvector('english', 'The quick brown foxes jumped')"),
    ("tsvector", "'a:1A,2B b:3 ''it''''s'':4C c\\\\d'::tsvector"),
    ("tsvector", "''::tsvector"),
    ("tsquery", "to_tsquery('english', 'quick & (brown | !fox)')"),
    ("tsquery", "'a:* <-> b:AB <2> c'::tsquery"),
    ("tsquery", "'!(a | b) & c'::tsquery"),
    ("tsquery", "''::tsquery"),
    ("point", "'(1.5,-2)'"),
    ("point", "'(1e+100,-0.0001)'"),
    ("line", "'{1,-1,0}'"),
    ("lseg", "'[(0,0),(1,1)]'"),
    ("box", "'(1,1),(0,0)'"),
    ("path", "'[(0,0),(1,1),(2,0)]'"),
    ("path", "'((0,0),(1,1),(2,0))'"),
    ("polygon", "'((0,0),(1,1),(1,0))'"),
    ("circle", "'<(1,2),3.5>'"),
    ("int4range", "'[1,10)'"),
    ("int4range", "'empty'"),
    ("int4range", "'(,5]'"),
    ("int8range", "'[,)'"),
    ("numrange", "'(1.5,2.25]'"),
    ("daterange", "'[2024-01-01,2024-02-01)'"),
    ("daterange", "'[2024-01-01,infinity)'"),
    ("tsrange", "'[2024-01-01 00:00:00,2024-01-01 12:30:00.5)'"),
    ("tstzrange", "'[2024-01-01 00:00:00+00,)'"),
    ("int4multirange", "'{[1,3),[5,7)}'"),
    ("int4multirange", "'{}'"),
    ("datemultirange", "'{[2024-01-01,2024-01-05)}'"),
    ("integer[]", "'{}'"),
    ("integer[]", "'{1,NULL,-3}'"),
    ("text[]", "ARRAY['a b', NULL, '', 'NULL', 'q\"uo\\\\te', 'ü,{}']"),
    ("numeric(6,2)[]", "'{1.5,NULL,-2}'"),
    ("numeric[]", "'{1.5,NaN}'"),
    ("date[]", "'{2024-01-01,infinity}'"),
    ("timestamptz[]", "ARRAY['2024-01-01 00:00:00+00'::timestamptz]"),
    ("uuid[]", "ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid]"),
    ("boolean[]", "'{t,f,NULL}'"),
    ("bytea[]", "ARRAY['\\x00ff'::bytea, NULL]"),
    ("jsonb[]", "ARRAY['{\"a\":1}'::jsonb]"),
    ("box[]", "ARRAY['(1,1),(0,0)'::box, '(3,3),(2,2)'::box]"),
    ("point[]", "ARRAY[point(1,2)]"),
    ("interval[]", "ARRAY['1 day'::interval]"),
    ("int4range[]", "ARRAY['[1,2)'::int4range]"),
    ("integer[]", "'{{1,2},{3,4}}'"),
    ("integer[]", "'[0:1]={7,8}'"),
]

# Extension types, captured when the extension can be created; the vector records the type name
# (the unit tests resolve it through a Type message, as the stream does).
EXTENSION_CASES: list[tuple[str, str, str]] = [
    ("citext", "citext", "'MiXeD Ünïcode'"),
    ("hstore", "hstore", """'a=>1, "b c"=>NULL, "q''x\\\\y"=>"ü"'"""),
    ("hstore", "hstore", "''"),
    ("ltree", "ltree", "'top.science.astronomy'"),
    ("citext", "citext[]", "ARRAY['A'::citext, NULL]"),
]


def _forms(conn: psycopg.Connection[object], send: str) -> tuple[str, bytes]:
    """The output function's exact bytes (a ``::text`` cast would differ for char(n) and inet)
    and the send function's."""
    cur = conn.execute(f"SELECT c, {send}(c) FROM v", prepare=False)
    result = cur.pgresult
    assert result is not None
    text = result.get_value(0, 0)
    binary = result.get_value(0, 1)  # bytea, in its text (hex) form
    assert text is not None and binary is not None
    return bytes(text).decode("utf-8"), bytes.fromhex(bytes(binary)[2:].decode("ascii"))


def main(dsn: str) -> None:
    out = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET DateStyle = ISO; SET IntervalStyle = postgres; SET TimeZone = 'UTC'")
        for i, (type_sql, literal) in enumerate(CASES):
            conn.execute("DROP TABLE IF EXISTS v")
            conn.execute(f"CREATE TEMP TABLE v (c {type_sql})")
            conn.execute(f"INSERT INTO v VALUES (({literal})::{type_sql})")
            oid, typmod, send = conn.execute(
                "SELECT a.atttypid::int, a.atttypmod, t.typsend::text FROM pg_attribute a"
                " JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = 'v'::regclass"
                " AND a.attname = 'c'"
            ).fetchone()  # type: ignore[misc]
            text, binary = _forms(conn, send)
            out.append(
                {
                    "id": i,
                    "type": type_sql,
                    "literal": literal,
                    "oid": oid,
                    "typmod": typmod,
                    "text": text,
                    "binary": binary.hex(),
                }
            )
        for extension, type_sql, literal in EXTENSION_CASES:
            try:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
            except psycopg.Error:
                continue
            conn.execute("DROP TABLE IF EXISTS v")
            conn.execute(f"CREATE TEMP TABLE v (c {type_sql})")
            conn.execute(f"INSERT INTO v VALUES (({literal})::{type_sql})")
            oid, typmod, send, name = conn.execute(
                "SELECT a.atttypid::int, a.atttypmod, t.typsend::text, t.typname::text"
                " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
                " WHERE a.attrelid = 'v'::regclass AND a.attname = 'c'"
            ).fetchone()  # type: ignore[misc]
            text, binary = _forms(conn, send)
            out.append(
                {
                    "id": len(out),
                    "type": type_sql,
                    "literal": literal,
                    "oid": oid,
                    "typmod": typmod,
                    "type_name": name,
                    "text": text,
                    "binary": binary.hex(),
                }
            )
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
