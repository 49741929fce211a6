"""The protocol adapter's cold start on a base model (issue 42 item 4): a checkpoint with no chat template.

Gemma-3-270M is a base model: its tokenizer has no chat template, so the prompt is the template's plain text
(awarl.agent.templates.render_prompt) with the tokenizer's own special tokens, and the model's turn starts after
a blank line. This runs the whole path on the tiny model with its chat template removed and a <bos> its
tokenizer adds, as Gemma's does: teacher sequences, the LoRA adapter, the merge, and greedy rollouts of the
merged model through the real engine and the shipped corpus's BM25 index."""

from __future__ import annotations

import shutil

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def base_model_dir(tmp_path, tiny_dir):
    """The tiny model as a base model: no chat template; its tokenizer puts <bos> first."""
    from tokenizers import processors
    from transformers import AutoTokenizer

    out = tmp_path / "tiny-base"
    shutil.copytree(tiny_dir, out)
    tok = AutoTokenizer.from_pretrained(out)
    tok.chat_template = None
    bos = "<|im_start|>"  # the tiny vocabulary's bos (awarl.models.tiny.BOS_TOKEN)
    tok.bos_token = bos
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.convert_tokens_to_ids(bos))])
    (out / "chat_template.jinja").unlink(missing_ok=True)
    tok.save_pretrained(out)
    again = AutoTokenizer.from_pretrained(out)
    assert not getattr(again, "chat_template", None) and again("a")["input_ids"][0] == again.bos_token_id
    return out


def test_cold_start_adapter_on_a_model_without_chat_template(tmp_path, base_model_dir, shipped_bm25_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.agent.rollout import RolloutEngine
    from awarl.agent.templates import load_template, render_prompt
    from awarl.config import load_config
    from awarl.data.loaders import load_shipped
    from awarl.retrieval import load_index
    from awarl.training.protocol_adapter import merge_adapter, train_protocol_adapter
    from awarl.training.warmup import build_sequences

    tok = AutoTokenizer.from_pretrained(base_model_dir)
    template, retriever = load_template("awarl"), load_index(shipped_bm25_dir)
    examples = load_shipped("hotpotqa", limit=8, seed=0)
    seq = build_sequences(examples[:1], retriever, template, tok, topk=2)[0]
    start = seq.loss_mask.index(1)
    prompt, turn = seq.input_ids[:start], seq.input_ids[start:]
    # the plain prompt: <bos>, the instructions and question, a blank line; then the model's search call
    assert prompt[0] == tok.bos_token_id and tok.bos_token_id not in prompt[1:]
    assert tok.decode(prompt[1:]) == template.user_message(examples[0].question) + "\n\n"
    assert tok.decode(turn).startswith(f"<search> {examples[0].question} </search>")
    assert "<|im_end|>" not in tok.decode(seq.input_ids)

    info = train_protocol_adapter(base_model_dir, tmp_path / "adapter", examples, retriever, template, topk=2,
                                  steps=6, batch_size=4, lr=3e-3, seed=0, max_len=1024, r=4, alpha=8,
                                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    assert info["sequences"] == 8 and info["final_loss"] < info["first_loss"]
    merged = merge_adapter(base_model_dir, tmp_path / "adapter", tmp_path / "warm")
    tok2 = AutoTokenizer.from_pretrained(merged)
    assert not getattr(tok2, "chat_template", None)
    assert render_prompt(template, "Who?", tok2) == render_prompt(template, "Who?", tok)

    cfg = load_config(None, ["agent.max_new_tokens_per_turn=12", "agent.max_trajectory_tokens=200",
                             "agent.max_turns=1", "critic.judge=none"])
    engine = RolloutEngine.from_config(cfg, tok2, retriever,
                                       model=AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32))
    trajs = engine.run([e.question for e in examples[:2]], temperature=0.0)
    assert len(trajs) == 2
    for t, ex in zip(trajs, examples[:2], strict=True):
        # the engine prompted with the same plain text the adapter was trained on
        assert list(t.prompt_ids) == render_prompt(template, ex.question, tok2)
