"""The continuous rollout path over vLLM: a session over the in-process engine (vLLM's CPU build) and one over
a server (one request in flight per trajectory).

Real (tier `vllm`): vLLM's engine stepped by `EngineSession`, the transformers backend, the tokenizer, the
protocol-warmed tiny model (it searches, reads passages over several turns and answers), the BM25 index of
the shipped closed corpus and the rollout engine. One engine serves the module, built as eval/estimate build
it (`make_backend` over the single-GPU recipe's vLLM options); the per-turn path is the same engine behind
`VLLMBackend(..., continuous=False)`. At temperature 0 the session must give token for token the per-turn
path's trajectories and the transformers backend's (ids, env mask, stop reasons, passages, outcome, log-probs),
so a session whose stop handling or log-prob reading drifted from the transformers backend's fails here.

The server session's scheduling (runs everywhere): TRL's real `VLLMClient` against a FAKE vLLM server (a
loopback app answering /v1/completions in vLLM's shape: vLLM's server needs the vLLM tier, where
tests/test_vllm_servers.py rolls out through this same session against `serve_vllm.sh` for real).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from conftest import fake_vllm_app, serve_app
from vllm_recipe import ON_CPU, hotpot, recipe_config, rollout_engine

CPU = [*ON_CPU, "agent.max_turns=3", "agent.max_new_tokens_per_turn=48", "agent.max_trajectory_tokens=768",
       "retrieval.topk=2"]  # short runs
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

    return make_backend(cfg.generation, str(protocol_dir), tok)


@pytest.fixture(scope="module")
def per_turn(vllm_be, tok):
    from awarl.agent.backends.vllm import VLLMBackend

    return VLLMBackend(vllm_be.llm, tok, continuous=False)


@pytest.fixture(scope="module")
def hf_be(cfg, protocol_dir, tok):
    from awarl.agent.backends import make_backend

    return make_backend(cfg.generation, str(protocol_dir), tok, kind="hf")


@pytest.fixture(scope="module")
def retriever(shipped_bm25_dir):
    from awarl.retrieval import load_index

    return load_index(shipped_bm25_dir)


class StepCounter:
    """Counts the engine's steps (the per-turn path's `LLM.generate` and the session both call them)."""

    def __init__(self, llm):
        self.n, inner = 0, llm.llm_engine.step

        def step():
            self.n += 1
            return inner()

        llm.llm_engine.step = step
        self.restore = lambda: delattr(llm.llm_engine, "step")


def ids(trajs):
    return [t.completion_ids for t in trajs]


# ---------------------------------------------------------------------------------- in-process engine
@pytest.mark.vllm
def test_greedy_session_equals_the_per_turn_path_and_the_transformers_backend(cfg, vllm_be, per_turn, hf_be, tok,
                                                                              retriever):
    from awarl.agent.templates import abstention_phrases, load_template
    from awarl.critic.correctness import trajectory_outcome

    examples = hotpot(3, 0) + hotpot(5, 1)[:3]
    qs = [ex.question for ex in examples]
    hf = rollout_engine(cfg, hf_be, tok, retriever).run(qs, temperature=0.0, seed=0)
    counter = StepCounter(vllm_be.llm)
    try:
        turns_eng = rollout_engine(cfg, per_turn, tok, retriever)
        session_eng = rollout_engine(cfg, vllm_be, tok, retriever)
        turns = turns_eng.run(qs, temperature=0.0, seed=0)
        turn_steps, counter.n = counter.n, 0
        got = session_eng.run(qs, temperature=0.0, seed=0)
    finally:
        counter.restore()
    stats = session_eng.last_stats
    assert turns_eng.last_stats == {"engine": "turns", "failed_searches": 0} and stats["engine"] == "continuous"
    phrases = abstention_phrases(load_template(cfg.agent.template), cfg.agent.abstention_phrases)
    for ex, h, t, v in zip(examples, hf, turns, got, strict=True):
        for ref in (t, h):
            assert v.completion_ids == ref.completion_ids, ex.question
            assert (v.env_mask, v.stop_reason) == (ref.env_mask, ref.stop_reason)
            assert (v.parsed.searches, v.parsed.answer) == (ref.parsed.searches, ref.parsed.answer)
            assert [p["id"] for p in v.passages] == [p["id"] for p in ref.passages]
            assert trajectory_outcome(v.parsed, ex.answers, cfg.metrics, phrases) == \
                trajectory_outcome(ref.parsed, ex.answers, cfg.metrics, phrases)
            for lv, lr, m in zip(v.logprobs, ref.logprobs, v.env_mask, strict=True):
                assert abs(lv - lr) < LP_TOL if m else lv == lr == 0.0
    # What was compared: retrieval turns and several endings.
    assert any(0 in t.env_mask for t in hf) and len({t.stop_reason for t in hf}) >= 2
    # One request per model turn, each resubmitting the whole history: the prefix cache served most of it.
    model_turns = sum(1 + sum(1 for a, b in zip(t.env_mask, t.env_mask[1:], strict=False) if a == 0 and b == 1)
                      for t in got)
    assert stats["requests"] == model_turns > len(qs)
    assert stats["prefix_cached_tokens"] > stats["prompt_tokens"] / 2
    # No barrier per turn: trajectories of different turn lengths do not wait for each other's turns.
    assert counter.n == stats["decode_steps"] < turn_steps


@pytest.mark.vllm
def test_sampled_session_trajectories_depend_on_seed_and_position_only(cfg, vllm_be, tok, retriever):
    qs = [ex.question for ex in hotpot(9, 2)]
    eng = rollout_engine(cfg, vllm_be, tok, retriever)
    base = eng.run(qs[:6], temperature=1.0, seed=11)
    assert eng.last_stats["engine"] == "continuous" and any(t.passages for t in base)
    assert ids(eng.run(qs[:6], temperature=1.0, seed=11)) == ids(base)
    # other companions (and fewer of them): each trajectory is the same
    assert ids(eng.run(qs[:3] + qs[6:], temperature=1.0, seed=11))[:3] == ids(base)[:3]
    assert ids(eng.run(qs[:6], temperature=1.0, seed=12)) != ids(base)
    # the same question at two positions samples two streams (a GRPO group does not collapse)
    group = eng.run([qs[0]] * 4, temperature=1.0, seed=11)
    assert group[0].completion_ids == base[0].completion_ids and len(set(map(tuple, ids(group)))) > 1


def drive(backend, prompts, *, max_new, stop_strings, temperature=0.0, seed=None):
    """One turn of each prompt through a backend's session, as the rollout engine drives it."""
    session = backend.open_session(n_sequences=len(prompts), max_len=max(map(len, prompts)) + max_new,
                                   max_new_total=max_new, temperature=temperature, top_p=1.0,
                                   stop_strings=stop_strings, seed=seed)
    ends = {}
    try:
        for i, p in enumerate(prompts):
            session.add(i, p, max_new_tokens=max_new)
        while session.busy():
            ends.update((e.key, e) for e in session.step())
    finally:
        session.close()
    return [ends[i] for i in range(len(prompts))]


