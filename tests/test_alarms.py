"""Collapse alarms as pure functions over a trainer's log (awarl/training/alarms.py): each signal fires when its
metric is stuck for a whole window, at the step the window completes, and not on healthy or noisy curves, on a
window one step short, or while the reward itself expects the refusal rate; the incremental watch of the
training callback and a resume rebuilt from the log agree with a scan of the whole log. The end-to-end runs
(a run made to collapse, stopped with a checkpoint, resumed) are in tests/test_train.py."""

from __future__ import annotations

import math
import random

import pytest

from awarl.config import CollapseConfig, ConfigError, config_from_dict
from awarl.training.alarms import SIGNALS, CollapseWatch, report_lines, scan, summary_lines

HEALTHY = {"awarl/share_abstain": 0.3, "awarl/rho_hat": 0.3, "awarl/share_invalid": 0.05, "entropy": 0.5,
           "rollout/truncated_share": 0.02, "completions/mean_length": 300.0, "frac_reward_zero_std": 0.3}
# (signal, key, stuck value): each well past its default level (for the relative ones, against HEALTHY's value)
STUCK = [("refusal_high", "awarl/share_abstain", 1.0), ("refusal_low", "awarl/share_abstain", 0.0),
         ("invalid", "awarl/share_invalid", 0.8), ("entropy_low", "entropy", 0.01),
         ("entropy_spike", "entropy", 2.0), ("truncated", "rollout/truncated_share", 0.9),
         ("length_collapse", "completions/mean_length", 50.0), ("reward_flat", "frac_reward_zero_std", 1.0)]
W = 5


def cfg(**kw) -> CollapseConfig:
    return CollapseConfig(window=W, **kw)


def history(n: int, changes: dict[int, dict[str, float | None]] | None = None, every: int = 1) -> list[dict]:
    """A log of steps every..n (every `every` steps, as train.logging_steps writes it): HEALTHY values, with
    `changes[step]` applied from that step on (None: the key is missing from then on)."""
    out, cur = [], dict(HEALTHY)
    for step in range(1, n + 1):
        cur.update((changes or {}).get(step, {}))
        if step % every == 0:
            out.append({"step": step, "loss": 0.1, **{k: v for k, v in cur.items() if v is not None}})
    return out


def test_every_signal_is_documented_in_the_config():
    assert set(SIGNALS) == set(CollapseConfig().signals) and {s for s, _, _ in STUCK} == set(SIGNALS)


@pytest.mark.parametrize(("signal", "key", "value"), STUCK, ids=[s for s, _, _ in STUCK])
def test_each_signal_fires_once_at_the_step_its_window_completes(signal, key, value):
    start = 2 * W + 1  # after the opening stretch the relative signals compare against
    alarms = scan(history(4 * W, {start: {key: value}}), cfg())
    assert [(a.signal, a.step, a.first_step) for a in alarms] == [(signal, start + W - 1, start)]
    a = alarms[0]
    assert a.key == key and a.mean == pytest.approx(value) and a.low == a.high == pytest.approx(value)
    if SIGNALS[signal].relative:  # the level is the factor times the opening median
        factor = getattr(CollapseConfig(), SIGNALS[signal].level)
        assert a.reference == pytest.approx(HEALTHY[key]) and a.threshold == pytest.approx(factor * HEALTHY[key])
    msg = a.message()
    assert f"step {a.step}" in msg and signal in msg and key in msg and f"{value:.4g}" in msg and "Try:" in msg


@pytest.mark.parametrize(("signal", "key", "value"), STUCK, ids=[s for s, _, _ in STUCK])
def test_a_window_one_step_short_raises_nothing(signal, key, value):
    start = 2 * W + 1
    # stuck for W - 1 steps, then healthy for one, then stuck for W - 1 again
    log = history(5 * W, {start: {key: value}, start + W - 1: {key: HEALTHY[key]}, start + W: {key: value},
                          start + 2 * W - 1: {key: HEALTHY[key]}})
    assert scan(log, cfg()) == []


