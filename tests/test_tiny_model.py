"""The tiny offline model: loads back with the Auto classes, generates, keeps protocol tags, chats."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from awarl.models.tiny import EOS_TOKEN, PAD_TOKEN, PROTOCOL_TAGS, build_tiny_model  # noqa: E402


def _ids(x):
    return list(x["input_ids"]) if hasattr(x, "keys") else list(x)


def test_loads_and_generates(tiny_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    n_params = sum(p.numel() for p in model.parameters())
    assert 1e5 < n_params < 1e7
    assert model.config.tie_word_embeddings
    assert model.config.vocab_size == len(tok)
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids(EOS_TOKEN)
    assert model.generation_config.pad_token_id == tok.convert_tokens_to_ids(PAD_TOKEN)
    x = torch.tensor([tok.encode("Which Canadian rock band released a song")])
    out = model.generate(x, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > x.shape[1]
    assert out[0, : x.shape[1]].tolist() == x[0].tolist()


@pytest.mark.parametrize("tag", PROTOCOL_TAGS)
def test_tags_are_single_non_special_tokens(tiny_dir, tag):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    ids = tok.encode(tag, add_special_tokens=False)
    assert len(ids) == 1
    assert ids[0] not in tok.all_special_ids
    assert tok.decode(ids, skip_special_tokens=True) == tag


def test_protocol_text_round_trips_with_skip_special_tokens(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    text = ("<think> who drummed? </think>\n<search> Neil Peart drummer </search>\n"
            "<information> [1] Title: Rush (band)\nRush was a Canadian rock band. </information>\n"
            "<cite> 1 </cite>\n<answer> Rush </answer>")
    ids = tok.encode(text, add_special_tokens=False)
    for tag in PROTOCOL_TAGS:
        if tag in text:
            assert tok.convert_tokens_to_ids(tag) in ids
    assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == text
    assert tok.decode(ids + [tok.eos_token_id]).endswith(EOS_TOKEN)


def test_chat_template(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who is Evan Morris?"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWho is Evan Morris?"
                    "<|im_end|>\n<|im_start|>assistant\n")
    ids = _ids(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True))
    assert tok.decode(ids) == text
    no_sys = tok.apply_chat_template(msgs[1:], add_generation_prompt=False, tokenize=False)
    assert no_sys.startswith("<|im_start|>system\nYou are a helpful assistant.")
    assert not no_sys.endswith("assistant\n")


def test_deterministic_for_seed(tmp_path):
    import hashlib

    texts = ["The quick brown fox jumps over the lazy dog."] * 50 + ["Rush is a Canadian rock band."] * 50

    def digest(d):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}

    a = digest(build_tiny_model(tmp_path / "a", seed=3, vocab_size=300, texts=texts))
    b = digest(build_tiny_model(tmp_path / "b", seed=3, vocab_size=300, texts=texts))
    c = digest(build_tiny_model(tmp_path / "c", seed=4, vocab_size=300, texts=texts))
    assert a == b
    assert a["model.safetensors"] != c["model.safetensors"]
    assert a["tokenizer.json"] == c["tokenizer.json"]


@pytest.mark.slow
def test_cli_builds_model(tmp_path, capsys):
    from transformers import AutoTokenizer

    from awarl.cli import main

    # A tiny vocab keeps this fast; the CLI runs the same builder on the shipped texts.
    rc = main(["model", "tiny", "--out", str(tmp_path / "m"), "--seed", "1", "--vocab-size", "400",
               "--hidden", "32", "--layers", "1", "--heads", "2"])
    assert rc == 0
    assert str(tmp_path / "m") in capsys.readouterr().out
    tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert tok.decode(tok.encode("<answer> x </answer>"), skip_special_tokens=True) == "<answer> x </answer>"


def test_a_folder_holding_something_else_is_refused_not_overwritten(tmp_path, capsys):
    """`awarl model tiny --out` into a trained model's folder would replace its weights with random ones; it is
    refused and the folder left as it was. An earlier tiny model is replaced, and the folder is never left
    half-written (the build goes to a temporary sibling first)."""
    from awarl.cli import main

    texts = ["Rush is a Canadian rock band."] * 20
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "config.json").write_text("{}")
    (trained / "model.safetensors").write_bytes(b"trained weights")
    with pytest.raises(ValueError, match=r"trained: exists and holds something else \(no tiny_model.json\)"):
        build_tiny_model(trained, vocab_size=300, hidden=32, layers=1, heads=2, texts=texts)
    assert (trained / "model.safetensors").read_bytes() == b"trained weights"
    assert main(["model", "tiny", "--out", str(trained), "--vocab-size", "300", "--hidden", "32", "--layers", "1",
                 "--heads", "2"]) == 2
    assert "holds something else" in capsys.readouterr().err
    assert sorted(p.name for p in trained.iterdir()) == ["config.json", "model.safetensors"]
    tiny = build_tiny_model(tmp_path / "tiny", seed=1, vocab_size=300, hidden=32, layers=1, heads=2, texts=texts)
    first = (tiny / "model.safetensors").read_bytes()
    build_tiny_model(tiny, seed=2, vocab_size=300, hidden=32, layers=1, heads=2, texts=texts)  # an earlier tiny one
    assert (tiny / "model.safetensors").read_bytes() != first
    assert json.loads((tiny / "tiny_model.json").read_text())["seed"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny", "trained"]  # no temporary folder left behind