@pytest.mark.vllm
def test_a_session_cuts_at_a_stop_string_and_an_eos_where_the_transformers_backend_does(vllm_be, hf_be, tok):
    """A stop string first completed by a token inside free text, and an eos id the engine itself does not
    stop on (only our eos set has it): the session ends the turn where the transformers backend does, with
    the same ids, reason and log-probs."""
    from awarl.agent.backends.hf import HFBackend
    from awarl.agent.backends.vllm import VLLMBackend

    prompt = tok.encode("Which Canadian rock band released a song called Counterparts?", add_special_tokens=False)
    (free,) = hf_be.generate([prompt], max_new_tokens=24, temperature=0.0)
    (vfree,) = drive(vllm_be, [prompt], max_new=24, stop_strings=[])
    assert (vfree.token_ids, vfree.finish_reason) == (free.token_ids, free.finish_reason)
    fresh = [i for i in range(3, len(free.token_ids)) if free.token_ids[i] not in free.token_ids[:i]
             and tok.decode(free.token_ids[i:i + 1]).strip().isalnum()]
    k, j = fresh[0], fresh[-1]
    stop = tok.decode(free.token_ids[j:j + 1])
    (h,) = hf_be.generate([prompt], max_new_tokens=24, temperature=0.0, stop_strings=[stop])
    (v,) = drive(vllm_be, [prompt], max_new=24, stop_strings=[stop])
    assert h.finish_reason == "stop" and len(h.token_ids) <= j + 1
    assert (v.token_ids, v.finish_reason) == (h.token_ids, h.finish_reason)
    assert v.logprobs == pytest.approx(h.logprobs, abs=LP_TOL)
    extra = SimpleNamespace(eos_token_id=[tok.eos_token_id, free.token_ids[k]])
    hf_eos = HFBackend(hf_be.model, tok)
    hf_eos.eos |= set(extra.eos_token_id)
    (h,) = hf_eos.generate([prompt], max_new_tokens=24, temperature=0.0)
    (v,) = drive(VLLMBackend(vllm_be.llm, tok, generation_config=extra), [prompt], max_new=24, stop_strings=[])
    assert (h.token_ids, h.finish_reason) == (free.token_ids[:k + 1], "eos")
    assert (v.token_ids, v.finish_reason) == (h.token_ids, h.finish_reason)
    assert v.logprobs == pytest.approx(h.logprobs, abs=LP_TOL)


