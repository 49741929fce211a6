"""`awarl estimate`: K sampled trajectories per training question -> p_i JSONL (resumable)."""

from __future__ import annotations

import argparse

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
    from awarl.data.estimates import estimates_path, estimates_summary, read_estimates
    from awarl.stages.estimate import run_estimate

    cfg = config_from_args(args, {"estimate.model": args.model, "estimate.out": args.out, "estimate.k": args.k})
    out = run_estimate(cfg)
    used = estimates_path(cfg.estimate.out, cfg.run.out_dir, train_file=cfg.train.p_estimates)
    use = ("`awarl train` with this config reads them" if used.resolve() == out.resolve() else
           f"note: train.p_estimates points to {used}; set train.p_estimates={out} to train with these")
    print(f"p_i estimates: {out}\n  {estimates_summary(read_estimates(out))}\n  {use}")
    return 0
