"""Evaluation report: results.json, results.md (tables + coverage gaps), results.png, and a rich table.

Coverage gaps (questions the agent abstained on, with the searches it tried) are a required section:
it says "none" when there are none, it is never left out. When the predictions carry the citation
critic's verdicts (`awarl eval` with `critic.judge` set), a "Citation critic" section reports their means;
when they carry gold evidence, a "Citations and evidence" section reports citation precision/recall against
it, the evidence-retrieved share, and the judge's agreement with the gold judge; under
`metrics.correctness: judge` the answer grader's failures are counted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from awarl.io import atomic_write_json, atomic_write_text, save_figure

# (results key, column label, is a share shown as %)
TABLE_COLUMNS: list[tuple[str, str]] = [
    ("n", "n"), ("correct", "correct"), ("wrong", "wrong"), ("abstain", "abstain"), ("invalid", "invalid"),
    ("precision", "P"), ("accuracy", "A"), ("ra_f1", "RA-F1"), ("abstention_rate", "abstain rate"),
    ("reliability", "reliability"), ("em", "EM"), ("f1", "F1"), ("cover_em", "cover-EM"),
]
_COUNTS = {"n", "correct", "wrong", "abstain", "invalid"}
_PLOT_METRICS = [("precision", "precision"), ("accuracy", "accuracy"), ("ra_f1", "RA-F1")]


def _rows(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = list(results.get("per_dataset", {}).items())
    if results.get("macro"):
        rows.append(("macro", results["macro"]))
    return rows


def _cell(m: dict[str, Any], key: str, with_ci: bool, counts: set[str] | None = None) -> str:
    """One table cell: a dash where missing, a count as an integer, else 3 decimals and the 95% CI if any."""
    v = m.get(key)
    if v is None:
        return "–"
    if key in (_COUNTS if counts is None else counts):
        return str(int(v))
    text = f"{v:.3f}"
    ci = (m.get("ci") or {}).get(key)
    if with_ci and ci:
        text += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    return text


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def results_markdown(results: dict[str, Any]) -> str:
    cfg = results.get("config", {})
    lines = ["# Evaluation results", ""]
    if results.get("source"):
        lines.append(f"Predictions: `{results['source']}`  ")
    lines += [f"Questions scored: {results.get('n', 0)}; correctness: `{cfg.get('correctness', '?')}`"
              + (f" (F1 >= {cfg.get('f1_threshold')})" if cfg.get("correctness") == "f1" else "")
              + f"; 95% bootstrap CIs over {cfg.get('bootstrap_samples', 0)} resamples in brackets.",
              "", "Macro = unweighted mean over datasets (RA-F1 macro is the mean of per-dataset RA-F1). "
              "Invalid trajectories count as answered and wrong.", ""]
    if cfg.get("critic_gate") is not None:
        n_gated = sum(m.get("gated", 0) for m in results.get("per_dataset", {}).values())
        lines += [f"Critic gate {cfg['critic_gate']:g}: {n_gated} answer(s) whose citation critic found less than "
                  "that share of their claims grounded are scored as abstentions (marked *gated* below).", ""]
    heads = [label for _, label in TABLE_COLUMNS]
    lines.append("| dataset | " + " | ".join(heads) + " |")
    lines.append("|---|" + "---:|" * len(heads))
    for name, m in _rows(results):
        counts_only = name == "macro"
        cells = ["" if counts_only and k in _COUNTS and k != "n" else _cell(m, k, True) for k, _ in TABLE_COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ov = results.get("overall")
    if ov:
        lines += ["", f"Overall (micro, all questions pooled): P {ov['precision']:.3f}, A {ov['accuracy']:.3f}, "
                  f"RA-F1 {ov['ra_f1']:.3f}, abstention rate {ov['abstention_rate']:.3f}."]
    lines += _grader_markdown(results)
    lines += _critic_markdown(results)
    lines += _evidence_markdown(results)
    lines += _research_markdown(results)
    gaps = results.get("coverage_gaps", [])
    lines += ["", "## Coverage gaps", ""]
    if not gaps:
        lines.append("none")
    else:
        lines.append(f"{len(gaps)} question(s) abstained on, with the searches tried:")
        lines.append("")
        for g in gaps:
            searches = "; ".join(f"`{_md_escape(s)}`" for s in g.get("searches", [])) or "(no search)"
            known = g.get("evidence_retrieved")
            lines.append(f"- **{_md_escape(g['dataset'])}** `{_md_escape(str(g['id']))}`"
                         + (" *gated*" if g.get("gated") else "")
                         + ("" if known is None else " (gold evidence retrieved)" if known
                            else " (gold evidence not retrieved)")
                         + f": {_md_escape(g['question'])} — searches: {searches}")
    skipped = results.get("skipped_lines", [])
    if skipped:
        lines += ["", "## Skipped lines", ""] + [f"- {_md_escape(s)}" for s in skipped]
    return "\n".join(lines) + "\n"


CRITIC_COLUMNS: list[tuple[str, str]] = [
    ("judged", "judged"), ("failures", "judge failures"), ("coverage", "coverage"),
    ("redundancy", "redundancy"), ("reward", "r_cite"), ("groundedness", "groundedness"),
    ("flagged", "flagged"), ("fallbacks", "fallbacks"), ("skipped", "not judged"),
]
_CRITIC_COUNTS = {"judged", "failures", "flagged", "fallbacks", "skipped"}
EVIDENCE_COLUMNS: list[tuple[str, str]] = [
    ("questions", "questions"), ("evidence_retrieved", "evidence retrieved"), ("evidence_recall", "evidence recall"),
    ("answered", "answered"), ("citation_precision", "citation P"), ("citation_recall", "citation R"),
    ("reading_failures", "reading failures"), ("retrieval_gaps", "retrieval gaps"),
]
AGREEMENT_COLUMNS: list[tuple[str, str]] = [
    ("judge", "judge"), ("compared", "answers"), ("passage_agreement", "passage agreement"),
    ("r_cite_abs_diff", "mean |Δ r_cite|"), ("r_cite_judge", "r_cite (judge)"), ("r_cite_gold", "r_cite (gold)"),
]
_EVIDENCE_COUNTS = {"questions", "answered", "reading_failures", "retrieval_gaps", "compared"}


def _grader_markdown(results: dict[str, Any]) -> list[str]:
    per = {name: m["grader_failures"] for name, m in _rows(results) if "grader_failures" in m and name != "macro"}
    if not per:
        return []
    total = sum(per.values())
    return ["", f"Answer grader (`metrics.correctness: judge`): {total} failed grade(s) ("
            + ", ".join(f"{k} {v}" for k, v in per.items()) + "). Those answers kept exact match's verdict and "
            "are flagged `judge_failed`; rerunning the same `awarl eval` into this folder grades them again."]


def _evidence_markdown(results: dict[str, Any]) -> list[str]:
    rows = [(name, m["evidence"]) for name, m in _rows(results) if isinstance(m.get("evidence"), dict)]
    if not rows:
        return []
    lines = ["", "## Citations and evidence (against the gold evidence)", "",
             "Over the questions whose data marks supporting evidence and whose line has a trajectory. Evidence "
             "retrieved = share of questions whose every gold paragraph was retrieved somewhere in the trajectory "
             "(evidence recall: share of gold paragraphs retrieved); citation P = share of the cited passages "
             "that are gold (answers that cite), citation R = share of the gold paragraphs cited (answered "
             "questions). Of the questions not answered correctly, reading failures had all their evidence "
             "retrieved, retrieval gaps did not. 95% bootstrap CIs in brackets.", ""]
    lines += _table(rows, EVIDENCE_COLUMNS)
    agree = [(name, e["judge_agreement"]) for name, e in rows if isinstance(e.get("judge_agreement"), dict)]
    if agree:
        lines += ["", "Agreement of the run's citation judge with the gold judge, on the answers both judged: "
                  "passage agreement = share of cited passages both call supporting or both call redundant; "
                  "mean |Δ r_cite| = mean absolute difference of their citation rewards.", ""]
        lines += _table(agree, AGREEMENT_COLUMNS)
    return lines


def _table(rows: list[tuple[str, dict[str, Any]]], columns: list[tuple[str, str]],
           counts: set[str] = _EVIDENCE_COUNTS) -> list[str]:
    out = ["| dataset | " + " | ".join(label for _, label in columns) + " |", "|---|" + "---:|" * len(columns)]
    for name, e in rows:
        cells = [_md_escape(e[key]) if isinstance(e.get(key), str) else _cell(e, key, True, counts)
                 for key, _ in columns]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def _research_markdown(results: dict[str, Any]) -> list[str]:
    """The critic loop's own figures (`awarl eval --agent critic_loop`), with the judge that decided it."""
    res = results.get("research")
    if not isinstance(res, dict):
        return []
    m = res.get("macro") or {}
    lines = ["", "## Critic loop", "", f"Decisions by: {', '.join(res.get('judges') or ['?'])}."]
    if res.get("oracle"):
        lines += ["", "**Oracle:** the gold judge decided this loop from the dataset's gold evidence; its figures are "
                  "not comparable with a system without that evidence."]

    def num(key: str) -> str:
        return "—" if m.get(key) is None else f"{m[key]:.2f}"

    return lines + ["", f"Macro: approved share {num('approved_share')}, critic-loop cycles {num('iterations')}, "
                    f"re-queries {num('requeries')}, groundedness before/after {num('groundedness_before')} / "
                    f"{num('groundedness_after')}, coverage gaps {num('coverage_gaps_per_question')} and query "
                    f"failures {num('query_failures_per_question')} per question."]


