"""Argument helpers shared by the subcommands that take a config, and the one rule that turns their flags
into config overrides.

Precedence, lowest to highest: the defaults, the --config file (and what it `extends:`), the command's own
flags (each is a shorthand for a config key, e.g. `awarl eval --index D` is `retrieval.index_dir=D`), then
the KEY=VALUE overrides in the order given; the last value written for a key wins, so an explicit KEY=VALUE
beats a flag for the same key. Flag values are always quoted, so a path such as `/data/idx #2` or
`runs/2024.10` stays the string it is (unquoted, YAML would cut a comment off or read a float).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from awarl import choices
from awarl.config import MAX_PORT, MAX_SEED, REGISTERED_KEYS, AwarlConfig, allowed_values, load_config

PRECEDENCE = ("dotted overrides, applied after the config file and after this command's own flags: the last "
              "value for a key wins, so KEY=VALUE beats a flag for the same key")


def registered_choices() -> str:
    """The values of every registry-backed key (awarl/choices.py), keys with the same values on one line."""
    lines: dict[tuple[str, ...], list[str]] = {}
    for key in REGISTERED_KEYS:
        lines.setdefault(allowed_values(key), []).append(key)
    settings = [f"  {reg.options_key}.{e.name}: {', '.join(model.model_fields)};" for reg in choices.ALL
                for e in reg if e.options and (model := reg.options_model(e.name)) is not None]
    return "\n".join([*(f"  {', '.join(keys)}: {', '.join(values)};" for values, keys in lines.items()), *settings])


def add_choices_epilog(p: argparse.ArgumentParser) -> None:
    """Append the registered choices (`registered_choices`) to the epilog of a command that takes overrides."""
    block = ("registered choices (awarl/choices.py; docs/config.md describes each, docs/extending.md adds one):\n"
             + registered_choices())
    p.epilog = f"{p.epilog}\n\n{block}" if p.epilog else block


def add_config_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    """--config and the KEY=VALUE overrides, and the registered choices in the epilog."""
    p.add_argument("--config", "-c", required=required, metavar="YAML",
                   help="run config (YAML under configs/; may `extends:` another)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help=f"{PRECEDENCE}; e.g. reward.gamma=0.25 train.max_steps=10")
    add_choices_epilog(p)


def int_between(lo: int, hi: int, what: str) -> Callable[[str], int]:
    """An argparse `type=` for an integer in [lo, hi] (`what` names the range's reason): a port past 65535
    was taken modulo 2**16 (`serve --port 70000` listened on 4464), a negative seed failed deep in numpy."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is outside {lo}-{hi} ({what})")
        return value
    return parse


def port_number(text: str) -> int:
    return int_between(1, MAX_PORT, "a TCP port")(text)


def seed_number(text: str) -> int:
    return int_between(0, MAX_SEED, "the seeds numpy takes")(text)


def looks_like_override(word: str | None) -> bool:
    """`KEY=VALUE` with a dotted key (`reward.gamma=0.25`): what an optional positional or an option's optional
    value took from the overrides that followed it (argparse fills those first)."""
    return word is not None and re.match(r"^[A-Za-z_][\w.]*=", word) is not None


def flag_overrides(flags: Mapping[str, Any]) -> list[str]:
    """`KEY=VALUE` overrides for the flags that were given (value not None), values quoted as JSON (which
    YAML reads back as the same string, number, bool or list)."""
    return [f"{key}={json.dumps(value)}" for key, value in flags.items() if value is not None]


def config_from_args(args: argparse.Namespace, flags: Mapping[str, Any] | None = None) -> AwarlConfig:
    """The run config: `--config`, then `flags` (config key -> flag value, None = not given), then the
    KEY=VALUE overrides of the command line (module docstring)."""
    return load_config(args.config, flag_overrides(flags or {}) + list(args.overrides or []))
