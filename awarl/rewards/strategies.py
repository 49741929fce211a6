"""Refusal-reward strategies: AWA-RL and the baselines the paper compares against (`reward.strategy`,
registered in `awarl.choices.STRATEGIES`).

- `awarl`:  the dynamic r_ref of section 4 (computed by the caller, passed in), behind BAPO's group rule when
            `reward.refusal_gate: any_correct`;
- `none`:   plain GRPO, an abstention is worth exactly a wrong answer (r_wrong);
- `static`: a constant (`static_value`, e.g. 0.05, reported to collapse into near-total refusal);
- `bapo`:   BAPO's group rule: `bapo_value` for an abstention only when no rollout of the query's group
            is correct, otherwise r_wrong.

Each is a pure function (cfg, r_ref, group_any_correct) -> reward, wrapped in a `Strategy` that says which of
the caller's state it reads, so the training reward and the simulator compute only that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from awarl.choices import STRATEGIES
from awarl.config import RewardConfig


@dataclass(frozen=True)
class Strategy:
    """What a refusal-reward strategy registers (docs/extending.md).

    - `abstain_reward(cfg, r_ref, group_any_correct)`: the reward of one abstention; `r_ref` is AWA-RL's
      dynamic refusal reward of the query (steps 2-8; with the penalty only when `uses_r_ref`),
      `group_any_correct` whether any completion of the query's GRPO group is correct (counted across
      processes only when `uses_group`; False otherwise).
    - `uses_r_ref`: the reward reads r_ref, so training needs every query's p_i (`awarl estimate`) and the
      caller keeps Ē and applies P(Ē) (steps 5-7); E, Ē and P are logged.
    - `uses_group`: the caller counts each query's group outcomes.
    """

    abstain_reward: Callable[[RewardConfig, float, bool], float]
    uses_r_ref: bool = False
    uses_group: bool = False


def awarl_reward(cfg: RewardConfig, r_ref: float, group_any_correct: bool) -> float:
    """Step 8: the dynamic r_ref itself; r_wrong instead when `reward.refusal_gate: any_correct` and a rollout
    of the group is correct."""
    if cfg.refusal_gate == "any_correct" and group_any_correct:
        return float(cfg.r_wrong)
    return float(r_ref)


def needs_group_counts(cfg: RewardConfig) -> bool:
    """Whether the reward needs each query's group outcomes: the strategy's own rule, an online p from the group,
    or AWA-RL's refusal gate."""
    return strategy(cfg.strategy).uses_group or cfg.p_online != "off" or cfg.refusal_gate != "off"


def wrong_answer_reward(cfg: RewardConfig, r_ref: float, group_any_correct: bool) -> float:
    """Plain GRPO: an abstention is worth a wrong answer."""
    return float(cfg.r_wrong)


def static_reward(cfg: RewardConfig, r_ref: float, group_any_correct: bool) -> float:
    """A constant refusal reward."""
    return float(cfg.static_value)


def bapo_reward(cfg: RewardConfig, r_ref: float, group_any_correct: bool) -> float:
    """BAPO's group rule: the IDK reward only when no rollout of the group is correct."""
    return float(cfg.r_wrong) if group_any_correct else float(cfg.bapo_value)


AWARL = Strategy(awarl_reward, uses_r_ref=True)
NONE = Strategy(wrong_answer_reward)
STATIC = Strategy(static_reward)
BAPO = Strategy(bapo_reward, uses_group=True)


def strategy(name: str) -> Strategy:
    """The registered strategy `name` (ValueError naming the choices when there is none)."""
    return STRATEGIES.load(name)


def abstain_reward(name: str, cfg: RewardConfig, r_ref: float, group_any_correct: bool) -> float:
    """The reward an abstention earns under the strategy `name`."""
    return strategy(name).abstain_reward(cfg, r_ref, group_any_correct)