def _critic_markdown(results: dict[str, Any]) -> list[str]:
    rows = [(name, m["critic"]) for name, m in _rows(results) if isinstance(m.get("critic"), dict)]
    if not rows:
        return []
    lines = ["", "## Citation critic", "",
             "Means over the answered, valid trajectories the judge verified (abstained and invalid ones are "
             "not judged): coverage = share of claims grounded in a cited passage, redundancy = share of cited "
             "passages supporting no claim, r_cite = coverage − redundancy, groundedness = the share of "
             "grounded claims (cited or not), recounted from the judge's labels; flagged = judged answers with at least one flag; fallbacks = "
             "answers a gold judge left to its fallback (no gold evidence); not judged = answers without gold "
             "evidence under `critic.gold_fallback: none`. Macro means are over the datasets with at least one "
             "judged answer.", ""]
    return lines + _table(rows, CRITIC_COLUMNS, _CRITIC_COUNTS)   # critic entries carry no CIs


def plot_results(results: dict[str, Any], path: str | os.PathLike) -> Path:
    """Grouped bars of precision / accuracy / RA-F1 per dataset and macro, with CI whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    path = Path(path)
    rows = _rows(results)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(rows) + 2), 3.8))
    x = np.arange(len(rows))
    width = 0.8 / len(_PLOT_METRICS)
    for j, (key, label) in enumerate(_PLOT_METRICS):
        vals = [m.get(key) or 0.0 for _, m in rows]
        cis = [(m.get("ci") or {}).get(key) for _, m in rows]
        bounds = [c for c in cis if c]
        err = None
        if rows and len(bounds) == len(cis):
            err = np.array([[v - c[0] for v, c in zip(vals, bounds, strict=True)],
                            [c[1] - v for v, c in zip(vals, bounds, strict=True)]]).clip(min=0)
        ax.bar(x + (j - (len(_PLOT_METRICS) - 1) / 2) * width, vals, width, label=label, yerr=err, capsize=2)
    ax.set_xticks(x, [name for name, _ in rows])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score")
    ax.set_title(f"Precision, accuracy and RA-F1 ({results.get('n', 0)} questions)")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
    return path


def write_report(results: dict[str, Any], out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write results.json (atomic), results.md and results.png into out_dir; returns their paths."""
    out = Path(out_dir)
    results.setdefault("coverage_gaps", [])
    results.setdefault("skipped_lines", [])
    paths = {"json": out / "results.json", "md": out / "results.md", "png": out / "results.png"}
    atomic_write_json(paths["json"], results)
    atomic_write_text(paths["md"], results_markdown(results))
    plot_results(results, paths["png"])
    return paths


