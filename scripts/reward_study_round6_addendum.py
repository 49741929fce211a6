"""Round 6, addendum: the runner-up of round 6's tuning table on round 6's evidence cells. Secondary: it chooses
nothing.

Protocol. Fixed in this file and committed before any of its results, after round 6's step 5 had chosen (the
current default at γ 0.2, the only candidate meeting every filed target) and before round 6's held-out cells
existed. Round 6's rule put the filed targets first; the candidate with the largest mean lead on the tuning cells,
the RA-F1 line with warm-up 0.75 (+0.0101 against the chosen +0.0016), missed one (dead_once under mean-only
advantages). Users choosing `reward.abstain_line` need to know how it does where it was not tuned, so:

1. `CANDIDATE` (the RA-F1 line, warm-up 0.75) runs on every cell of round 6's steps 7, 8, 9 and 10 (the same
   populations, normalisations, seeds 0-2 and extra options), without baselines: a cell's baselines are round 6's
   own (the same seeds and sampling streams: common random numbers).
2. Per evidence cell: its lead over round 6's best baseline ± the larger seed sd, ahead / tie / behind, as
   round 6; beside round 6's chosen. Per earlier cell: no worse than the current default and than the reward at
   filing, within 1 sd.
3. Nothing is chosen from these results: the default is round 6's choice. Reported in docs/learning_study.md
   "Round 6" as the option's evidence.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/reward_study_round6_addendum.py \\
        --round6 runs/reward_study_round6 --jobs 2

Reads round 6's cells under ROUND6/cells, writes its own beside them (tag `...-addendum`), then
ROUND6/addendum.json and ROUND6/addendum.md (kept in the repo under docs/reward_study_round6/).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from awarl.io import atomic_write_json, atomic_write_text, repo_root


def _round6():
    spec = importlib.util.spec_from_file_location("reward_study_round6", repo_root() / "scripts" / "reward_study_round6.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("reward_study_round6", mod)
    spec.loader.exec_module(mod)
    return sys.modules["reward_study_round6"]


R6 = _round6()
L, R5 = R6.L, R6.R5
NAME = "ra_f1 line, warm-up 0.75"
CANDIDATE = {NAME: (R6.CANDIDATES[NAME][0], (0.1,))}
STEPS = {"held-out": "held_out", "unflattering": "unflattering", "r5-held-out": "round5_held_out"}


def protocol_commit() -> str:
    """This file's last commit; refuses when it has uncommitted changes."""
    import subprocess

    root = repo_root()
    rel = str(Path(__file__).resolve().relative_to(root))
    if subprocess.run(["git", "status", "--porcelain", "--", rel], cwd=root, capture_output=True, text=True,
                      check=True).stdout.strip():
        raise SystemExit(f"{rel} has uncommitted changes: commit the protocol before running it")
    return subprocess.run(["git", "log", "-1", "--format=%H", "--", rel], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--round6", default="runs/reward_study_round6", help="round 6's output folder")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    commit = protocol_commit()
    base = Path(args.round6)
    study = json.loads((base / "study.json").read_text())
    pops = {p["name"]: p for p in R6.populations() + R5.populations() + L.draw_populations() + L.earlier_populations()}
    g = study["chosen"]["gamma"]
    result: dict = {"protocol_commit": commit, "round6_protocol_commit": study["protocol_commit"], "candidate": NAME}
    for tag, key in [*STEPS.items(), ("earlier", "earlier")]:
        jobs, theirs = [], []
        for row in study[key]:
            cell = json.loads((base / "cells" / f"{row['population']}-{row['norm']}-{tag}.json").read_text())
            jobs.append((pops[row["population"]], row["norm"], tuple(cell["seeds"]), CANDIDATE, cell["extra"], False,
                         f"{tag}-addendum", str(base)))
            theirs.append(cell)
        mine = R6.run_jobs(jobs, args.jobs, tag)
        rows = []
        for cell, extra in zip(theirs, mine, strict=True):
            joined = {**cell, "variants": {**cell["variants"], **extra["variants"]}}
            if key == "earlier":
                rows.append({"population": cell["population"], "norm": cell["norm"],
                             "vs_current": R6.compare(joined, (NAME, 0.1), R6.CURRENT),
                             "vs_at_filing": R6.compare(joined, (NAME, 0.1), R6.AT_FILING)})
            else:
                v = R6.judge(joined, NAME, 0.1)
                chosen = R6.judge(joined, "chosen", g)
                rows.append({**v, "chosen_ra_f1": chosen["ra_f1"], "chosen_refusal": chosen["refusal"],
                             "chosen_lead": chosen["lead"]})
        result[key] = rows
    atomic_write_json(base / "addendum.json", result)
    atomic_write_text(base / "addendum.md", report(result))
    print(f"wrote {base}/addendum.json, {base}/addendum.md", file=sys.stderr)
    return 0


def f(x: float) -> str:
    return f"{x:.3f}".replace("-", "−")


def report(res: dict) -> str:
    lines = [f"# Round 6, addendum: {res['candidate']} on round 6's evidence cells (protocol: "
             f"scripts/reward_study_round6_addendum.py at {res['protocol_commit']}; round 6 at "
             f"{res['round6_protocol_commit']})", "",
             "Secondary: nothing is chosen from it. \"old default\" is the current default (γ 0.1); \"round 6's "
             "chosen\" the default round 6 chose.", ""]
    for title, key in (("Held-out cells", "held_out"), ("The unflattering simulator", "unflattering"),
                       ("Round 5's held-out populations", "round5_held_out")):
        rows = res[key]
        counts = []
        for norm in L.NORMALISATIONS:
            rs = [r for r in rows if r["norm"] == norm]
            counts.append(f"{norm}: ahead {sum(r['ahead'] for r in rs)}, tied {sum(r['tie'] for r in rs)}, behind "
                          f"{sum(not r['ahead'] and not r['tie'] for r in rs)} of {len(rs)}; mean lead "
                          f"{np.mean([r['lead'] for r in rs]):+.4f} (round 6's chosen "
                          f"{np.mean([r['chosen_lead'] for r in rs]):+.4f})")
        lines += [f"## {title}", "", "; ".join(counts), "",
                  "| cell | best baseline: RA-F1 (refusal) | candidate: RA-F1 (refusal) | lead ± sd | round 6's chosen: "
                  "RA-F1 (refusal) | verdict |", "|---|---|---|---|---|---|"]
        for r in rows:
            verdict = "ahead" if r["ahead"] else "tie" if r["tie"] else "behind"
            lines.append(f"| {r['population']} / {r['norm']} | {r['rival']} {f(r['rival_ra_f1'])} "
                         f"({r['rival_refusal']:.2f}) | {f(r['ra_f1'])} ({r['refusal']:.2f}) | {r['lead']:+.3f} ± "
                         f"{r['sd']:.3f} | {f(r['chosen_ra_f1'])} ({r['chosen_refusal']:.2f}) | {verdict} |")
        lines.append("")
    rows = res["earlier"]
    lines += ["## Earlier populations", "",
              f"No worse than the current default in {sum(r['vs_current']['no_worse'] for r in rows)} of {len(rows)}; "
              f"than the reward at filing in {sum(r['vs_at_filing']['no_worse'] for r in rows)} of {len(rows)}.", ""]
    worse = [r for r in rows if not r["vs_current"]["no_worse"] or not r["vs_at_filing"]["no_worse"]]
    if worse:
        lines += ["| population | candidate | current default | at filing |", "|---|---|---|---|"]
        lines += [f"| {r['population']} / {r['norm']} | {f(r['vs_current']['new'])} | {f(r['vs_current']['old'])} | "
                  f"{f(r['vs_at_filing']['old'])} |" for r in worse]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
