"""`awarl model tiny --out DIR`: build the tiny offline test/demo model."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser(
        "model", help=help_text,
        description="Build local models. `tiny` trains a byte-level BPE tokenizer on the shipped data and "
                    "saves a random-init Qwen2 causal LM (about 1M parameters) for CPU tests and the demo.")
    sub = p.add_subparsers(dest="model_command", metavar="KIND", required=True)
    t = sub.add_parser("tiny", help="tiny random-init Qwen2 model + tokenizer (seconds, offline)",
                       description="Build the tiny model; deterministic for a seed.")
    t.add_argument("--out", required=True, help="output folder (model + tokenizer)")
    t.add_argument("--seed", type=int, default=0, help="initialisation seed (default 0)")
    t.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary size before added tokens")
    t.add_argument("--hidden", type=int, default=128, help="hidden size")
    t.add_argument("--layers", type=int, default=2, help="decoder layers")
    t.add_argument("--heads", type=int, default=4, help="attention heads")
    t.set_defaults(func=_run_tiny)


def _run_tiny(args: argparse.Namespace) -> int:
    from awarl.models.tiny import build_tiny_model

    for name in ("vocab_size", "hidden", "layers", "heads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"awarl model tiny: --{name.replace('_', '-')} must be >= 1")
    out = build_tiny_model(args.out, seed=args.seed, vocab_size=args.vocab_size, hidden=args.hidden,
                           layers=args.layers, heads=args.heads)
    print(out)
    return 0
