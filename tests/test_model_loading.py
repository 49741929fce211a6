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


def test_merging_one_adapter_into_another_base_is_merged_again_not_the_earlier_merge(tmp_path, tiny_dir):
    """An --out that held this adapter's merge was kept whatever the base: merging a plain peft adapter (no
    adapter_info.json, so no base of its own) into a second base returned the first base's merge, exit 0."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from awarl.models.tiny import build_tiny_model
    from awarl.training.protocol_adapter import merge_adapter

    other = build_tiny_model(tmp_path / "tiny-seed1", seed=1)
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(str(tiny_dir)),
                          LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.save_pretrained(str(tmp_path / "adapter"))
    out = tmp_path / "merged"
    emb = "model.embed_tokens.weight"
    for base in (tiny_dir, other):
        merge_adapter(base, tmp_path / "adapter", out)
        merged = load_file(str(out / "model.safetensors"))
        assert torch.equal(merged[emb], load_file(f"{base}/model.safetensors")[emb]), base
