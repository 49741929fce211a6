"""Round 8 of the reward study (issue 41): the refusal warm-up under the learning-rate schedule `awarl train` runs.

Protocol. Fixed in this file and committed BEFORE any of its results were computed; `main` refuses to run while
this file has uncommitted changes and records its commit in the results (`protocol_commit`), which land in a
later commit (docs/learning_study.md "Round 8"). The machinery is round 7's (scripts/reward_study_round7.py and
the rounds it imports), frozen with its results and imported here.

Why this round, said before its results. Rounds 4-7 chose the refusal warm-up (round 7: 90% of the run) on the
simulator, whose step size is constant; `awarl train` passed no schedule, so it ran TRL's default, a linear decay
to 0. A refusal phase after 90% of the steps then learns at 10% of the peak step size or less: 0.5% of the run's
learning. Seen before this protocol was written (a diagnosis on the filed cells and round 7's tuning cells r7-00,
r7-02, r7-04, r7-06, r7-08, seeds 0-2, `simulate.lr_schedule=linear`): the shipped reward with a warm-up of 90% of
the steps reached RA-F1 0.472 on dead/group (BAPO 0.520), 0.408 on dead/none (BAPO 0.519), 0.413 on
dead_once/none (BAPO 0.518), 0.624 on r7-00/group (BAPO 0.656). Two changes were made on that diagnosis, before
this round's results, and nothing here selects among settings:

- `train.lr_scheduler_type`, default `constant` (verl's and Search-R1's schedule, and the simulator's): the shipped
  recipe now trains under the schedule its reward was chosen under; TRL's `linear` and `cosine` stay options.
- `reward.refusal_warmup` is a share of the run's *learning* (the sum of the step sizes), not of its steps: the
  same under a constant schedule (round 7 reproduces bit for bit, step C), earlier under a decaying one (0.9 of a
  linear run's learning ends at step 684 of 1000).

What this round measures (all seeds 0, 1, 2, 1000 steps, both advantage normalisations; "steps 0.9" is round 7's
reading, a warm-up of 900 of 1000 steps, which under linear decay is `refusal_warmup: 0.99` of the learning;
"learning 0.9" is the shipped one):

A. **The filed cells under linear decay** (targets, not evidence): plain GRPO, static 0.05, BAPO (0.5), "steps 0.9"
   and "learning 0.9"; issue 41's targets (grow ≥ plain GRPO − 1 sd, dead ≥ the best baseline − 1 sd) for both.
   The same cells under cosine decay for "learning 0.9" and the baselines.
B. **Evidence: round 7's held-out populations (r7-01 ... r7-15, odd) under linear decay**, which no diagnosis has
   touched: per cell, "learning 0.9"'s lead over the best baseline ± the larger seed sd, ahead / tie / behind, with
   "steps 0.9" in the "old default" column; counts and mean leads per normalisation. Beside them, round 7's own
   evidence (constant step size: what the shipped recipe now runs) is quoted from docs/reward_study_round7.
C. **Reproduction under a constant step size**: round 7's chosen candidate on two of its cells (dead_once/none,
   r7-01/group) at this commit must equal the rows round 7 recorded, field for field.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/reward_study_round8.py --out runs/reward_study_round8 --jobs 2

Writes OUT/cells/NAME.json per cell as it finishes (a rerun skips those), then OUT/study.json and OUT/study.md
(kept in the repo under docs/reward_study_round8/).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from awarl.io import atomic_write_json, atomic_write_text, repo_root
from awarl.lr_schedule import refusal_warmup_steps


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

SEEDS = (0, 1, 2)
STEPS = 1000  # every population of rounds 4-7 runs 1000 steps (checked in main)
LINE = {"reward.abstain_line": "ra_f1"}
STEPS_09 = "steps 0.9"        # round 7's reading: the first 900 of 1000 steps
LEARNING_09 = "learning 0.9"  # the shipped reading: the first 0.9 of the run's learning
CANDIDATES: dict[str, tuple[dict, tuple[float, ...]]] = {
    STEPS_09: ({**LINE, "reward.refusal_warmup": 0.99}, (0.2,)),  # 0.99 of a linear run's learning = 900 steps
    LEARNING_09: ({**LINE, "reward.refusal_warmup": 0.9}, (0.2,)),  # γ unused under the line: it labels the row
}
LINEAR, COSINE = ["simulate.lr_schedule=linear"], ["simulate.lr_schedule=cosine"]
ROUND7_CELLS = repo_root() / "docs" / "reward_study_round7" / "cells"
REPRODUCE = (("dead_once", "none"), ("r7-01", "group"))
ROUND7_CHOSEN = "ra_f1 line, warm-up 0.9"


def check_readings() -> dict[str, int]:
    """Each candidate's warm-up in steps of a 1000-step run under linear decay (900 for round 7's reading)."""
    got = {name: refusal_warmup_steps(keys["reward.refusal_warmup"], "linear", STEPS)
           for name, (keys, _) in CANDIDATES.items()}
    if got[STEPS_09] != 900:
        raise SystemExit(f"round 7's reading must be 900 of {STEPS} steps under linear decay, got {got[STEPS_09]}")
    return got


def reproduction(cells: list[dict]) -> list[dict]:
    """Step C: this commit's rows against round 7's recorded ones (every summary field equal)."""
    out = []
    for c in cells:
        name = f"{c['population']}-{c['norm']}-" + ("main" if c["population"] in ("dead_once",) else "held-out")
        recorded = json.loads((ROUND7_CELLS / f"{name}.json").read_text())
        old = L.row_at(recorded, "chosen" if "chosen" in recorded["variants"] else ROUND7_CHOSEN, 0.2)
        new = L.row_at(c, ROUND7_CHOSEN, 0.2)
        keys = sorted(k for k in old if k not in ("label",))
        out.append({"cell": f"{c['population']}/{c['norm']}", "round7_file": f"{name}.json",
                    "ra_f1": new["ra_f1"], "round7_ra_f1": old["ra_f1"],
                    "equal": all(old[k] == new.get(k) for k in keys),
                    "differing": [k for k in keys if old[k] != new.get(k)]})
    return out


def filed_rows(cells: list[dict], names: tuple[str, ...]) -> list[dict]:
    """Step A: per filed cell, the baselines and each candidate with issue 41's target met or not."""
    rows = []
    for c in cells:
        b = {r["strategy"]: r for r in c["baselines"]}
        row = {"cell": f"{c['population']}/{c['norm']}", "plain": b["none"], "bapo": b["bapo"],
               "best": L.best_baseline(c), "candidates": {}}
        for n in names:
            r = L.row_at(c, n, 0.2)
            row["candidates"][n] = {**r, "met": L.filed_target(c, r)}
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/reward_study_round8")
    ap.add_argument("--jobs", type=int, default=1, help="cells simulated in parallel processes")
    args = ap.parse_args(argv)
    commit = P.protocol_commit(__file__)
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    steps_of = check_readings()
    filed = L.filed_populations()
    held = [p for p in R7.populations() if p["half"] == "held-out"]
    for p in filed + held:
        if L.cell_config(p, "group", SEEDS, []).simulate.steps != STEPS:
            raise SystemExit(f"{p['name']} does not run {STEPS} steps: the readings' step counts would not hold")

    def grid(ps: list[dict], tag: str, candidates: dict, extra: list[str],
             norms: tuple[str, ...] = L.NORMALISATIONS) -> list[tuple]:
        return [(p, n, SEEDS, candidates, extra, True, tag, str(out)) for p in ps for n in norms]

    linear_filed = R6.run_jobs(grid(filed, "linear", CANDIDATES, LINEAR), args.jobs, "A: filed, linear")
    cosine_filed = R6.run_jobs(grid(filed, "cosine", {LEARNING_09: CANDIDATES[LEARNING_09]}, COSINE), args.jobs,
                               "A: filed, cosine")
    evidence = R6.run_jobs(grid(held, "linear", CANDIDATES, LINEAR), args.jobs, "B: held-out, linear")
    R5.CURRENT = (STEPS_09, 0.2)  # round 5's verdict names round 7's reading as its "old" column
    verdicts = [R5.judge(c, LEARNING_09, 0.2) for c in evidence]

    pops = {p["name"]: p for p in filed + held}
    again = {ROUND7_CHOSEN: R7.CANDIDATES[ROUND7_CHOSEN]}
    repro_cells = R6.run_jobs([(pops[name], norm, SEEDS, again, [], False, "constant", str(out))
                               for name, norm in REPRODUCE], args.jobs, "C: constant")
    round7 = json.loads((repo_root() / "docs" / "reward_study_round7" / "study.json").read_text())
    study = {"protocol_commit": commit, "warmup_steps_linear": steps_of,
             "filed_linear": filed_rows(linear_filed, tuple(CANDIDATES)),
             "filed_cosine": filed_rows(cosine_filed, (LEARNING_09,)),
             "held_out_linear": verdicts, "round7_held_out_constant": round7["held_out"],
             "reproduction": reproduction(repro_cells)}
    atomic_write_json(out / "study.json", study)
    atomic_write_text(out / "study.md", report(study))
    print(f"wrote {out}/study.json, {out}/study.md", file=sys.stderr)
    return 0


