"""`awarl estimate`: K sampled trajectories per training question -> p_i JSONL (resumable)."""

from __future__ import annotations

import argparse
import json

from awarl.commands.common import add_config_args, config_from_args

EPILOG = """examples:
  # cold start: p_i of the instruct model itself (estimate.model defaults to train.model)
  awarl estimate --config configs/qwen2.5-3b_1gpu.yaml
  # warm start: the plain-GRPO checkpoint, 16 samples per question
  awarl estimate --config configs/qwen2.5-7b_warm_8gpu.yaml estimate.k=16 generation.backend=vllm
Writes estimate.out (default <run.out_dir>/p_estimates.jsonl); a rerun skips finished questions."""


def add_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    p = sub.add_parser("estimate", help=help_text, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=help_text + ": the share of K sampled trajectories of the standard "
                       "checkpoint that answer correctly, with the training template and retriever.")
    p.add_argument("--model", help="standard checkpoint (overrides estimate.model; default train.model)")
    p.add_argument("--out", help="output JSONL (overrides estimate.out)")
    p.add_argument("-k", type=int, help="trajectories per question (overrides estimate.k)")
    add_config_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from awarl.stages.estimate import estimates_summary, read_estimates, run_estimate
    from awarl.stages.train import estimates_path

    # Overrides are parsed as YAML: quote the free-text values so a path such as `runs/2024.10` or
    # `ckpt #3` stays the string it is (unquoted, YAML would read a float, or cut a comment off).
    extra = []
    if args.model:
        extra.append(f"estimate.model={json.dumps(args.model)}")
    if args.out:
        extra.append(f"estimate.out={json.dumps(args.out)}")
    if args.k is not None:
        extra.append(f"estimate.k={args.k}")
    args.overrides = list(args.overrides or []) + extra
    cfg = config_from_args(args)
    out = run_estimate(cfg)
    used = estimates_path(cfg)
    use = ("`awarl train` with this config reads them" if used.resolve() == out.resolve() else
           f"note: train.p_estimates points to {used}; set train.p_estimates={out} to train with these")
    print(f"p_i estimates: {out}\n  {estimates_summary(read_estimates(out))}\n  {use}")
    return 0
