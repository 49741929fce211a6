"""Config system: YAML + extends, dotted overrides, strict validation with key paths, resolved config."""

from __future__ import annotations

import pytest
import yaml

from awarl.config import AwarlConfig, ConfigError, load_config, parse_override, save_resolved


def write(path, text):
    path.write_text(text)
    return path


def test_defaults_match_spec():
    cfg = AwarlConfig()
    assert cfg.reward.p_min == 0.1 and cfg.reward.beta == 0.9
    assert cfg.reward.penalty_steps == [(0.05, 0.0), (0.15, 0.2), (0.30, 0.5)]
    assert cfg.agent.abstention_phrases == ["not enough information"]
    assert cfg.retrieval.topk == 3 and cfg.agent.max_turns == 4 and cfg.estimate.k == 8


def test_one_set_of_reward_defaults_and_the_paper_reading_as_a_config():
    """What RewardConfig defaults to is what configs/base.yaml runs (base.yaml spells the recipe out, it does
    not change it); configs/paper_spec.yaml is the SPEC's literal reading."""
    from awarl.config import RewardConfig
    from awarl.io import repo_root

    listed = yaml.safe_load((repo_root() / "configs" / "base.yaml").read_text())["reward"]
    defaults = RewardConfig().model_dump(mode="json")
    assert listed == {k: defaults[k] for k in listed}
    assert load_config(repo_root() / "configs" / "base.yaml").reward == RewardConfig()
    spec = load_config(repo_root() / "configs" / "paper_spec.yaml").reward
    assert (spec.expected_rate, spec.gamma, spec.r_ref_margin, spec.r_ref_floor_margin, spec.ema_start,
            spec.p_definition, spec.p_online) == ("threshold", 0.5, None, None, "zero", "share_of_k", "off")


def test_extends_merges_deeply_and_child_wins(tmp_path):
    write(tmp_path / "base.yaml", "reward:\n  gamma: 0.25\n  beta: 0.8\nrun:\n  name: base\n")
    child = write(tmp_path / "child.yaml", "extends: base.yaml\nreward:\n  gamma: 0.75\n")
    cfg = load_config(child)
    assert cfg.reward.gamma == 0.75  # child overrides
    assert cfg.reward.beta == 0.8  # inherited sibling key survives the merge
    assert cfg.run.name == "base"


def test_a_bad_key_in_an_extends_parent_names_the_parent_file(tmp_path):
    """The error named only the file given on the command line, so a typo in a parent was searched for in the
    child, where it is not."""
    parent = write(tmp_path / "base.yaml", "reward:\n  gamam: 0.25\n  beta: 0.8\ntrain:\n  max_steps: -1\n")
    child = write(tmp_path / "child.yaml", "extends: base.yaml\nreward:\n  p_min: 2\n")
    with pytest.raises(ConfigError) as e:
        load_config(child)
    lines = str(e.value).splitlines()
    assert lines[0] == f"{child}: invalid config"
    assert any(ln.strip().startswith(f"reward.gamam (set in {parent.resolve()}): unknown key") for ln in lines)
    assert any(ln.strip().startswith(f"train.max_steps (set in {parent.resolve()}):") for ln in lines)
    assert any(ln.strip().startswith("reward.p_min: ") for ln in lines)  # the child's own key: no note
    with pytest.raises(ConfigError) as e:  # overridden on the command line: the override's, not the parent's
        load_config(child, ["train.max_steps=-2"])
    assert any(ln.strip().startswith("train.max_steps: ") for ln in str(e.value).splitlines())


def test_multiple_parents_and_cycle(tmp_path):
    write(tmp_path / "a.yaml", "reward:\n  gamma: 0.3\n")
    write(tmp_path / "b.yaml", "reward:\n  p_min: 0.2\n")
    cfg = load_config(write(tmp_path / "c.yaml", "extends: [a.yaml, b.yaml]\n"))
    assert (cfg.reward.gamma, cfg.reward.p_min) == (0.3, 0.2)
    write(tmp_path / "x.yaml", "extends: y.yaml\n")
    write(tmp_path / "y.yaml", "extends: x.yaml\n")
    with pytest.raises(ConfigError, match="circular"):
        load_config(tmp_path / "x.yaml")


