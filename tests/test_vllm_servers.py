"""vLLM's OpenAI-compatible server on CPU, started by scripts/serve_vllm.sh and scripts/serve_judge.sh on
loopback, against awarl's clients of it.

- serve_vllm.sh (what `train.vllm_mode: server` trains against): TRL's own `VLLMClient`, as the rollout
  adapter builds it from a server-mode GRPOConfig, drives multi-turn rollouts with the real BM25 retriever;
  they equal the transformers backend's token for token. The one part of server mode that cannot run
  here is the weight push: TRL sends weights through vLLM's NCCL weight-transfer engine, CUDA only.
- serve_judge.sh: awarl's `OpenAIJudge` gets a schema-valid verdict through structured outputs
  (response_format json_schema). The judge is the tiny model tuned to answer every judge prompt with a
  verdict whose `status` is not one the schema allows, so the check has teeth: the same model without
  response_format replies with a verdict the schema rejects; with it, vLLM's grammar forces a valid one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from conftest import fake_chat_app, free_port, serve_app

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 300   # a vLLM server on 2 busy cores: imports, an engine-core process, the engine
OFF_ENUM = "maybe"  # in no enum of the verdict schema


def off_schema_instance(schema: dict) -> object:
    """An instance of `schema` (the judge's own response_format) that breaks it only where it has an enum
    (the claim status): every enum gets OFF_ENUM, every other field a plain value, arrays one item."""
    if "anyOf" in schema:
        return off_schema_instance(schema["anyOf"][0])
    if "enum" in schema:
        return OFF_ENUM
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object":
        return {k: off_schema_instance(v) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        return [off_schema_instance(schema.get("items", {}))]
    return {"string": "Paris", "number": 0.5, "integer": 1, "boolean": True}.get(kind)


@contextlib.contextmanager
def served(script: str, args: list[str], log: Path) -> Iterator[str]:
    """Run scripts/`script` in its own process group on a free loopback port; yield its base URL once
    /health answers; stop that process group."""
    port = free_port()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", str(REPO / "scripts" / script), *args, "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{script} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.time() > deadline:
                raise RuntimeError(f"{script} did not answer /health in {START_TIMEOUT_S} s:\n"
                                   f"{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


# ---------------------------------------------------------------------- arguments (no vLLM needed)
@pytest.mark.parametrize(("script", "args", "msg"), [
    ("serve_vllm.sh", ["--model", "m", "--dtype", "fp8;x"], "--dtype must be"),
    ("serve_vllm.sh", ["--model", "m", "--prefix-caching", "yes"], "--prefix-caching must be true or false"),
    ("serve_judge.sh", [], "--model is required"),
    ("serve_judge.sh", ["--model", "$(reboot)"], "unexpected characters"),
    ("serve_judge.sh", ["--model", "m", "--dtype", "int3"], "--dtype must be"),
    ("serve_judge.sh", ["--model", "m", "--port", "0"], "--port must be"),
    ("serve_judge.sh", ["--model", "m", "--gpus", "0", "--tp", "2"], "must equal the number of --gpus"),
    ("serve_judge.sh", ["--bogus"], "unknown argument"),
])
def test_the_vllm_serving_scripts_reject_bad_arguments(script, args, msg):
    r = subprocess.run(["bash", str(REPO / "scripts" / script), *args], capture_output=True, text=True)
    assert r.returncode == 2 and msg in r.stderr


# -------------------------------------------------------------------------------- serve_vllm.sh
@pytest.mark.vllm
def test_serve_vllm_sh_rollouts_through_trls_client_equal_the_transformers_backend(
        tmp_path, protocol_dir, shipped_bm25_dir, monkeypatch):
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from awarl.agent.backends import make_backend
    from awarl.agent.backends.vllm import VLLMServerBackend
    from awarl.agent.rollout import RolloutEngine
    from awarl.agent.templates import load_template
    from awarl.config import load_config
    from awarl.data.loaders import load_examples
    from awarl.io import shipped_data_dir
    from awarl.retrieval import load_index
    from awarl.training.rollout_adapter import RolloutAdapter

    cfg = load_config(None, ["agent.max_turns=3", "agent.max_new_tokens_per_turn=48",
                             "agent.max_trajectory_tokens=768", "retrieval.topk=2", "generation.dtype=float32"])
    tok = AutoTokenizer.from_pretrained(protocol_dir)
    retriever = load_index(shipped_bm25_dir)
    hotpot = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"
    questions = [ex.question for ex in load_examples(hotpot, format="hotpotqa", dataset="hotpotqa", limit=4,
                                                     seed=0).examples]
    hf = RolloutEngine.from_config(cfg, tok, retriever, backend=make_backend(cfg.generation, str(protocol_dir),
                                                                              tok, kind="hf"))
    expected = hf.run(questions, temperature=0.0)
    args = ["--cpu", "--model", str(protocol_dir), "--dtype", "float32", "--enforce-eager", "--max-model-len",
            "2048"]
    with served("serve_vllm.sh", args, tmp_path / "serve_vllm.log") as url:
        grpo = GRPOConfig(output_dir=str(tmp_path / "out"), use_vllm=True, vllm_mode="server",
                          vllm_server_base_url=url, vllm_server_timeout=30, use_cpu=True, bf16=False,
                          report_to="none")
        trainer = SimpleNamespace(args=grpo, model=None, use_vllm=True)
        adapter = RolloutAdapter(cfg, tok, retriever, load_template(cfg.agent.template), [])
        with adapter._backend(trainer) as backend:
            assert isinstance(backend, VLLMServerBackend)
            assert backend.context_len == 2048   # the server's --max-model-len, read from its /v1/models
            engine = RolloutEngine.from_config(cfg, tok, retriever, backend=backend)
            got = engine.run(questions, temperature=0.0)
            assert engine.last_stats["engine"] == "continuous"   # one request in flight per trajectory
            with pytest.raises(NotImplementedError, match="CUDA"):  # why server mode cannot train on CPU
                backend.client.init_communicator(device="cpu")
    for h, v in zip(expected, got, strict=True):
        assert (v.completion_ids, v.env_mask, v.stop_reason) == (h.completion_ids, h.env_mask, h.stop_reason)
        assert v.parsed.answer == h.parsed.answer
        for lv, lh, m in zip(v.logprobs, h.logprobs, v.env_mask, strict=True):
            assert abs(lv - lh) < 2e-4 if m else lv == lh == 0.0
    assert any(0 in t.env_mask for t in expected)  # retrieval turns were compared too


# ------------------------------------------------------------------------------- serve_judge.sh
def judge_request(item) -> dict:
    """The request `OpenAIJudge.verify` sends, captured by a loopback endpoint that then refuses it."""
    from fastapi.responses import JSONResponse

    from awarl.config import CriticConfig
    from awarl.critic.openai_judge import OpenAIJudge

    seen: list[dict] = []
    app = fake_chat_app(lambda body: JSONResponse({"error": "captured"}, status_code=400), log=seen)
    with serve_app(app) as url:
        judge = OpenAIJudge(CriticConfig(judge="openai", base_url=f"{url}/v1", model="tiny-judge", retries=0))
        assert judge.verify([item]) == [None]
        judge.close()
    (body,) = seen
    return body


def tune_judge(tiny_dir: Path, out: Path, messages: list[dict], reply: str) -> Path:
    """The tiny model taught to reply `reply` to the judge's prompt (its chat template rendered), with
    awarl's supervised warm-up loop on that one sequence (loss on the reply only)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.training.warmup import WarmupSequence, supervised_warmup

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    p_ids = tok.encode(prompt, add_special_tokens=False)
    r_ids = tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id]
    seq = WarmupSequence(p_ids + r_ids, [0] * len(p_ids) + [1] * len(r_ids), answered=True)
    supervised_warmup(model, tok, [seq], steps=100, batch_size=1, lr=1e-2, progress=False)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.mark.vllm
