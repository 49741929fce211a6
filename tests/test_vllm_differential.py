"""Real vLLM (its CPU build) against the transformers backend, on the same tiny model in float32.

Everything here is real: vLLM's engine, the transformers model, the tokenizer, the BM25 index of the
shipped closed corpus, the rollout engine, `awarl eval` and `awarl estimate`. The model is the tiny model
taught the agent protocol by awarl's supervised warm-up, so greedy decoding searches, reads passages over
several turns and answers (or runs out of budget). One vLLM engine serves the module; it is built through
the path eval/estimate take (`make_backend(cfg.generation, path, tok)`) from the single-GPU recipe's vLLM
options, so those options are checked to reach `vllm.LLM`.

If the vLLM backend's stop handling, log-prob reading or seeding drifted from the transformers backend's,
these comparisons fail: they compare ids, finish reasons, env masks, outcomes and log-probs, not shapes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from vllm_recipe import (
    HOTPOT,
    ON_CPU,
    RECIPE,
    check_logprobs_against_policy,
    hotpot,
    recipe_config,
    rollout_engine,
)

pytestmark = pytest.mark.vllm

CPU = [*ON_CPU, "generation.batch_size=8", "agent.max_turns=3", "agent.max_new_tokens_per_turn=48",
       "agent.max_trajectory_tokens=768", "retrieval.topk=2"]  # short runs
LP_TOL = 2e-4   # float32 log-probs of two implementations of the same forward pass


@pytest.fixture(scope="module")
def cfg(shipped_bm25_dir):
    return recipe_config(shipped_bm25_dir, CPU)


@pytest.fixture(scope="module")
def tok(protocol_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(protocol_dir)


@pytest.fixture(scope="module")
def vllm_be(cfg, protocol_dir, tok):
    from awarl.agent.backends import make_backend

    assert cfg.generation.backend == "vllm"  # the recipe's
    return make_backend(cfg.generation, str(protocol_dir), tok)


@pytest.fixture(scope="module")
def hf_be(cfg, protocol_dir, tok):
    from awarl.agent.backends import make_backend

    return make_backend(cfg.generation, str(protocol_dir), tok, kind="hf")


@pytest.fixture(scope="module")
def retriever(shipped_bm25_dir):
    from awarl.retrieval import load_index

    return load_index(shipped_bm25_dir)


def test_the_recipes_vllm_options_reach_the_engine(vllm_be, cfg):
    vc = vllm_be.llm.llm_engine.vllm_config
    assert cfg.generation.gpu_memory_utilization == 0.35  # as configs/qwen2.5-3b_1gpu.yaml sets it
    assert vc.cache_config.gpu_memory_utilization == 0.35
    assert vc.parallel_config.tensor_parallel_size == cfg.generation.tensor_parallel_size == 1
    assert vc.cache_config.enable_prefix_caching is cfg.generation.enable_prefix_caching is True
    assert vc.model_config.max_model_len == 4096  # generation.max_model_len unset: the model's own context
    assert vc.model_config.enforce_eager is True and str(vc.model_config.dtype) == "torch.float32"
    assert vc.model_config.logprobs_mode == "processed_logprobs"


def test_greedy_multi_turn_trajectories_are_equal_token_for_token(cfg, vllm_be, hf_be, tok, retriever):
    from awarl.agent.templates import abstention_phrases, load_template
    from awarl.critic.correctness import trajectory_outcome

    examples = hotpot(3, 0) + hotpot(5, 1)[:3]
    questions = [ex.question for ex in examples]
    hf = rollout_engine(cfg, hf_be, tok, retriever).run(questions, temperature=0.0, seed=0)
    vl = rollout_engine(cfg, vllm_be, tok, retriever).run(questions, temperature=0.0, seed=0)
    phrases = abstention_phrases(load_template(cfg.agent.template), cfg.agent.abstention_phrases)
    for ex, h, v in zip(examples, hf, vl, strict=True):
        assert v.completion_ids == h.completion_ids, ex.question
        assert v.env_mask == h.env_mask and v.stop_reason == h.stop_reason
        assert v.parsed.searches == h.parsed.searches and v.parsed.answer == h.parsed.answer
        assert [p["id"] for p in v.passages] == [p["id"] for p in h.passages]
        assert trajectory_outcome(v.parsed, ex.answers, cfg.metrics, phrases) == \
            trajectory_outcome(h.parsed, ex.answers, cfg.metrics, phrases)
        for lv, lh, m in zip(v.logprobs, h.logprobs, v.env_mask, strict=True):
            assert abs(lv - lh) < LP_TOL if m else lv == lh == 0.0
    # The comparison covers what matters: retrieval turns (environment tokens) and several endings.
    assert any(0 in t.env_mask for t in hf) and any(t.stop_reason == "answer" for t in hf)
    assert len({t.stop_reason for t in hf}) >= 2


def test_a_stop_string_completed_inside_a_turn_is_cut_alike(vllm_be, hf_be, tok):
    """A stop string first completed by a token in the middle of free text (not a protocol tag): both
    backends end right after that token, with the same ids, reason and log-probs."""
    prompt = tok.encode("Which Canadian rock band released a song called Counterparts?", add_special_tokens=False)
    (free,) = hf_be.generate([prompt], max_new_tokens=24, temperature=0.0)
    (vfree,) = vllm_be.generate([prompt], max_new_tokens=24, temperature=0.0)
    assert vfree.token_ids == free.token_ids and vfree.finish_reason == free.finish_reason
    k = next(i for i in range(3, len(free.token_ids))
             if tok.decode(free.token_ids[i:i + 1]).strip()
             and tok.decode(free.token_ids[i:i + 1]) not in tok.decode(free.token_ids[:i]))
    stop = tok.decode(free.token_ids[k:k + 1])
    (h,) = hf_be.generate([prompt], max_new_tokens=24, temperature=0.0, stop_strings=[stop])
    (v,) = vllm_be.generate([prompt], max_new_tokens=24, temperature=0.0, stop_strings=[stop])
    assert h.token_ids == free.token_ids[:k + 1] and h.finish_reason == "stop"
    assert (v.token_ids, v.finish_reason) == (h.token_ids, h.finish_reason)
    assert v.logprobs == pytest.approx(h.logprobs, abs=LP_TOL)


def test_sampled_logprobs_are_the_policys_for_the_same_tokens(cfg, vllm_be, tok, retriever, protocol_dir):
    """vLLM samples at T=0.7; for every model token it reports log softmax(logits / T) of the policy, as
    the transformers backend does (and TRL recomputes): checked against one transformers forward pass."""
    questions = [ex.question for ex in hotpot(3, 0)]
    trajs = rollout_engine(cfg, vllm_be, tok, retriever).run(questions, temperature=0.7, seed=5)
    assert check_logprobs_against_policy(trajs, protocol_dir, 0.7, LP_TOL) > 50


def test_per_prompt_seeds_give_a_grpo_group_distinct_reproducible_completions(vllm_be, tok):
    prompt = tok.encode("Who wrote the novel on which the film was based?", add_special_tokens=False)
    group = vllm_be.generate([prompt] * 6, max_new_tokens=24, temperature=1.0, seed=11)
    again = vllm_be.generate([prompt] * 6, max_new_tokens=24, temperature=1.0, seed=11)
    other = vllm_be.generate([prompt] * 6, max_new_tokens=24, temperature=1.0, seed=12)
    ids = [tuple(g.token_ids) for g in group]
    # One seed per prompt: the group does not collapse (the warmed model is peaky, so two of six
    # completions may still coincide; a shared seed would make all six identical).
    assert len(set(ids)) >= 5
    assert [tuple(g.token_ids) for g in again] == ids       # and reproducible
    assert [tuple(g.token_ids) for g in other] != ids
    assert [tuple(g.token_ids) for g in other[:5]] == ids[1:]  # prompt i draws with seed + i


def test_an_eos_of_the_generation_config_ends_both_alike(cfg, protocol_dir, tok, hf_be, tmp_path):
    """A model whose generation_config lists a second eos id (as Qwen instruct models list <|endoftext|>
    besides <|im_end|>): vLLM's engine and the transformers backend both end the message on it, keep it
    as the last id and call it eos. The id is taken from the engine, not passed by us."""
    from awarl.agent.backends import make_backend

    prompt = tok.encode("Which Canadian rock band released a song called Counterparts?", add_special_tokens=False)
    (free,) = hf_be.generate([prompt], max_new_tokens=24, temperature=0.0)
    # A plain word piece (not a protocol tag, which would also complete a stop string) first produced at k.
    k = next(i for i in range(2, len(free.token_ids)) if free.token_ids[i] not in free.token_ids[:i]
             and tok.decode(free.token_ids[i:i + 1]).strip().isalnum())
    extra_eos = free.token_ids[k]
    model = tmp_path / "model"
    shutil.copytree(protocol_dir, model)
    gen_cfg = json.loads((model / "generation_config.json").read_text())
    gen_cfg["eos_token_id"] = [tok.eos_token_id, extra_eos]
    (model / "generation_config.json").write_text(json.dumps(gen_cfg))
    vl = make_backend(cfg.generation, str(model), tok)
    hf = make_backend(cfg.generation, str(model), tok, kind="hf")
    assert extra_eos in vl.eos and extra_eos in hf.eos
    for temp, seed in ((0.0, None), (1.0, 3)):
        (v,) = vl.generate([prompt], max_new_tokens=24, temperature=temp, seed=seed)
        if temp == 0.0:
            (h,) = hf.generate([prompt], max_new_tokens=24, temperature=0.0)
            assert (v.token_ids, v.finish_reason) == (h.token_ids, h.finish_reason) == (free.token_ids[:k + 1], "eos")
        assert extra_eos not in v.token_ids[:-1]
        assert v.finish_reason != "eos" or v.token_ids[-1] in vl.eos


def _cli_config(tmp_path: Path, bm25: Path) -> Path:
    data = [{"path": str(HOTPOT), "format": "hotpotqa", "dataset": "hotpotqa", "limit": 6}]
    path = tmp_path / "cpu.yaml"
    path.write_text(json.dumps({  # JSON is YAML
        "extends": str(RECIPE), "data": {"train": data, "eval": data},
        "retrieval": {"kind": "bm25", "index_dir": str(bm25), "topk": 2},
        "estimate": {"k": 2, "temperature": 0.0}, "eval": {"temperature": 0.0, "limit": 6},
        "critic": {"judge": "lexical"}}))
    return path


def test_eval_and_estimate_write_the_same_files_with_vllm_as_with_hf(tmp_path, protocol_dir, shipped_bm25_dir):
    """`awarl eval` and `awarl estimate` at temperature 0, generation.backend=vllm vs hf: the same
    predictions and p_i files, byte for byte (each vLLM run builds its own engine, as the commands do)."""
    from awarl.cli import main

    config = _cli_config(tmp_path, shipped_bm25_dir)
    out = {}
    for backend in ("hf", "vllm"):
        over = [*CPU, f"generation.backend={backend}"]
        assert main(["eval", "--config", str(config), "--model", str(protocol_dir), "--out",
                     str(tmp_path / f"eval-{backend}"), *over]) == 0
        assert main(["estimate", "--config", str(config), "--model", str(protocol_dir), "--out",
                     str(tmp_path / f"p-{backend}.jsonl"), *over]) == 0
        out[backend] = ((tmp_path / f"eval-{backend}" / "predictions.jsonl").read_text(),
                        (tmp_path / f"p-{backend}.jsonl").read_text())
    assert out["vllm"] == out["hf"]
    rows = [json.loads(line) for line in out["hf"][0].splitlines()]
    assert len(rows) == 6 and any(r["trajectory"]["searches"] for r in rows)
    assert len(out["hf"][1].splitlines()) == 6
