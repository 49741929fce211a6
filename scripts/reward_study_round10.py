"""Round 10 of the reward study (issue 41): issue 41's 85 targets measured on ten seeds, on two fresh seed blocks.

Protocol. Fixed in this file and committed BEFORE any of its results were computed; `main` refuses to run while
this file has uncommitted changes and records its commit in the results (`protocol_commit`), which land in a
later commit (docs/learning_study.md "Round 10"). Nothing is tuned or chosen: the reward is the one shipped at
this commit (round 9's defaults), unchanged.

Why this round, said before its results. Issue 41 states its targets as "simulator, ≥ 3 seeds, reported with sd",
each "no worse beyond 1 sd". Rounds 4-9 measured them on seeds 0-2, and after round 9 the shipped reward missed 2
of the 85: pop05 and fresh04 under group-std advantages, 0.1324 against the reward at filing's 0.1334 ± 0.0003 and
0.3837 against 0.3864 ± 0.0023. A 1-sd criterion is only as good as its sd, and the standard deviation of three
values is itself a poor estimate of the seed noise: exploration after round 9 (docs/learning_study.md, "Explored
after round 9"), on seeds 0-9, gave the same two cells sds of 0.0036 and 0.0042, 12 and 2 times the three-seed
ones, and put both cells within 1 sd. Those ten seeds were chosen and seen after the three-seed misses, so they do
not decide anything here; this round measures every target again, the same way, on seeds nobody has run.

What this round measures (1000 steps, the normalisations round 7's targets use). "shipped" is the reward at this
commit's defaults; "at filing" is round 9's amended reference (`R9.AT_FILING_KEYS`: no online p, no gate, no
warm-up, the courage line at γ 0.02). Baselines on the filed cells: plain GRPO, static 0.05, BAPO (0.5).

R. **Reproduction** (seeds 0-2): both rewards on all 85 cells reproduce what round 9 recorded (shipped: RA-F1 and
   refusal on the filed and earlier cells; at filing: round 7's recorded values, as round 9's amendment checked),
   within 1e-9; otherwise the study stops before any block is counted, since it would not be measuring the
   rewards the earlier counts were about.
S. **The targets on ten seeds**, each block counted as round 9's step A counted seeds 0-2: the 8 filed cells
   (grow, grow_once ≥ plain GRPO − 1 sd; dead, dead_once ≥ the best baseline − 1 sd) and the 77 earlier cells (no
   worse than the reward at filing within the larger of the two seed sds; sds as every round computed them, over
   seeds with ddof 0). Blocks, in this order:
   - F1: seeds 1000-1009 and F2: seeds 2000-2009, never run by any round or exploration: **decisive**;
   - X: seeds 0-9, reported, not decisive (it contains seeds 0-2 and the exploration's seeds).
   Per block: the missed targets, named, and the five cells closest to missing (smallest margin, RA-F1 minus the
   line it must reach).
T. **How far three seeds' sd is from ten's** (descriptive): per earlier cell, the criterion's sd on seeds 0-2
   (round 9's) against X's; the median ratio and the cells where three seeds' sd is below a third of ten's.

Rule, fixed now: issue 41's simulator targets (its item 1) count as met when F1 and F2 each miss none of the 85.
Otherwise item 1 stays open, and the results name each missed cell with its figures. Either way the reward and
its defaults do not change in this round.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/reward_study_round10.py --out runs/reward_study_round10 --jobs 2

Writes OUT/cells/NAME.json per cell as it finishes (a rerun skips those), then OUT/study.json and OUT/study.md
(kept in the repo under docs/reward_study_round10/).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_protocol import load_script, protocol_commit  # noqa: E402 - scripts/ is not a package

from awarl.io import atomic_write_json, atomic_write_text, repo_root  # noqa: E402

R9 = load_script("reward_study_round9")
R7, R6, L = R9.R7, R9.R6, R9.L

SHIPPED = "shipped"
REWARDS: dict[str, tuple[dict, tuple[float, ...]]] = {SHIPPED: ({}, (0.2,))}  # γ labels the row (RA-F1 line)
AT_FILING = R6.AT_FILING
WITH_FILING = {**REWARDS, AT_FILING[0]: (R9.AT_FILING_KEYS, (AT_FILING[1],))}
REPRODUCE = (0, 1, 2)
BLOCKS: dict[str, tuple[int, ...]] = {"F1": tuple(range(1000, 1010)), "F2": tuple(range(2000, 2010)),
                                      "X": tuple(range(10))}
DECISIVE = ("F1", "F2")
ROUND9_STUDY = repo_root() / "docs" / "reward_study_round9" / "study.json"
REPRODUCE_TOL = 1e-9
CLOSEST = 5


def count(filed_cells: list[dict], earlier_cells: list[dict]) -> dict:
    """One block's targets: every filed and earlier cell with its RA-F1, the line it must reach and whether it
    does, the missed ones named, and the closest to missing."""
    rows = []
    for c in filed_cells:
        row = L.row_at(c, SHIPPED, 0.2)
        rival = L.plain(c) if c["population"].startswith("grow") else L.best_baseline(c)
        sd = max(row["ra_f1_sd"], rival["ra_f1_sd"])
        rows.append({"cell": f"{c['population']}/{c['norm']}", "kind": "filed", "ra_f1": row["ra_f1"],
                     "refusal_rate": row["refusal_rate"], "reference": rival["ra_f1"], "reference_label": rival["label"],
                     "sd": sd, "met": L.filed_target(c, row)})
    for c in earlier_cells:
        r = R6.compare(c, (SHIPPED, 0.2), AT_FILING)
        rows.append({"cell": f"{c['population']}/{c['norm']}", "kind": "earlier", "ra_f1": r["new"],
                     "refusal_rate": r["new_refusal"], "reference": r["old"], "reference_label": AT_FILING[0],
                     "sd": r["sd"], "met": r["no_worse"]})
    for r in rows:
        r["margin"] = r["ra_f1"] - (r["reference"] - r["sd"])
    return {"targets": len(rows), "missed": [r["cell"] for r in rows if not r["met"]],
            "closest": sorted(rows, key=lambda r: r["margin"])[:CLOSEST], "rows": rows}


def reproduction(filed_cells: list[dict], earlier_cells: list[dict]) -> dict:
    """Step R: seeds 0-2 against round 9's recorded shipped values (filed and earlier) and round 7's recorded
    at-filing ones (through round 9's own check)."""
    recorded = json.loads(ROUND9_STUDY.read_text())["targets"][R9.SHIPPED]
    filed = {r["cell"]: r for r in recorded["filed"]}
    earlier = {f"{r['population']}/{r['norm']}": r for r in recorded["earlier"]}
    differing = []
    for c in filed_cells:
        name, row = f"{c['population']}/{c['norm']}", L.row_at(c, SHIPPED, 0.2)
        ref = filed[name]
        if max(abs(row["ra_f1"] - ref["ra_f1"]), abs(row["refusal_rate"] - ref["refusal_rate"])) > REPRODUCE_TOL:
            differing.append({"cell": name, "ra_f1": row["ra_f1"], "round9": ref["ra_f1"]})
    for c in earlier_cells:
        name, row = f"{c['population']}/{c['norm']}", L.row_at(c, SHIPPED, 0.2)
        ref = earlier[name]
        if max(abs(row["ra_f1"] - ref["new"]), abs(row["refusal_rate"] - ref["new_refusal"])) > REPRODUCE_TOL:
            differing.append({"cell": name, "ra_f1": row["ra_f1"], "round9": ref["new"]})
    at_filing = R9.at_filing_check(earlier_cells)
    return {"cells": len(filed_cells) + len(earlier_cells), "shipped_differing": differing,
            "at_filing_differing": at_filing["differing"]}


def sd_ratios(three: dict, ten: dict) -> dict:
    """Step T: per earlier cell, the criterion's sd on seeds 0-2 over its sd on seeds 0-9."""
    sd3 = {r["cell"]: r["sd"] for r in three["rows"] if r["kind"] == "earlier"}
    ratios = {r["cell"]: sd3[r["cell"]] / r["sd"] for r in ten["rows"] if r["kind"] == "earlier" and r["sd"] > 0}
    return {"median": float(np.median(list(ratios.values()))),
            "below_a_third": sorted(c for c, v in ratios.items() if v < 1 / 3), "cells": len(ratios)}


def verdict(blocks: dict[str, dict]) -> dict:
    """The protocol's rule: item 1's simulator targets are met when every decisive block misses none."""
    missed = {b: blocks[b]["missed"] for b in DECISIVE}
    return {"missed": missed, "item1_met": not any(missed.values())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/reward_study_round10")
    ap.add_argument("--jobs", type=int, default=1, help="cells simulated in parallel processes")
    args = ap.parse_args(argv)
    commit = protocol_commit(__file__)
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    filed = L.filed_populations()

    def block(seeds: tuple[int, ...], tag: str) -> tuple[list[dict], list[dict]]:
        f = R6.run_jobs([(p, n, seeds, REWARDS, [], True, f"filed-{tag}", str(out)) for p in filed
                         for n in L.NORMALISATIONS], args.jobs, f"{tag}: filed")
        e = R6.run_jobs([(p, n, seeds, WITH_FILING, [], False, f"earlier-{tag}", str(out))
                         for p, norms in R7.earlier_populations() for n in norms], args.jobs, f"{tag}: earlier")
        return f, e

    f0, e0 = block(REPRODUCE, "R")
    check = reproduction(f0, e0)
    if check["shipped_differing"] or check["at_filing_differing"]:
        atomic_write_json(out / "reproduction.json", check)
        raise SystemExit(f"seeds 0-2 do not reproduce rounds 9 and 7's recorded values (see {out}/reproduction.json):"
                         " no block is counted")
    three = count(f0, e0)
    blocks = {}
    for tag, seeds in BLOCKS.items():
        blocks[tag] = {"seeds": list(seeds), **count(*block(seeds, tag))}
    study = {"protocol_commit": commit, "reproduction": check, "seeds_0_2": three, "blocks": blocks,
             "sd_ratios": sd_ratios(three, blocks["X"]), "verdict": verdict(blocks)}
    atomic_write_json(out / "study.json", study)
    atomic_write_text(out / "study.md", report(study))
    print(f"wrote {out}/study.json, {out}/study.md", file=sys.stderr)
    return 0


def _closest(b: dict) -> str:
    return "; ".join(f"{r['cell']} {r['ra_f1']:.4f} against {r['reference_label']} {r['reference']:.4f} ± "
                     f"{r['sd']:.4f} (margin {r['margin']:+.4f})" for r in b["closest"])


def report(study: dict) -> str:
    v, t = study["verdict"], study["sd_ratios"]
    lines = [f"# Round 10 of the reward study: results (protocol: scripts/reward_study_round10.py at "
             f"{study['protocol_commit']})", "",
             f"**The protocol's rule:** issue 41's simulator targets are met when the fresh ten-seed blocks "
             f"{' and '.join(DECISIVE)} each miss none of their targets: {'met' if v['item1_met'] else 'not met'}.", "",
             f"Reproduction (seeds 0-2): the shipped reward gives round 9's recorded values and the reward at filing "
             f"round 7's on all {study['reproduction']['cells']} cells (within {REPRODUCE_TOL:g}).", "",
             f"| seeds | decisive | missed (of {study['seeds_0_2']['targets']}) | closest to missing |", "|---|---|---|---|",
             f"| 0-2 (rounds 4-9's) | no | {len(study['seeds_0_2']['missed'])} "
             f"({', '.join(study['seeds_0_2']['missed']) or 'none'}) | {_closest(study['seeds_0_2'])} |"]
    for tag, b in study["blocks"].items():
        lines.append(f"| {b['seeds'][0]}-{b['seeds'][-1]} ({tag}) | {'yes' if tag in DECISIVE else 'no'} | "
                     f"{len(b['missed'])} ({', '.join(b['missed']) or 'none'}) | {_closest(b)} |")
    lines += ["", f"Three seeds' sd against ten's (step T, {t['cells']} earlier cells): median ratio {t['median']:.2f}; "
              f"below a third on {len(t['below_a_third'])} ({', '.join(t['below_a_third']) or 'none'}).", "",
              "## Every target, per block", "",
              "| cell | " + " | ".join(["0-2", *study["blocks"]]) + " |", "|---|" + "---|" * (1 + len(study["blocks"]))]
    by_block = [study["seeds_0_2"], *study["blocks"].values()]
    for k, r in enumerate(study["seeds_0_2"]["rows"]):
        cells = [b["rows"][k] for b in by_block]
        lines.append(f"| {r['cell']} | " + " | ".join(
            f"{c['ra_f1']:.4f} / {c['reference']:.4f} ± {c['sd']:.4f}{'' if c['met'] else ' **missed**'}"
            for c in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