def _cell(r: dict) -> str:
    return f"{r['ra_f1']:.3f} ± {r['ra_f1_sd']:.3f} ({r['refusal_rate']:.2f})"


def filed_table(rows: list[dict]) -> list[str]:
    names = list(rows[0]["candidates"]) if rows else []
    out = ["| filed cell | plain GRPO | BAPO | best baseline | " + " | ".join(f"{n} (met)" for n in names) + " |",
           "|---|---|---|---|" + "---|" * len(names)]
    for r in rows:
        out.append(f"| {r['cell']} | {_cell(r['plain'])} | {_cell(r['bapo'])} | {r['best']['label']} "
                   f"{_cell(r['best'])} | " + " | ".join(
                       f"{_cell(c)} ({'yes' if c['met'] else 'no'})" for c in r["candidates"].values()) + " |")
    for n in names:
        missed = [r["cell"] for r in rows if not r["candidates"][n]["met"]]
        out.append(f"- {n}: {len(rows) - len(missed)} of {len(rows)} met" + (f" (missed: {', '.join(missed)})"
                                                                              if missed else ""))
    return out


def summary(rows: list[dict], key: str = "lead") -> list[str]:
    lines = []
    for norm in L.NORMALISATIONS:
        rs = [r for r in rows if r["norm"] == norm]
        lines.append(f"- {norm}: ahead {sum(r['ahead'] for r in rs)}, tied {sum(r['tie'] for r in rs)}, behind "
                     f"{sum(not r['ahead'] and not r['tie'] for r in rs)}, collapse {sum(r['collapse'] for r in rs)}; "
                     f"mean lead {np.mean([r[key] for r in rs]):+.4f}")
    return lines


