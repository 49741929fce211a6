"""`awarl score`: score a predictions file (P, A, RA-F1 with CIs, coverage gaps) and write the report."""

from __future__ import annotations

import argparse

from awarl.commands.common import add_config_args, config_from_args


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from awarl.locks import folder_lock
    from awarl.report import print_results_table
    from awarl.stages.score import score_file

    cfg = config_from_args(args)
    out_dir = Path(args.out) if args.out else Path(args.predictions).parent
    # results.json/.md/.png are written one after the other: two writers (or an eval still running in the
    # folder) would leave a report of two runs
    with folder_lock(out_dir, f"report folder {out_dir}", remedy="or pass another --out"):
        results = score_file(args.predictions, out_dir, cfg)
    print_results_table(results)
    print(f"wrote {out_dir / 'results.json'}, results.md, results.png")
    return 0


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser(
        "score", help=help_text,
        description=help_text + ". PREDICTIONS is JSONL with id, dataset, question, prediction (null = no final "
                    "answer), answers, and optional valid, judge_correct, trajectory (docs/formats.md). "
                    "Malformed lines are reported with their line number and skipped. Write KEY=VALUE "
                    "overrides right after PREDICTIONS.jsonl (before --out/--config), e.g. "
                    "`awarl score preds.jsonl metrics.correctness=f1 --out report/`.")
    p.add_argument("predictions", metavar="PREDICTIONS.jsonl", help="predictions file")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output folder for results.json/.md/.png (default: next to the predictions)")
    add_config_args(p)
    p.set_defaults(func=_run)
