"""Training generation in vLLM server mode (`train.vllm_mode: server`) through TRL's real `VLLMClient`.

vLLM needs a GPU, so a FAKE vLLM server stands in for `trl vllm-serve`: a loopback HTTP app answering the
OpenAI-compatible routes TRL 1.16's client calls (/health, /v1/models, /v1/completions) in vLLM's response
shape. What is real: TRL's client (request building, logprob parsing), our `VLLMServerBackend` as the
rollout adapter builds it from the trainer's arguments, the rollout engine, the tokenizer and the BM25
retriever. TRL's client refuses to start without vLLM installed; that one check is patched out. The
colocate tests below use a FAKE in-process engine for the same reason."""

from __future__ import annotations

import math

import pytest
from conftest import fake_vllm_app, serve_app

EXTRA = " trailing words"  # vLLM may return tokens past the stop string; the backend must cut them


def fake_vllm_server_app(tok, requests: list[dict]):
    """A FAKE vLLM server (conftest.fake_vllm_app) answering a search to the first request and an answer to
    every later one, each with text past its stop string."""

    first: list[int] = []   # the id of the first request handled (all of its prompts get the search)

    def turn(body: dict, prompt: list[int]) -> str:
        first[:] = first or [id(body)]
        return ("<search> capital of France </search>" if first == [id(body)] else "<answer> Paris </answer>") \
            + EXTRA

    return fake_vllm_app(tok, turn, lambda body, arrived: requests.append(body))


def adapter_backend(trainer, tok, cfg):
    """The backend the rollout adapter builds for this trainer (the code path training takes)."""
    from awarl.agent.templates import load_template
    from awarl.training.rollout_adapter import RolloutAdapter

    adapter = RolloutAdapter(cfg, tok, None, load_template(cfg.agent.template), [])
    with adapter._backend(trainer) as be:
        return be


@pytest.fixture()
def trainer_for(monkeypatch):
    import trl.generation.vllm_client as vc
    from trl import GRPOConfig

    monkeypatch.setattr(vc, "is_vllm_available", lambda: True)

    def make(url: str, tmp_path):
        from types import SimpleNamespace

        args = GRPOConfig(output_dir=str(tmp_path / "out"), use_vllm=True, vllm_mode="server",
                          vllm_server_base_url=url, vllm_server_timeout=5, use_cpu=True, bf16=False,
                          report_to="none")
        return SimpleNamespace(args=args, model=None, use_vllm=True)

    return make


def test_server_mode_backend_maps_parameters_and_cuts_at_the_stop_string(tmp_path, tiny_dir, trainer_for):
    from transformers import AutoTokenizer

    from awarl.agent.backends.vllm import VLLMServerBackend
    from awarl.config import load_config

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    requests: list[dict] = []
    with serve_app(fake_vllm_server_app(tok, requests)) as url:
        be = adapter_backend(trainer_for(url, tmp_path), tok, load_config(None, []))
        assert isinstance(be, VLLMServerBackend)
        gens = be.generate([[5, 6, 7], [8]], max_new_tokens=40, temperature=0.7, top_p=0.9,
                           stop_strings=["</search>"], seed=3)
    (body,) = requests
    assert body["model"] == "tiny-policy" and body["prompt"] == [[5, 6, 7], [8]]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["n"]) == (40, 0.7, 0.9, 1)
    assert body["stop"] == ["</search>"] and body["include_stop_str_in_output"] is True
    assert body["logprobs"] == 0 and "seed" not in body  # a shared seed would make a GRPO group identical
    for g in gens:
        assert tok.decode(g.token_ids) == "<search> capital of France </search>"
        assert g.finish_reason == "stop" and g.logprobs == [-0.25] * len(g.token_ids)


