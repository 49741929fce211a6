"""The AWA-RL training recipe, top to bottom: the training rows with their p_i → the reward → the GRPO trainer,
its rollouts the agent's multi-turn searches → the evaluation of the trained policy.

    rows, info = training_rows(cfg)                  # 1. questions joined to p_i      (stages/train_data.py)
    reward = build_reward(cfg, rows)                 # 2. AwaRLReward with its judge   (rewards/trl_reward.py)
    plan = preflight(...)                            #    checks before weights load   (stages/train_preflight.py)
    adapter = RolloutAdapter(...)                    # 3. rollouts over the retriever  (training/rollout_adapter.py)
    trainer = build_trainer(..., reward, adapter)    # 4. TRL's GRPOTrainer            (training/trainer.py)
    trainer.train()
    evaluate_policy(...)                             # 5. RA-F1 of the live policy     (stages/evaluate.py)

`run_train(cfg)` is what `awarl train` calls; `run_train(cfg, dry_run=True)` resolves and checks everything
(data, p_i join, reward, generation backend, batch arithmetic) without loading model weights. What a run
folder needs across launches (the lock, resume, a finished run, the resolved config, the final policy and its
LoRA merge) is run management, in awarl/stages/train_run.py; docs/training.md tells the whole story.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awarl.agent.backends import Backend
from awarl.agent.templates import load_template
from awarl.config import AwarlConfig
from awarl.critic import check_endpoints, critic_cache_dir, make_judge
from awarl.critic.correctness import AnswerGrader, make_answer_grader
from awarl.data.types import QAExample
from awarl.locks import folder_lock, is_main_process
from awarl.lr_schedule import lr_multipliers
from awarl.models.loading import load_tokenizer
from awarl.retrieval import load_retriever
from awarl.retrieval.types import Retriever
from awarl.rewards.trl_reward import AwaRLReward
from awarl.stages.eval_manifest import policy_identity
from awarl.stages.evaluate import run_eval
from awarl.stages.resources import ensure_default_retrieval
from awarl.stages.train_data import build_dataset, training_rows
from awarl.stages.train_preflight import preflight, world_size
from awarl.stages.train_run import (
    StartPoint,
    check_start,
    log_device,
    record_config,
    save_final,
    save_merged,
    set_aside_other_step,
    stopped_summary,
)
from awarl.training.alarms import read_alarms
from awarl.training.checkpoints import resolve_resume, reward_state_needed
from awarl.training.rollout_adapter import RolloutAdapter
from awarl.training.trainer import build_trainer, grpo_config

log = logging.getLogger(__name__)

BackendFactory = Callable[[Any], Backend]  # trainer -> the generator that replaces the live policy


def run_train(cfg: AwarlConfig, *, resume: str | None = None, dry_run: bool = False, model: Any = None,
              tokenizer: Any = None, retriever: Retriever | None = None, examples: list[QAExample] | None = None,
              final_eval: bool = True, backend_factory: BackendFactory | None = None, callbacks: list[Any] | None = None,
              on_trainer: Callable[[Any], None] | None = None, reset_reward_state: bool = False,
              processes: int | None = None) -> dict[str, Any]:
    """Train (or, with dry_run, only plan). Returns the plan (dry run) or a summary of the run.

    `model` / `tokenizer` / `retriever` may be passed in (tests, notebooks); by default they come from
    train.model and the retrieval config. `backend_factory(trainer) -> Backend` replaces the live policy as
    the generator (see RolloutAdapter); `callbacks` are extra TrainerCallbacks; `on_trainer(trainer)` is
    called once the trainer is built (instrumentation). The summary holds the `trainer` and `reward`
    objects too, for programmatic use. `resume`: see awarl.training.checkpoints (only a complete checkpoint
    is trusted; one without the reward state is refused unless `reset_reward_state`). `processes`: a dry
    run's plan for a launch on that many processes (default: this launch's, WORLD_SIZE)."""
    if processes is not None and not dry_run:
        raise ValueError("processes is for a dry run: a launch runs on the processes accelerate starts")
    kwargs = dict(resume=resume, model=model, tokenizer=tokenizer, retriever=retriever, examples=examples,
                  final_eval=final_eval, backend_factory=backend_factory, callbacks=callbacks, on_trainer=on_trainer,
                  reset_reward_state=reset_reward_state)
    if dry_run or not is_main_process():  # a dry run writes nothing; the other ranks write where rank 0 holds
        return _run_train(cfg, dry_run=dry_run, processes=processes, **kwargs)
    # One writer per run folder: two launches on one run.out_dir interleaved their checkpoints.
    with folder_lock(cfg.run.out_dir, f"training run folder {cfg.run.out_dir}", remedy="or set another run.out_dir"):
        return _run_train(cfg, dry_run=False, processes=None, **kwargs)


def _run_train(cfg: AwarlConfig, *, resume: str | None, dry_run: bool, model: Any, tokenizer: Any,
               retriever: Retriever | None, examples: list[QAExample] | None, final_eval: bool,
               backend_factory: BackendFactory | None, callbacks: list[Any] | None,
               on_trainer: Callable[[Any], None] | None, reset_reward_state: bool,
               processes: int | None) -> dict[str, Any]:
    """`run_train` (its docstring), under the run folder's lock for a launch."""
    check_start(cfg, resume)
    rows, info = training_rows(cfg, strict=not dry_run, examples=examples)
    reward = build_reward(cfg, rows)
    plan = preflight(cfg, rows, info, reward, n_procs=processes or world_size(), dry_run=dry_run)
    if dry_run:
        return plan
    grader = make_answer_grader(cfg.metrics, cfg.critic, Path(cfg.run.out_dir) / "critic_cache")
    try:
        check_endpoints(cfg.critic, reward.judge, grader)  # a dead endpoint fails here, before the policy loads
        ckpt = resolve_resume(cfg.run.out_dir, resume, reward_state_needed=reward_state_needed(cfg.reward),
                              reset_reward_state=reset_reward_state)
        return _train(cfg, plan, rows, reward, grader, start=StartPoint.of(cfg, ckpt, model), model=model,
                      tokenizer=tokenizer, retriever=retriever, final_eval=final_eval,
                      backend_factory=backend_factory, extra_callbacks=callbacks or [], on_trainer=on_trainer)
    finally:
        if grader is not None:
            grader.close()


