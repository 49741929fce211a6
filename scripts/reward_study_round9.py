"""Round 9 of the reward study (issue 41): the refusal gate's weight and a warm-up per advantage normalisation.

Protocol. Fixed in this file and committed BEFORE any of its results were computed; `main` refuses to run while
this file has uncommitted changes and records its commit in the results (`protocol_commit`), which land in a
later commit (docs/learning_study.md "Round 9"). The machinery is round 7's (scripts/reward_study_round7.py and
the rounds it imports), frozen with its results and imported here.

Why this round, said before its results. After round 8 four of issue 41's 85 targets stayed missed by the shipped
reward (round 7's: the RA-F1 line, gate, group p, warm-up 0.9): dead_once under mean-only advantages (0.513
against BAPO's 0.519 ± 0.002), r6-00 under mean-only (0.419 against the reward at filing's 0.432 ± 0.006), pop05
and fresh04 under group-std (by 0.0007 and 0.0004 beyond 1 sd). Two causes were diagnosed, and one change made
for each, before this protocol was written:

- **The gate moves the line's tie.** The gate pays an abstention only when none of its group's a answers is
  correct, probability (1 − s)^a for a query of true success s, so abstaining ties with answering below the line
  s* = F̂/2, and under mean-only advantages (where the reward's size is the learning signal) the refusal phase
  learns slowly. `reward.refusal_gate_weight: tie_at_line` (now the default) pays r_wrong + (r_ref − r_wrong)/(1 −
  s*)^a, within the r_ref_margin cap: the expected payment is r_ref at s = s* for every a and refusal rate
  (tests/test_gate_weight.py). Under group-std advantages a gated group's two outcomes normalise alike, so it
  changes almost nothing there.
- **The refusal phase is too short without a per-group std.** Under mean-only advantages a tenth of the run does
  not reach BAPO's refusal on dead_once. `reward.refusal_warmup` now takes one share per normalisation, default
  group 0.9 (round 7's), none 0.75 (and batch 0.75, by mechanism; the simulator has no batch scaling).

Exploration seen before this protocol (seeds 0-2, 1000 steps; cells of the issue's targets and round 7's tuning
populations r7-00 ... r7-14 even, never evidence): under mean-only advantages the weight with warm-up 0.75 met
every target (dead_once 0.5175 against BAPO 0.5190 ± 0.0018; r6-00 0.4285 against 0.4323 ± 0.0057; 30 earlier
mean-only cells no worse than at filing), warm-up 0.75 without the weight missed dead_once (0.5160), the weight
with warm-up 0.9 missed dead_once and r6-00 (0.5150, 0.4207), with warm-up 0.6 met all but gave a lower mean lead
on the r7 tuning cells (+0.0006 against +0.0015). Under group-std advantages the weight left every explored cell
unchanged to 4 decimals (pop05 0.1324, fresh04 0.3837, dead 0.5199, fresh07 0.3892 against 0.3895).

What this round measures (seeds 0, 1, 2, 1000 steps, both advantage normalisations unless said). "shipped" is
the reward at this commit's defaults; "round 7" is the same with `refusal_gate_weight: off` and `refusal_warmup:
0.9` (the default before this round). Baselines: plain GRPO, static 0.05, BAPO (0.5).

A. **Issue 41's targets** (constraints, not evidence), as round 7 counted them: the 8 filed cells (grow, grow_once
   ≥ plain GRPO − 1 sd; dead, dead_once ≥ the best baseline − 1 sd) and the 77 earlier cells (round 7's
   `earlier_populations`), each no worse than the reward at filing within the larger seed sd. Missed targets per
   reward, named.
B. **Stability**: the filed cells on two fresh seed blocks (100-102, 200-202): targets met per block, both rewards.
C. **Evidence: 16 fresh populations**, `draw_populations(16, ROUND9_SEED)` of round 4's distribution, named r9-NN;
   nothing was tuned on any of them, so all 16 are evidence. Per cell the shipped reward's lead over the best
   baseline ± the larger seed sd, ahead / tie / behind, with round 7's default in the "old default" column; counts
   and mean leads per normalisation, for both rewards.
D. **Evidence: round 7's held-out populations** (r7-01 ... r7-15, odd), which this round's exploration did not
   touch (round 7 reported them for its own default): as C.
E. **The unflattering simulator** (round 5's four options on) on the r9 populations: as C.

Decision rule, fixed now: the shipped defaults stay if (1) they miss fewer of A's 85 targets than round 7's
default, and (2) on C their mean lead over the best baseline is no more than 0.001 below round 7's default's
under either normalisation. Otherwise the results commit restores round 7's defaults (`refusal_gate_weight: off`,
`refusal_warmup: 0.9`) and says so.

Amendment, committed after the first run's results (kept unedited in docs/reward_study_round9/first_run/) and
before this run: step A's reference. Round 6's `AT_FILING_KEYS` (no online p, no gate, no warm-up, γ 0.02) were
written when the default line was courage γ's; since round 7 made the RA-F1 line the default, those keys alone
ran the RA-F1 line, not the reward shipped when issue 41 was filed, and the first run's counts compared against
it. The at-filing reward is now `AT_FILING_KEYS` + `reward.abstain_line: courage`, and before any count step A
checks that it reproduces, on every earlier cell, the at-filing RA-F1 and refusal round 7 recorded
(docs/reward_study_round7/study.json; `at_filing_check` in the results, which stop if any cell differs by more
than 1e-9). Nothing else changed: the rewards, populations, seeds, steps B-E and the decision rule are as
committed in 09bf976.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/reward_study_round9.py --out runs/reward_study_round9 --jobs 2

Writes OUT/cells/NAME.json per cell as it finishes (a rerun skips those), then OUT/study.json and OUT/study.md
(kept in the repo under docs/reward_study_round9/).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from awarl.io import atomic_write_json, atomic_write_text, repo_root


def _script(name: str):  # noqa: ANN202 - a module
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, repo_root() / "scripts" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


R7 = _script("reward_study_round7")
P = _script("study_protocol")
L, R6, R5 = R7.L, R7.R6, R7.R5

ROUND9_SEED = 20261209
SEEDS = (0, 1, 2)
SEED_BLOCKS = ((100, 101, 102), (200, 201, 202))
SHIPPED, ROUND7 = "shipped", "round 7"
REWARDS: dict[str, tuple[dict, tuple[float, ...]]] = {  # γ is unused under the RA-F1 line: it labels the row
    SHIPPED: ({}, (0.2,)),
    ROUND7: ({"reward.refusal_gate_weight": "off", "reward.refusal_warmup": 0.9}, (0.2,)),
}
LEAD_TOL = 0.001  # the decision rule's (2)
# the amendment: the reward at filing, with the courage line that was its default (round 6's keys predate round 7)
AT_FILING_KEYS = {**R6.AT_FILING_KEYS, "reward.abstain_line": "courage"}
ROUND7_STUDY = repo_root() / "docs" / "reward_study_round7" / "study.json"
REPRODUCE_TOL = 1e-9


def populations() -> list[dict]:
    """Step C: 16 fresh populations of round 4's distribution, renamed r9-NN; every one is evidence."""
    return [{**p, "name": p["name"].replace("learn", "r9-"), "half": "evidence"}
            for p in L.draw_populations(16, ROUND9_SEED)]


