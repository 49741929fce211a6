"""Colocated vLLM GRPO training (TRL, LoRA) on a released checkpoint: SmolLM2-135M-Instruct with the shipped
protocol adapter merged in, vLLM's CPU build, awarl's reload-API weight sync (tests/test_vllm_training.py does
the same on the tiny model). A module of its own, so that no other engine is alive beside TRL's: two engines
and a training step of this 49,152-token-vocabulary model together ran out of the 24 GB of the CI machine.
"""

from __future__ import annotations

import json

import pytest
from test_vllm_pretrained import LP_TOL

pytestmark = [pytest.mark.vllm, pytest.mark.pretrained]
NUDGE = 0.02  # std of the nudge to the LoRA B matrices: moves greedy log-probs by far more than LP_TOL


def test_colocated_lora_grpo_on_the_released_model_keeps_the_engine_in_sync(tmp_path, smollm2_warm,
                                                                             shipped_bm25_dir):
    """Two LoRA GRPO steps of the single-GPU recipe (colocate) on SmolLM2 with CPU settings: after each step
    the engine (LoRA merged into its weights by awarl's reload-API sync) decodes what transformers decodes
    on the live policy, and no longer what the initial weights did (the GRPO update, and a seeded nudge of the
    adapters after step 1, so the check never rests on one group's reward variance)."""
    import torch
    from test_vllm_training import STEPS, Probe, recipe_on_cpu
    from transformers import AutoTokenizer, TrainerCallback

    from awarl.agent.templates import load_template, render_prompt
    from awarl.data.estimates import estimate_row
    from awarl.data.loaders import load_shipped
    from awarl.stages.train import run_train
    from awarl.training import weight_sync

    # A question the warm model answers greedily and not always when sampling: usually a group with reward
    # variance (the nudge below covers the draws without any).
    examples = [ex for ex in load_shipped("hotpotqa") if ex.id == "5a77a7695542997042120ac4"]
    assert len(examples) == 1
    estimates = tmp_path / "p.jsonl"
    estimates.write_text("".join(json.dumps(estimate_row(ex, ["correct", "wrong"])) + "\n" for ex in examples))
    cfg = recipe_on_cpu(tmp_path, smollm2_warm, shipped_bm25_dir, estimates)
    # One question x 4 completions a step (the recipe's 8 would double the step's 49,152-wide logits: the
    # test peaked at 20 GB with 8), lr large enough to move LoRA adapters in two steps.
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"learning_rate": 5e-3,
                                                                       "per_device_train_batch_size": 4}),
                                 "agent": cfg.agent.model_copy(update={"max_new_tokens_per_turn": 48,
                                                                       "max_trajectory_tokens": 640})})
    assert cfg.train.lora.enabled and cfg.train.vllm_mode == "colocate"
    tok = AutoTokenizer.from_pretrained(smollm2_warm)
    probe = Probe(tok, [render_prompt(load_template("awarl"), ex.question, tok) for ex in examples])
    seen: dict = {}

    def on_trainer(trainer):
        probe.trainer = trainer
        seen["method"] = weight_sync.sync_method(trainer.vllm_generation.llm)

    class Nudge(TrainerCallback):
        """After the first step, a seeded nudge to every LoRA B matrix. A group of four completions of one
        question can all earn the same reward (the CI machine's sampler drew four correct answers), and then
        GRPO's advantages and its update are exactly zero: the sync would be checked on unchanged weights.
        The nudge changes the adapters whatever the rewards were, before the probe's sync (registered first)."""

        def on_step_end(self, args, state, control, **kw):
            if state.global_step != 1:
                return
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for name, param in probe.trainer.model.named_parameters():
                    if "lora_B" in name:
                        param.add_(torch.randn(param.shape, generator=gen).to(param) * NUDGE)
                        seen["nudged"] = seen.get("nudged", 0) + 1

    summary = run_train(cfg, examples=examples, final_eval=False, callbacks=[Nudge(), probe.callback()],
                        on_trainer=on_trainer)
    assert seen.get("nudged", 0) > 0
    assert summary["global_step"] == STEPS and seen["method"] == weight_sync.RELOAD
    probe.assert_engine_followed(LP_TOL, min_move=1e-3)