def build_reward(cfg: AwarlConfig, rows: list[dict[str, Any]]) -> AwaRLReward:
    """AwaRLReward with the configured judge (none when reward.lambda_cite is 0), the p table and the sample
    counts behind it."""
    judge = make_judge(cfg.critic, critic_cache_dir(cfg.critic, cfg.run.out_dir)) \
        if cfg.reward.lambda_cite > 0 else None
    p_table = {r["qid"]: r["p_i"] for r in rows if r["p_i"] is not None}
    n_table = {r["qid"]: r["p_n"] for r in rows if r["p_i"] is not None and r.get("p_n") is not None}
    t = cfg.train
    return AwaRLReward(cfg.reward, judge, p_table, n_table, total_steps=t.max_steps,
                       lr_multipliers=lr_multipliers(t.lr_scheduler_type, t.max_steps, t.warmup_ratio),
                       scale_rewards=t.scale_rewards)


def _train(cfg: AwarlConfig, plan: dict[str, Any], rows: list[dict[str, Any]], reward: AwaRLReward,
           grader: AnswerGrader | None, *, start: StartPoint, model: Any, tokenizer: Any,
           retriever: Retriever | None, final_eval: bool, backend_factory: BackendFactory | None,
           extra_callbacks: list[Any], on_trainer: Callable[[Any], None] | None) -> dict[str, Any]:
    """Steps 3-5 of the recipe (module docstring), once the plan's checks have passed."""
    from awarl.training.callbacks import (
        CollapseAlarms,
        PeriodicEval,
        RewardStateCallback,
        ScheduleFromResumedStep,
    )

    out = Path(cfg.run.out_dir)
    log_device(plan["device"])
    args = grpo_config(cfg, cpu=plan["device"]["cpu"])
    if args.process_index == 0:
        record_config(out, cfg, start.ckpt)
    tokenizer = _tokenizer(cfg, tokenizer)
    if retriever is None:
        cfg = ensure_default_retrieval(cfg)
        retriever = load_retriever(cfg.retrieval)
    adapter = RolloutAdapter(cfg, tokenizer, retriever, load_template(cfg.agent.template), rows,
                             backend_factory=backend_factory, grader=grader)

    def periodic_eval(_model: Any, step: int) -> None:  # runs inside trainer.train(): `trainer` is bound by then
        res = _eval_live(cfg, trainer, tokenizer, retriever, out / "eval" / f"step-{step}", step)
        if res is not None:
            trainer.log(_eval_metrics(res))

    alarms = CollapseAlarms(cfg.train.collapse, out, stop=cfg.train.stop_on_collapse,
                            logging_steps=cfg.train.logging_steps)
    callbacks = [RewardStateCallback(reward), ScheduleFromResumedStep(), alarms, *extra_callbacks]
    if cfg.eval.every_steps:
        callbacks.append(PeriodicEval(cfg.eval.every_steps, periodic_eval))
    trainer = build_trainer(cfg, model=start.policy(model, cfg.train.model), tokenizer=tokenizer,
                            train_dataset=build_dataset(rows), reward=reward, rollout_func=adapter,
                            callbacks=callbacks, args=args)
    if on_trainer is not None:
        on_trainer(trainer)
    if start.restore(trainer, reward, cfg):  # a finished run: its checkpoint's weights are the final policy
        training_loss = None
    else:
        log.info("training %s for %d steps -> %s", cfg.train.model, cfg.train.max_steps, out)
        training_loss = trainer.train(resume_from_checkpoint=start.resume_from).training_loss
    if alarms.stopped is not None:
        return stopped_summary(out, trainer, training_loss, reward, alarms)
    final_dir = save_final(trainer, tokenizer, out, lora=cfg.train.lora.enabled)
    summary: dict[str, Any] = {"out_dir": str(out), "final": str(final_dir), "global_step": trainer.state.global_step,
                               "train_loss": training_loss, "reward_state": reward.state_dict(),
                               "alarms": read_alarms(out) or [], "stopped": None, "trainer": trainer, "reward": reward}
    if final_eval:
        res = _eval_live(cfg, trainer, tokenizer, retriever, out / "eval" / "final", trainer.state.global_step)
        if res is not None:
            summary["eval"] = _eval_metrics(res)
            trainer.log(summary["eval"])
    if cfg.train.lora.enabled:
        save_merged(trainer, final_dir)  # last: merging folds the adapters into the live model
    return summary