def print_results_table(results: dict[str, Any], console: Any = None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    table = Table(title=f"RA-F1 report ({results.get('n', 0)} questions, "
                        f"correctness={results.get('config', {}).get('correctness', '?')})",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    # Narrow on purpose (fits 80 columns); results.md has every column with its CI.
    # C/W/Ab/I = correct / wrong / abstain / invalid counts; abst = abstention rate.
    table.add_column("dataset", no_wrap=True)
    table.add_column("n", justify="right")
    table.add_column("C/W/Ab/I", justify="right", no_wrap=True)
    short = [("precision", "P"), ("accuracy", "A"), ("ra_f1", "RA-F1"), ("abstention_rate", "abst"),
             ("em", "EM")]
    for _, label in short:
        table.add_column(label, justify="right")
    for name, m in _rows(results):
        counts = "" if name == "macro" else "/".join(str(m.get(k, 0)) for k in ("correct", "wrong", "abstain", "invalid"))
        cells = [_cell(m, "n", False), counts] + [_cell(m, k, False) for k, _ in short]
        table.add_row(name[:15], *cells, style="bold" if name == "macro" else None)
    console.print(table)
    ci = (results.get("macro") or {}).get("ci", {}).get("ra_f1")
    if ci:
        console.print(f"macro RA-F1 95% CI: [{ci[0]:.3f}, {ci[1]:.3f}]")
    critic = (results.get("macro") or {}).get("critic")
    if critic:
        def fmt(key: str) -> str:
            return "–" if critic.get(key) is None else f"{critic[key]:.3f}"
        console.print(f"citation critic (macro): coverage {fmt('coverage')}, redundancy {fmt('redundancy')}, "
                      f"groundedness {fmt('groundedness')}; {critic['judged']} judged, "
                      f"{critic['failures']} judge failure(s)")
    ev = (results.get("macro") or {}).get("evidence")
    if ev:
        def pct(key: str) -> str:
            return "–" if ev.get(key) is None else f"{ev[key]:.3f}"
        console.print(f"against gold evidence (macro): citation P {pct('citation_precision')}, citation R "
                      f"{pct('citation_recall')}, evidence retrieved {pct('evidence_retrieved')}")
    gaps = results.get("coverage_gaps", [])
    console.print(f"coverage gaps: {len(gaps)} abstained question(s)" if gaps else "coverage gaps: none")
    skipped = results.get("skipped_lines", [])
    for s in skipped:
        console.print(Text("skipped ", style="yellow") + Text(s))