def test_serve_judge_sh_gives_the_openai_judge_a_schema_valid_verdict(tmp_path, tiny_dir):
    from pydantic import ValidationError

    from awarl.config import CriticConfig
    from awarl.critic.openai_judge import OpenAIJudge
    from awarl.critic.schema import CriticInput, CriticOutput, PassageRef

    passage = PassageRef(number=1, id="p1", title="Paris", text="Paris is the capital and largest city of France.")
    item = CriticInput(question="What is the capital of France?", answer="Paris", cited=[passage],
                       passages=[passage])
    body = judge_request(item)
    assert body["response_format"]["type"] == "json_schema"
    off = json.dumps(off_schema_instance(body["response_format"]["json_schema"]["schema"]), separators=(",", ":"))
    assert f'"{OFF_ENUM}"' in off
    model = tune_judge(tiny_dir, tmp_path / "judge", body["messages"], off)
    args = ["--cpu", "--model", str(model), "--dtype", "float32", "--enforce-eager", "--max-model-len", "4096"]
    with served("serve_judge.sh", args, tmp_path / "serve_judge.log") as url:
        # Without response_format the tuned model's own reply is a verdict the schema rejects ...
        free = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            **{k: v for k, v in body.items() if k != "response_format"}, "model": str(model)}
        ).json()["choices"][0]["message"]["content"]
        with pytest.raises(ValidationError, match="status"):
            CriticOutput.model_validate(json.loads(free))  # JSON, off the schema in its status
        # ... with it (the judge's own request), vLLM's structured outputs make it one the schema accepts.
        judge = OpenAIJudge(CriticConfig(judge="openai", base_url=f"{url}/v1", model=str(model), retries=0,
                                         max_tokens=256), cache_dir=tmp_path / "cache")
        (verdict,) = judge.verify([item])
        judge.close()
    assert judge.failures == 0 and isinstance(verdict, CriticOutput)  # the content is the tiny model's
