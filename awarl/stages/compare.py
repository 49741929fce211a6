"""Compare evaluation runs on the same questions (`awarl compare`).

Each run is an `awarl eval` folder (its predictions.jsonl) or any predictions file (docs/formats.md). All
runs are re-scored under one rule (`metrics.*`, `agent.abstention_phrases`) on the questions they ALL
answered, so the figures are comparable even when one run was cut short or used `--limit` differently.
Every run after the first gets its macro difference to the first with a paired-bootstrap 95% interval:
both runs are scored on the same resampled questions, which is the test to use when two checkpoints (or
two γ) were evaluated on one question set.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from awarl.agent.templates import run_abstention_phrases
from awarl.config import AwarlConfig
from awarl.critic import is_oracle
from awarl.io import atomic_write_json, atomic_write_text, loads_json, save_figure
from awarl.metrics import Outcome, aggregate, macro_average, paired_bootstrap_delta
from awarl.stages.predictions import PREDICTIONS
from awarl.stages.score import read_predictions, scorable_rows

log = logging.getLogger(__name__)

METRICS = ("ra_f1", "precision", "accuracy", "abstention_rate", "reliability")
DELTA_METRICS = ("ra_f1", "precision", "accuracy", "abstention_rate")


def predictions_path(run: str | os.PathLike) -> Path:
    """An eval folder's predictions.jsonl, or the file itself."""
    p = Path(run)
    if p.is_dir():
        p = p / PREDICTIONS
    if not p.is_file():
        raise FileNotFoundError(f"no predictions at {p} (give an `awarl eval` folder or a predictions file)")
    return p


def run_outcomes(path: Path, cfg: AwarlConfig) -> tuple[dict[tuple[str, str], Outcome], list[str],
                                                       dict[tuple[str, str], str]]:
    """Outcome per (dataset, id) of a predictions file, the messages of its skipped lines, and the question
    text per (dataset, id)."""
    rows, lines, skipped = read_predictions(path)
    out, questions = {}, {}
    for row, outcome, _ in scorable_rows(rows, cfg.metrics, run_abstention_phrases(cfg.agent),
                                         source=str(path), line_numbers=lines, skipped=skipped):
        key = (row["dataset"], str(row["id"]))
        out[key], questions[key] = outcome, row["question"]
    return out, skipped, questions


def check_same_questions(names: list[str], questions: list[dict[tuple[str, str], str]],
                         keys: list[tuple[str, str]]) -> None:
    """ValueError when a shared (dataset, id) holds different question texts in two runs: they were made on
    different data (another dataset version, ids reused), and a paired comparison would be meaningless."""
    bad = [k for k in keys if len({q[k] for q in questions}) > 1]
    if bad:
        ds, qid = bad[0]
        texts = "; ".join(f"{n}: {q[bad[0]][:80]!r}" for n, q in zip(names, questions, strict=True))
        raise ValueError(f"{len(bad)} shared question id(s) have different question texts across runs, e.g. "
                         f"{ds}/{qid} ({texts}): the runs were made on different data")


