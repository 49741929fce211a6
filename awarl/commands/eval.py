"""`awarl eval`: run the search agent on evaluation sets and score it (resumable)."""

from __future__ import annotations

import argparse

from awarl.choices import DEV_SETS
from awarl.commands.common import add_config_args, config_from_args

EPILOG = """examples:
  # a released Search-R1 checkpoint, with its own prompt, against a running wiki-18 retrieval server
  awarl eval --model PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-em-ppo --template search-r1 \\
      --retriever-url http://127.0.0.1:8000 --limit 500 --out runs/eval/searchr1-7b generation.backend=vllm
  # one of ours (`make demo` writes runs/demo/final), on the shipped dev samples with the closed-corpus BM25
  # index (built on first use)
  awarl eval --model runs/demo/final --limit 20 --out runs/eval/demo
  # the same checkpoint inside the critic-loop research agent (docs/research.md), then side by side
  awarl eval --model runs/demo/final --limit 20 --out runs/eval/demo-loop --agent critic_loop
  awarl compare runs/eval/demo runs/eval/demo-loop --out runs/eval/loop-vs-single
A rerun of the same command resumes: finished questions are skipped (a rerun with another model, template,
agent limits, sampling, seed, data or index is refused: use another --out). Every answered, valid trajectory
is checked by the citation critic (critic.judge, gold by default: an oracle yardstick; `none` skips it). The
critic loop's own decisions are made by research.judge (lexical by default; gold there is an oracle, and
`awarl compare` says so)."""


def add_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    p = sub.add_parser("eval", help=help_text, description=help_text + ".", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="checkpoint: local path or hub id (default: train.model of the config)")
    p.add_argument("--datasets", help="comma-separated shipped dev sets, of " + ", ".join(DEV_SETS.names)
                   + " (default: eval.datasets, or the data.eval files of the config)")
    p.add_argument("--limit", type=int, help="questions per dataset (seeded subsample)")
    p.add_argument("--out", required=True, help="output folder (predictions, manifest, results)")
    p.add_argument("--template", help="prompt template name or YAML path (agent.template)")
    p.add_argument("--index", help="BM25/dense index folder (retrieval.index_dir)")
    p.add_argument("--retriever-url", help="Search-R1-compatible retrieval server (retrieval.kind=server)")
    p.add_argument("--agent", choices=["single_pass", "critic_loop"],
                   help="the agent evaluated (eval.agent): one search trajectory per question, or the critic-loop "
                        "research agent over it (research.*; docs/research.md)")
    add_config_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from awarl.report import print_results_table
    from awarl.stages.evaluate import run_eval
    from awarl.stages.resources import ensure_default_retrieval

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1 (questions per dataset), got {args.limit}")
    cfg = config_from_args(args, {
        "agent.template": args.template,
        "retrieval.index_dir": args.index,  # its kind is read from the index's meta
        "retrieval.kind": "server" if args.retriever_url else None,
        "retrieval.server_url": args.retriever_url,
        "eval.agent": args.agent})
    cfg = ensure_default_retrieval(cfg)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()] if args.datasets else None
    results = run_eval(cfg, args.out, model=args.model, datasets=datasets, limit=args.limit)
    print_results_table(results)
    print(f"\npredictions, manifest and report in {args.out}/ (results.md, results.json, results.png)")
    return 0
