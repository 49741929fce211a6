"""Per-dataset statistics of loaded examples (what `awarl data stats` prints)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from awarl.data.types import QAExample

STAT_COLUMNS: list[tuple[str, str]] = [
    ("n", "n"),
    ("answerable_share", "answerable"),
    ("mean_question_words", "q words"),
    ("mean_answers", "answers"),
    ("mean_context_paragraphs", "paragraphs"),
    ("mean_supporting_paragraphs", "supp. par."),
    ("mean_supporting_facts", "supp. facts"),
]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _stats(exs: list[QAExample]) -> dict[str, Any]:
    types: dict[str, int] = defaultdict(int)
    for ex in exs:
        t = ex.metadata.get("type")
        if isinstance(t, str):
            types[t] += 1
    return {
        "n": len(exs),
        "answerable_share": _mean([1.0 if ex.answerable else 0.0 for ex in exs]),
        "mean_question_words": _mean([len(ex.question.split()) for ex in exs]),
        "mean_answers": _mean([len(ex.answers) for ex in exs]),
        "no_answer": sum(1 for ex in exs if not ex.answers),
        "mean_context_paragraphs": _mean([len(ex.context) for ex in exs]),
        "mean_supporting_paragraphs": _mean([sum(p.is_supporting for p in ex.context) for ex in exs]),
        "mean_supporting_facts": _mean([len(ex.supporting_facts) for ex in exs]),
        "types": dict(sorted(types.items())),
    }


def dataset_stats(examples: Iterable[QAExample]) -> dict[str, dict[str, Any]]:
    """{dataset: stats} in first-seen dataset order, plus "all" when there is more than one dataset."""
    by_ds: dict[str, list[QAExample]] = defaultdict(list)
    for ex in examples:
        by_ds[ex.dataset].append(ex)
    out = {ds: _stats(exs) for ds, exs in by_ds.items()}
    if len(out) > 1:
        out["all"] = _stats([ex for exs in by_ds.values() for ex in exs])
    return out


def print_stats_table(stats: dict[str, dict[str, Any]], console: Any = None, title: str = "dataset stats") -> None:
    from rich.console import Console
    from rich.table import Table

    # Means are per question; "supp. facts" are sentence-level (HotpotQA/2Wiki), "supp. par." paragraphs.
    table = Table(title=title)
    table.add_column("dataset")
    for _, label in STAT_COLUMNS:
        table.add_column(label, justify="right")
    for ds, s in stats.items():
        cells = []
        for key, _ in STAT_COLUMNS:
            v = s[key]
            cells.append(f"{v:.1%}" if key == "answerable_share" else str(v) if isinstance(v, int) else f"{v:.2f}")
        table.add_row(ds, *cells)
    (console or Console()).print(table)
