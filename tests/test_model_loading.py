"""A model named on the command line or in a config: clear errors instead of transformers tracebacks."""

from __future__ import annotations

import pytest

from awarl.models.loading import load_tokenizer, looks_local


def test_local_or_hub():
    assert looks_local("/abs/model") and looks_local("./m") and looks_local("~/m") and looks_local("runs/x/final")
    assert not looks_local("Qwen/Qwen2.5-3B-Instruct") and not looks_local("gpt2")


def test_errors_name_the_key_and_the_problem(tmp_path, tiny_dir):
    with pytest.raises(FileNotFoundError, match=r"train.model: model folder not found: .*nope"):
        load_tokenizer(str(tmp_path / "nope"), "train.model")
    with pytest.raises(FileNotFoundError, match="holds no tokenizer"):
        load_tokenizer(str(tmp_path), "--model")
    assert load_tokenizer(str(tiny_dir)).convert_tokens_to_ids("<search>") is not None


def test_unreachable_hub_id_offline(monkeypatch):
    """Offline here (no hub access): the error says it was a hub id and what to check."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"--model: cannot load the tokenizer of 'awarl-test/no-such-model' from the "
                                         r"Hugging Face Hub"):
        load_tokenizer("awarl-test/no-such-model", "--model")


def test_cli_eval_with_a_missing_model_folder_exits_2(tmp_path, capsys):
    from awarl.cli import main

    assert main(["eval", "--model", str(tmp_path / "missing"), "--out", str(tmp_path / "o"), "--limit", "1"]) == 2
    assert "model folder not found" in capsys.readouterr().err
