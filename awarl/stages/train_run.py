"""Run management of `awarl train`: everything around the training recipe (awarl/stages/train.py) that a run
folder needs across launches. Where a launch starts (a fresh run must not overwrite one; a resume keeps the
run's objective and says what else changed; a run already at train.max_steps trains nothing), what it
records (the resolved config, the final policy, the LoRA adapters merged in) and what a stopped run leaves.
The run folder's lock is taken by `run_train` (awarl/locks.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from awarl.config import AwarlConfig, ConfigError, config_changes, read_resolved, save_resolved
from awarl.io import atomic_write_text, loads_json
from awarl.rewards.trl_reward import AwaRLReward, load_reward_state
from awarl.stages.eval_manifest import MANIFEST
from awarl.stages.predictions import PREDICTIONS
from awarl.training.alarms import read_alarms
from awarl.training.checkpoints import checkpoint_step, refuse_fresh_start_over

if TYPE_CHECKING:
    from awarl.training.callbacks import CollapseAlarms  # imports transformers: only the training step does

log = logging.getLogger(__name__)


def check_start(cfg: AwarlConfig, resume: str | None) -> None:
    """Refuse a launch that would overwrite or change a run (first: a dry run says it too, before anything is
    loaded): a fresh start over a run folder that holds one, a resume under another advantage normalisation or
    learning-rate schedule."""
    if resume is None:
        refuse_fresh_start_over(cfg.run.out_dir)
    else:
        refuse_other_objective(cfg)


# Settings a resume must keep, with what an awarl run from before the key trained with (it passed nothing, and
# TRL's defaults are "group" advantages and a linear learning-rate decay) and what changing it midway would do.
KEPT_ON_RESUME: dict[str, tuple[str, str, str]] = {
    "scale_rewards": ("group", "advantages", "would change the objective midway"),
    "lr_scheduler_type": ("linear", "as its learning-rate schedule",
                          "would change the step sizes and where reward.refusal_warmup ends midway"),
}


def refuse_other_objective(cfg: AwarlConfig) -> None:
    """ConfigError when resuming the run in run.out_dir under another train.scale_rewards or
    train.lr_scheduler_type than it trained with (its resolved_config.yaml): the advantage normalisation is the
    objective and the schedule sets the refusal warm-up's end, and a run that changes either midway is neither
    run (a new γ or a longer max_steps only warns, keep_config_of_resumed_run). Nothing to compare without the
    file."""
    resolved = read_resolved(cfg.run.out_dir, "which advantages and schedule the run trained with")
    if resolved is None or not isinstance(resolved[1], dict):
        return
    train = resolved[1].get("train")
    for key, (before_the_key, what, why) in KEPT_ON_RESUME.items():
        before = (train.get(key) if isinstance(train, dict) else None) or before_the_key
        now = getattr(cfg.train, key)
        if before != now:
            raise ConfigError(
                f"train.{key}: the run in {cfg.run.out_dir} trained with {before!r} {what} (its "
                f"resolved_config.yaml); resuming it under {now!r} {why}. Resume with train.{key}={before}, or "
                f"start a new run (another run.out_dir)")


def keep_config_of_resumed_run(out: Path, cfg: AwarlConfig, ckpt: Path) -> list[str]:
    """Resuming with settings other than the run's: a warning naming each changed key, and the run's
    resolved_config.yaml kept as resolved_config.until-<checkpoint>.yaml, since this resume writes its own
    (a longer max_steps is a normal reason to change one; a new γ is another run, and should look like one).
    Returns the changes."""
    resolved = read_resolved(out, "what this resume changes")
    if resolved is None:
        return []
    text, old = resolved
    changes = config_changes(old, cfg.model_dump(mode="json"))
    if changes:
        kept = out / f"resolved_config.until-{ckpt.name}.yaml"
        atomic_write_text(kept, text)
        log.warning("resuming from %s with %d setting(s) other than the run's (kept in %s): %s", ckpt,
                    len(changes), kept.name, "; ".join(c[:200] for c in changes))
    return changes


def record_config(out: Path, cfg: AwarlConfig, ckpt: Path | None) -> None:
    """The run folder with this launch's resolved_config.yaml (a resume keeps the run's own beside it)."""
    out.mkdir(parents=True, exist_ok=True)
    if ckpt is not None:
        keep_config_of_resumed_run(out, cfg, ckpt)
    save_resolved(cfg, out)


def log_device(device: dict[str, Any]) -> None:
    """What the CPU forced (the plan's `device` section: effective_settings)."""
    for note in device["forced"]:
        log.warning("CPU run: %s", note)
    if device["cpu"]:
        log.info("CPU run: bf16=False, use_cpu=True, gradient checkpointing off, %s generation",
                 "colocated vLLM (CPU build)" if device["use_vllm"] else "transformers")


@dataclass(frozen=True)
class StartPoint:
    """Where a launch starts: step 0 (`ckpt` None), a checkpoint, or the checkpoint of a run that reached
    train.max_steps already (`finished`). The Trainer would still run one more step on such a resume (its stop
    check comes after a step), sampling and scoring a batch at learning rate 0 and moving Ē: its weights are
    loaded as the policy instead and nothing is trained (a plain full-weights checkpoint, `full_weights`; a
    LoRA one gets its adapters on the base weights; others, sharded, resume through the Trainer)."""

    ckpt: Path | None
    finished: bool = False
    full_weights: bool = False

    @classmethod
    def of(cls, cfg: AwarlConfig, ckpt: Path | None, model: Any) -> StartPoint:
        """`model`: a policy the caller passed in (tests): then the Trainer resumes as it would."""
        if ckpt is None:
            return cls(None)
        finished = model is None and checkpoint_step(ckpt) >= cfg.train.max_steps
        return cls(ckpt, finished, finished and not cfg.train.lora.enabled and (ckpt / "model.safetensors").is_file())

    def policy(self, model: Any, default: str) -> Any:
        """What the Trainer loads as the policy: the finished checkpoint's weights, else `model`, else `default`."""
        return str(self.ckpt) if self.full_weights else model if model is not None else default

    @property
    def resume_from(self) -> str | None:
        return str(self.ckpt) if self.ckpt is not None else None

    def restore(self, trainer: Any, reward: AwaRLReward, cfg: AwarlConfig) -> bool:
        """Load what the Trainer does not restore itself: a finished LoRA run's adapters, the reward's state (Ē,
        the online p), a finished run's trainer state. True when nothing is left to train."""
        if self.ckpt is None:
            return False
        done = self.full_weights
        if self.finished and cfg.train.lora.enabled:
            # LoRA: the base weights with the checkpoint's adapters are the final policy (every rerun of a
            # finished `awarl demo-real` trained one more step through the Trainer, and moved Ē)
            done = load_adapters(trainer, self.ckpt)
        load_reward_state(reward, self.ckpt)
        log.info("resuming from %s (Ē=%.4f after %d reward updates)", self.ckpt, reward.e_bar, reward.updates)
        if done:
            log.info("%s is at train.max_steps (%d): nothing left to train; its weights are the final policy",
                     self.ckpt, cfg.train.max_steps)
            from transformers import TrainerState

            # the step count and the log history (the demo's dynamics plot reads it), as a resume restores them
            trainer.state = TrainerState.load_from_json(str(self.ckpt / "trainer_state.json"))
        return done


def save_final(trainer: Any, tokenizer: Any, out: Path, *, lora: bool) -> Path:
    """The final policy and its tokenizer in out/final. With LoRA the trainer saves adapters only; they go to
    final/adapter and final/ gets the merged model (`save_merged`, last), because vLLM, `trl vllm-serve` and a
    warm start load a full model folder."""
    final_dir = out / "final"
    trainer.save_model(str(final_dir / "adapter" if lora else final_dir))
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(str(final_dir))
    return final_dir


def stopped_summary(out: Path, trainer: Any, training_loss: float | None, reward: AwaRLReward,
                    alarms: CollapseAlarms) -> dict[str, Any]:
    """A run stopped by a collapse alarm (train.stop_on_collapse): its checkpoint is the state to look at or
    resume; no final/ is written and no final evaluation runs (the policy is the collapsed one)."""
    step = trainer.state.global_step
    log.warning("training stopped at step %d by a collapse alarm (%s); checkpoint: %s", step,
                (alarms.stopped or {}).get("signal"), out / f"checkpoint-{step}")
    return {"out_dir": str(out), "final": None, "global_step": step, "train_loss": training_loss,
            "reward_state": reward.state_dict(), "alarms": list(alarms.records) or read_alarms(out) or [],
            "stopped": alarms.stopped, "checkpoint": str(out / f"checkpoint-{step}"), "trainer": trainer,
            "reward": reward}


def load_adapters(trainer: Any, ckpt: Path) -> bool:
    """Load a finished LoRA run's checkpoint adapters into the trainer's (freshly wrapped) policy; False when
    they cannot be loaded that way (sharded training, another adapter layout): the Trainer resumes instead."""
    path = ckpt / "adapter_model.safetensors"
    if not path.is_file() or trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled:
        return False
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    loaded = set_peft_model_state_dict(trainer.accelerator.unwrap_model(trainer.model), load_file(str(path)))
    unexpected = getattr(loaded, "unexpected_keys", None) or []
    missing = [k for k in getattr(loaded, "missing_keys", None) or [] if "lora_" in k]
    if unexpected or missing:
        log.warning("%s: adapters do not match the policy (unexpected %s, missing %s): resuming through the "
                    "Trainer", path, unexpected[:3], missing[:3])
        return False
    return True


def save_merged(trainer: Any, final_dir: Path) -> None:
    """Fold the LoRA adapters into the base weights and save the full model to final_dir."""
    sharded = trainer.is_fsdp_enabled or (
        trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3)
    if sharded:
        # The adapters' base weights are partitioned across processes here; merge offline instead.
        log.warning("LoRA under ZeRO-3/FSDP: %s/adapter holds the adapters only; merge them with peft "
                    "(PeftModel.from_pretrained(base, adapter).merge_and_unload()) before serving", final_dir)
        return
    trainer.accelerator.wait_for_everyone()
    if trainer.accelerator.is_main_process:
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        merged.save_pretrained(str(final_dir))
        log.info("merged LoRA adapters into %s (adapters alone: %s/adapter)", final_dir, final_dir)
    trainer.accelerator.wait_for_everyone()


def set_aside_other_step(out_dir: Path, step: int) -> Path | None:
    """Rename `out_dir` to `<name>.step-<N>` when it holds an evaluation of the policy at another step N (a
    resumed run that trains further evaluates its new final policy in eval/final; the old one is kept, not
    resumed as if it were the same policy). A folder whose manifest names no step (an earlier awarl) is
    moved aside too, as `<name>.step-unknown`: which weights it scored cannot be told; so is one with
    predictions and no manifest at all (the evaluation would refuse to resume it). Returns the new path."""
    manifest = out_dir / MANIFEST
    if not manifest.is_file():
        preds = out_dir / PREDICTIONS
        if not (preds.is_file() and preds.stat().st_size):
            return None
        old_step = None
    else:
        try:
            old = loads_json(manifest.read_text(encoding="utf-8"))
            old_step = old["model"]["global_step"]
        except (ValueError, OSError, KeyError, TypeError):
            old_step = None
    if old_step == step:
        return None
    tag = "unknown" if old_step is None else str(old_step)
    target = out_dir.with_name(f"{out_dir.name}.step-{tag}")
    n = 1
    while target.exists():
        n += 1
        target = out_dir.with_name(f"{out_dir.name}.step-{tag}.{n}")
    out_dir.rename(target)
    log.warning("%s held the evaluation of the policy at step %s, not %d: kept as %s", out_dir, tag, step,
                target.name)
    return target
