"""Collapse alarms: `awarl train` reads its own log and says when a run is stuck.

RL runs of search agents blow up in a few recognisable ways (Search-R1 and ZeroSearch users report runs that
went wrong near step 160): refusal stuck at 0 or at 1, the protocol forgotten (invalid trajectories), policy
entropy collapsed or exploding, trajectories running into the token budget or shrinking to nothing, and GRPO
groups whose completions all get one reward, from which nothing is learnt. Each is one logged metric crossing
a level (`train.collapse`, awarl/config.py) on every logged step of a window of `window` steps.

Everything here is pure over the trainer's log (`trainer.state.log_history`, a list of dicts with a `step`):
`scan(history, cfg)` gives every alarm a log raises, and `CollapseWatch` does the same incrementally, one log
entry at a time, for the training callback (awarl.training.callbacks.CollapseAlarms), which writes the records
to `alarms.jsonl` in the run folder and may stop the run. A resume rebuilds the watch from the restored log,
so an alarm is neither lost nor raised twice across a resume.
"""

from __future__ import annotations

import math
import os
import statistics
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from awarl.config import CollapseConfig
from awarl.io import DataError, iter_jsonl, write_jsonl

ALARMS_FILE = "alarms.jsonl"


@dataclass(frozen=True)
class Signal:
    """One watched metric: `key` at or above (`above`) / at or below the level `cfg.<level>` (for a
    `relative` signal, that multiple of the metric's median over the run's first `window` steps)."""

    name: str
    key: str
    above: bool
    level: str
    relative: bool
    what: str    # the alarm in words
    means: str   # what it usually means
    tries: str   # what to try
    guard: str | None = None  # refusal: no alarm while the reward's own ρ̂ sits in the same band


SIGNALS: dict[str, Signal] = {s.name: s for s in (
    Signal("refusal_high", "awarl/share_abstain", True, "refusal_high", False, "refusal stuck near 1",
           "the policy abstains on almost everything: refusing pays more than answering for most queries (a "
           "static or BAPO refusal value set too high, an expected rate ρ̂ far above what the policy can reach), "
           "or answering was unlearnt; all-abstain groups then carry no learning signal",
           "a smaller refusal reward (reward.static_value, reward.gamma), compare awarl/rho with awarl/rho_hat, "
           "resume from an earlier checkpoint with a lower train.learning_rate", guard="awarl/rho_hat"),
    Signal("refusal_low", "awarl/share_abstain", False, "refusal_low", False, "refusal stuck near 0",
           "the policy never abstains although the reward expects refusals (ρ̂ above the level): the refusal "
           "reward is too small to compete with a lucky guess, the penalty is pushing it down, or the abstain "
           "phrase is no longer produced; under plain GRPO (reward.strategy none) this is the expected outcome",
           "check awarl/r_ref_mean and awarl/penalty, a larger reward.gamma, check agent.abstention_phrases against "
           "the completions; drop refusal_low from train.collapse.signals for plain GRPO", guard="awarl/rho_hat"),
    Signal("invalid", "awarl/share_invalid", True, "invalid_high", False, "invalid trajectories",
           "the policy lost the protocol (no parsable answer, broken tags, trajectories cut at the budget): often "
           "the first sign of a blow-up, or a cold start that never learnt the format",
           "a lower train.learning_rate or higher train.kl_beta, a warm start, a larger agent.max_trajectory_tokens "
           "if the cut share (rollout/truncated_share) is high too; resume from an earlier checkpoint"),
    Signal("entropy_low", "entropy", False, "entropy_low", False, "policy entropy collapsed",
           "the policy became (nearly) deterministic: its groups repeat one completion, advantages vanish and "
           "exploration stops",
           "a higher generation.temperature, a larger train.epsilon clip range or train.kl_beta, a lower "
           "train.learning_rate"),
    Signal("entropy_spike", "entropy", True, "entropy_spike", True, "policy entropy exploding",
           "the update step is too large for the policy: tokens turn to noise, usually followed by invalid "
           "trajectories and long gibberish completions (the classic late blow-up)",
           "resume from a checkpoint before the rise with a lower train.learning_rate, a tighter "
           "train.max_grad_norm or train.epsilon, or a higher train.kl_beta"),
    Signal("truncated", "rollout/truncated_share", True, "truncated_high", False, "trajectories hit the token budget",
           "completions run on until a token budget cuts them (agent.max_new_tokens_per_turn or "
           "agent.max_trajectory_tokens: repetition, rambling, endless searching); they are counted invalid",
           "check the completions for loops, larger budgets if the answers are just long, a lower "
           "train.learning_rate"),
    Signal("length_collapse", "completions/mean_length", False, "length_collapse", True, "completions collapsed",
           "completions shrank to a fraction of their length at the start: the policy answers or abstains "
           "without searching (lazy answers), or emits nothing",
           "check awarl/share_abstain and rollout/searches_mean, a smaller refusal reward if it abstains at once, "
           "resume from an earlier checkpoint"),
    Signal("reward_flat", "frac_reward_zero_std", True, "zero_std_high", False, "no reward variance within groups",
           "in almost every GRPO group all completions got the same reward, so the advantages are 0 and "
           "nothing is learnt (all wrong on too-hard questions, all abstaining, or a collapsed policy)",
           "easier or better-matched training questions, a larger train.num_generations, check the outcome "
           "shares (awarl/share_*) for the state the groups agree on"),
)}