def test_overrides_are_typed_and_applied_last(tmp_path):
    f = write(tmp_path / "c.yaml", "reward:\n  gamma: 0.25\n")
    cfg = load_config(f, ["reward.gamma=1.0", "eval.datasets=[hotpotqa]", "train.lora.enabled=true"])
    assert cfg.reward.gamma == 1.0
    assert cfg.eval.datasets == ["hotpotqa"]
    assert cfg.train.lora.enabled is True
    assert parse_override("estimate.out=null") == (["estimate", "out"], None)


def test_unknown_key_names_path_and_allowed_keys(tmp_path):
    f = write(tmp_path / "bad.yaml", "reward:\n  gama: 0.5\n")
    with pytest.raises(ConfigError) as e:
        load_config(f)
    msg = str(e.value)
    assert str(f) in msg and "reward.gama" in msg and "unknown key" in msg and "gamma" in msg


def test_mistyped_and_out_of_range_values(tmp_path):
    with pytest.raises(ConfigError, match=r"reward\.gamma"):
        load_config(None, ["reward.gamma=1.5"])  # γ must be in (0, 1]
    with pytest.raises(ConfigError, match=r"agent\.max_turns"):
        load_config(None, ["agent.max_turns=many"])
    with pytest.raises(ConfigError, match="strictly increasing"):
        load_config(None, ["reward.penalty_steps=[[0.3, 0.5], [0.1, 0.2]]"])
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(None, ["reward.gamma"])


def test_group_size_must_divide_batch():
    with pytest.raises(ConfigError, match="num_generations"):
        load_config(None, ["train.num_generations=3", "train.per_device_train_batch_size=8"])


def test_bad_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(write(tmp_path / "b.yaml", "reward: [unclosed\n"))
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(write(tmp_path / "l.yaml", "- 1\n- 2\n"))


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(None, ["reward.gamma=0.25", "run.name=x"])
    path = save_resolved(cfg, tmp_path / "run")
    data = yaml.safe_load(path.read_text())
    assert data["reward"]["gamma"] == 0.25 and data["critic"]["judge"] == "gold"
    assert AwarlConfig.model_validate(data) == cfg


def test_unknown_key_inside_a_list_of_sections_lists_its_keys():
    with pytest.raises(ConfigError) as e:
        load_config(None, ['data.train=[{"pth": "x.jsonl"}]'])
    msg = str(e.value)
    assert "data.train.0.pth: unknown key" in msg and "path" in msg and "format" in msg


def test_config_changes_names_every_dotted_key_that_differs():
    from awarl.config import config_changes

    old = load_config(None).model_dump(mode="json")
    new = load_config(None, ["reward.gamma=0.25", "train.max_steps=7"]).model_dump(mode="json")
    assert config_changes(old, old) == []
    assert config_changes(old, new) == [f"reward.gamma: {old['reward']['gamma']!r} -> 0.25",
                                        f"train.max_steps: {old['train']['max_steps']!r} -> 7"]
    # a key on one side only (a config written by another awarl version) is a change too
    assert config_changes({"a": {"b": 1}}, {"a": {"b": 1, "c": [2]}}) == ["a.c: None -> [2]"]


def test_a_choice_named_off_is_read_from_unquoted_yaml_and_a_bad_choice_is_named(tmp_path):
    """YAML reads an unquoted `off` as false: `reward.p_online=off` (as the docs write it) was refused with
    "expected numbers or numbers, got a boolean"."""
    from awarl.config import ConfigError, load_config

    assert load_config(None, ["reward.p_online=off"]).reward.p_online == "off"
    f = tmp_path / "c.yaml"
    f.write_text("reward:\n  p_online: off\n")
    assert load_config(str(f)).reward.p_online == "off"
    with pytest.raises(ConfigError, match=r"reward\.p_online: .*expected one of 'off', 'ema', 'group', got a boolean"):
        load_config(None, ["reward.p_online=yes"])


@pytest.mark.parametrize("over", [["reward.r_correct=0", "reward.r_ref_margin=null", "reward.r_ref_floor_margin=null"],
                                  ["reward.r_correct=0.5", "reward.r_wrong=0.5", "reward.r_ref_margin=null",
                                   "reward.r_ref_floor_margin=null"]])
def test_a_correct_answer_must_pay_more_than_a_wrong_one(over):
    """With the refusal cap and floor off, r_correct <= r_wrong passed validation (and a dry run); the run then
    raised at its first reward step, after the models had loaded and rollouts were generated."""
    with pytest.raises(ConfigError, match=r"reward\.r_correct \([\d.]+\) must exceed reward\.r_wrong"):
        load_config(None, over)
