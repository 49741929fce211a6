"""The TrainerCallbacks of an AWA-RL run: the reward's state in every checkpoint, periodic evaluation, collapse
alarms.

transformers is imported at the top: this module is only imported by the training stage, which needs it
anyway (the reward itself, and every process that only scores, does not import this module).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from awarl.config import CollapseConfig
from awarl.rewards.trl_reward import AwaRLReward, save_reward_state
from awarl.training.alarms import ALARMS_FILE, CollapseWatch, read_alarms, write_alarms
from awarl.training.checkpoints import mark_complete
from awarl.upstream.torch import set_last_lr

log = logging.getLogger(__name__)


def _barrier() -> None:
    """Wait for every process (their shards of the checkpoint are written once they all get here)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


class RewardStateCallback(TrainerCallback):
    """Saves the reward state into every checkpoint, then marks the checkpoint complete (awarl.training.
    checkpoints: a resume trusts only marked ones), and tells the reward when it is inside a training step
    (evaluation batches between steps then leave Ē untouched)."""

    def __init__(self, reward: AwaRLReward) -> None:
        self.reward = reward
        reward.training = False

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.reward.training = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.reward.training = False

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Written wherever the Trainer writes the checkpoint: with save_on_each_node (node-local disks) every
        # node needs its copy, or a resume would restart Ē at 0 on some ranks only.
        writer = state.is_local_process_zero if args.save_on_each_node else state.is_world_process_zero
        # Same folder name the Trainer just wrote (transformers' PREFIX_CHECKPOINT_DIR-global_step).
        ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if writer:
            save_reward_state(self.reward, ckpt)
        _barrier()
        if writer:
            mark_complete(ckpt, state.global_step)  # last: after every process's files and the reward state


class PeriodicEval(TrainerCallback):
    """Calls `run_eval_fn(trainer_model, step)` every `every_steps` optimizer steps (not at the last step:
    the final evaluation follows training)."""

    def __init__(self, every_steps: int, run_eval_fn: Callable[[Any, int], Any]) -> None:
        self.every_steps = every_steps
        self.run_eval_fn = run_eval_fn

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        step = state.global_step
        if self.every_steps and step % self.every_steps == 0 and step < state.max_steps:
            self.run_eval_fn(model, step)


class ScheduleFromResumedStep(TrainerCallback):
    """On a resume, sets each optimizer group's learning rate to what this run's schedule gives at the resumed
    step. The Trainer restores the optimizer's learning rate as the checkpoint saved it, and the scheduler
    recomputes it only after the next step: a finished run extended to more steps (a longer train.max_steps)
    took its first extra step at the old schedule's end value, 0 for the linear default, sampling and scoring a
    batch and moving Ē for no update. An ordinary resume is unchanged: the value is the one restored."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from torch.optim.lr_scheduler import LambdaLR

        opt, sched = kwargs.get("optimizer"), kwargs.get("lr_scheduler")
        sched = getattr(sched, "scheduler", sched)  # accelerate's AcceleratedScheduler wraps the torch one
        if state.global_step == 0 or opt is None or not isinstance(sched, LambdaLR):
            return
        # LambdaLR's own rule (get_lr): base_lr * lambda(step), with this run's lambdas (built for its max_steps)
        lrs = [base * lam(sched.last_epoch) for base, lam in zip(sched.base_lrs, sched.lr_lambdas, strict=True)]
        for group, lr in zip(opt.param_groups, lrs, strict=True):
            group["lr"] = lr
        set_last_lr(sched, lrs)  # what the Trainer logs as learning_rate


class CollapseAlarms(TrainerCallback):
    """Watches the run's own log for collapse (awarl.training.alarms, `train.collapse`): each alarm is logged as a
    warning naming the step, the signal and the figure, and written to `alarms.jsonl` in the run folder; with
    `stop` (train.stop_on_collapse) the Trainer also saves a checkpoint and stops. Every process judges the same
    (gathered) log, so all of them stop at the same step; the main process alone writes and warns. On a resume
    the watch is rebuilt from the restored log, and the file keeps the records up to the resumed step."""

    def __init__(self, cfg: CollapseConfig, out_dir: str | Path, *, stop: bool, logging_steps: int = 1) -> None:
        self.cfg, self.out, self.stop, self.logging_steps = cfg, Path(out_dir), stop, logging_steps
        self.watch = CollapseWatch(cfg, logging_steps)
        self.records: list[dict[str, Any]] = []
        self.stopped: dict[str, Any] | None = None
        self._seen = 0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.watch = CollapseWatch(self.cfg, self.logging_steps)
        self.watch.feed(state.log_history)
        rebuilt = self.watch.advance(state.global_step)  # a resume: the state of the restored log, silently
        self._seen = len(state.log_history)
        if not state.is_world_process_zero:
            return
        kept = read_alarms(self.out)
        if kept is None and rebuilt:
            log.warning("resuming at step %d without %s: %d alarm(s) rebuilt from the checkpoint's log",
                        state.global_step, ALARMS_FILE, len(rebuilt))
        # records of steps after the resumed one belong to steps that are trained again
        self.records = ([r.record("rebuilt") for r in rebuilt] if kept is None else
                        [r for r in kept if isinstance(r.get("step"), int) and r["step"] <= state.global_step])
        if kept is not None or self.records:
            self.out.mkdir(parents=True, exist_ok=True)
            write_alarms(self.out, self.records)

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.watch.feed(state.log_history[self._seen:])
        self._seen = len(state.log_history)
        alarms = self.watch.advance(state.global_step)
        if not alarms:
            return control
        stopping = self.stop and state.global_step < state.max_steps
        rows = [a.record("stop" if stopping else "warn") for a in alarms]
        if stopping:
            control.should_save = True  # the checkpoint a resume continues from
            control.should_training_stop = True
            self.stopped = self.stopped or rows[0]
        if state.is_world_process_zero:
            for a in alarms:
                log.warning("%s%s", a.message(), f" Stopping: checkpoint-{state.global_step} is saved "
                            "(train.stop_on_collapse)." if stopping else "")
            self.records.extend(rows)
            self.out.mkdir(parents=True, exist_ok=True)
            write_alarms(self.out, self.records)
        return control
