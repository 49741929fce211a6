"""awarl.lr_schedule: the schedules' multipliers are transformers' own, and `reward.refusal_warmup` is a
share of the run's learning under them (round 8: a 90%-of-steps warm-up under linear decay left the refusal phase
0.5% of the learning)."""

from __future__ import annotations

import math

import pytest

from awarl.config import RewardConfig, config_from_dict
from awarl.lr_schedule import (
    learning_share_step,
    lr_multiplier,
    lr_multipliers,
    refusal_warmup_steps,
    warmup_step_count,
)
from awarl.rewards import abstention as A
from awarl.rewards.trl_reward import AwaRLReward


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("total,ratio", [(10, 0.0), (37, 0.1), (200, 0.25), (5, 1.0)])
def test_multipliers_are_what_transformers_schedulers_set(schedule, total, ratio):
    """A real torch optimizer under transformers' scheduler, stepped through the run, has at every step the peak
    learning rate times our multiplier (`constant` is transformers' constant_with_warmup: the warm-up counts)."""
    import torch
    from transformers import get_scheduler

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    name = "constant_with_warmup" if schedule == "constant" else schedule
    sched = get_scheduler(name, opt, num_warmup_steps=warmup_step_count(ratio, total), num_training_steps=total)
    ours = lr_multipliers(schedule, total, ratio) or [1.0] * total
    for t in range(total):
        assert opt.param_groups[0]["lr"] == pytest.approx(0.5 * ours[t], abs=1e-12), (t, name)
        assert lr_multiplier(schedule, t, total, warmup_step_count(ratio, total)) == ours[t]
        opt.step()
        sched.step()


def test_a_constant_schedule_keeps_the_share_of_the_steps_and_a_decaying_one_ends_earlier():
    for total in range(1, 400):
        for share in (0.0, 0.1, 0.25, 0.33, 0.45, 0.5, 0.6, 0.75, 0.9):
            steps = round(share * total)
            assert A.warmup_steps(share, total) == steps == refusal_warmup_steps(share, "constant", total)
            assert learning_share_step(share, [1.0] * total) == steps
    # linear decay from the first step: the learning before step t is 1 - (1 - t/T)^2 of the run's
    assert refusal_warmup_steps(0.9, "linear", 1000) == round(1000 * (1 - math.sqrt(0.1))) == 684
    assert refusal_warmup_steps(0.99, "linear", 1000) == 900          # round 7's 90% of the steps
    cosine = refusal_warmup_steps(0.9, "cosine", 1000)
    assert 500 < cosine < 684 + 100 and cosine != 900
    # a learning-rate warm-up delays it: its first steps learn little
    assert refusal_warmup_steps(0.5, "constant", 100, 0.2) > refusal_warmup_steps(0.5, "constant", 100)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_the_warm_up_ends_where_the_share_of_the_learning_is_done(schedule):
    m = lr_multipliers(schedule, 300, 0.05)
    assert m is not None
    total = math.fsum(m)
    previous = 0
    for share in [k / 20 for k in range(20)]:
        t = learning_share_step(share, m)
        assert t >= previous                                        # monotone in the share
        previous = t
        if share > 0:   # within one step of the crossing: the learning before it straddles the target
            assert math.fsum(m[:max(t - 1, 0)]) <= share * total <= math.fsum(m[:t + 1]) + 1e-9


def test_bad_schedules_and_lengths_are_clear_errors():
    with pytest.raises(ValueError, match="unknown learning-rate schedule 'step'"):
        lr_multiplier("step", 0, 10)
    with pytest.raises(ValueError, match="3 learning-rate multipliers for a run of 10 steps"):
        A.warmup_steps(0.5, 10, [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="2 learning-rate multipliers for a run of total_steps=10"):
        AwaRLReward(RewardConfig(), total_steps=10, lr_multipliers=[1.0, 1.0])


def test_the_training_reward_holds_refusal_off_for_the_share_of_the_learning():
    """Under linear decay over 10 steps, 0.5 of the learning is done after 3 steps (10 - sqrt(50) = 2.93): the
    reward pays an abstention r_wrong for 3 steps, not 5."""
    kw = dict(prompts=["p"] * 2, completions=["c"] * 2, qid=["q"] * 2, p_i=[0.0] * 2, p_n=[8] * 2,
              outcome=["abstain", "wrong"])
    rc = RewardConfig(gamma=0.25, abstain_line="courage", refusal_warmup=0.5)
    reward = AwaRLReward(rc, total_steps=10, lr_multipliers=lr_multipliers("linear", 10))
    paid = [reward(**kw)[0] for _ in range(5)]
    assert paid[:3] == [rc.r_wrong] * 3 and all(p > rc.r_wrong for p in paid[3:])
    steps_share = AwaRLReward(rc, total_steps=10)  # no schedule given: constant, half the steps
    assert [steps_share(**kw)[0] for _ in range(6)][:5] == [rc.r_wrong] * 5


def test_awarl_train_builds_its_reward_and_trls_scheduler_from_train_lr_scheduler_type(tmp_path):
    from awarl.stages.train import build_reward
    from awarl.training.trainer import grpo_config

    assert config_from_dict({}).train.lr_scheduler_type == "constant"
    for value, trl_name in (("constant", "constant_with_warmup"), ("linear", "linear"), ("cosine", "cosine")):
        cfg = config_from_dict({"run": {"out_dir": str(tmp_path)}, "train": {
            "lr_scheduler_type": value, "max_steps": 100, "report_to": ["none"]}})
        assert str(grpo_config(cfg, cpu=True).lr_scheduler_type.value) == trl_name
        reward = build_reward(cfg, [])
        assert reward._warm_steps({}) == refusal_warmup_steps(cfg.reward.warmup_share("group"), value, 100)
    assert build_reward(config_from_dict({"train": {"lr_scheduler_type": "linear", "max_steps": 100}}),
                        [])._warm_steps({}) in (68, 69)  # 0.9 of a linear run's learning: 100 (1 - √0.1) = 68.4


def test_a_resume_under_another_schedule_is_refused_and_a_run_from_before_the_key_trained_linear(tmp_path):
    """The schedule sets the step sizes and where the refusal warm-up ends: changing it midway is refused, before
    anything loads; a run whose resolved config has no lr_scheduler_type ran TRL's default, linear."""
    import yaml

    from awarl.config import ConfigError, save_resolved
    from awarl.stages.train_run import check_start

    def cfg(schedule: str):
        return config_from_dict({"run": {"out_dir": str(tmp_path)}, "train": {"lr_scheduler_type": schedule}})

    save_resolved(cfg("constant"), tmp_path)
    check_start(cfg("constant"), "latest")
    with pytest.raises(ConfigError, match=r"train.lr_scheduler_type: the run in .* trained with 'constant' as its "
                                          r"learning-rate schedule .* resuming it under 'linear' would change the "
                                          r"step sizes and where reward.refusal_warmup ends"):
        check_start(cfg("linear"), "latest")
    resolved = tmp_path / "resolved_config.yaml"
    old = yaml.safe_load(resolved.read_text())
    del old["train"]["lr_scheduler_type"]
    resolved.write_text(yaml.safe_dump(old))
    check_start(cfg("linear"), "latest")
    with pytest.raises(ConfigError, match="trained with 'linear'"):
        check_start(cfg("constant"), "latest")