def _tokenizer(cfg: AwarlConfig, tokenizer: Any) -> Any:
    """The policy's tokenizer (train.model's unless given), with a pad token (its eos where it has none)."""
    if tokenizer is None:
        tokenizer = load_tokenizer(cfg.train.model, "train.model")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# ------------------------------------------------------------------------------- 5. evaluation
def evaluate_policy(cfg: AwarlConfig, model: Any, tokenizer: Any, retriever: Retriever | None, out_dir: str | Path,
                    *, step: int, limit: int | None = None) -> dict[str, Any]:
    """Greedy (eval.temperature) run of the live policy, at optimizer step `step`, on the held-out questions
    (data.eval files, else the shipped dev samples of eval.datasets), scored with awarl.metrics; returns the
    scorer's results (macro RA-F1 in results["macro"]["ra_f1"]). Uses transformers on the given model object.
    An evaluation in `out_dir` of the policy at another step is moved aside first (`set_aside_other_step`)."""
    import torch

    set_aside_other_step(Path(out_dir), step)
    batch = cfg.eval.policy_batch_size or cfg.generation.batch_size
    eval_cfg = cfg.model_copy(update={"generation": cfg.generation.model_copy(update={"backend": "hf",
                                                                                      "batch_size": batch})})
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return run_eval(eval_cfg, out_dir, model=model, tokenizer=tokenizer, retriever=retriever,
                            limit=limit if limit is not None else cfg.eval.limit,
                            model_ident=policy_identity(cfg.train.model, step))
    finally:
        model.train(was_training)


def _eval_metrics(results: dict[str, Any], prefix: str = "eval") -> dict[str, float]:
    out: dict[str, float] = {}
    for k in ("ra_f1", "precision", "accuracy", "abstention_rate"):
        v = results.get("macro", {}).get(k)
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[f"{prefix}/macro_{k}"] = float(v)
    for ds, m in results.get("per_dataset", {}).items():
        if isinstance(m.get("ra_f1"), (int, float)):
            out[f"{prefix}/{ds}_ra_f1"] = float(m["ra_f1"])
    return out


def _eval_live(cfg: AwarlConfig, trainer: Any, tokenizer: Any, retriever: Retriever, out_dir: Path,
               step: int) -> dict[str, Any] | None:
    """Evaluate the trainer's current policy on the main process; the others wait (inside the unwrap
    context, so ZeRO-3 parameter gathering stays collective)."""
    from trl.models import unwrap_model_for_generation

    acc = trainer.accelerator
    res = None
    with unwrap_model_for_generation(trainer.model_wrapped, acc,
                                     gather_deepspeed3_params=trainer.args.ds3_gather_for_generation) as m:
        if acc.is_main_process:
            try:
                res = evaluate_policy(cfg, m, tokenizer, retriever, out_dir, step=step)
                log.info("eval (%s): macro RA-F1 %.4f", out_dir.name, res.get("macro", {}).get("ra_f1", float("nan")))
            except (ValueError, FileNotFoundError) as e:  # no eval data must not kill a finished training run
                log.warning("evaluation skipped: %s", e)
        acc.wait_for_everyone()
    return res
