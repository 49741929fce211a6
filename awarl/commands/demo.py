"""`awarl demo`: the whole pipeline offline on the shipped data, on CPU (the README's main job)."""

from __future__ import annotations

import argparse

from awarl.commands.common import add_choices_epilog


def add_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    p = sub.add_parser(
        "demo", help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=help_text + ".\n\nBuilds a tiny model and tokenizer locally, the BM25 index of the shipped "
        "closed corpus,\nwarms the model up on the agent protocol, estimates p_i, runs AWA-RL GRPO (40 steps; "
        "REPORT.md plots\nthe reward's ρ, ρ̂, Ē and P per step from the trainer's log beside the simulator's "
        "prediction) and\nevaluates before and after RL on held-out HotpotQA / 2WikiMultiHopQA / MuSiQue questions.\n"
        "A rerun with the same --out continues where it stopped (finished stages are kept: use a new --out\nto run with other settings).",
        epilog="example:\n  awarl demo --out runs/demo\n  awarl demo --out runs/demo-g5 reward.gamma=0.5 train.max_steps=8")
    p.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    p.add_argument("--config", "-c", metavar="YAML", help="demo config (default: configs/demo_cpu.yaml)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides")
    add_choices_epilog(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from awarl.stages.demo import run_demo

    run_demo(args.out, args.config, args.overrides)
    return 0
