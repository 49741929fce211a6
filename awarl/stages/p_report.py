"""What a p_i estimate file says about the reward: the p_i histogram and the ρ̂ every expected-rate reading
gives on it.

ρ̂ (SPEC step 4) is the refusal rate the reward expects of the batch; each `reward.expected_rate` reading
turns the same p_i into a different ρ̂, and the dynamic penalty pushes the observed refusal rate towards it.
On a real checkpoint's estimate the readings can disagree a lot (many p_i = 0 questions: every reading says
"abstain"; p_i between the thresholds: they split), so the report shows them side by side, for both
`reward.p_definition`s, at the run's γ and over the γ grid of configs/sweep_gamma.yaml. The readings are
listed from `abstention.EXPECTED_RATES`, so a new one appears here without a change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from awarl.config import RewardConfig
from awarl.data.estimates import row_p, row_samples
from awarl.io import save_figure
from awarl.rewards import abstention

GAMMAS = (0.02, 0.05, 0.1, 0.25, 0.5)  # the γ grid of configs/sweep_gamma.yaml


def rho_hat(rows: Sequence[dict], reward: RewardConfig, mode: str, gamma: float,
            definition: str | None = None) -> float:
    """ρ̂ of a batch holding each estimate row's question once, under `mode` at `gamma`, with the run's other
    reward settings: p_i under `definition` (default the run's), and the samples it rests on (a row without
    counts: reward.posterior_samples), as training reads them."""
    definition = definition or reward.p_definition
    ps = p_values(rows, definition)
    ns = [float(reward.posterior_samples) if n is None else n for n in (row_samples(r, definition) for r in rows)]
    return abstention.batch_expected_rate(ps, reward.model_copy(update={"expected_rate": mode, "gamma": gamma}), ns)


def p_values(rows: Sequence[dict], definition: str) -> list[float]:
    """p_i of each row under `definition`, as training reads it (a never-answered question keeps its share of K)."""
    return [float(row_p(r, definition)) for r in rows]


def p_distribution(rows: Sequence[dict], reward: RewardConfig) -> dict[str, Any]:
    """Histogram counts (p_i value -> questions) and ρ̂ per reading, definition and γ."""
    out: dict[str, Any] = {"questions": len(rows), "gamma": reward.gamma, "readings": list(abstention.EXPECTED_RATES),
                           "definitions": {}}
    for definition in abstention.P_DEFINITIONS:
        ps = p_values(rows, definition)
        hist = Counter(round(p, 3) for p in ps)
        out["definitions"][definition] = {
            "mean_p": sum(ps) / len(ps) if ps else None,
            "histogram": {f"{k:g}": hist[k] for k in sorted(hist)},
            "rho_hat": {mode: {f"{g:g}": rho_hat(rows, reward, mode, g, definition)
                               for g in sorted({*GAMMAS, reward.gamma})}
                        for mode in abstention.EXPECTED_RATES},
        }
    return out


def plot_histogram(dist: dict[str, Any], path: Path) -> None:
    """p_i histogram, one bar group per p_definition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    defs = list(dist["definitions"])
    values = sorted({float(v) for d in defs for v in dist["definitions"][d]["histogram"]})
    fig, ax = plt.subplots(figsize=(6, 3.2))
    width = 0.8 / max(1, len(defs))
    for j, d in enumerate(defs):
        hist = dist["definitions"][d]["histogram"]
        ax.bar([i + j * width for i in range(len(values))], [hist.get(f"{v:g}", 0) for v in values], width,
               label=f"p_definition={d}")
    ax.set_xticks([i + width * (len(defs) - 1) / 2 for i in range(len(values))], [f"{v:g}" for v in values])
    ax.set_xlabel("p_i")
    ax.set_ylabel("training questions")
    ax.set_title(f"p_i of {dist['questions']} training questions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def p_markdown(dist: dict[str, Any], image: str | None = None) -> list[str]:
    """The report's section: histogram table (and image), then ρ̂ per reading and γ."""
    defs = dist["definitions"]
    values = sorted({float(v) for d in defs.values() for v in d["histogram"]})
    lines = ["| p_i | " + " | ".join(f"{v:g}" for v in values) + " | mean |",
             "|---|" + "---|" * (len(values) + 1)]
    for name, d in defs.items():
        lines.append(f"| {name} | " + " | ".join(str(d["histogram"].get(f"{v:g}", 0)) for v in values)
                     + f" | {d['mean_p']:.3f} |")
    lines += [""] + ([f"![p_i histogram]({image})", ""] if image else [])
    gammas = sorted({float(g) for d in defs.values() for m in d["rho_hat"].values() for g in m})
    lines += [f"ρ̂ (the refusal rate the reward expects of a batch of these questions) per `reward.expected_rate` "
              f"reading; the run's γ is {dist['gamma']:g}:", "",
              "| reading | p_definition | " + " | ".join(f"γ={g:g}" for g in gammas) + " |",
              "|---|---|" + "---|" * len(gammas)]
    for mode in dist["readings"]:
        for name, d in defs.items():
            lines.append(f"| {mode} | {name} | " + " | ".join(f"{d['rho_hat'][mode][f'{g:g}']:.3f}" for g in gammas)
                         + " |")
    return lines + [""]
