"""`awarl research`: the critic-loop research agent (one question, or a regression suite)."""

from __future__ import annotations

import argparse
import re

from awarl.commands.common import add_config_args, config_from_args

EPILOG = """examples:
  awarl research "What is the seat of the county where Van Hook Township is located?" --model runs/demo/policy
  awarl research "..." --model Qwen/Qwen2.5-7B-Instruct --config configs/research_gpu.yaml generation.backend=vllm
  awarl research --regression data/research/regression.jsonl --out runs/research-regression   # check
  awarl research --regression my_tasks.jsonl --record --out runs/rec    # (re)record the expectations
The report (markdown) is printed and written as JSON (--out, default research_report.json). A regression
run is refused against another source snapshot than the one recorded, and exits 1 when a task differs
from its expectations (REGRESSION: a claim once found unsupported is approved again)."""


def add_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    p = sub.add_parser("research", help=help_text, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=help_text + ": planner, executor (the search agent), critic on the original "
                       "sources, re-query up to research.max_iterations, and a report with its coverage gaps.")
    p.add_argument("question", nargs="?", help="the question (omit with --regression)")
    p.add_argument("--model", help="executor checkpoint: local path or hub id (default: train.model of the config)")
    p.add_argument("--out", help="the report JSON (default research_report.json), or with --regression the "
                   "output folder (default runs/research-regression)")
    p.add_argument("--regression", metavar="TASKS.jsonl", help="run fixed tasks against their recorded expectations")
    p.add_argument("--record", action="store_true", help="with --regression: record the expectations instead")
    p.add_argument("--index", help="BM25/dense index folder (retrieval.index_dir)")
    p.add_argument("--retriever-url", help="Search-R1-compatible retrieval server (retrieval.kind=server)")
    add_config_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from awarl.research.report import report_markdown
    from awarl.stages.research import research_question, run_regression

    if args.regression and args.question and re.match(r"^[A-Za-z_][\w.]*=", args.question):
        # `--regression F KEY=VALUE ...`: argparse took the first override for the (absent) question
        args.overrides, args.question = [args.question, *(args.overrides or [])], None
    if bool(args.question) == bool(args.regression):
        raise ValueError("give a QUESTION or --regression TASKS.jsonl (one of them)")
    if args.record and not args.regression:
        raise ValueError("--record goes with --regression")
    cfg = config_from_args(args, {"retrieval.index_dir": args.index,
                                  "retrieval.kind": "server" if args.retriever_url else None,
                                  "retrieval.server_url": args.retriever_url})
    if args.regression:
        out = args.out or "runs/research-regression"
        res = run_regression(cfg, args.regression, out, model=args.model, record_mode=args.record)
        if res["recorded"]:
            print(f"recorded the expectations of {res['tasks']} task(s) into {args.regression}")
            return 0
        for tid, diffs in res["failures"].items():
            for d in diffs:
                print(f"{tid}: {d}")
        print(f"{res['tasks'] - len(res['failures'])}/{res['tasks']} tasks as recorded, {res['regressions']} "
              f"regression(s); details in {out}/regression.json")
        return 1 if res["failures"] else 0
    out = args.out or "research_report.json"
    report = research_question(cfg, args.question, model=args.model, out=out)
    print(report_markdown(report))
    print(f"report written to {out}")
    return 0
