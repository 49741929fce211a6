"""GRPO training through TRL's colocated vLLM engine on vLLM's CPU build, with awarl's weight sync.

Real: the single-GPU recipe (configs/qwen2.5-3b_1gpu.yaml: colocate, LoRA, its vLLM options) with only
what CPU needs changed, TRL's GRPOTrainer and the engine it builds, awarl's rollout function and reward, the
BM25 index of the shipped closed corpus, and `awarl.training.weight_sync` (vLLM's reload API: TRL 1.16's
own per-parameter sync fails on vLLM 0.32 with "'Parameter' object has no attribute 'weight_loader'").
The policy is the protocol-warmed tiny model, so sampled trajectories differ in outcome and the GRPO steps
change the weights. After each step the engine must generate what the live policy (LoRA merged)
computes, and no longer what the initial weights did.

Server mode cannot train on CPU: TRL pushes weights to `trl vllm-serve` through vLLM's NCCL weight-transfer
engine, which needs a CUDA device (TRL raises NotImplementedError for any other). Its generation path runs
for real against a server started by scripts/serve_vllm.sh (tests/test_vllm_servers.py), its training
path against a fake server (tests/test_vllm_server_mode.py)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from vllm_recipe import HOTPOT, ON_CPU, hotpot, recipe_config

pytestmark = pytest.mark.vllm

STEPS = 2
LP_TOL = 2e-4


def recipe_on_cpu(tmp_path: Path, model: Path, bm25: Path, estimates: Path):
    data = json.dumps([{"path": str(HOTPOT), "format": "hotpotqa", "dataset": "hotpotqa", "limit": 2}])
    return recipe_config(bm25, [
        f"run.out_dir={tmp_path / 'run'}", f"train.model={model}", f"data.train={data}",
        f"train.p_estimates={estimates}", *ON_CPU, "generation.temperature=1.0",
        # Tiny budgets.
        "retrieval.topk=2", "agent.max_turns=2", "agent.max_new_tokens_per_turn=40",
        "agent.max_trajectory_tokens=512",
        # Two questions x four completions per step; a step large enough to move the tiny model's weights.
        "train.num_generations=4", "train.per_device_train_batch_size=8", "train.gradient_accumulation_steps=1",
        f"train.max_steps={STEPS}", "train.learning_rate=0.02", "train.report_to=[none]", "critic.judge=none",
        "reward.lambda_cite=0"])


class Probe:
    """After every optimizer step: sync (awarl's installed sync_weights), then greedy-decode probe prompts
    with the engine and with transformers on the live policy (LoRA adapters applied in its forward)."""

    def __init__(self, tok, prompts):
        self.tok, self.prompts, self.steps, self.initial = tok, prompts, [], None
        self.trainer = None

    def greedy(self):
        from awarl.agent.backends.hf import HFBackend
        from awarl.agent.backends.vllm import VLLMBackend

        engine = VLLMBackend(self.trainer.vllm_generation.llm, self.tok)
        policy = HFBackend(self.trainer.model, self.tok)
        return [be.generate(self.prompts, max_new_tokens=16, temperature=0.0) for be in (engine, policy)]

    def assert_engine_followed(self, lp_tol: float, min_move: float) -> None:
        """Before training and after each step the engine decoded what transformers decodes on the live
        policy; and the steps moved the weights (greedy ids or a log-prob by more than `min_move`), so an
        engine left with the initial ones would have failed."""
        assert len(self.steps) == STEPS
        for engine, policy in [self.initial, *self.steps]:
            for v, h in zip(engine, policy, strict=True):
                assert v.token_ids == h.token_ids and v.finish_reason == h.finish_reason
                assert v.logprobs == pytest.approx(h.logprobs, abs=lp_tol)
        (before, _), (after, _) = self.initial, self.steps[-1]
        moved = [abs(a - b) for g0, g1 in zip(before, after, strict=True)
                 for a, b in zip(g0.logprobs, g1.logprobs, strict=False)]
        assert [g.token_ids for g in after] != [g.token_ids for g in before] or max(moved) > min_move

    def callback(self):
        from transformers import TrainerCallback

        probe = self

        class _CB(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                probe.initial = probe.greedy()

            def on_step_end(self, args, state, control, **kw):
                probe.trainer.vllm_generation.sync_weights()
                probe.steps.append(probe.greedy())

        return _CB()


def test_colocated_vllm_training_syncs_each_step_through_the_reload_api(tmp_path, protocol_dir,
                                                                          shipped_bm25_dir):
    from transformers import AutoTokenizer

    from awarl.agent.backends.vllm import VLLMBackend
    from awarl.agent.templates import load_template, render_prompt
    from awarl.data.estimates import estimate_row
    from awarl.stages.train import run_train
    from awarl.training import weight_sync

    examples = hotpot(2, 0)
    estimates = tmp_path / "p.jsonl"
    estimates.write_text("".join(json.dumps(estimate_row(ex, ["correct", "wrong"])) + "\n" for ex in examples))
    cfg = recipe_on_cpu(tmp_path, protocol_dir, shipped_bm25_dir, estimates)
    assert cfg.train.use_vllm and cfg.train.vllm_mode == "colocate" and cfg.train.lora.enabled  # the recipe's
    tok = AutoTokenizer.from_pretrained(protocol_dir)
    probe = Probe(tok, [render_prompt(load_template("awarl"), ex.question, tok) for ex in examples])
    seen: dict = {"syncs": 0, "rollout_backends": []}

    def on_trainer(trainer):
        probe.trainer = trainer
        gen = trainer.vllm_generation
        seen["method"] = weight_sync.sync_method(gen.llm)
        seen["engine"] = gen.llm.llm_engine.vllm_config
        installed = gen.sync_weights

        def counting_sync():
            seen["syncs"] += 1
            installed()

        gen.sync_weights = counting_sync
        adapter = trainer.rollout_func
        original = adapter._backend

        @contextlib.contextmanager
        def spy(tr):
            with original(tr) as be:
                # (the backend's name, why it cannot open a session: None = the continuous path)
                seen["rollout_backends"].append((type(be).__name__, be.session_support()))
                yield be

        adapter._backend = spy

    summary = run_train(cfg, final_eval=False, callbacks=[probe.callback()], on_trainer=on_trainer)
    assert summary["global_step"] == STEPS
    # The plan kept vLLM on this CPU (its CPU build), and rollouts went through the colocated engine.
    assert seen["method"] == weight_sync.RELOAD
    assert seen["rollout_backends"] == [(VLLMBackend.__name__, None)] * STEPS   # continuous (a session)
    assert seen["syncs"] >= 2 * STEPS  # TRL's sync before each step's rollouts, and the probe's
    # The recipe's vLLM options reached TRL's engine (through GRPOConfig and awarl's engine options).
    vc = seen["engine"]
    assert vc.cache_config.gpu_memory_utilization == cfg.generation.gpu_memory_utilization == 0.35
    assert vc.parallel_config.tensor_parallel_size == 1
    assert vc.model_config.max_model_len == cfg.agent.max_trajectory_tokens + 2048
    assert vc.cache_config.enable_prefix_caching is True and vc.model_config.enforce_eager is True
    probe.assert_engine_followed(LP_TOL, min_move=1e-2)
