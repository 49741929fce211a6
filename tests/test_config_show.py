"""`awarl config show`: the resolved config with each key's origin (the --config file and line, an `extends:`
parent, a command-line override, the default), as text and as JSON, on a real chain of files that ends in the
shipped configs/base.yaml; bad keys and overrides are the one-line errors every command gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from awarl.config import AwarlConfig, ConfigError, load_config
from awarl.config_show import VALUE_COLUMN_MAX, resolve_with_origins

BASE = Path(__file__).resolve().parent.parent / "configs" / "base.yaml"


def _line_of(path: Path, pattern: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if re.match(pattern, line))


@pytest.fixture
def chain(tmp_path):
    """child.yaml extends mid.yaml, which extends the shipped configs/base.yaml."""
    mid = tmp_path / "mid.yaml"
    mid.write_text(f"extends: {BASE}\nrun:\n  name: mid\ntrain:\n  max_steps: 7\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: mid.yaml\n# the child's own name\nrun:\n  name: child\n")
    return child, mid


def _by_key(path, overrides=()):
    return {s.key: s for s in resolve_with_origins(path, list(overrides))}


def test_each_key_names_the_file_and_line_the_parent_the_override_or_the_default(chain):
    child, mid = chain
    got = _by_key(child, ["reward.gamma=0.3"])
    # the child's own value, over its parent's
    assert (got["run.name"].value, got["run.name"].origin) == ("child", "file")
    assert (got["run.name"].file, got["run.name"].line) == (child.resolve(), 4)
    # a value of the parent it extends
    assert (got["train.max_steps"].value, got["train.max_steps"].origin) == (7, "extends")
    assert (got["train.max_steps"].file, got["train.max_steps"].line) == (mid.resolve(), 5)
    # a value of base.yaml, two `extends:` up
    p_min = got["reward.p_min"]
    assert (p_min.origin, p_min.file, p_min.line) == ("extends", BASE, _line_of(BASE, r"  p_min:"))
    assert p_min.value == load_config(BASE).reward.p_min
    # a command-line override, over base.yaml's gamma
    assert (got["reward.gamma"].value, got["reward.gamma"].origin) == (0.3, "override")
    assert got["reward.gamma"].override == "reward.gamma=0.3" and got["reward.gamma"].file is None
    # set nowhere: the default
    timeout = got["retrieval.timeout_s"]
    assert (timeout.origin, timeout.file, timeout.value) == ("default", None, AwarlConfig().retrieval.timeout_s)


def test_every_key_of_the_resolved_config_is_shown_with_its_resolved_value(chain):
    child, _ = chain
    overrides = ["train.max_steps=9", "agent.abstention_phrases=[no idea]"]
    cfg = load_config(child, overrides).model_dump(mode="json")
    shown = resolve_with_origins(child, overrides)
    for s in shown:
        node = cfg
        for part in s.key.split("."):
            node = node[part]
        assert node == s.value, s.key
    assert {s.key.split(".")[0] for s in shown} == set(cfg)
    assert {s.key for s in shown if s.origin == "override"} == {"train.max_steps", "agent.abstention_phrases"}


def test_a_section_replaced_on_the_command_line_takes_its_keys_from_the_override_alone(chain):
    """`agent={max_turns: 2}` replaces the whole section (as set_dotted does): the keys the override holds are
    its, the others fall back to their defaults, not to base.yaml's values."""
    child, _ = chain
    got = _by_key(child, ["agent={max_turns: 2}"])
    assert (got["agent.max_turns"].value, got["agent.max_turns"].origin) == (2, "override")
    assert got["agent.template"].origin == "default"
    assert got["agent.max_new_tokens_per_turn"].value == AwarlConfig().agent.max_new_tokens_per_turn
    # a later override of one key of the section is that override's
    got = _by_key(child, ["agent={max_turns: 2}", "agent.max_turns=3"])
    assert got["agent.max_turns"].override == "agent.max_turns=3" and got["agent.max_turns"].value == 3


def test_of_two_parents_the_later_one_wins_and_is_named(tmp_path):
    (tmp_path / "a.yaml").write_text("reward:\n  gamma: 0.1\n  p_min: 0.2\n")
    (tmp_path / "b.yaml").write_text("\n\nreward:\n  gamma: 0.4\n")
    c = tmp_path / "c.yaml"
    c.write_text("extends: [a.yaml, b.yaml]\n")
    got = _by_key(c)
    assert (got["reward.gamma"].value, got["reward.gamma"].file.name, got["reward.gamma"].line) == (0.4, "b.yaml", 4)
    assert (got["reward.p_min"].value, got["reward.p_min"].file.name, got["reward.p_min"].line) == (0.2, "a.yaml", 3)