def run_judges(path: Path) -> dict[str, Any]:
    """Which agent made a run and which judges it used, from its eval folder's manifest (else from its lines):
    `decisions` (the critic loop's approving judge; None for a single pass, which decides nothing by a judge),
    `citations` (the judge behind its citation metrics) and `oracle` (the gold judge decided the loop: it read
    the gold evidence, so the run is not comparable with one that could not)."""
    manifest_path = path.parent / "manifest.json"
    try:
        manifest = loads_json(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {}
    except (OSError, ValueError):
        manifest = {}
    agent = manifest.get("eval_agent") or {}
    kind = agent.get("kind")
    decisions = agent.get("loop_judge")
    if kind is None:  # a predictions file without its folder: the lines say what they can
        rows = read_predictions(path)[0]
        reports = [r["research"] for r in rows if isinstance(r, dict) and isinstance(r.get("research"), dict)]
        kind = "critic_loop" if reports else "single_pass"
        decisions = ", ".join(sorted({str(x.get("judge")) for x in reports if x.get("judge")})) or None
    citations = (manifest.get("critic") or {}).get("judge")
    oracle = bool(agent.get("oracle")) or bool(decisions and "oracle" in decisions)
    label = f"{citations} (oracle)" if is_oracle(citations) else citations
    return {"agent": kind or "unknown", "decisions": decisions, "citations": label, "oracle": oracle}


def compare_runs(runs: list[str | os.PathLike], cfg: AwarlConfig, names: list[str] | None = None) -> dict[str, Any]:
    """The comparison table (see the module docstring) as a dict; the first run is the baseline."""
    if len(runs) < 2:
        raise ValueError("compare needs at least two runs")
    if not names:
        names = [_default_name(r) for r in runs]
        if len(set(names)) < len(names):  # e.g. two files in one folder
            names = [f"{n}-{i + 1}" for i, n in enumerate(names)]
    if len(names) != len(runs) or len(set(names)) != len(names):
        raise ValueError(f"--names: need {len(runs)} distinct names, got {names}")
    paths = [predictions_path(r) for r in runs]
    loaded = [run_outcomes(p, cfg) for p in paths]
    common = set.intersection(*(set(o) for o, _, _ in loaded))
    if not common:
        raise ValueError("the runs share no (dataset, id) question: nothing to compare")
    keys = sorted(common)
    check_same_questions(names, [q for _, _, q in loaded], keys)
    datasets = sorted({ds for ds, _ in keys})
    nboot, seed = cfg.metrics.bootstrap_samples, cfg.run.seed

    def by_dataset(outcomes: dict[tuple[str, str], Outcome]) -> dict[str, list[Outcome]]:
        return {ds: [outcomes[k] for k in keys if k[0] == ds] for ds in datasets}

    table: list[dict[str, Any]] = []
    for name, path, (outcomes, skipped, _) in zip(names, paths, loaded, strict=True):
        per_ds = {ds: aggregate(outs) for ds, outs in by_dataset(outcomes).items()}
        macro = macro_average(per_ds)
        table.append({"name": name, "source": str(path), "questions": len(outcomes),
                      "judges": run_judges(path),
                      "not_shared": len(outcomes) - len(common), "skipped_lines": skipped,
                      "macro": {m: macro[m] for m in METRICS},
                      "per_dataset": {ds: {m: per_ds[ds][m] for m in (*METRICS, "n")} for ds in datasets}})
        if len(outcomes) > len(common):
            log.warning("%s: %d of its %d questions are not in every run and are left out", name,
                        len(outcomes) - len(common), len(outcomes))
    base = by_dataset(loaded[0][0])
    deltas: dict[str, dict[str, Any]] = {}
    for name, (outcomes, _, _) in zip(names[1:], loaded[1:], strict=True):
        other = by_dataset(outcomes)
        if nboot:
            deltas[name] = {m: paired_bootstrap_delta(base, other, m, nboot, seed) for m in DELTA_METRICS}
        else:
            macro_b = table[names.index(name)]["macro"]
            deltas[name] = {m: {"delta": macro_b[m] - table[0]["macro"][m], "ci": None, "p_le_0": None}
                            for m in DELTA_METRICS}
    return {"baseline": names[0], "common_questions": len(common), "datasets": datasets, "runs": table,
            "deltas": deltas, "config": {"correctness": cfg.metrics.correctness,
                                         "f1_threshold": cfg.metrics.f1_threshold,
                                         "abstention_phrases": list(cfg.agent.abstention_phrases),
                                         "bootstrap_samples": nboot, "seed": seed}}


def _default_name(run: str | os.PathLike) -> str:
    """An eval folder's name (also for its predictions.jsonl given directly), else the file's stem."""
    p = Path(run)
    return p.name if p.is_dir() else (p.parent.name if p.name == PREDICTIONS else p.stem)


def _f(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def compare_markdown(res: dict[str, Any]) -> str:
    base = res["baseline"]
    lines = [f"# Comparison of {len(res['runs'])} runs", "",
             f"{res['common_questions']} questions shared by every run ({', '.join(res['datasets'])}), scored "
             f"with correctness `{res['config']['correctness']}`. Macro = unweighted mean over datasets. "
             f"Δ = run − `{base}` with its paired-bootstrap 95% interval "
             f"({res['config']['bootstrap_samples']} resamples); p(Δ≤0) = share of resamples where the "
             "run does not beat the baseline.", "",
             "| run | RA-F1 | precision | accuracy | abstention | ΔRA-F1 (95% CI) | p(Δ≤0) | Δaccuracy | "
             "Δabstention |", "|---" * 9 + "|"]
    for r in res["runs"]:
        m = r["macro"]
        d = res["deltas"].get(r["name"])
        if d is None:
            delta_cells = ["baseline", "", "", ""]
        else:
            ci = d["ra_f1"]["ci"]
            delta_cells = [f"{d['ra_f1']['delta']:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""),
                           _f(d["ra_f1"]["p_le_0"]), f"{d['accuracy']['delta']:+.3f}",
                           f"{d['abstention_rate']['delta']:+.3f}"]
        lines.append(f"| {r['name']} | {_f(m['ra_f1'])} | {_f(m['precision'])} | {_f(m['accuracy'])} | "
                     f"{_f(m['abstention_rate'])} | " + " | ".join(delta_cells) + " |")
    lines += ["", "RA-F1 per dataset:", "", "| run | " + " | ".join(res["datasets"]) + " | macro |",
              "|---" * (len(res["datasets"]) + 2) + "|"]
    for r in res["runs"]:
        lines.append(f"| {r['name']} | " + " | ".join(_f(r["per_dataset"][ds]["ra_f1"]) for ds in res["datasets"])
                     + f" | {_f(r['macro']['ra_f1'])} |")
    lines += ["", "Agents and judges:", "", "| run | agent | loop decisions by | citation metrics by |", "|---|---|---|---|"]
    for r in res["runs"]:
        j = r.get("judges") or {}
        lines.append(f"| {r['name']} | {j.get('agent', 'unknown')} | {j.get('decisions') or '—'} | "
                     f"{j.get('citations') or 'unknown'} |")
    oracles = [r["name"] for r in res["runs"] if (r.get("judges") or {}).get("oracle")]
    if oracles:
        lines += ["", f"**Oracle:** the critic loop of {', '.join(oracles)} decided with the gold judge, which reads "
                  "the dataset's gold evidence: its figures are not comparable with a run that could not see "
                  "the evidence (research.judge: lexical or openai is the fair setting)."]
    left = [r for r in res["runs"] if r["not_shared"] or r["skipped_lines"]]
    if left:
        lines += ["", "Left out:"]
        lines += [f"- {r['name']}: {r['not_shared']} question(s) not in every run, {len(r['skipped_lines'])} "
                  f"unreadable line(s) ({r['source']})" for r in left]
    return "\n".join(lines) + "\n"


def plot_comparison(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    shown = ("ra_f1", "precision", "accuracy", "abstention_rate")
    runs = res["runs"]
    width = 0.8 / len(runs)
    x = np.arange(len(shown))
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, r in enumerate(runs):
        ax.bar(x + i * width, [r["macro"][m] or 0.0 for m in shown], width, label=r["name"])
    ax.set_xticks(x + width * (len(runs) - 1) / 2, ["RA-F1", "precision", "accuracy", "abstention"])
    ax.set_ylim(0, 1)
    ax.set_title(f"macro over {', '.join(res['datasets'])} ({res['common_questions']} shared questions)")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def write_comparison(res: dict[str, Any], out_dir: str | os.PathLike) -> Path:
    """compare.json, compare.md and compare.png in `out_dir`; returns the markdown's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "compare.json", res)
    atomic_write_text(out / "compare.md", compare_markdown(res))
    plot_comparison(res, out / "compare.png")
    return out / "compare.md"
