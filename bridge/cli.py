"""The ``pgbridge`` command: thin wiring from arguments to the library."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from bridge import __version__
from bridge.errors import PgBridgeError

logger = logging.getLogger(__name__)


def _dev(args: argparse.Namespace) -> int:
    from bridge.devstack.stack import LocalStack

    stack = LocalStack(postgres_major=getattr(args, "pg_version", None))
    if args.dev_command == "up":
        info = stack.up()
        print(f"PostgreSQL {info.postgres_major}: {info.postgres_dsn()}")
        print(f"Kafka:    {info.bootstrap_servers}")
        print(f"Registry: {info.registry_url}")
        print(f"Spark jars: {len(info.spark_jars)} in {info.spark_jars[0].rsplit('/', 1)[0]}")
        print(f"Started in {info.start_seconds['total']} s {info.start_seconds}")
        print(f"Environment for other shells: source {info.stack_dir}/stack.env")
    elif args.dev_command == "down":
        stack.destroy() if args.destroy else stack.down()
    else:
        status = stack.status()
        print(json.dumps(status, indent=2))
        return 0 if all(part["running"] for part in status.values()) else 3
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgbridge", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pgbridge {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

    dev = commands.add_parser("dev", help="the local stack of real services (no Docker needed)")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True)
    up = dev_commands.add_parser("up", help="download what is missing and start everything")
    up.add_argument("--pg-version", help="PostgreSQL major version (13-18; default: newest)")
    down = dev_commands.add_parser("down", help="stop everything (data is kept)")
    down.add_argument("--destroy", action="store_true", help="also delete data and logs")
    dev_commands.add_parser("status", help="what is running, where, and its log")
    dev.set_defaults(handler=_dev)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.handler(args)
    except PgBridgeError as exc:
        print(f"pgbridge: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
