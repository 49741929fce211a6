"""`awarl research`: the critic-loop research agent (one question, or a regression suite)."""

from __future__ import annotations

import argparse

from awarl.commands.common import add_config_args, config_from_args, looks_like_override

EPILOG = """examples:
  # the demo's trained policy (`make demo` writes runs/demo/final) on the shipped closed corpus
  awarl research "What is the seat of the county where Van Hook Township is located?" --model runs/demo/final
  # GPUs: an AWA-RL checkpoint with vLLM, the LLM planner and judge behind scripts/serve_judge.sh
  awarl research "Who was born earlier, Simone Bolelli or Caroline Wozniacki?" --config configs/research_qwen2.5-7b.yaml
  # the shipped regression suite (scripted executor; docs/research.md)
  awarl research --regression data/research/regression.jsonl --model runs/demo/final --out runs/research-regression \
      generation.backend=scripted generation.script=data/research/regression_script.jsonl
  # (re)record a suite's expectations after an intended change
  awarl research --regression data/research/regression.jsonl --record --model runs/demo/final --out runs/rec \
      generation.backend=scripted generation.script=data/research/regression_script.jsonl
The loop's decisions are made by research.judge (lexical by default; openai in the GPU recipe; gold is an
ORACLE that reads the dataset's gold evidence). The report (markdown) is printed and written as JSON (--out,
default research_report.json). --dry-run checks the question, config and tasks and says what would run,
loading nothing. A regression run is refused against another source snapshot, judge, planner or executor
policy than the recorded ones, and exits 1 when a task differs from its expectations (REGRESSION: a claim
once found unsupported is approved again)."""


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
    p.add_argument("--dry-run", action="store_true", help="check the question (or tasks), config and paths and "
                   "say what would run; load no model, index or endpoint")
    add_config_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from awarl.research.report import report_markdown
    from awarl.stages.research import research_question, run_regression

    if args.regression and looks_like_override(args.question):
        # `--regression F KEY=VALUE ...`: argparse took the first override for the (absent) question
        args.overrides, args.question = [args.question, *(args.overrides or [])], None
    if bool(args.question) == bool(args.regression):
        raise ValueError("give a QUESTION or --regression TASKS.jsonl (one of them)")
    if args.record and not args.regression:
        raise ValueError("--record goes with --regression")
    cfg = config_from_args(args, {"retrieval.index_dir": args.index,
                                  "retrieval.kind": "server" if args.retriever_url else None,
                                  "retrieval.server_url": args.retriever_url})
    if args.dry_run:
        from awarl.stages.research import dry_run

        print(dry_run(cfg, question=args.question, tasks=args.regression, model=args.model))
        return 0
    if args.regression:
        out = args.out or "runs/research-regression"
        res = run_regression(cfg, args.regression, out, model=args.model, record_mode=args.record)
        if res["recorded"]:
            print(f"recorded the expectations of {res['tasks']} task(s) into {args.regression}")
            return 0
        for note in res["setting_differences"]:
            print(f"note: {note}")
        for tid, diffs in res["failures"].items():
            for d in diffs:
                print(f"{tid}: {d}")
        print(f"{res['tasks'] - len(res['failures'])}/{res['tasks']} tasks as recorded, {res['regressions']} "
              f"regression(s); details in {out}/regression.json")
        return 1 if res["failures"] else 0
    out = args.out or "research_report.json"
    # printed before the JSON is written: a write that fails after the whole run costs the file, not the report
    research_question(cfg, args.question, model=args.model, out=out,
                      on_report=lambda report: print(report_markdown(report), flush=True))
    print(f"report written to {out}")
    return 0