def test_server_mode_multi_turn_rollout_masks_retrieved_passages(tmp_path, tiny_dir, shipped_bm25_dir,
                                                                 trainer_for):
    from transformers import AutoTokenizer

    from awarl.agent.rollout import RolloutEngine
    from awarl.agent.templates import load_template
    from awarl.config import load_config
    from awarl.retrieval import load_index

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    cfg = load_config(None, ["agent.max_turns=3", "retrieval.topk=2"])
    requests: list[dict] = []
    with serve_app(fake_vllm_server_app(tok, requests)) as url:
        engine = RolloutEngine(adapter_backend(trainer_for(url, tmp_path), tok, cfg), tok,
                               load_index(shipped_bm25_dir), load_template(cfg.agent.template), cfg.agent,
                               cfg.retrieval.topk)
        (t,) = engine.run(["What is the capital of France?"], temperature=1.0)
    assert len(requests) == 2  # one search turn, one answer turn
    assert tok.decode(requests[1]["prompt"][0]).rstrip().endswith("</information>")
    assert t.parsed.searches == ["capital of France"] and t.parsed.answer == "Paris"
    assert len(t.passages) == 2
    model_ids = [i for i, m in zip(t.completion_ids, t.env_mask, strict=True) if m == 1]
    env_ids = [i for i, m in zip(t.completion_ids, t.env_mask, strict=True) if m == 0]
    assert tok.decode(env_ids).strip().startswith("<information>")
    assert "<information>" not in tok.decode(model_ids) and EXTRA.strip() not in tok.decode(model_ids)
    # the server's log-probs reach the trajectory for model tokens; environment tokens carry none
    assert all(lp == -0.25 for lp, m in zip(t.logprobs, t.env_mask, strict=True) if m == 1)
    assert all(lp == 0.0 or math.isnan(lp) for lp, m in zip(t.logprobs, t.env_mask, strict=True) if m == 0)
    # the second turn's prompt is the first prompt plus the first turn, ids carried over, not re-encoded
    assert requests[1]["prompt"][0][: len(requests[0]["prompt"][0])] == requests[0]["prompt"][0]


def test_colocate_mode_gives_each_prompt_its_own_seed_with_a_fake_vllm_module(tiny_dir, monkeypatch):
    """Colocate mode calls the trainer's in-process `vllm.LLM`; a FAKE `vllm` module (SamplingParams) and
    LLM stand in for it here. Identical prompts (a GRPO group) must not share a seed."""
    import sys
    import types
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from awarl.config import load_config

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    fake_vllm = types.ModuleType("vllm")
    fake_vllm.SamplingParams = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    seen = {}

    def generate(prompts, sampling_params, use_tqdm):
        seen.update(prompts=prompts, params=sampling_params)
        ids = tok.encode("<answer> Paris </answer>" + EXTRA, add_special_tokens=False)
        lps = [{t: SimpleNamespace(logprob=-0.5)} for t in ids]
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, logprobs=lps)]) for _ in prompts]

    trainer = SimpleNamespace(args=SimpleNamespace(vllm_mode="colocate"), model=None, use_vllm=True,
                              vllm_generation=SimpleNamespace(llm=SimpleNamespace(generate=generate)))
    be = adapter_backend(trainer, tok, load_config(None, []))
    gens = be.generate([[4, 2]] * 3, max_new_tokens=30, temperature=1.0, stop_strings=["</answer>"], seed=7)
    assert seen["prompts"] == [{"prompt_token_ids": [4, 2]}] * 3
    assert [p["seed"] for p in seen["params"]] == [7, 8, 9]
    assert all(p["stop"] == ["</answer>"] and p["max_tokens"] == 30 and p["logprobs"] == 0 for p in seen["params"])
    for g in gens:
        assert tok.decode(g.token_ids) == "<answer> Paris </answer>" and g.logprobs == [-0.5] * len(g.token_ids)
    be.generate([[4, 2]] * 2, max_new_tokens=30, temperature=1.0)
    assert [p["seed"] for p in seen["params"]] == [None, None]  # unseeded: vLLM's own generator
