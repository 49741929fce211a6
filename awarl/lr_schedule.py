"""The learning-rate schedules a run trains under, as the multiplier of the peak learning rate at each step, and
the step where a given share of the run's learning is done.

Why the reward needs them: `reward.refusal_warmup` holds the refusal reward off for a share of the run, and the
refusal phase that follows learns with whatever step size the schedule has left. Under TRL's default (linear decay
to 0) a warm-up of 90% of the *steps* leaves that phase at most 10% of the peak step size, 0.5% of the run's
learning, and in the simulator the refusal is barely learnt (docs/learning_study.md "Round 8"). So the warm-up is
a share of the run's learning, the sum of these multipliers: under a constant schedule that is the share of the
steps, as before; under a decaying one it ends earlier.

Pure Python, the formulas of transformers' `get_scheduler` (tests check them against it), so the reward, the
simulator and the demo can read them without torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from awarl.config import AwarlConfig

Schedule = Literal["constant", "linear", "cosine"]
SCHEDULES: tuple[str, ...] = ("constant", "linear", "cosine")


def warmup_step_count(warmup_ratio: float, total_steps: int) -> int:
    """transformers' `TrainingArguments.get_warmup_steps` for a share in [0, 1): ceil(share · total)."""
    if not 0.0 <= warmup_ratio <= 1.0:
        raise ValueError(f"a learning-rate warm-up share must be in [0, 1], got {warmup_ratio!r}")
    return int(math.ceil(total_steps * warmup_ratio))


def lr_multiplier(schedule: str, step: int, total_steps: int, warmup_steps: int = 0) -> float:
    """The learning rate at optimizer step `step` (0-based) as a share of the peak: a linear ramp over the first
    `warmup_steps`, then constant, linear decay to 0 at `total_steps`, or a half cosine to 0."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown learning-rate schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    if schedule == "constant":
        return 1.0
    progress = float(step - warmup_steps) / float(max(1, total_steps - warmup_steps))
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def lr_multipliers(schedule: str, total_steps: int, warmup_ratio: float = 0.0) -> list[float] | None:
    """Every step's multiplier, or None for a constant schedule without warm-up (every step learns alike: a share
    of the learning is the same share of the steps)."""
    if total_steps < 0:
        raise ValueError(f"a run's step count must be >= 0, got {total_steps!r}")
    warm = warmup_step_count(warmup_ratio, total_steps)
    if schedule == "constant" and warm == 0:
        return None
    return [lr_multiplier(schedule, t, total_steps, warm) for t in range(total_steps)]


def learning_share_step(share: float, multipliers: Sequence[float]) -> int:
    """The number of steps t after which `share` of the run's learning (the multipliers' sum) is done: the point
    where the cumulative sum crosses share · total, read between steps by linear interpolation, rounded to a
    step. Constant multipliers give round(share · steps), up to floating point."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"a share of the run's learning must be in [0, 1], got {share!r}")
    total = math.fsum(multipliers)
    if share == 0.0 or total <= 0.0:
        return 0
    target, done = share * total, 0.0
    for t, m in enumerate(multipliers):
        if m > 0.0 and done + m >= target:
            return int(round(t + (target - done) / m))
        done += m
    return len(multipliers)


def warmup_steps(share: float, total_steps: int, lr_multipliers: Sequence[float] | None = None) -> int:
    """`reward.refusal_warmup`: how many of a run's `total_steps` training steps are warm-up. The share is of the
    run's learning: `lr_multipliers` (each step's learning rate over the peak) say how it is spread; None (a
    constant schedule) gives round(share · total), the share of the steps. Also `awarl.rewards.abstention`'s."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"refusal_warmup must be a share of the run in [0, 1), got {share!r}")
    if total_steps < 0:
        raise ValueError(f"a run's step count must be >= 0, got {total_steps!r}")
    if lr_multipliers is None:
        return int(round(float(share) * int(total_steps)))
    if len(lr_multipliers) != total_steps:
        raise ValueError(f"{len(lr_multipliers)} learning-rate multipliers for a run of {total_steps} steps")
    return learning_share_step(share, lr_multipliers)


def refusal_warmup_steps(refusal_warmup: float, schedule: str, total_steps: int, warmup_ratio: float = 0.0) -> int:
    """How many of a run's steps `reward.refusal_warmup` holds the refusal reward off: that share of the run's
    learning under `train.lr_scheduler_type` and `train.warmup_ratio` (the one length the trainer's reward, the
    demo's replay and its words use)."""
    return warmup_steps(refusal_warmup, total_steps, lr_multipliers(schedule, total_steps, warmup_ratio))


def run_refusal_warmup_steps(cfg: AwarlConfig) -> int:
    """`refusal_warmup_steps` of a run's config: its reward.refusal_warmup (the share for train.scale_rewards)
    under train.lr_scheduler_type, train.max_steps and train.warmup_ratio (the plan, the demo's words and its
    replay)."""
    t = cfg.train
    share = cfg.reward.warmup_share(t.scale_rewards)
    return refusal_warmup_steps(share, t.lr_scheduler_type, t.max_steps, t.warmup_ratio)
