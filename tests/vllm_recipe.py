"""The single-GPU recipe on CPU, as the vLLM tier runs it (tests/test_vllm_differential.py, test_vllm_session.py,
test_vllm_pretrained.py, test_vllm_training.py): one place for the recipe, the questions and what CPU needs,
the rollout engine those modules compare over each backend, and the check of sampled log-probs against the
policy's. Each module adds its own budgets.

The recipe's gpu_memory_utilization, tensor_parallel_size, enable_prefix_caching and max_model_len stay as
it sets them (unless a module says otherwise), so the tests check that they reach `vllm.LLM`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from awarl.io import shipped_data_dir

if TYPE_CHECKING:
    from awarl.agent.rollout import RolloutEngine
    from awarl.config import AwarlConfig
    from awarl.data.types import QAExample

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "qwen2.5-3b_1gpu.yaml"  # colocate, LoRA, vLLM options
HOTPOT = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"
# What CPU needs on top of the recipe: float32 (no bf16 kernels here), eager (no 40 s torch.compile at
# engine start-up).
ON_CPU = ("generation.dtype=float32", "generation.enforce_eager=true")


def recipe_config(index_dir: Path, overrides: list[str]) -> AwarlConfig:
    """The recipe with `overrides` (ON_CPU and the module's budgets), retrieving from the BM25 index at
    `index_dir` (the shipped closed corpus's)."""
    from awarl.config import load_config

    return load_config(str(RECIPE), [*overrides, f"retrieval.index_dir={index_dir}"])


def hotpot(n: int, seed: int) -> list[QAExample]:
    """`n` questions of the shipped HotpotQA sample, drawn with `seed`."""
    from awarl.data.loaders import load_examples

    return load_examples(HOTPOT, format="hotpotqa", dataset="hotpotqa", limit=n, seed=seed).examples


def rollout_engine(cfg: AwarlConfig, backend: Any, tok: Any, retriever: Any) -> RolloutEngine:
    """The rollout engine of `cfg` generating with `backend` (vLLM's or transformers')."""
    from awarl.agent.rollout import RolloutEngine

    return RolloutEngine.from_config(cfg, tok, retriever, backend=backend)


def check_logprobs_against_policy(trajs: list, model_dir: Path, temperature: float, tol: float) -> int:
    """Every model token's log-prob in `trajs` (sampled at `temperature`) is log softmax(logits / T) of
    the policy at `model_dir`, checked against one transformers forward pass per trajectory, within `tol`
    and never NaN; environment tokens are not the policy's and are skipped. Returns how many were checked."""
    import math

    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    checked = 0
    for t in trajs:
        ids = torch.tensor([t.prompt_ids + t.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_ids) - 1:-1].float() / temperature
        ref = torch.log_softmax(logits, -1).gather(-1, ids[0, len(t.prompt_ids):, None]).squeeze(-1).tolist()
        for lp, r, m in zip(t.logprobs, ref, t.env_mask, strict=True):
            if m:
                assert not math.isnan(lp) and abs(lp - r) < tol, (lp, r)
                checked += 1
    return checked