def report(study: dict) -> str:
    steps = study["warmup_steps_linear"]
    lines = [f"# Round 8 of the reward study: results (protocol: scripts/reward_study_round8.py at "
             f"{study['protocol_commit']})", "",
             f"Warm-ups under linear decay, 1000 steps: {STEPS_09} = the first {steps[STEPS_09]} steps, "
             f"{LEARNING_09} = the first {steps[LEARNING_09]}.", "",
             "## A. The filed cells under linear decay (targets, not evidence)", "",
             *filed_table(study["filed_linear"]), "",
             "Under cosine decay (learning 0.9 only):", "", *filed_table(study["filed_cosine"]), "",
             "## B. Evidence: round 7's held-out populations under linear decay", "",
             f"\"chosen\" is {LEARNING_09}, \"old default\" {STEPS_09}.", "",
             L.counts_line(study["held_out_linear"]), "", *L.judged_table(study["held_out_linear"]), "",
             f"{LEARNING_09}:", *summary(study["held_out_linear"]),
             f"{STEPS_09}:", *summary(study["held_out_linear"], "old_lead"), "",
             "Round 7's evidence on the same cells under a constant step size (what the shipped recipe runs), quoted:",
             *summary(study["round7_held_out_constant"]), "",
             "## C. Reproduction of round 7 under a constant step size", ""]
    for r in study["reproduction"]:
        lines.append(f"- {r['cell']}: RA-F1 {r['ra_f1']:.6f} (round 7 recorded {r['round7_ra_f1']:.6f} in "
                     f"{r['round7_file']}); every summary field equal: {'yes' if r['equal'] else 'no'}"
                     + (f" (differ: {', '.join(r['differing'])})" if r["differing"] else ""))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
