"""The AWA-RL mechanism as the real trainer ran it, for `awarl demo`'s report: ρ_t, ρ̂_t, Ē_t and P(Ē_t) per
GRPO step, read from the trainer's own log history (the `awarl/*` metrics `AwaRLReward` logs through TRL's
`log_metric`), next to the simulator's prediction for the same p_i estimates and batch shape.

Three things come out: `dynamics.json` (the plotted numbers and where each came from), `dynamics.png`, and a
paragraph saying in words what moved. The logged Ē_t and P_t are also recomputed from the logged E_t with the
pure functions of awarl.rewards.abstention, which checks that the trainer applied the formulas of
docs/method.md step by step.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from awarl.config import AwarlConfig, RewardConfig
from awarl.data.estimates import row_p, row_samples
from awarl.io import atomic_write_json, save_figure
from awarl.lr_schedule import run_refusal_warmup_steps
from awarl.rewards import abstention as A
from awarl.simulate import AB, INV, OUTCOMES, dead_zone, population_from_counts, seed_pair, simulate_run
from awarl.stages.p_report import rho_hat

SERIES = ("rho", "rho_hat", "E", "E_bar", "penalty", "penalty_applied", "r_ref_mean", "share_correct", "share_wrong",
          "share_abstain", "share_invalid", "line", "ra_f1_hat")
SIM_SERIES = {"rho": "batch_rho", "rho_hat": "batch_rho_hat", "E_bar": "E_bar", "penalty": "penalty",
              "penalty_applied": "penalty_applied"}
# Float rounding of the logged values; a real difference of the formulas is orders of magnitude larger.
REPLAY_TOLERANCE = 1e-6
# The simulator's own speed (simulate.learning_rate) is set for its 1000-step runs; the demo's tiny model moves
# at its own pace, so the prediction uses the rate of this grid whose refusal curve is closest to the trainer's.
LR_GRID = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
SOURCE = ("trainer.state.log_history: the awarl/* metrics AwaRLReward logged through TRL's log_metric, one "
          "entry per GRPO step")


def trainer_dynamics(log_history: Sequence[dict]) -> dict[str, list]:
    """The reward statistics per training step from a Trainer's `state.log_history` (entries without
    `awarl/rho` are other logs, e.g. evaluation). A series the strategy does not log (E, Ē, P for the
    baselines) is absent."""
    entries = [h for h in log_history if "awarl/rho" in h and "step" in h]
    out: dict[str, list] = {"step": [int(h["step"]) for h in entries]}
    for key in SERIES:
        if all(f"awarl/{key}" in h for h in entries) and entries:
            out[key] = [float(h[f"awarl/{key}"]) for h in entries]
    return out


def replay_error(dyn: dict[str, list], rc: RewardConfig, warm_steps: int = 0) -> float | None:
    """Largest difference between the logged Ē_t, P_t and those recomputed from the logged E_t through
    abstention.ema / smoothed_excess / stepwise_penalty (None when the strategy has no penalty). The first
    `warm_steps` steps (`reward.refusal_warmup`) hold Ē and P at 0 and feed no E to the EMA."""
    if "E" not in dyn or "E_bar" not in dyn:
        return None
    m, worst = 0.0, 0.0
    for t, (e, e_bar, pen) in enumerate(zip(dyn["E"], dyn["E_bar"], dyn["penalty"], strict=True), start=1):
        if A.warming_up(t - 1, warm_steps):
            worst = max(worst, abs(e_bar), abs(pen))
            continue
        m = A.ema(m, e, rc.beta)
        mine = A.smoothed_excess(m, t, rc.beta, rc.ema_start)
        worst = max(worst, abs(mine - e_bar))
        # P is a step function: compare it at the logged Ē, so float32 logging cannot flip a step
        worst = max(worst, abs(A.stepwise_penalty(e_bar, rc.penalty_steps, rc.penalty_max) - pen))
    return worst


def estimate_counts(rows: Sequence[dict]) -> np.ndarray:
    """(n, 4) outcome counts (simulator column order) of estimate-file rows."""
    return np.array([[int(r["outcomes"].get(o.value, 0)) for o in OUTCOMES] for r in rows], dtype=int)


def simulator_prediction(cfg: AwarlConfig, rows: Sequence[dict], observed_rho: Sequence[float] | None = None,
                         seeds: int = 20) -> dict[str, Any]:
    """The simulator run on the demo's own p_i estimates (their outcome counts are the population's pre-RL
    estimate), batch shape, step count and reward config: mean and 10-90% band over `seeds` runs of each
    logged series, plus the environment it assumed. With `observed_rho`, the learning rate is the one of
    LR_GRID whose mean refusal curve is closest to it (the one number fitted); else simulate.learning_rate."""
    counts = estimate_counts(rows)
    tot = counts.sum(axis=0)
    answered = int(tot.sum() - tot[AB])
    t = cfg.train
    per_step = t.per_device_train_batch_size * t.gradient_accumulation_steps
    sc = cfg.simulate.model_copy(update={
        "steps": t.max_steps, "n_queries": len(rows), "group_size": t.num_generations,
        "batch_queries": max(1, per_step // t.num_generations),
        "invalid_rate": float(tot[INV] / answered) if answered else 0.0,
        "init_abstain_rate": float(min(0.99, max(0.01, tot[AB] / max(int(tot.sum()), 1))))})

    def runs_at(lr: float) -> list:
        sc_lr = sc.model_copy(update={"learning_rate": lr})
        runs = []
        for seed in range(seeds):
            pop_rng, run_seed = seed_pair(cfg.run.seed + seed)
            pop = population_from_counts(counts, sc_lr, pop_rng)
            runs.append(simulate_run(pop, sc_lr, cfg.reward, cfg.reward.strategy, gamma=cfg.reward.gamma,
                                     seed=run_seed))
        return runs

    def misfit(runs: list) -> float:
        pred = np.mean([r.history["batch_rho"] for r in runs], axis=0)[:len(observed_rho or [])]
        return float(np.sum((pred - np.asarray(observed_rho)[:len(pred)]) ** 2))

    if observed_rho:
        fits = {lr: runs_at(lr) for lr in LR_GRID}
        lr = min(fits, key=lambda k: misfit(fits[k]))
        runs = fits[lr]
    else:
        lr, runs = sc.learning_rate, runs_at(sc.learning_rate)
    out: dict[str, Any] = {"seeds": seeds, "learning_rate_fitted": bool(observed_rho), "assumed": {
        **{k: getattr(sc, k) for k in ("steps", "batch_queries", "group_size", "invalid_rate", "init_abstain_rate")},
        "learning_rate": lr}}
    for key, sim_key in SIM_SERIES.items():
        if sim_key in runs[0].history:
            arr = np.array([r.history[sim_key] for r in runs])
            out[key] = {"mean": arr.mean(axis=0).tolist(), "p10": np.percentile(arr, 10, axis=0).tolist(),
                        "p90": np.percentile(arr, 90, axis=0).tolist()}
    return out


def plot_dynamics(dyn: dict[str, list], sim: dict[str, Any], path: str | os.PathLike) -> None:
    """Four panels, ρ_t, ρ̂_t, Ē_t, P(Ē_t): the trainer's logged values (points) and the simulator's
    prediction (line, 10-90% band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5), sharex=True)
    titles = {"rho": "ρ_t: observed refusal rate of the batch", "rho_hat": "ρ̂_t: expected refusal rate",
              "E_bar": "Ē_t: smoothed excess", "penalty": "P(Ē_t): stepwise penalty, and its mean over groups"}
    for ax, (key, title) in zip(axes.flat, titles.items(), strict=True):
        if key in sim:
            xs = np.arange(1, len(sim[key]["mean"]) + 1)
            ax.fill_between(xs, sim[key]["p10"], sim[key]["p90"], color="tab:orange", alpha=0.2)
            ax.plot(xs, sim[key]["mean"], color="tab:orange", lw=1.5, label="simulator (mean, 10-90%)")
        if key in dyn:
            ax.plot(dyn["step"], dyn[key], "o-", color="tab:blue", ms=3, lw=1, label="trainer log")
        else:
            ax.text(0.5, 0.5, "not logged by this strategy", ha="center", transform=ax.transAxes)
        if key == "penalty" and "penalty_applied" in dyn:
            # reward.penalty_dither: each group's step is drawn at Ē + u, so the batch's mean penalty moves smoothly
            ax.plot(dyn["step"], dyn["penalty_applied"], "s-", color="tab:green", ms=2, lw=0.8,
                    label="mean over groups (P(Ē + u))")
            ax.legend(fontsize=7)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.ticklabel_format(axis="y", useOffset=False)
    for ax in axes[0]:
        ax.set_ylim(-0.02, 1.02)  # rates: a constant ρ̂ must read as a constant, not as offset noise
    for ax in axes[1]:
        ax.set_xlabel("GRPO step")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def _span(xs: Sequence[float]) -> tuple[float, float]:
    """Mean of the first and of the last quarter of a series (at least one value each)."""
    q = max(1, len(xs) // 4)
    return float(np.mean(xs[:q])), float(np.mean(xs[-q:]))


def target_readings(rows: Sequence[dict], rc: RewardConfig) -> dict[str, Any]:
    """ρ̂ that every `reward.expected_rate` reading gives on these estimate rows (each question once), at the
    run's γ, p_min and outcome rewards (`p_report.rho_hat`): the rate the p_i imply, and where a reading's own
    form caps it."""
    ps = [row_p(r, rc.p_definition) for r in rows]
    ns = [row_samples(r, rc.p_definition) for r in rows]
    return {"questions": len(ps), "never_solved": sum(p == 0 for p in ps),
            "samples": sorted({int(rc.posterior_samples if n is None else n) for n in ns}), "run": rc.expected_rate,
            "abstain_line": rc.abstain_line, "gamma": rc.gamma,
            "r_base_mean_cap": 1.0 - rc.p_min ** rc.gamma,
            "rho_hat": {mode: rho_hat(rows, rc, mode, rc.gamma) for mode in A.EXPECTED_RATES}}


def target_words(targets: dict[str, Any]) -> str:
    """The readings' ρ̂ on the training questions, in one sentence."""
    if not targets.get("questions"):
        return ""
    k = "/".join(str(n) for n in targets["samples"])
    # under the RA-F1 line the run's ρ̂ reads F̂/2, not these courage-line values
    courage = targets["abstain_line"] == "courage"
    each = ", ".join(f"{mode} {v:.2f}" + (" (this run's)" if courage and mode == targets["run"] else "")
                     + (f" (capped at 1 − p_min^γ = {targets['r_base_mean_cap']:.2f})" if mode == "r_base_mean" else "")
                     for mode, v in targets["rho_hat"].items())
    where = "" if courage else f" at the courage line (γ = {targets['gamma']:g}; this run's line is F̂/2 instead)"
    return (f"On these {targets['questions']} training questions ({targets['never_solved']} never solved in their "
            f"{k} samples) the expected-rate readings give ρ̂{where}: {each} (docs/method.md \"The penalty's "
            "target\").")


def line_words(dyn: dict[str, list], rc: RewardConfig, flat: bool) -> str:
    """Why ρ̂_t moved or did not: the batch's p_i alone (courage line), or also the RA-F1 line F̂/2 it reads."""
    if rc.abstain_line == "ra_f1" and dyn.get("line"):
        l0, l1 = _span(dyn["line"])
        return (f" (it reads the RA-F1 line F̂/2, F̂ the policy's running RA-F1 on its training batches: the line went "
                f"{l0:.3f} -> {l1:.3f})")
    return " (constant: it is a function of the batch's p_i only, and these barely differ)" if flat else ""


def dynamics_words(dyn: dict[str, list], sim: dict[str, Any], rc: RewardConfig, replay: float | None,
                   targets: dict[str, Any] | None = None, warm_steps: int = 0) -> str:
    """What moved, in words, with the numbers; `warm_steps`: the refusal warm-up's length (as `replay_error`)."""
    if not dyn.get("step"):
        return "No reward statistics were logged (no training step ran)."
    n = len(dyn["step"])
    r0, r1 = _span(dyn["rho"])
    h0, h1 = _span(dyn["rho_hat"])
    parts = [f"Over {n} GRPO steps the observed refusal rate ρ_t went from {r0:.2f} (mean of the first quarter) "
             f"to {r1:.2f} (last quarter); the expected rate ρ̂_t from {h0:.2f} to {h1:.2f}"
             + line_words(dyn, rc, max(dyn["rho_hat"]) - min(dyn["rho_hat"]) < 0.02) + "."]
    if targets:
        parts.append(target_words(targets))
    if "E_bar" in dyn and warm_steps:
        parts.append(f"The first {warm_steps} steps were the refusal warm-up (reward.refusal_warmup {rc.warmup_text()}): "
                     "an abstention earned what a wrong answer earns, as in plain GRPO, and Ē_t stayed at 0; the "
                     "refusal reward and its penalty ran from the next step.")
    if "E_bar" in dyn:
        dz = dead_zone(rc)
        out_at = next((s for s, e in zip(dyn["step"], dyn["E_bar"], strict=True) if abs(e) > dz), None)
        pens = sorted(set(dyn["penalty"]), key=abs)
        first = {p: next(s for s, q in zip(dyn["step"], dyn["penalty"], strict=True) if q == p) for p in pens}
        parts.append(f"Ē_t ({rc.ema_start} start, β = {rc.beta:g}) went from {dyn['E_bar'][0]:+.3f} to "
                     f"{dyn['E_bar'][-1]:+.3f}; " + (f"it left the dead zone (|Ē| <= {dz:g}) at step {out_at}, and "
                                                      if out_at else f"it never left the dead zone (|Ē| <= {dz:g}), so ")
                     + "the penalty took the values " + ", ".join(f"{p:+.2f} (from step {first[p]})" for p in pens)
                     + ". " + ("A negative Ē means the policy refused less than ρ̂ asks: the penalty raised the "
                               "refusal reward" if dyn["E_bar"][-1] < 0 else "A positive Ē means the policy refused "
                               "more than ρ̂ asks: the penalty lowered the refusal reward")
                     + f" (mean r_ref on offer {dyn['r_ref_mean'][0]:.3f} -> {dyn['r_ref_mean'][-1]:.3f})."
                     + (f" Each GRPO group drew its step at Ē ± {rc.penalty_dither:g} (reward.penalty_dither): the mean "
                        f"penalty over the batch's groups went {dyn['penalty_applied'][0]:+.3f} -> "
                        f"{dyn['penalty_applied'][-1]:+.3f}." if rc.penalty_dither and "penalty_applied" in dyn else ""))
    inv0, inv1 = _span(dyn.get("share_invalid", [0.0]))
    parts.append(f"Invalid trajectories: {inv0:.2f} -> {inv1:.2f} of the batch.")
    if "rho" in sim:
        s0, s1 = _span(sim["rho"]["mean"])
        same = (s1 - s0) * (r1 - r0) > 0 or (abs(s1 - s0) < 0.02 and abs(r1 - r0) < 0.02)
        parts.append(f"The simulator, given the same p_i estimates and batch shape, predicted ρ_t {s0:.2f} -> {s1:.2f}"
                     + (f" and Ē_t ending at {sim['E_bar']['mean'][-1]:+.3f}" if "E_bar" in sim else "")
                     + f": {'the same' if same else 'a different'} direction. Its learning rate "
                     f"({sim['assumed']['learning_rate']:g}"
                     + (", the one of the grid closest to the observed ρ_t: the only number fitted" if
                        sim.get("learning_rate_fitted") else "")
                     + ("; the grid's lowest, so the policy's refusal barely moved at all" if
                        sim.get("learning_rate_fitted") and sim["assumed"]["learning_rate"] == LR_GRID[0] else "")
                     + ") stands for this model's speed, which the simulator does not know; ρ̂_t needs no fit "
                     + ("(a function of the batch's p_i and, through F̂, of its outcomes)." if
                        rc.abstain_line == "ra_f1" else "(a function of the batch's p_i)."))
    if replay is not None and replay <= REPLAY_TOLERANCE:
        parts.append(f"Recomputing Ē_t and P_t from the logged E_t with awarl.rewards.abstention reproduces the "
                     f"logged values to within {replay:.1e}: the trainer applied the formulas of docs/method.md.")
    elif replay is not None:  # the sentence above was printed whatever the error (a miss of 0.1 included)
        parts.append(f"Recomputing Ē_t and P_t from the logged E_t with awarl.rewards.abstention misses the "
                     f"logged values by up to {replay:.1e}: the log does not follow the formulas of docs/method.md "
                     "step by step (a train.logging_steps above 1 logs means over several steps).")
    return " ".join(parts)


def write_dynamics(out: Path, cfg: AwarlConfig, log_history: Sequence[dict], estimate_rows: Sequence[dict],
                   seeds: int = 20) -> dict[str, Any]:
    """dynamics.json and dynamics.png in `out`; returns the json's content (with the words)."""
    dyn = trainer_dynamics(log_history)
    sim = simulator_prediction(cfg, estimate_rows, dyn.get("rho"), seeds) if estimate_rows else {}
    warm = run_refusal_warmup_steps(cfg)  # one length for the replay and the words
    replay = replay_error(dyn, cfg.reward, warm)
    targets = target_readings(estimate_rows, cfg.reward) if estimate_rows else {}
    words = dynamics_words(dyn, sim, cfg.reward, replay, targets, warm)
    data = {"source": SOURCE, "trainer": dyn, "simulator": sim, "replay_max_abs_diff": replay, "targets": targets,
            "words": words}
    atomic_write_json(out / "dynamics.json", data)
    plot_dynamics(dyn, sim, out / "dynamics.png")
    return data