class SlowRetriever:
    """The real BM25 retriever behind a latency: a call returns once the engine has stepped 3 more times (or
    after 10 s), noting how many steps ran meanwhile."""

    def __init__(self, inner, counter):
        self.inner, self.counter, self.calls = inner, counter, []

    def search(self, queries, k):
        before, deadline = self.counter.n, time.monotonic() + 10
        while self.counter.n < before + 3 and time.monotonic() < deadline:
            time.sleep(0.002)
        self.calls.append(self.counter.n - before)
        return self.inner.search(queries, k)


@pytest.mark.vllm
def test_the_engine_keeps_stepping_while_a_search_is_out_and_leaves_no_request_behind(cfg, vllm_be, tok,
                                                                                      retriever):
    qs = [ex.question for ex in hotpot(8, 0)]
    counter = StepCounter(vllm_be.llm)
    try:
        slow = SlowRetriever(retriever, counter)
        # as soon as back: with a lag the engine would wait for a search that waits for the engine's steps
        as_ready = cfg.model_copy(update={"generation": cfg.generation.model_copy(update={"search_lag_steps": None})})
        trajs = rollout_engine(as_ready, vllm_be, tok, slow).run(qs, temperature=1.0, seed=5)
    finally:
        counter.restore()
    assert slow.calls and any(n >= 3 for n in slow.calls)   # others generated while a search was out
    assert len({len(t.completion_ids) for t in trajs}) > 1
    assert not vllm_be.llm.llm_engine.has_unfinished_requests()

    class FailingRetriever:
        def search(self, queries, k):
            raise OSError("index gone")

    with pytest.raises(OSError, match="index gone"):
        rollout_engine(cfg, vllm_be, tok, FailingRetriever()).run(qs, temperature=1.0, seed=5)
    # the interrupted rollout's requests were aborted: the engine is free for the next call
    assert not vllm_be.llm.llm_engine.has_unfinished_requests()
    assert vllm_be.generate([[5, 6, 7]], max_new_tokens=4, temperature=0.0)[0].token_ids


# ----------------------------------------------------------------------------------------- server
def fake_server_app(tok, log: list, slow_marker: str, delay_s: float):
    """A FAKE vLLM server (conftest.fake_vllm_app): a prompt that ends with an information block gets an
    answer turn, any other a search turn; a prompt containing `slow_marker` is answered after `delay_s`. Logs
    (arrival, reply, thread) per request."""

    def turn(body: dict, prompt: list[int]) -> str:
        text = tok.decode(prompt)
        if slow_marker in text:
            time.sleep(delay_s)
        return "<answer> Paris </answer>" if text.rstrip().endswith("</information>") else \
            "<search> capital of France </search>"

    def record(body: dict, arrived: float) -> None:
        log.append({"body": body, "arrived": arrived, "replied": time.monotonic(),
                    "thread": threading.current_thread().name})

    return fake_vllm_app(tok, turn, record)


