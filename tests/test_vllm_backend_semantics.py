"""The one set of vLLM generation semantics (awarl/agent/backends/vllm.py docstring), held for BOTH vLLM
backends: an in-process engine (a FAKE `vllm.LLM` stands in: vLLM is not installed in this environment)
and a `trl vllm-serve` server (a FAKE client object returning TRL's client output shape; the real TRL
client against a fake server is tests/test_vllm_server_mode.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest


@pytest.fixture(scope="module")
def tok(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


class FakeEngine:
    """Stands in for vllm.LLM: returns fixed ids with a logprob for the first `known` tokens only."""

    def __init__(self, ids, known, finish_reason=None, stop_reason=None):
        self.ids, self.known, self.finish_reason, self.stop_reason = ids, known, finish_reason, stop_reason
        self.params = None

    def generate(self, prompts, sampling_params, use_tqdm):
        self.params = sampling_params
        lps = [{t: SimpleNamespace(logprob=-0.5)} for t in self.ids[: self.known]]
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=list(self.ids), logprobs=lps,
                                                         finish_reason=self.finish_reason,
                                                         stop_reason=self.stop_reason)]) for _ in prompts]


class FakeClient:
    """Stands in for TRL's VLLMClient: records the call, returns its output shape (logprobs per position
    as [value], with their token ids) for the first `known` tokens only."""

    def __init__(self, ids, known):
        self.ids, self.known, self.calls = ids, known, []

    def generate(self, prompts, **kw):
        self.calls.append(kw)
        n = len(prompts)
        lps = [[[-0.5] for _ in self.ids[: self.known]] for _ in range(n)]
        toks = [[[t] for t in self.ids[: self.known]] for _ in range(n)]
        return {"completion_ids": [list(self.ids) for _ in range(n)], "logprobs": lps, "logprob_token_ids": toks}


def in_process(tok, ids, known, **engine_kw):
    from awarl.agent.backends.vllm import VLLMBackend

    engine = FakeEngine(ids, known, **engine_kw)
    gen_cfg = SimpleNamespace(eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")])
    return VLLMBackend(engine, tok, generation_config=gen_cfg, sampling_params_cls=lambda **kw: kw), \
        lambda: engine.params[0]


def server(tok, ids, known, **_):
    from awarl.agent.backends.vllm import VLLMServerBackend

    client = FakeClient(ids, known)
    gen_cfg = SimpleNamespace(eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")])
    return VLLMServerBackend("http://unused", tok, generation_config=gen_cfg, client=client), \
        lambda: {**client.calls[-1], **client.calls[-1]["generation_kwargs"]}


BACKENDS = pytest.mark.parametrize("make", [in_process, server], ids=["in_process", "server"])


@BACKENDS
def test_a_logprob_vllm_does_not_report_is_nan_not_zero(tok, make):
    ids = tok.encode("<answer> Paris </answer>", add_special_tokens=False)
    be, _ = make(tok, ids, known=2)
    (g,) = be.generate([[1]], max_new_tokens=30, temperature=1.0, stop_strings=["</answer>"], seed=0)
    assert g.logprobs[:2] == [-0.5, -0.5]
    assert len(g.logprobs) == len(g.token_ids) and all(math.isnan(x) for x in g.logprobs[2:])


@BACKENDS
def test_greedy_resets_top_p_and_special_tokens_are_kept(tok, make):
    ids = tok.encode("<answer> Paris </answer>", add_special_tokens=False)
    be, params = make(tok, ids, known=len(ids))
    be.generate([[1]], max_new_tokens=30, temperature=0.0, top_p=0.7, stop_strings=["</answer>"], seed=0)
    assert params()["top_p"] == 1.0 and params()["skip_special_tokens"] is False
    be.generate([[1]], max_new_tokens=30, temperature=0.8, top_p=0.7, stop_strings=["</answer>"], seed=0)
    assert params()["top_p"] == 0.7 and params()["temperature"] == 0.8
    assert params()["include_stop_str_in_output"] is True and params()["logprobs"] == 0


@BACKENDS
def test_an_eos_of_the_generation_config_ends_the_message(tok, make):
    """Qwen instruct models end on `<|endoftext|>` too, which the tokenizer's eos does not name: both vLLM
    backends take the policy's generation_config eos ids, cut there and label it eos."""
    other = tok.convert_tokens_to_ids("<|endoftext|>")
    assert other != tok.eos_token_id
    ids = tok.encode("<think> done", add_special_tokens=False) + [other] + tok.encode(" more", add_special_tokens=False)
    be, _ = make(tok, ids, known=len(ids))
    (g,) = be.generate([[1]], max_new_tokens=30, temperature=1.0, stop_strings=["</answer>"], seed=0)
    assert g.finish_reason == "eos" and g.token_ids[-1] == other and len(g.token_ids) == ids.index(other) + 1


def test_in_process_seeds_are_per_prompt_and_the_server_gets_none(tok):
    ids = tok.encode("<answer> x </answer>", add_special_tokens=False)
    be, _ = in_process(tok, ids, known=len(ids))
    be.generate([[1]] * 3, max_new_tokens=9, temperature=1.0, stop_strings=["</answer>"], seed=4)
    assert [p["seed"] for p in be.llm.params] == [4, 5, 6]
    be.generate([[1]] * 3, max_new_tokens=9, temperature=1.0, stop_strings=["</answer>"], seed=[11, 7, 93])
    assert [p["seed"] for p in be.llm.params] == [11, 7, 93]   # one seed per prompt (question_seed): its own
    from awarl.agent.backends.base import stream_seed
    from awarl.agent.backends.vllm import turn_seed

    # a session request: the trajectory's own stream at its turn, by position or from its own seed
    assert turn_seed(4, 1, 2) == stream_seed(stream_seed(4, 1), 2) and turn_seed([5, 9], 1, 2) == stream_seed(9, 2)
    sbe, params = server(tok, ids, known=len(ids))
    sbe.generate([[1]] * 3, max_new_tokens=9, temperature=1.0, stop_strings=["</answer>"], seed=4)
    assert "seed" not in params()
