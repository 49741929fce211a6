"""Config numbers are finite and typed strictly: NaN/Inf and YAML booleans read as numbers are errors that
name the key (reward.r_invalid=.nan used to train with exit 0 and grad norm 0 at every step)."""

from __future__ import annotations

import pytest

from awarl.config import ConfigError, load_config


@pytest.mark.parametrize("override", [
    "reward.r_invalid=.nan", "reward.penalty_max=.inf", "train.learning_rate=.inf", "critic.timeout_s=.inf",
    "retrieval.timeout_s=.inf", "reward.r_correct=-.inf", "reward.gamma=.nan",
    "reward.r_clip=[-1, .inf]", "reward.penalty_steps=[[0.05, 0.0], [.nan, 0.2]]",
])
def test_nan_and_inf_are_rejected_naming_the_key(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key}(\.\d+)*: Input should be a finite number"):
        load_config(None, [override])


@pytest.mark.parametrize("override", ["train.max_steps=true", "run.seed=false", "agent.max_turns=yes",
                                      "reward.r_wrong=true", "eval.limit=true",
                                      "reward.penalty_steps=[[0.05, true]]"])
def test_a_boolean_is_never_read_as_a_number(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key}: .*got a boolean"):
        load_config(None, [override])


def test_booleans_where_booleans_belong_and_numbers_where_numbers_belong():
    cfg = load_config(None, ["train.bf16=false", "train.max_steps=3", "reward.r_wrong=0", "eval.limit=null",
                             "reward.r_clip=[-1, 0.5]"])
    assert cfg.train.bf16 is False and cfg.train.max_steps == 3 and cfg.reward.r_clip == (-1.0, 0.5)


def test_a_yaml_file_with_nan_names_file_and_key(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("reward:\n  r_invalid: .nan\ntrain:\n  max_steps: yes\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and "reward.r_invalid" in msg and "train.max_steps" in msg


def test_the_cli_refuses_a_nan_reward_before_training(capsys):
    from awarl.cli import main
    from awarl.io import repo_root

    demo = str(repo_root() / "configs" / "demo_cpu.yaml")
    assert main(["train", "--config", demo, "--dry-run", "reward.r_invalid=.nan"]) == 2
    assert "reward.r_invalid" in capsys.readouterr().err


def test_the_batch_size_error_names_the_keys_not_the_whole_config():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["train.per_device_train_batch_size=3", "train.num_generations=2"])
    msg = str(e.value)
    assert "train.per_device_train_batch_size" in msg and "train.num_generations" in msg
    assert "'run':" not in msg and len(msg) < 600  # the resolved config is not dumped into the error


def test_sweep_files_are_as_strict(tmp_path):
    from awarl.stages.sweep import load_sweep

    p = tmp_path / "s.yaml"
    p.write_text("sweep:\n  base: b.yaml\n  grid: {reward.gamma: [0.5]}\n  share_estimate: 3\n")
    with pytest.raises(ConfigError, match="share_estimate"):
        load_sweep(p)


def test_a_sweep_file_given_as_a_run_config_and_back_says_which_command_takes_it(tmp_path):
    """`awarl train --config configs/sweep_gamma.yaml` (or `awarl sweep --config configs/base.yaml`) fails on
    unknown keys; the error also says what the file is and which command runs it."""
    from awarl.io import repo_root
    from awarl.stages.sweep import load_sweep

    configs = repo_root() / "configs"
    with pytest.raises(ConfigError, match=r"sweep: unknown key[^\n]*\n  \(a sweep file: run it with `awarl sweep"):
        load_config(configs / "sweep_gamma.yaml")
    with pytest.raises(ConfigError, match=r"\(a run config: train it with `awarl train --config FILE`"):
        load_sweep(configs / "base.yaml")
    p = tmp_path / "s.yaml"
    p.write_text("sweep:\n  base: b.yaml\n  grid: {reward.gamma: [0.5]}\n  share_estimate: 3\n")
    with pytest.raises(ConfigError) as e:
        load_sweep(p)
    assert "a run config" not in str(e.value)  # a sweep file with a bad value gets no such hint