def test_the_text_is_one_aligned_line_per_key_with_the_origin_as_a_comment(chain, capsys, monkeypatch):
    from awarl.cli import main

    child, _ = chain
    monkeypatch.chdir(child.parent)
    assert main(["config", "show", "--config", str(child), "reward.gamma=0.3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(resolve_with_origins(child, ["reward.gamma=0.3"]))
    row = {line.split(":", 1)[0]: line for line in lines}
    assert re.fullmatch(r"run\.name: +child +# child\.yaml:4", row["run.name"])   # relative to the cwd
    assert re.fullmatch(r"train\.max_steps: +7 +# mid\.yaml:5 \(extends\)", row["train.max_steps"])
    assert row["reward.p_min"].endswith(f"# {BASE}:{_line_of(BASE, r'  p_min:')} (extends)")
    assert row["reward.gamma"].endswith("# override reward.gamma=0.3")
    assert row["retrieval.timeout_s"].endswith("# default")
    assert row["agent.abstention_phrases"].split("#")[0].split(":", 1)[1].strip() == "[not enough information]"
    # values start in one column, and so do the comments after values that fit it
    assert len({line.index(line.split(":", 1)[1].strip()) for line in lines}) == 1
    short = [line for line in lines if len(line.split("  # ")[0].split(":", 1)[1].strip()) <= VALUE_COLUMN_MAX]
    assert len(short) > 100 and len({line.index("  # ") for line in short}) == 1


def test_json_parses_and_carries_the_same_origins(chain, capsys):
    from awarl.cli import main

    child, mid = chain
    assert main(["config", "show", "--config", str(child), "--json", "reward.gamma=0.3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"] == str(child) and doc["overrides"] == ["reward.gamma=0.3"]
    keys = doc["keys"]
    assert keys["run.name"] == {"value": "child", "origin": "file", "file": str(child.resolve()), "line": 4}
    assert keys["train.max_steps"] == {"value": 7, "origin": "extends", "file": str(mid.resolve()), "line": 5}
    assert keys["reward.gamma"] == {"value": 0.3, "origin": "override", "override": "reward.gamma=0.3"}
    assert keys["retrieval.timeout_s"] == {"value": 30.0, "origin": "default"}
    assert len(keys) == len(resolve_with_origins(child, ["reward.gamma=0.3"]))


@pytest.mark.parametrize("argv", [
    ["reward.gammma=0.3"],          # an unknown key
    ["reward.gamma"],               # an override without a value
    ["reward.gamma=2"],             # out of range
])
def test_bad_keys_and_overrides_are_the_same_one_line_errors_as_any_command(chain, argv, capsys):
    from awarl.cli import main

    child, _ = chain
    with pytest.raises(ConfigError) as e:
        load_config(child, argv)
    assert main(["config", "show", "--config", str(child), *argv]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"awarl config: error: {e.value}\n"


def test_a_bad_key_in_a_parent_names_the_parent(chain, capsys):
    from awarl.cli import main

    child, mid = chain
    mid.write_text(mid.read_text() + "reward:\n  p_mni: 0.2\n")
    assert main(["config", "show", "--config", str(child)]) == 2
    assert f"reward.p_mni (set in {mid.resolve()}): unknown key" in capsys.readouterr().err
    assert main(["config", "show", "--config", str(child.parent / "none.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_the_help_has_a_working_example(capsys, monkeypatch):
    from awarl.cli import main
    from awarl.commands.config import EPILOG
    from awarl.io import repo_root

    examples = [line.split()[1:] for line in EPILOG.splitlines() if line.strip().startswith("awarl config")]
    assert len(examples) == 2
    monkeypatch.chdir(repo_root())
    for argv in examples:
        assert main(argv) == 0, argv
    out = capsys.readouterr().out
    assert "# configs/qwen2.5-3b_1gpu.yaml:" in out and "(extends)" in out and '"origin": "override"' in out
    with pytest.raises(SystemExit) as e:
        main(["config", "show", "--help"])
    assert e.value.code == 0 and "awarl config show --config" in capsys.readouterr().out


def test_the_example_in_docs_training_is_what_the_command_prints(capsys, monkeypatch):
    from awarl.cli import main
    from awarl.io import repo_root

    page = (repo_root() / "docs" / "training.md").read_text()
    block = page.split("`awarl config show --config C [k=v ...]` prints", 1)[1].split("```")[1]
    shown = [re.split(r":\s+|\s+#\s+", line.strip(), maxsplit=2) for line in block.strip().splitlines()]
    assert len(shown) == 4
    monkeypatch.chdir(repo_root())
    assert main(["config", "show", "--config", "configs/qwen2.5-3b_1gpu.yaml", "reward.gamma=0.25"]) == 0
    printed = {line.split(":", 1)[0]: re.split(r":\s+|\s+#\s+", line, maxsplit=2)
               for line in capsys.readouterr().out.splitlines()}
    for key, value, origin in shown:
        assert printed[key] == [key, value, origin]
