"""The ``pgbridge`` command: thin wiring from arguments to the library."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bridge import __version__
from bridge.dependency_warnings import quiet_dependency_warnings
from bridge.errors import ConfigError, PgBridgeError

if TYPE_CHECKING:
    from bridge.config import BridgeConfig

logger = logging.getLogger(__name__)


def _dev(args: argparse.Namespace) -> int:
    from bridge.devstack.stack import LocalStack

    if getattr(args, "secure", False):
        return _dev_secure(args)

    stack = LocalStack(
        postgres_major=getattr(args, "pg_version", None), brokers=getattr(args, "brokers", None)
    )
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


def _dev_secure(args: argparse.Namespace) -> int:
    from bridge.devstack.secure import SecureStack

    stack = SecureStack(postgres_major=getattr(args, "pg_version", None))
    if args.dev_command == "up":
        info = stack.up()
        print(f"PostgreSQL (TLS, SCRAM): {info.postgres_dsn}")
        print(f"Kafka (SASL_SSL):        {info.bootstrap_servers}")
        print(f"Registry (HTTPS, basic): {info.registry_url}")
        print(f"CA: {info.ca_file}")
        print(f"Try: pgbridge run -c {info.config_file} --set topic.prefix=secure")
    elif args.dev_command == "down":
        stack.destroy() if args.destroy else stack.down()
    return 0


def _load_config(args: argparse.Namespace) -> BridgeConfig:
    import os
    from pathlib import Path

    from bridge.config import load_config

    overrides: dict[str, str] = {}
    for item in args.set or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(item, "--set takes key=value")
        overrides[key.strip()] = value
    return load_config(Path(args.config) if args.config else None, os.environ, overrides)


def _run(args: argparse.Namespace) -> int:
    from bridge.ops.logs import configure_logging
    from bridge.runner import run

    config = _load_config(args)
    configure_logging(config.logging.format, "DEBUG" if args.verbose else config.logging.level)
    if args.print_config:
        print(config.describe())
        return 0
    return run(config)


def _status(args: argparse.Namespace) -> int:
    from bridge.ops.status import collect

    status = collect(
        _load_config(args),
        apply_checkpoint=args.apply_checkpoint,
        apply_dead_letter=args.apply_dead_letter,
    )
    print(json.dumps(status.as_dict(), indent=2) if args.json else status.render())
    return 0 if not status.problems and status.slot.exists else 3


def _check(args: argparse.Namespace) -> int:
    from bridge.ops.check import check, render

    findings = check(_load_config(args))
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    else:
        print(render(findings))
    return 0 if all(f.ok for f in findings) else 4


def _snapshot(args: argparse.Namespace) -> int:
    from bridge import signal_messages
    from bridge.signals import cli_signal, send_signal_to

    config = _load_config(args)
    signal_type, data = cli_signal(args.tables, args.where, args.stop, args.pause, args.resume)
    table = config.signal.data_collection
    if table is None:
        key_file = signal_messages.key_path(config.snapshot.state_dir, config.replication.slot_name)
        signal_id = signal_messages.emit_to(config.database.conninfo(), key_file, signal_type, data)
        table = "the stream (a signed logical message)"
    else:
        signal_id = send_signal_to(config.database.conninfo(), table, signal_type, data)
    print(f"sent {signal_type} signal {signal_id} to {table}: {json.dumps(data)}")
    return 0


def _apply(args: argparse.Namespace) -> int:
    from bridge.spark.arguments import config_from_args
    from bridge.spark.graceful_stop import GracefulStop
    from bridge.spark.job import run_apply

    stop = GracefulStop()
    stop.install()  # SIGTERM or SIGINT: stop between two batches, exit 0
    run_apply(config_from_args(args), stop=stop)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from bridge.ops.demo import run_demo

    return run_demo()


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", help="TOML file (see pgbridge.example.toml)")
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override one setting (repeatable); wins over the file and PGBRIDGE_* variables",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgbridge", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pgbridge {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="stream changes from PostgreSQL to Kafka")
    _add_config_options(run)
    run.add_argument(
        "--print-config", action="store_true", help="print the effective settings and exit"
    )
    run.set_defaults(handler=_run)

    from bridge.spark.arguments import add_apply_arguments

    apply = commands.add_parser(
        "apply", help="the Spark job: apply the change topics to Delta tables (local mode)"
    )
    add_apply_arguments(apply)
    apply.set_defaults(handler=_apply)

    demo = commands.add_parser("demo", help="the whole flow on the local stack")
    demo.set_defaults(handler=_demo)

    status = commands.add_parser("status", help="slot position and lag, topics, subjects")
    _add_config_options(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--apply-checkpoint",
        metavar="PATH",
        help="the Spark apply job's --checkpoint: also show its per-table lag (Kafka records "
        "not applied yet)",
    )
    status.add_argument(
        "--apply-dead-letter",
        metavar="PATH",
        help="the Spark apply job's --dead-letter: also show the tables it holds since a batch "
        "of theirs failed (each a problem: exit 3); read with delta-rs (a local path, or an "
        "object store its AWS_*/AZURE_*/GOOGLE_* environment reaches)",
    )
    status.set_defaults(handler=_status)

    check = commands.add_parser(
        "check",
        help="connect with the configured settings: what works, and what would stop pgbridge",
    )
    _add_config_options(check)
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(handler=_check)

    snapshot = commands.add_parser(
        "snapshot",
        help="copy tables again while pgbridge runs (an incremental snapshot, by signal)",
    )
    _add_config_options(snapshot)
    snapshot.add_argument("tables", nargs="*", metavar="TABLE", help="schema.table or a regex")
    snapshot.add_argument("--where", help="copy only the rows matching this SQL condition")
    action = snapshot.add_mutually_exclusive_group()
    action.add_argument("--stop", action="store_true", help="stop (these tables, or all)")
    action.add_argument("--pause", action="store_true", help="pause the running snapshot")
    action.add_argument("--resume", action="store_true", help="resume a paused snapshot")
    snapshot.set_defaults(handler=_snapshot)

    dev = commands.add_parser("dev", help="the local stack of real services (no Docker needed)")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True)
    up = dev_commands.add_parser("up", help="download what is missing and start everything")
    up.add_argument("--pg-version", help="PostgreSQL major version (13-18; default: newest)")
    up.add_argument(
        "--brokers",
        type=int,
        choices=(1, 3),
        help="Kafka brokers: 1 (the default), or a 3-node KRaft cluster (replication factor 3, "
        "min.insync.replicas 2)",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="a second stack with TLS and authentication on every hop, and its pgbridge config",
    )
    down = dev_commands.add_parser("down", help="stop everything (data is kept)")
    down.add_argument("--destroy", action="store_true", help="also delete data and logs")
    down.add_argument("--secure", action="store_true", help="the secured stack")
    dev_commands.add_parser("status", help="what is running, where, and its log")
    dev.set_defaults(handler=_dev)
    return parser


def _database_errors() -> type[Exception]:
    import psycopg

    return psycopg.OperationalError


def main(argv: Sequence[str] | None = None) -> int:
    quiet_dependency_warnings()
    args = build_parser().parse_args(argv)
    from bridge.ops.logs import configure_logging

    configure_logging("text", "DEBUG" if args.verbose else "INFO")
    try:
        code: int = args.handler(args)
    except PgBridgeError as exc:
        print(f"pgbridge: error: {exc}", file=sys.stderr)
        return 2
    except _database_errors() as exc:
        # A connection failure that no module typed: what libpq said, without a trace.
        from bridge.source.errors import access_refusal

        refusal = access_refusal(str(exc))
        text = str(refusal) if refusal else f"PostgreSQL: {str(exc).strip().splitlines()[0]}"
        print(f"pgbridge: error: {text}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