@dataclass(frozen=True)
class Alarm:
    """A signal that held on every logged step of steps first_step..step."""

    step: int
    signal: str
    key: str
    first_step: int
    mean: float
    low: float
    high: float
    threshold: float
    reference: float | None = None  # relative signals: the metric's median over the run's opening window
    guard: float | None = None      # refusal signals: the window's mean ρ̂

    def message(self) -> str:
        s = SIGNALS[self.signal]
        rel = (f" = {self.threshold / self.reference:g} x its median {self.reference:.4g} over the run's first "
               "steps" if self.reference is not None else "")
        guard = f"; the reward's ρ̂ (awarl/rho_hat) averaged {self.guard:.3f}" if self.guard is not None else ""
        return (f"collapse alarm at step {self.step}: {s.what} ({self.signal}): {self.key} "
                f"{'>=' if s.above else '<='} {self.threshold:.4g}{rel} on every logged step of steps "
                f"{self.first_step}-{self.step} (mean {self.mean:.4g}, range {self.low:.4g}..{self.high:.4g}{guard}). "
                f"Usually: {s.means}. Try: {s.tries}.")

    def record(self, action: str) -> dict[str, Any]:
        """The alarms.jsonl row: the figures, the message, and what the run did (`warn`, `stop`, or `rebuilt`
        from the log of a resumed run that had no alarms file)."""
        return {**asdict(self), "action": action, "message": self.message()}


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