@pytest.mark.parametrize(("signal", "key", "value"), STUCK, ids=[s for s, _, _ in STUCK])
def test_a_signal_not_watched_never_fires(signal, key, value):
    others = [s for s in SIGNALS if s != signal]
    assert scan(history(4 * W, {2 * W + 1: {key: value}}), cfg(signals=others)) == []
    assert scan(history(4 * W, {2 * W + 1: {key: value}}), cfg(signals=[])) == []


def test_noisy_healthy_curves_raise_nothing():
    """Long runs whose metrics wander as real ones do (a tenth of the steps at a bad value) raise no alarm."""
    rng = random.Random(0)
    log = []
    for step in range(1, 401):
        e = {"step": step}
        for key, base in HEALTHY.items():
            e[key] = max(0.0, base * rng.uniform(0.6, 1.4))
        if rng.random() < 0.1:  # an isolated bad step of a random signal
            _, key, value = rng.choice(STUCK)
            e[key] = value
        log.append(e)
    assert scan(log, CollapseConfig(window=20)) == []
    assert scan(log, cfg()) == []  # even at a short window


def test_an_alarm_is_raised_again_only_after_its_signal_recovers():
    log = history(8 * W, {W + 1: {"awarl/share_invalid": 0.9}, 3 * W: {"awarl/share_invalid": 0.0},
                          3 * W + 1: {"awarl/share_invalid": 0.9}})
    assert [a.step for a in scan(log, cfg())] == [2 * W, 4 * W]  # held from W+1, broken at 3W, held again


def test_refusal_alarms_hold_back_while_the_reward_expects_that_rate():
    """All-abstain while ρ̂ is as high is what the reward asks for; no refusal while ρ̂ is ~0 likewise."""
    both_high = history(3 * W, {1: {"awarl/share_abstain": 1.0, "awarl/rho_hat": 0.97}})
    both_low = history(3 * W, {1: {"awarl/share_abstain": 0.0, "awarl/rho_hat": 0.005}})
    assert scan(both_high, cfg()) == [] and scan(both_low, cfg()) == []
    apart = scan(history(3 * W, {1: {"awarl/share_abstain": 1.0, "awarl/rho_hat": 0.4}}), cfg())
    assert [(a.signal, a.step, a.guard) for a in apart] == [("refusal_high", W, pytest.approx(0.4))]
    assert "ρ̂ (awarl/rho_hat) averaged 0.400" in apart[0].message()


def test_relative_signals_compare_with_the_runs_opening_stretch():
    # entropy 0.5 at the start: 2.8x is under the default 3x, 3.2x is over
    assert scan(history(5 * W, {2 * W + 1: {"entropy": 1.4}}), cfg()) == []
    (a,) = scan(history(5 * W, {2 * W + 1: {"entropy": 1.6}}), cfg())
    assert (a.signal, a.step, a.reference) == ("entropy_spike", 3 * W, pytest.approx(0.5))
    # a change inside the opening stretch moves the reference instead of firing early
    assert scan(history(2 * W, {1: {"entropy": 2.0}}), cfg()) == []
    # one late in it leaves the reference, but the window judged never overlaps the stretch: from step 2W on
    (a,) = scan(history(3 * W, {W - 1: {"entropy": 2.0}}), cfg())
    assert (a.step, a.first_step, a.reference) == (2 * W, W + 1, pytest.approx(0.5))
    # and a run that starts at length 0 has no reference to collapse from
    assert scan(history(5 * W, {1: {"completions/mean_length": 0.0}}), cfg()) == []


def test_logging_steps_count_the_window_in_steps_not_entries():
    """train.logging_steps 5: a 20-step window is 4 log entries."""
    c = CollapseConfig(window=20)
    log = history(100, {41: {"awarl/share_invalid": 0.9}}, every=5)
    (a,) = scan(log, c, logging_steps=5)
    assert (a.step, a.first_step) == (60, 45)  # entries 45, 50, 55, 60 are the first window all stuck
    # read as if every step were logged, 4 entries fall short of a 20-step window
    assert scan(log, c, logging_steps=1) == []


