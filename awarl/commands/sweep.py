"""`awarl sweep`: expand a grid of configs (e.g. over γ), run them or write launch scripts, compare."""

from __future__ import annotations

import argparse
from pathlib import Path

from awarl.commands.common import add_choices_epilog


def add_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    p = sub.add_parser(
        "sweep", help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=help_text + ".\n\nEach grid point becomes <out_dir>/<run>/config.yaml; p_i is estimated once "
        "and shared.\nIn `local` mode the runs go one after the other (a rerun skips finished runs); in `scripts` "
        "mode\none launch script per run is written for a cluster (--dry-run checks the runs and writes none). Finished runs are compared in\n"
        "<out_dir>/comparison.{md,json,png} (RA-F1, precision, accuracy, abstention rate per point).",
        epilog="example:\n  awarl sweep --config configs/sweep_gamma.yaml\n"
               "  awarl sweep --config configs/sweep_gamma.yaml sweep.mode=scripts   # cluster scripts\n"
               "  awarl sweep --config configs/sweep_gamma.yaml --aggregate          # compare finished runs")
    p.add_argument("--config", "-c", required=True, metavar="YAML", help="sweep file (see configs/sweep_gamma.yaml)")
    p.add_argument("--aggregate", action="store_true", help="only (re)build the comparison of finished runs")
    p.add_argument("--dry-run", action="store_true", help="validate every run (`train --dry-run`), train nothing")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides of the sweep file, e.g. sweep.mode=scripts")
    add_choices_epilog(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from awarl.stages.sweep import run_sweep

    res = run_sweep(args.config, args.overrides, aggregate_only=args.aggregate, dry_run=args.dry_run)
    keys = list(res["runs"][0]["point"]) if res["runs"] else []
    print(f"{len(res['runs'])} runs over {' x '.join(keys) or 'no key'}:")
    for r in res["runs"]:
        point = ", ".join(f"{k}={v}" for k, v in r["point"].items())
        print(f"  {point:<48} {r['config']}")
    if "scripts" in res:
        print("launch scripts:\n  " + "\n  ".join(res["scripts"]))
    if "comparison" in res:
        print(f"comparison: {Path(res['out_dir']) / 'comparison.md'}")  # where aggregate wrote it: sweep.out_dir
    failed = {k: v for k, v in res.get("exit_codes", {}).items() if v}
    if failed:
        print(f"failed runs: {failed}")
    return 1 if failed else 0