class CollapseWatch:
    """The alarm state of a run, fed its log entries in order (pure: no I/O).

    A signal holds at logged step s when its metric crossed the level on every logged step of (s - window, s],
    with at least window / logging_steps of them (a relative signal: also s >= 2 window, so the window does not
    overlap the opening stretch it is compared with); an alarm is raised at each step where a signal starts to
    hold."""

    def __init__(self, cfg: CollapseConfig, logging_steps: int = 1) -> None:
        self.cfg = cfg
        self.signals = [SIGNALS[n] for n in cfg.signals]
        self.keys = {s.key for s in self.signals} | {s.guard for s in self.signals if s.guard}
        self.min_points = max(1, cfg.window // max(1, logging_steps))
        self.series: dict[str, tuple[list[int], list[float]]] = {k: ([], []) for k in self.keys}
        self.steps: list[int] = []  # logged steps, in order, each once
        self.done = 0               # steps up to this one are judged
        self.holding: dict[str, bool] = {s.name: False for s in self.signals}

    def feed(self, entries: Iterable[dict[str, Any]]) -> None:
        """Add log entries (a step's metrics may come in several entries; the first value of a key counts)."""
        for e in entries:
            step = e.get("step")
            if not isinstance(step, int) or isinstance(step, bool) or step <= self.done:
                continue
            if not self.steps or step > self.steps[-1]:
                self.steps.append(step)
            for k in self.keys:
                v = _finite(e.get(k))
                xs, ys = self.series[k]
                if v is not None and (not xs or step > xs[-1]):
                    xs.append(step)
                    ys.append(v)

    def advance(self, upto: int) -> list[Alarm]:
        """Judge every logged step after the last judged one, up to `upto`, in order; the alarms raised."""
        out = []
        for step in self.steps[bisect_right(self.steps, self.done):bisect_right(self.steps, upto)]:
            for s in self.signals:
                alarm = self.check(s, step)
                if alarm is not None and not self.holding[s.name]:
                    out.append(alarm)
                self.holding[s.name] = alarm is not None
            self.done = step
        return out

    def _window(self, key: str, lo: int, hi: int) -> list[float]:
        xs, ys = self.series[key]
        return ys[bisect_right(xs, lo):bisect_right(xs, hi)]

    def check(self, s: Signal, end: int) -> Alarm | None:
        """The alarm of signal `s` if it holds at logged step `end`, else None."""
        w = self.cfg.window
        if end < (2 * w if s.relative else w):
            return None
        vals = self._window(s.key, end - w, end)
        if len(vals) < self.min_points:
            return None
        level = float(getattr(self.cfg, s.level))
        reference = None
        if s.relative:
            opening = self._window(s.key, 0, w)
            if len(opening) < self.min_points:
                return None
            reference = statistics.median(opening)
            if reference <= 0:
                return None
            level *= reference
        if not all((v >= level) if s.above else (v <= level) for v in vals):
            return None
        guard = None
        if s.guard is not None and (g := self._window(s.guard, end - w, end)):
            guard = sum(g) / len(g)
            if (guard >= level) if s.above else (guard <= level):  # the reward itself expects this rate
                return None
        xs = self.series[s.key][0]
        first = xs[bisect_right(xs, end - w)]
        return Alarm(step=end, signal=s.name, key=s.key, first_step=first, mean=sum(vals) / len(vals),
                     low=min(vals), high=max(vals), threshold=level, reference=reference, guard=guard)


def scan(history: Iterable[dict[str, Any]], cfg: CollapseConfig, logging_steps: int = 1) -> list[Alarm]:
    """Every alarm a whole log raises, in order of step."""
    watch = CollapseWatch(cfg, logging_steps)
    entries = list(history)
    watch.feed(entries)
    return watch.advance(max((e["step"] for e in entries if isinstance(e.get("step"), int)), default=0))


# ------------------------------------------------------------------------------------------ the run's file
def read_alarms(out_dir: str | os.PathLike) -> list[dict[str, Any]] | None:
    """The records of `out_dir/alarms.jsonl`, or None when there is no such file or it cannot be read."""
    path = Path(out_dir) / ALARMS_FILE
    if not path.is_file():
        return None
    try:
        return [obj for _, obj in iter_jsonl(path)]
    except (DataError, OSError):
        return None


def write_alarms(out_dir: str | os.PathLike, records: list[dict[str, Any]]) -> Path:
    """Write the run's alarm records atomically (a handful of rows: rewritten whole)."""
    path = Path(out_dir) / ALARMS_FILE
    write_jsonl(path, records)
    return path


def summary_lines(records: list[dict[str, Any]]) -> list[str]:
    """One line per alarm for the end-of-run summaries: step, signal, figure, action."""
    return [f"step {r.get('step')}: {SIGNALS[r['signal']].what if r.get('signal') in SIGNALS else r.get('signal')} "
            f"({r.get('key')} mean {r.get('mean', float('nan')):.4g} over steps {r.get('first_step')}-{r.get('step')}"
            f", level {r.get('threshold', float('nan')):.4g})" + (", run stopped" if r.get("action") == "stop" else "")
            for r in records]


def report_lines(records: list[dict[str, Any]]) -> list[str]:
    """The alarms as a Markdown paragraph (or list) for a run report."""
    head = f"Collapse alarms (`{ALARMS_FILE}`, docs/training.md \"Collapse alarms\"): "
    if not records:
        return [head + "none.", ""]
    return [head + f"{len(records)}.", "", *(f"- {line}" for line in summary_lines(records)), ""]
