"""`awarl` command line: parse arguments and call one stage function; nothing else lives here.

Each subcommand is a module in `awarl/commands/` with `add_parser(subparsers)`; a command module imports
its stage only when it runs, so `awarl --help` builds every parser without importing every stage.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from awarl import __version__, cli_errors
from awarl.config import ConfigError
from awarl.io import DataError
from awarl.retrieval.client import RetrievalClientError

# (module in awarl.commands, one-line help) in the order `awarl --help` shows them.
COMMANDS: list[tuple[str, str]] = [
    ("demo", "run the whole pipeline offline on the shipped data (CPU, < 10 minutes)"),
    ("demo-real", "the pipeline on a released checkpoint, SmolLM2-135M-Instruct (CPU, about 8 minutes on 2 idle cores)"),
    ("data", "prepare datasets into unified JSONL, corpora, and statistics"),
    ("index", "build a BM25 or dense passage index"),
    ("serve", "serve a retrieval index over HTTP (Search-R1 contract)"),
    ("model", "build local models: the tiny test/demo model, a released checkpoint from a GGUF file"),
    ("estimate", "estimate each training question's success rate p_i"),
    ("train", "AWA-RL GRPO training"),
    ("sweep", "expand a grid of configs (e.g. over gamma), run or script them, and compare"),
    ("eval", "run the search agent on evaluation sets and score it"),
    ("score", "score a predictions file: precision, accuracy, RA-F1 with CIs"),
    ("compare", "compare evaluation runs on their shared questions, with paired-bootstrap differences"),
    ("research", "research a question with the critic loop (planner, executor, critic, re-query, gaps)"),
    ("simulate", "simulate the reward dynamics on CPU to choose gamma and penalty steps"),
    ("config", "show a resolved config, each key with the file, line, override or default that set it"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="awarl",
        description="Abstention-Aware RL for search agents: answer when the evidence supports it, "
                    "abstain when it does not, measured with RA-F1.",
    )
    parser.add_argument("--version", action="version", version=f"awarl {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS:
        importlib.import_module(f"awarl.commands.{name.replace('-', '_')}").add_parser(sub, help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Overrides (KEY=VALUE) may follow options (`--out D reward.gamma=0.5`); argparse stops collecting
    # positionals at the first option, so leftovers that look like overrides are added back here.
    args, rest = parser.parse_known_args(argv)
    stray = [a for a in rest if "=" not in a or a.startswith("-")]
    if stray or (rest and not hasattr(args, "overrides")):
        parser.parse_args(argv)  # let argparse report the unknown arguments as usual (exits 2)
    if rest:
        args.overrides = list(args.overrides or []) + rest
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if (gone := cli_errors.missing_cwd()) is not None:
        print(f"awarl {args.command}: error: {gone}", file=sys.stderr)
        return 2
    cli_errors.terminate_as_exit()
    try:
        return int(args.func(args) or 0)
    except (ConfigError, DataError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
            ValueError, RetrievalClientError) as e:
        # Bad input (a config key, a data line, a missing file, an output that would overwrite an earlier run,
        # a wrong value, an unreachable retrieval server): the message names it. The traceback is for bugs;
        # -v shows it anyway.
        if args.verbose:
            raise
        print(f"awarl {args.command}: error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"awarl {args.command}: interrupted; {cli_errors.resume_advice(args)}", file=sys.stderr)
        return 130
    except cli_errors.Terminated as e:
        print(f"awarl {args.command}: terminated (SIGTERM); {cli_errors.resume_advice(args)}", file=sys.stderr)
        return int(e.code or 143)
    except Exception as e:
        # The system stopped the command (a full disk, a file-size limit, a read-only or forbidden output, also
        # when a library wraps it), or a number overflowed: one line naming the path and what to do, exit 1.
        where = cli_errors.output_of(args)
        found = e if isinstance(e, OverflowError) else cli_errors.os_error_in(e, where)
        if found is None or args.verbose:
            raise
        text = cli_errors.overflow(found) if isinstance(found, OverflowError) else \
            cli_errors.describe(found, where, cli_errors.resume_advice(args))
        print(f"awarl {args.command}: error: {text}", file=sys.stderr)
        return 1


def _message(e: Exception) -> str:
    """The error's message; mkdir's bare `[Errno 17] File exists: 'X'` or `[Errno 20] Not a directory` (an
    --out, or a folder above it, that is a file) names the file instead."""
    if isinstance(e, FileExistsError | NotADirectoryError) and isinstance(e.filename, str):
        path = e.filename
        while path and not os.path.lexists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        if os.path.isfile(path):
            return f"{path} is a file, where a folder is needed (an output folder, or a folder above it)"
    if isinstance(e, IsADirectoryError):  # os.replace of an atomic write onto a folder: name the folder
        path = e.filename2 if isinstance(e.filename2, str) else e.filename
        return f"{path} is a folder, where a file is needed (an output file path)"
    return str(e)


if __name__ == "__main__":
    sys.exit(main())
