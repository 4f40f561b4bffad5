"""Parsing the command line, running one command and turning every failure into one line and a status."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from ..errors import ConfigError, MQClientError, MQLiteError
from .commands import COMMANDS, Command
from .context import STORE_ENV, CommandError, Context, UsageError, find_store
from .output import write_report

__all__ = ["main", "build_parser"]

_EPILOG = f"""\
The store is PATH, --store PATH or ${STORE_ENV}. Read commands open it read-only and work beside a
live writer; commands that change it need the writer lock and refuse (exit 1) while a process holds it.
-n HOST:PORT runs a command on the process serving a store there (mqlite serve) instead.
Exit status: 0 success; 1 the command found a problem (verify), a message is not there, the store is
locked or damaged; 2 bad usage (unknown command or flag, bad value, unknown topic or group, no store).
Run `mqlite COMMAND --help` for a command's options."""


class _ParseError(UsageError):
    """argparse's complaint, already prefixed with the program name."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) and never exit the process."""

    def error(self, message: str) -> NoReturn:
        raise _ParseError(f"{self.prog}: {message} (see {self.prog} --help)")


def _common_options() -> _Parser:
    """`[PATH] [--store PATH] [--json]`, on every command (SUPPRESS: a --json given before the command stays)."""
    common = _Parser(add_help=False)
    common.add_argument("path", nargs="?", help="store directory (or --store, or $MQLITE_STORE)")
    # Its own dest: `mqlite --store A COMMAND --store B` must be seen as two stores, not B silently.
    common.add_argument("--store", dest="command_store", metavar="PATH", help="store directory")
    common.add_argument("-n", "--namesrvAddr", dest="command_address", metavar="HOST:PORT",
                        help="a serving process's address (mqlite serve) instead of a store path")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print one JSON document: a list of row objects with snake_case keys")
    return common


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The `mqlite` parser with one sub-command per table entry."""
    parser = _Parser(prog="mqlite", description="Admin commands for an mqlite store, with mqadmin's names, "
                     "flags and columns.", epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"mqlite {__version__}")
    parser.add_argument("--store", metavar="PATH", help=f"store directory (default: ${STORE_ENV})")
    parser.add_argument("-n", "--namesrvAddr", dest="address", metavar="HOST:PORT",
                        help="run on the process serving a store at HOST:PORT (mqlite serve) instead of a path")
    parser.add_argument("--json", action="store_true", help="print one JSON document (also after the command)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    common = _common_options()
    for command in commands:
        cmd = sub.add_parser(command.name, parents=[common], help=command.summary, description=command.description,
                             formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
        for option in command.options:
            option.add_to(cmd)
        cmd.set_defaults(run=command.run, creates_store=command.creates_store)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (`sys.argv[1:]` by default) and return the exit status.

    Bad usage and store errors print one line on stderr (`mqlite COMMAND: what
    was wrong`) and return 2 or 1; `--help` returns 0.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _ParseError as exc:
        return _fail(str(exc), 2)
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0)
    if args.command is None:
        return _fail("mqlite: no command given (see mqlite --help)", 2)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    prefix = f"mqlite {args.command}"
    try:
        ctx = _context(args)
        try:
            return write_report(args.run(ctx, args), args.json, sys.stdout)
        finally:
            ctx.close()
    except UsageError as exc:
        return _fail(f"{prefix}: {exc}", 2)
    except ConfigError as exc:  # the CLI passes no settings: a refused one is the store's own
        return _fail(f"{prefix}: {exc}", 1)
    except MQClientError as exc:  # the library refused an argument (a bad topic name, an empty body...)
        return _fail(f"{prefix}: {exc}", 2)
    except BrokenPipeError:
        # The reader of our output went away (`| head`): not a problem the command found (that is status 1), so
        # stop quietly with 0, and keep Python from complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CommandError, MQLiteError, OSError) as exc:
        return _fail(f"{prefix}: {exc}", 1)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug: still one line, never a traceback (issue 11)
        return _fail(f"{prefix}: unexpected {type(exc).__name__}: {exc} (an mqlite bug: please report it "
                     "with this line)", 1)


def _context(args: argparse.Namespace) -> Context:
    """The command's context: a store path, or with `-n` a serving process's address (never both)."""
    addresses = {a for a in (args.address, args.command_address) if a}
    if len(addresses) > 1:
        raise UsageError(f"two addresses given ({' and '.join(sorted(addresses))}): name one with -n")
    if addresses:
        if args.path or args.store or args.command_store:
            raise UsageError("give a store PATH or -n HOST:PORT, not both")
        return Context(args.command, "", address=addresses.pop())
    return Context(args.command, find_store(args.path, args.store, args.command_store, create=args.creates_store))


def _fail(message: str, status: int) -> int:
    print(" ".join(message.split()), file=sys.stderr)  # one line, whatever the exception's text holds
    return status