@pytest.mark.slow
def test_server_session_keeps_one_request_per_trajectory_in_flight(tiny_dir, shipped_bm25_dir, monkeypatch):
    """Two trajectories against a server that answers one of them slowly: the fast one's second turn goes out
    (and its whole trajectory ends) while the slow one's first request is still out; every request carries
    one prompt (the trajectory's history) and, in a seeded run, that trajectory's own seed for the turn."""
    import trl.generation.vllm_client as vc
    from transformers import AutoTokenizer

    from awarl.agent.backends.base import stream_seed
    from awarl.agent.backends.vllm import VLLMServerBackend
    from awarl.agent.rollout import RolloutEngine
    from awarl.agent.templates import load_template
    from awarl.config import load_config
    from awarl.retrieval import load_index

    monkeypatch.setattr(vc, "is_vllm_available", lambda: True)   # TRL's client refuses to start without vLLM
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    cfg = load_config(None, ["agent.max_turns=2", "retrieval.topk=2"])
    qs = ["What is the capital of France?", "Which river flows through the slow city?"]
    log: list[dict] = []
    with serve_app(fake_server_app(tok, log, "slow city", 1.0)) as url:
        def run(continuous, seed):
            backend = VLLMServerBackend(url, tok, connection_timeout=5, continuous=continuous)
            eng = RolloutEngine(backend, tok, load_index(shipped_bm25_dir), load_template(cfg.agent.template),
                                cfg.agent, cfg.retrieval.topk)
            return eng.run(qs, temperature=1.0, seed=seed), eng.last_stats

        trajs, stats = run(True, 3)
        session_log, log[:] = list(log), []
        per_turn, turn_stats = run(False, 3)
    assert stats["engine"] == "continuous" and turn_stats == {"engine": "turns", "failed_searches": 0}
    assert [t.completion_ids for t in trajs] == [t.completion_ids for t in per_turn]
    assert all(t.parsed.answer == "Paris" and len(t.passages) == 2 for t in trajs)
    assert len(session_log) == 4 and all(len(r["body"]["prompt"]) == 1 for r in session_log)
    slow = [r for r in session_log if "slow city" in tok.decode(r["body"]["prompt"][0])]
    fast = [r for r in session_log if r not in slow]
    assert fast[1]["arrived"] < slow[0]["replied"]    # the fast trajectory did not wait for the slow one's turn
    for i, rows in enumerate((fast, slow)):
        assert [r["body"]["seed"] for r in rows] == [stream_seed(stream_seed(3, i), turn) for turn in (0, 1)]
        assert rows[1]["body"]["prompt"][0][: len(rows[0]["body"]["prompt"][0])] == rows[0]["body"]["prompt"][0]
    # the per-turn fallback: one request per turn for both, no seed (it would be shared by the prompts)
    assert len(log) == 2 and all(len(r["body"]["prompt"]) == 2 and "seed" not in r["body"] for r in log)


def test_a_server_backend_is_bounded_by_the_context_the_server_lists(tiny_dir, shipped_bm25_dir, monkeypatch, caplog):
    """The server backend had no context length: a trajectory whose history grew past the server's
    max_model_len got a 400 for its turn, which failed the whole generation round (the colocated engine's
    turns were bounded). It now reads max_model_len from /v1/models, and a full trajectory ends as token_budget."""
    import trl.generation.vllm_client as vc
    from transformers import AutoTokenizer

    from awarl.agent.backends.vllm import VLLMServerBackend, served_context_len
    from awarl.agent.rollout import RolloutEngine
    from awarl.agent.templates import load_template, render_prompt
    from awarl.config import load_config
    from awarl.retrieval import load_index

    monkeypatch.setattr(vc, "is_vllm_available", lambda: True)   # TRL's client refuses to start without vLLM
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    cfg = load_config(None, ["agent.max_turns=4", "retrieval.topk=3", "agent.max_trajectory_tokens=2048"])
    question = "Which river flows through the city?"
    room = len(render_prompt(load_template(cfg.agent.template), question, tok)) + 200  # less than one search's passages
    searches = fake_vllm_app(tok, lambda body, prompt: "<search> capital of France </search>", max_model_len=room)
    with serve_app(searches) as url:
        backend = VLLMServerBackend(url, tok, connection_timeout=5)
        assert backend.context_len == room
        eng = RolloutEngine(backend, tok, load_index(shipped_bm25_dir), load_template(cfg.agent.template),
                            cfg.agent, cfg.retrieval.topk)
        (traj,) = eng.run([question], temperature=0.0)
    assert traj.stop_reason == "token_budget" and len(traj.prompt_ids) + len(traj.completion_ids) <= room
    with serve_app(fake_vllm_app(tok, lambda body, prompt: "")) as url:   # a server that lists no length
        assert served_context_len(url) is None and "lists no max_model_len" in caplog.text
    assert served_context_len("http://127.0.0.1:9", timeout_s=2) is None   # nothing listening: no bound, a warning
