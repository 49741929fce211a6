"""Refusal-reward strategies: AWA-RL and the baselines the paper compares against (`reward.strategy`).

- `awarl`:  the dynamic r_ref of section 4 (computed by the caller, passed in);
- `none`:   plain GRPO, an abstention is worth exactly a wrong answer (r_wrong);
- `static`: a constant (`static_value`, e.g. 0.05, reported to collapse into near-total refusal);
- `bapo`:   BAPO's group rule: `bapo_value` for an abstention only when no rollout of the query's group
            is correct, otherwise r_wrong.
"""

from __future__ import annotations

from awarl.config import RewardConfig

STRATEGIES = ("awarl", "none", "static", "bapo")


def abstain_reward(strategy: str, cfg: RewardConfig, r_ref: float, group_any_correct: bool) -> float:
    """The reward an abstention earns under `strategy`."""
    if strategy == "awarl":
        return float(r_ref)
    if strategy == "none":
        return float(cfg.r_wrong)
    if strategy == "static":
        return float(cfg.static_value)
    if strategy == "bapo":
        return float(cfg.r_wrong) if group_any_correct else float(cfg.bapo_value)
    raise ValueError(f"reward.strategy must be one of {STRATEGIES}, got {strategy!r}")
