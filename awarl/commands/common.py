"""Argument helpers shared by the subcommands that take a config."""

from __future__ import annotations

import argparse

from awarl.config import AwarlConfig, load_config


def add_config_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("--config", "-c", required=required, metavar="YAML",
                   help="run config (YAML under configs/; may `extends:` another)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="dotted overrides applied after the file, e.g. reward.gamma=0.25 train.max_steps=10")


def config_from_args(args: argparse.Namespace) -> AwarlConfig:
    return load_config(args.config, list(args.overrides or []))
