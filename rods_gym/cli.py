"""The ``rods`` command. Core subcommands live in ``rods_gym.commands``; other packages
(the trainer) add theirs through the ``rods_gym.commands`` entry-point group, so the core
never imports them. Each command module exposes ``register(subparsers)`` which adds a
parser whose ``func(args) -> int`` runs it."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib.metadata import entry_points
from typing import Sequence

CORE_COMMANDS = (
    "rods_gym.commands.graph",
    "rods_gym.commands.play",
    "rods_gym.commands.tasksets",
    "rods_gym.commands.skills",
    "rods_gym.commands.synth",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rods", description="rods-gym: tool-use environments and RL training")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in CORE_COMMANDS:
        importlib.import_module(name).register(sub)
    for ep in sorted(entry_points(group="rods_gym.commands"), key=lambda e: e.name):
        ep.load()(sub)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``parser.parse_args``, except that bare ``KEY=VALUE`` overrides may also follow options
    (``rods train steps=2 --run-dir X sft.steps=2``): argparse ends a positional list at the first
    option, so what is left over joins the command's ``extra`` overrides, in order. Anything else
    left over is an error, as with ``parse_args``."""
    args, rest = parser.parse_known_args(argv)
    if rest:
        bare = [a for a in rest if "=" in a and not a.startswith("-")]
        if len(bare) != len(rest) or not isinstance(getattr(args, "extra", None), list):
            command_parser(parser, args).error(f"unrecognized arguments: {' '.join(rest)}")
        args.extra = [*args.extra, *bare]
    return args


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command ``args`` ran (so its errors show that command's usage), else ``parser``."""
    for action in parser._actions:  # argparse keeps its subparsers here; it has no public accessor
        if isinstance(action, argparse._SubParsersAction) and getattr(args, "command", None) in action.choices:
            return action.choices[args.command]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from rods_gym.domain import DomainError

    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not as an "Exception ignored" at interpreter exit
        return code
    except DomainError as exc:  # a broken domain file (--domains): it names the file, the place and why
        print(f"rods {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback (train and sft say how to resume)
        print(f"\nrods {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the output was piped into a reader that stopped early (`rods skills | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141
    except OSError as exc:  # a path the command cannot read or write (--out /proc/x, a --run-dir that is a file)
        if exc.filename is None or os.environ.get("RODS_TRACEBACK"):
            raise
        if isinstance(exc, FileExistsError) and os.path.isfile(exc.filename):
            what = f"{exc.filename} is a file, where a directory is needed"
        elif exc.strerror:
            what = f"{exc.strerror}: {exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
        else:
            what = str(exc)
        print(f"rods {args.command}: error: {what} (check the path; RODS_TRACEBACK=1 shows where)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