def targets(filed_cells: list[dict], earlier_cells: list[dict]) -> dict[str, dict]:
    """Step A per reward: the filed cells met or not, and the earlier cells no worse than at filing or not."""
    out = {}
    for name in REWARDS:
        filed = [{"cell": f"{c['population']}/{c['norm']}", **L.row_at(c, name, 0.2),
                  "met": L.filed_target(c, L.row_at(c, name, 0.2))} for c in filed_cells]
        earlier = [{"population": c["population"], "norm": c["norm"], **R6.compare(c, (name, 0.2), R6.AT_FILING)}
                   for c in earlier_cells]
        missed = [r["cell"] for r in filed if not r["met"]] + \
            [f"{r['population']}/{r['norm']}" for r in earlier if not r["no_worse"]]
        out[name] = {"filed": filed, "earlier": earlier, "missed": missed}
    return out


def at_filing_check(earlier_cells: list[dict]) -> dict:
    """The amendment's check: this run's at-filing RA-F1 and refusal on every earlier cell against round 7's
    recorded ones (any reward of round 7's `earlier` table carries them as "old")."""
    recorded = json.loads(ROUND7_STUDY.read_text())["earlier"]
    old = {(r["population"], r["norm"]): r for r in next(iter(recorded.values()))}
    differing = []
    for c in earlier_cells:
        row, ref = L.row_at(c, *R6.AT_FILING), old[(c["population"], c["norm"])]
        if abs(row["ra_f1"] - ref["old"]) > REPRODUCE_TOL or abs(row["refusal_rate"] - ref["old_refusal"]) > REPRODUCE_TOL:
            differing.append({"cell": f"{c['population']}/{c['norm']}", "ra_f1": row["ra_f1"], "round7": ref["old"]})
    return {"cells": len(earlier_cells), "differing": differing}


