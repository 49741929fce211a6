"""`awarl config show`: print a resolved config with the origin of each key (awarl.config_show)."""

from __future__ import annotations

import argparse
import os
import sys

from awarl.commands.common import add_config_args

EPILOG = """examples:
  # every key of a recipe, and whether the recipe, base.yaml (its `extends:` parent) or the default set it
  awarl config show --config configs/qwen2.5-3b_1gpu.yaml
  # with overrides, as `awarl train` would resolve them; JSON for a script
  awarl config show --config configs/demo_cpu.yaml reward.gamma=0.25 train.max_steps=10 --json
Each line is `key: value  # origin`, the origin one of: FILE:LINE (the --config file), FILE:LINE (extends)
(a parent it extends, at any depth), override KEY=VALUE (the command line), default (docs/config.md)."""


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser("config", help=help_text, description=help_text + ".")
    sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="print the resolved config, each key with its origin", epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          description="Print the config a command would run with (the defaults, the --config "
                          "file and what it `extends:`, the KEY=VALUE overrides), one key a line, each with "
                          "the file and line, `extends:` parent, override or default that set it. Loads "
                          "nothing but the config files.")
    show.add_argument("--json", action="store_true",
                      help="print JSON instead: {config, overrides, keys: {KEY: {value, origin, file, line, "
                           "override}}}")
    add_config_args(show)
    show.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    from awarl.config_show import render_json, render_yaml, resolve_with_origins

    overrides = list(args.overrides or [])
    settings = resolve_with_origins(args.config, overrides)
    text = render_json(settings, args.config, overrides) if args.json else render_yaml(settings)
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:   # `awarl config show ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
