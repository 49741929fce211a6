"""Tables of the real-model study's results (docs/real_model_study/study.json, written by
scripts/real_model_study.py) as Markdown: the per-run metrics with their 95% intervals, the paired deltas, the
claims. docs/real_model_study.md includes what this prints; the narrative around it is written by hand.

    python scripts/real_model_study_report.py [docs/real_model_study/study.json] > /tmp/tables.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = ("warm", "plain-s0", "plain-s1", "awarl-s0", "awarl-s1", "static-s0", "bapo-s0", "awarl-g0.25-s0")


def _ci(point: float, ci: list[float] | None) -> str:
    return f"{point:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{point:.3f}"


def runs_table(study: dict) -> list[str]:
    out = ["| run | reward | precision | accuracy | RA-F1 | abstention | invalid |", "|---|---|---|---|---|---|---|"]
    for name in ORDER:
        r = study["runs"].get(name)
        if r is None:
            continue
        rw = r.get("reward") or {}
        what = "warm checkpoint (no RL)" if name == "warm" else \
            f"{rw.get('strategy')}" + (f", γ {rw['gamma']:g}" if rw.get("strategy") == "awarl" else "") + \
            (f", p_online {rw['p_online']}" if rw.get("p_online", "off") != "off" else "") + f", seed {r.get('seed')}"
        m, ci = r["macro"], r["ci"]
        out.append(f"| {name} | {what} | {_ci(m['precision'], ci['precision'])} | {_ci(m['accuracy'], ci['accuracy'])} | "
                   f"{_ci(m['ra_f1'], ci['ra_f1'])} | {_ci(m['abstention_rate'], ci['abstention_rate'])} | "
                   f"{_ci(r['invalid']['share'], r['invalid']['ci'])} |")
    return out


def deltas_table(study: dict) -> list[str]:
    out = ["| comparison | Δ RA-F1 | Δ precision | Δ accuracy | Δ abstention |", "|---|---|---|---|---|"]
    for name, d in study["deltas"].items():
        cells = [f"{d[m]['delta']:+.3f} [{d[m]['ci'][0]:+.3f}, {d[m]['ci'][1]:+.3f}]"
                 for m in ("ra_f1", "precision", "accuracy", "abstention_rate")]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def claims_lines(study: dict) -> list[str]:
    return [f"- **{c['claim']}**: {c['verdict']}" for c in study["claims"]]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "docs/real_model_study/study.json")
    study = json.loads(path.read_text())
    print("\n".join(["### Per run (150 held-out questions, greedy; macro over the 3 datasets; 95% bootstrap "
                     "intervals)", "", *runs_table(study), "", "### Paired differences (paired bootstrap, 95%)", "",
                     *deltas_table(study), "", "### The claims, by the protocol's rules", "", *claims_lines(study)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