def mean_leads(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per normalisation, the mean lead over the best baseline of the shipped reward ("lead") and round 7's
    ("old_lead")."""
    return {norm: {k: float(np.mean([r[k] for r in rows if r["norm"] == norm])) for k in ("lead", "old_lead")}
            for norm in L.NORMALISATIONS}


def decision(a: dict[str, dict], c_leads: dict[str, dict[str, float]]) -> dict:
    """The protocol's rule: fewer missed targets, and C's mean lead no more than LEAD_TOL below round 7's."""
    fewer = len(a[SHIPPED]["missed"]) < len(a[ROUND7]["missed"])
    leads_ok = all(v["lead"] >= v["old_lead"] - LEAD_TOL for v in c_leads.values())
    return {"fewer_missed": fewer, "lead_no_worse": leads_ok, "keep_shipped": fewer and leads_ok}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/reward_study_round9")
    ap.add_argument("--jobs", type=int, default=1, help="cells simulated in parallel processes")
    args = ap.parse_args(argv)
    commit = P.protocol_commit(__file__)
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    filed, fresh = L.filed_populations(), populations()
    r7_held = [p for p in R7.populations() if p["half"] == "held-out"]

    def grid(ps: list[dict], seeds: tuple[int, ...], tag: str, rewards: dict, extra: list[str] | None = None,
             norms: tuple[str, ...] = L.NORMALISATIONS, baselines: bool = True) -> list[tuple]:
        return [(p, n, seeds, rewards, extra or [], baselines, tag, str(out)) for p in ps for n in norms]

    filed_cells = R6.run_jobs(grid(filed, SEEDS, "filed", REWARDS), args.jobs, "A: filed")
    with_filing = {**REWARDS, R6.AT_FILING[0]: (AT_FILING_KEYS, (R6.AT_FILING[1],))}
    earlier_jobs = [job for p, norms in R7.earlier_populations() for job in
                    grid([p], SEEDS, "earlier", with_filing, norms=norms, baselines=False)]
    earlier_cells = R6.run_jobs(earlier_jobs, args.jobs, "A: earlier")
    check = at_filing_check(earlier_cells)
    if check["differing"]:
        atomic_write_json(out / "at_filing_check.json", check)
        raise SystemExit(f"the at-filing reward does not reproduce round 7's values on {len(check['differing'])} "
                         f"cells (see {out}/at_filing_check.json): no target is counted")
    a = targets(filed_cells, earlier_cells)

    blocks = []
    for k, seeds in enumerate(SEED_BLOCKS):
        cells = R6.run_jobs(grid(filed, seeds, f"block{k + 1}", REWARDS), args.jobs, f"B: block {k + 1}")
        blocks.append({"seeds": list(seeds), **{name: [f"{c['population']}/{c['norm']}" for c in cells
                                                      if not L.filed_target(c, L.row_at(c, name, 0.2))]
                                               for name in REWARDS}})

    R5.CURRENT = (ROUND7, 0.2)  # round 5's verdict names round 7's default as its "old" column
    c_cells = R6.run_jobs(grid(fresh, SEEDS, "evidence", REWARDS), args.jobs, "C: r9")
    c_rows = [R5.judge(c, SHIPPED, 0.2) for c in c_cells]
    d_cells = R6.run_jobs(grid(r7_held, SEEDS, "r7-held-out", REWARDS), args.jobs, "D: r7 held-out")
    d_rows = [R5.judge(c, SHIPPED, 0.2) for c in d_cells]
    e_cells = R6.run_jobs([job for p in fresh for job in grid([p], SEEDS, "unflattering", REWARDS,
                                                               R5.unflattering(p))], args.jobs, "E: unflattering")
    e_rows = [R5.judge(c, SHIPPED, 0.2) for c in e_cells]
    c_leads = mean_leads(c_rows)
    study = {"protocol_commit": commit, "at_filing_check": check, "targets": a, "seed_blocks": blocks, "evidence_r9": c_rows,
             "evidence_r7_held_out": d_rows, "unflattering_r9": e_rows,
             "mean_leads": {"r9": c_leads, "r7_held_out": mean_leads(d_rows), "unflattering": mean_leads(e_rows)},
             "decision": decision(a, c_leads), "populations": fresh}
    atomic_write_json(out / "study.json", study)
    atomic_write_text(out / "study.md", report(study))
    print(f"wrote {out}/study.json, {out}/study.md", file=sys.stderr)
    return 0


def _row(r: dict) -> str:
    return f"{r['ra_f1']:.4f} ± {r['ra_f1_sd']:.4f} ({r['refusal_rate']:.2f})"


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for norm in L.NORMALISATIONS:
        rs = [r for r in rows if r["norm"] == norm]
        lines.append(f"- {norm}: ahead {sum(r['ahead'] for r in rs)}, tied {sum(r['tie'] for r in rs)}, behind "
                     f"{sum(not r['ahead'] and not r['tie'] for r in rs)}, collapse {sum(r['collapse'] for r in rs)}; "
                     f"mean lead {SHIPPED} {np.mean([r['lead'] for r in rs]):+.4f}, {ROUND7} "
                     f"{np.mean([r['old_lead'] for r in rs]):+.4f}")
    return lines


def report(study: dict) -> str:
    a, d = study["targets"], study["decision"]
    lines = [f"# Round 9 of the reward study: results (protocol: scripts/reward_study_round9.py at "
             f"{study['protocol_commit']})", "",
             f"**Decision (the protocol's rule):** fewer missed targets than round 7's default: "
             f"{'yes' if d['fewer_missed'] else 'no'}; mean lead on the r9 cells no more than {LEAD_TOL} below round "
             f"7's under both normalisations: {'yes' if d['lead_no_worse'] else 'no'}; so the shipped defaults "
             f"{'stay' if d['keep_shipped'] else 'revert to round 7s'}.", "",
             "## A. Issue 41's targets (constraints, not evidence)", "",
             f"The at-filing reward (courage line, γ 0.02, no online p, gate or warm-up) reproduces round 7's recorded "
             f"values on all {study['at_filing_check']['cells']} earlier cells (within {REPRODUCE_TOL:g}).", ""]
    for name in REWARDS:
        lines.append(f"- {name}: {len(a[name]['missed'])} of {len(a[name]['filed']) + len(a[name]['earlier'])} "
                     f"missed ({', '.join(a[name]['missed']) or 'none'})")
    lines += ["", f"| filed cell | {SHIPPED} (met) | {ROUND7} (met) |", "|---|---|---|"]
    for s, r in zip(a[SHIPPED]["filed"], a[ROUND7]["filed"], strict=True):
        lines.append(f"| {s['cell']} | {_row(s)} ({'yes' if s['met'] else 'no'}) | {_row(r)} "
                     f"({'yes' if r['met'] else 'no'}) |")
    lines += ["", "## B. Stability: the filed cells on fresh seed blocks", ""]
    for b in study["seed_blocks"]:
        lines.append(f"- seeds {b['seeds']}: " + "; ".join(
            f"{name} missed {len(b[name])} ({', '.join(b[name]) or 'none'})" for name in REWARDS))
    for title, key in (("C. Evidence: the 16 fresh r9 populations", "evidence_r9"),
                       ("D. Evidence: round 7's held-out populations", "evidence_r7_held_out"),
                       ("E. The unflattering simulator on the r9 populations", "unflattering_r9")):
        rows = study[key]
        lines += ["", f"## {title}", "", f"\"chosen\" is {SHIPPED}, \"old default\" {ROUND7}.", "",
                  L.counts_line(rows), "", *L.judged_table(rows), "", *summary(rows)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
