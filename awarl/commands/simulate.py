"""`awarl simulate`: the reward-dynamics simulator (numpy, CPU, seconds)."""

from __future__ import annotations

import argparse
from pathlib import Path

from awarl.commands.common import add_config_args, config_from_args, seed_number


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser(
        "simulate", help=help_text,
        description="Simulate GRPO training of an answer/abstain policy under each refusal-reward strategy of "
                    "simulate.strategies (static over simulate.static_values, AWA-RL over simulate.gammas, with "
                    "and without penalty) and write "
                    "curves.png, summary.md and summary.json, with the paper's claims checked. Reward constants "
                    "and reconstruction options come from `reward:` (e.g. reward.expected_rate=r_base_mean), the "
                    "population and policy from `simulate:`; populations: configs/simulate/*.yaml "
                    "(docs/simulator.md).",
        epilog="examples:\n  awarl simulate reward.expected_rate=r_base_mean\n"
               "  awarl simulate --config configs/simulate/paper_like.yaml --seeds 3 --out runs/simulate/paper_like",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--out", metavar="DIR", help="output folder (default: <run.out_dir>/simulate)")
    p.add_argument("--steps", type=int, metavar="N", help="steps per run (overrides simulate.steps)")
    p.add_argument("--seed", type=seed_number, metavar="S", help="first seed (overrides simulate.seed)")
    p.add_argument("--seeds", type=int, metavar="N", help="number of seeds (overrides simulate.seeds)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args, {"simulate.steps": args.steps, "simulate.seed": args.seed,
                                  "simulate.seeds": args.seeds})
    from awarl.locks import folder_lock
    from awarl.simulate import run_simulation

    out = Path(args.out) if args.out else Path(cfg.run.out_dir) / "simulate"
    with folder_lock(out, f"simulation folder {out}", remedy="or pass another --out"):
        summary = run_simulation(cfg, out, progress=not args.no_progress)
    for c in summary["claims"]:
        print(f"{'reproduced' if c['holds'] else 'NOT reproduced'}: {c['claim']}\n    {c['evidence']}")
    print(f"wrote {out}/summary.md, summary.json, curves.png")
    return 0