def test_missing_or_non_finite_values_do_not_count_as_stuck():
    log = history(4 * W, {1: {"awarl/share_invalid": 0.9}})
    log[W - 1]["awarl/share_invalid"] = None      # TRL logs None for a metric without a valid value
    log[2 * W - 1]["awarl/share_invalid"] = math.nan
    log[3 * W - 1].pop("awarl/share_invalid")
    # every window of W steps before step 3W + 1 spans a gap, so holds one stuck value too few
    assert [a.step for a in scan(log, cfg())] == [4 * W]


def test_a_steps_metrics_may_come_in_several_entries():
    """TRL's metrics of a step go into the first log call of that step (a periodic evaluation's), the loss into
    the next: merged by step, the first value of a key counting."""
    log = []
    for e in history(2 * W, {1: {"awarl/share_invalid": 0.9}}):
        step = e.pop("step")
        log += [{"step": step, **{k: v for k, v in e.items() if k != "loss"}, "eval/macro_ra_f1": 0.1},
                {"step": step, "loss": e["loss"], "awarl/share_invalid": 0.0}]
    assert [a.step for a in scan(log, cfg())] == [W]


def test_incremental_watch_and_a_resume_rebuilt_from_the_log_agree_with_a_scan():
    log = history(12 * W, {W + 1: {"awarl/share_abstain": 1.0}, 3 * W: {"awarl/share_abstain": 0.3},
                           4 * W: {"entropy": 0.01}, 6 * W: {"awarl/share_invalid": 0.9, "entropy": 0.5},
                           8 * W: {"awarl/share_invalid": 0.0}, 9 * W: {"awarl/share_invalid": 0.9}})
    whole = scan(log, cfg())
    assert [(a.signal, a.step) for a in whole] == [("refusal_high", 2 * W), ("entropy_low", 5 * W - 1),
                                                   ("invalid", 7 * W - 1), ("invalid", 10 * W - 1)]
    live = CollapseWatch(cfg())
    got = []
    for e in log:  # the callback: one entry, then judge up to its step
        live.feed([e])
        got += live.advance(e["step"])
    assert got == whole
    for cut in range(1, len(log)):  # a resume at every step: the restored log judged silently, then on
        w = CollapseWatch(cfg())
        w.feed(log[:cut])
        w.advance(log[cut - 1]["step"])
        w.feed(log[cut:])
        assert w.advance(log[-1]["step"]) == [a for a in whole if a.step > log[cut - 1]["step"]], cut


def test_records_and_summaries_name_step_signal_figure_and_action():
    (a,) = scan(history(2 * W, {1: {"frac_reward_zero_std": 1.0}}), cfg())
    rec = a.record("stop")
    assert rec["step"] == W and rec["signal"] == "reward_flat" and rec["action"] == "stop"
    assert rec["message"] == a.message() and rec["mean"] == 1.0 and rec["threshold"] == 0.9
    (line,) = summary_lines([rec])
    assert line.startswith(f"step {W}: no reward variance within groups (frac_reward_zero_std mean 1 over steps "
                           f"1-{W}, level 0.9)") and line.endswith("run stopped")
    assert report_lines([]) == ['Collapse alarms (`alarms.jsonl`, docs/training.md "Collapse alarms"): none.', ""]
    assert report_lines([rec])[2] == f"- {line}"


@pytest.mark.parametrize(("collapse", "match"), [
    ({"refusal_low": 0.5, "refusal_high": 0.5}, "refusal_low .* must be below refusal_high"),
    ({"signals": ["entropy_low", "entropy_low"]}, "lists a signal twice"),
    ({"signals": ["refusal_hi"]}, "train.collapse.signals"),
    ({"window": 0}, "train.collapse.window"),
    ({"entropy_spike": 1.0}, "train.collapse.entropy_spike"),
    ({"windw": 3}, "train.collapse.windw"),
])
def test_bad_alarm_settings_are_refused_naming_the_key(collapse, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict({"train": {"collapse": collapse}})
