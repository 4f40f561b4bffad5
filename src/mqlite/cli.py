"""The `mqlite` command line (mqadmin's command names).

Today: `verify` and `storeInfo`. Usage: `mqlite [--store PATH] COMMAND [PATH] [--json]`;
the store comes from the argument, `--store` or the `MQLITE_STORE` variable.
Exit status: 0 success, 1 when `verify` found problems, 2 on bad usage.
Errors print one line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from .errors import MQLiteError

__all__ = ["main"]


def _store_path(args: argparse.Namespace) -> str:
    path = args.path or args.store or os.environ.get("MQLITE_STORE")
    if not path:
        raise _UsageError("no store given: pass PATH, --store PATH or set MQLITE_STORE")
    if not os.path.isdir(path):
        raise _UsageError(f"{path} is not a directory")
    return str(path)


class _UsageError(Exception):
    pass


def _cmd_verify(args: argparse.Namespace) -> int:
    from .verify import verify_store

    path = _store_path(args)
    show = sys.stderr.isatty() and not args.json

    def progress(done: int, total: int) -> None:
        if show and total:
            sys.stderr.write(f"\rverifying commit log: {100 * done // total:3d}%")
            sys.stderr.flush()

    report = verify_store(path, progress)
    if show:
        sys.stderr.write("\r" + " " * 40 + "\r")
    if args.json:
        print(json.dumps([{"path": report.path, "ok": report.ok, "records": report.records,
                           "units": report.units, "queues": report.queues, "index_files": report.index_files,
                           "problems": report.problems}], indent=2))
    else:
        print(report.summary())
    return 0 if report.ok else 1


def _cmd_store_info(args: argparse.Namespace) -> int:
    from .reader import StoreReader

    path = _store_path(args)
    with StoreReader(path) as reader:
        files = reader.commitlog.mapped_files.files
        checkpoint = reader.checkpoint
        rows = []
        for topic in reader.topics():
            for queue_id in reader.queue_ids(topic):
                rows.append({"topic": topic, "queue_id": queue_id, "min_offset": reader.min_offset(topic, queue_id),
                             "max_offset": reader.max_offset(topic, queue_id)})
        info = {
            "path": os.path.abspath(path),
            "commitlog_file_size": reader.config.commitlog_file_size,
            "consumequeue_file_size": reader.config.consumequeue_file_size,
            "commitlog_segments": len(files),
            "commitlog_min_offset": reader.commitlog.min_offset,
            "commitlog_max_offset": max((cq.max_physic_offset for cq in reader.consume_queues.values()), default=0),
            "index_files": len(reader.index.files),
            "clean_shutdown": not os.path.exists(os.path.join(path, "abort")),
            "checkpoint_physic_msg_timestamp": checkpoint.physic_msg_timestamp,
            "checkpoint_logics_msg_timestamp": checkpoint.logics_msg_timestamp,
            "checkpoint_index_msg_timestamp": checkpoint.index_msg_timestamp,
            "queues": rows,
        }
    if args.json:
        print(json.dumps([info], indent=2))
        return 0
    for key, value in info.items():
        if key != "queues":
            print(f"{key:34s} {value}")
    print(f"{'#Topic':32s} {'#QueueId':>8s} {'#MinOffset':>12s} {'#MaxOffset':>12s}")
    for row in rows:
        print(f"{row['topic']:32s} {row['queue_id']:>8d} {row['min_offset']:>12d} {row['max_offset']:>12d}")
    return 0


_COMMANDS = {"verify": _cmd_verify, "storeInfo": _cmd_store_info}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqlite", description="mqlite admin commands (mqadmin names)")
    parser.add_argument("--store", help="store directory (default: $MQLITE_STORE)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in (("verify", "check every record, consume-queue unit and index chain"),
                            ("storeInfo", "summarise a store: files, offsets, checkpoint")):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("path", nargs="?", help="store directory")
        cmd.add_argument("--json", action="store_true", help="print one JSON document")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.command is None:
        parser.print_usage(sys.stderr)
        return 2
    try:
        return _COMMANDS[args.command](args)
    except _UsageError as exc:
        print(f"mqlite {args.command}: {exc}", file=sys.stderr)
        return 2
    except MQLiteError as exc:
        print(f"mqlite {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
