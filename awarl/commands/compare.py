"""`awarl compare`: several evaluation runs side by side, with paired-bootstrap differences to the first."""

from __future__ import annotations

import argparse
from pathlib import Path

from awarl.commands.common import add_choices_epilog, looks_like_override

EPILOG = """examples:
  awarl compare runs/eval/searchr1-7b runs/eval/awarl-7b --out runs/compare/7b
  awarl compare runs/sweep_gamma/gamma=0.02_expected_rate=posterior/eval/final \\
      runs/sweep_gamma/gamma=0.5_expected_rate=posterior/eval/final --names g0.02,g0.5 \\
      --out runs/compare/gamma metrics.correctness=cover_em
"""


def _run(args: argparse.Namespace) -> int:
    from awarl.config import load_config
    from awarl.locks import folder_lock
    from awarl.stages.compare import compare_runs, write_comparison

    # KEY=VALUE overrides arrive among the runs (both are positional); a path that exists is a run, and so is
    # one that does not but is no dotted KEY=VALUE (a sweep's run folders have `=` in their names).
    overrides = [a for a in args.runs if looks_like_override(a) and not Path(a).exists()]
    runs = [a for a in args.runs if a not in overrides]
    overrides += list(args.overrides or [])  # those written after the options
    cfg = load_config(args.config, overrides)
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    res = compare_runs(runs, cfg, names)
    with folder_lock(args.out, f"comparison folder {args.out}", remedy="or pass another --out"):
        md = write_comparison(res, args.out)
    print(md.read_text(encoding="utf-8"))
    print(f"wrote {md}, compare.json, compare.png")
    return 0


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser(
        "compare", help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description=help_text + ". Each RUN is an `awarl eval` folder or a predictions file; all are re-scored "
                    "under one rule on the questions every run answered. The first run is the baseline: each "
                    "other run gets its macro RA-F1 / precision / accuracy / abstention difference with a "
                    "paired-bootstrap 95% interval (metrics.bootstrap_samples resamples).")
    p.add_argument("runs", nargs="+", metavar="RUN", help="eval folders or predictions files (and KEY=VALUE "
                   "overrides, e.g. metrics.correctness=f1)")
    p.add_argument("--names", default=None, help="comma-separated labels, one per run (default: folder names)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for compare.json/.md/.png")
    p.add_argument("--config", "-c", default=None, metavar="YAML", help="config for metrics.* and "
                   "agent.abstention_phrases (default: the built-in defaults)")
    add_choices_epilog(p)
    p.set_defaults(func=_run, overrides=None)
