"""Command-line flags become config overrides through one helper with one rule (awarl/commands/common.py):
the config file, then the flags, then KEY=VALUE in order; the last value for a key wins; flag values are
always taken literally."""

from __future__ import annotations

from pathlib import Path

import pytest

from awarl.commands.common import PRECEDENCE, flag_overrides
from awarl.config import load_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"

LITERALS = ["/data/idx #2", "runs/2024.10", "null", "a: b", "x=y", "  padded  ", "[1, 2]", "yes"]


@pytest.mark.parametrize("value", LITERALS)
def test_flag_values_reach_the_config_as_the_same_string(value):
    cfg = load_config(None, flag_overrides({"retrieval.index_dir": value}))
    assert cfg.retrieval.index_dir == value


def test_flags_not_given_add_nothing_and_numbers_stay_numbers():
    assert flag_overrides({"estimate.k": None, "estimate.model": None}) == []
    assert load_config(None, flag_overrides({"estimate.k": 3})).estimate.k == 3


def capture(monkeypatch, module: str, name: str, result):
    """Replace a stage function with one that records the config it is given."""
    import importlib

    seen = {}

    def fake(cfg, *a, **kw):
        seen["cfg"] = cfg
        return result(cfg) if callable(result) else result

    monkeypatch.setattr(importlib.import_module(module), name, fake)
    return seen


def test_eval_index_with_hash_and_spaces_is_kept_whole(monkeypatch, tmp_path):
    """`awarl eval --index "/data/idx #2"` used to evaluate against `/data/idx` (YAML cut the comment)."""
    from awarl.cli import main

    seen = capture(monkeypatch, "awarl.stages.evaluate", "run_eval", {"macro": {}, "per_dataset": {}})
    monkeypatch.setattr("awarl.stages.resources.ensure_default_retrieval", lambda cfg: cfg)
    monkeypatch.setattr("awarl.report.print_results_table", lambda results: None)
    index = str(tmp_path / "idx #2")
    assert main(["eval", "--out", str(tmp_path / "o"), "--index", index, "--template", "search-r1",
                 "--retriever-url", "http://127.0.0.1:9/#x"]) == 0
    cfg = seen["cfg"]
    assert cfg.retrieval.index_dir == index and cfg.agent.template == "search-r1"
    assert cfg.retrieval.kind == "server" and cfg.retrieval.server_url == "http://127.0.0.1:9/#x"


@pytest.mark.parametrize("argv, key, expected", [
    (["estimate", "-k", "3"], "k", 3),
    (["estimate", "-k", "3", "estimate.k=5"], "k", 5),           # KEY=VALUE beats the flag
    (["estimate", "estimate.k=5", "-k", "3"], "k", 5),           # wherever it is written
    (["estimate", "--model", "m #1", "estimate.model=other"], "model", "other"),
])
def test_estimate_precedence(monkeypatch, tmp_path, argv, key, expected):
    from pathlib import Path

    from awarl.cli import main

    seen = capture(monkeypatch, "awarl.stages.estimate", "run_estimate",
                   lambda cfg: Path(tmp_path / "p.jsonl"))
    assert main(argv + [f"estimate.out={tmp_path / 'p.jsonl'}"]) == 0
    assert getattr(seen["cfg"].estimate, key) == expected


def test_simulate_precedence(monkeypatch, tmp_path):
    from awarl.cli import main

    seen = capture(monkeypatch, "awarl.simulate", "run_simulation", {"claims": []})
    assert main(["simulate", "--out", str(tmp_path), "--steps", "3", "--seed", "2", "simulate.steps=4"]) == 0
    assert (seen["cfg"].simulate.steps, seen["cfg"].simulate.seed) == (4, 2)


def test_the_rule_is_in_every_config_command_help(capsys):
    from awarl.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in ("eval", "estimate", "simulate", "train", "score"):
        text = " ".join(sub.choices[name].format_help().split())
        assert " ".join(PRECEDENCE.split()) in text, name


def test_an_output_folder_that_is_a_file_is_named_in_one_line(tmp_path, capsys):
    """`--out F` where F is a file: mkdir's `[Errno 17] File exists` would not say what is wrong."""
    from awarl.cli import main

    f = tmp_path / "preds.jsonl"
    f.write_text("kept\n")
    assert main(["simulate", "--out", str(f), "--steps", "10", "--seeds", "1", "--no-progress"]) == 2
    assert f"{f} is a file, where a folder is needed" in capsys.readouterr().err
    assert main(["simulate", "--out", str(f / "sub"), "--steps", "10", "--seeds", "1", "--no-progress"]) == 2
    assert f"{f} is a file, where a folder is needed (an output folder, or a folder above it)" in \
        capsys.readouterr().err
    assert f.read_text() == "kept\n"


def test_an_output_file_that_is_a_folder_is_named_in_one_line(tmp_path, capsys):
    """Before: os.replace's IsADirectoryError was a traceback (exit 1)."""
    from awarl.cli import main
    from awarl.data.loaders import shipped_path

    folder = tmp_path / "adir"
    folder.mkdir()
    assert main(["data", "prepare", str(shipped_path("hotpotqa")), "--out", str(folder)]) == 2
    assert f"{folder} is a folder, where a file is needed" in capsys.readouterr().err
    assert list(folder.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["adir"]


def test_a_config_or_template_that_is_not_utf8_is_an_error_naming_the_file(tmp_path, capsys):
    from awarl.agent.templates import load_template
    from awarl.cli import main
    from awarl.config import ConfigError

    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"run:\n  name: caf\xe9\n")
    assert main(["simulate", "--config", str(bad), "--steps", "10", "--seeds", "1", "--no-progress"]) == 2
    assert f"{bad}: config file is not UTF-8 text (byte 0xe9" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=rf"{bad}: template file is not UTF-8 text"):
        load_template(bad)


def test_model_tiny_refuses_head_settings_that_cannot_run(tmp_path, capsys):
    """Before: --hidden 0 was a SystemExit (exit 1, no "error:"), and --hidden 10 --heads 5 built a model
    whose first forward failed (5 query heads over 2 key/value heads; odd head sizes for rotary)."""
    from awarl.cli import main

    out = tmp_path / "t"
    assert main(["model", "tiny", "--out", str(out), "--hidden", "0"]) == 2
    assert "error: --hidden must be >= 1" in capsys.readouterr().err
    assert main(["model", "tiny", "--out", str(out), "--hidden", "10", "--heads", "5"]) == 2
    assert "heads (5) must be divisible by its 2 key/value heads" in capsys.readouterr().err
    assert main(["model", "tiny", "--out", str(out), "--hidden", "12", "--heads", "4"]) == 2
    assert "hidden / heads (12 / 4 = 3) must be even" in capsys.readouterr().err
    assert not out.exists()


def test_train_dry_run_checks_the_scripted_replay_and_the_corpus(tmp_path, capsys):
    from awarl.cli import main

    base = ["train", "--config", str(CONFIGS / "base.yaml"), "--dry-run", f"run.out_dir={tmp_path / 'r'}",
            "generation.backend=scripted"]
    assert main(base) == 2
    assert "generation.backend: scripted needs generation.script, a replay file; got None" in capsys.readouterr().err
    script = tmp_path / "script.jsonl"
    script.write_text('{"question": "q", "turns": ["<answer> a </answer>"]}\n')
    assert main([*base, f"generation.script={script}", "retrieval.index_dir=null",
                 f"retrieval.corpus={tmp_path / 'none.jsonl'}"]) == 0
    assert f"MISSING: retrieval.corpus {tmp_path / 'none.jsonl'} is no file" in capsys.readouterr().out
