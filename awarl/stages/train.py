"""AWA-RL GRPO training stage: dataset with p_i, reward pipeline, TRL trainer, checkpoints, evaluation.

`run_train(cfg)` is what `awarl train` calls; `run_train(cfg, dry_run=True)` resolves and checks everything
(data, p_i join, reward, generation backend, batch arithmetic) without loading model weights.

p_i join policy (documented in docs/training.md): training rows are joined to the estimate file on
(dataset, qid). A question without an estimate keeps p_i = None in the dataset and the reward falls back
to `reward.default_p`; the stage logs how many there are. A *missing estimate file* with the `awarl`
refusal strategy is an error for a real run (the reward would rest entirely on default_p, which is almost
certainly a forgotten `awarl estimate`), and a warning in a dry run.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from awarl.agent.backends.vllm import check_engine_options, engine_kwargs
from awarl.agent.templates import load_template
from awarl.config import AwarlConfig, ConfigError, config_changes, read_resolved, save_resolved
from awarl.critic import check_endpoints, critic_cache_dir, make_judge
from awarl.critic.correctness import make_answer_grader
from awarl.critic.gold_judge import compact_evidence
from awarl.data.estimates import (
    estimates_model,
    estimates_path,
    estimates_record,
    estimates_unfinished,
    join_p,
    join_samples,
    read_estimates,
    settings_path,
)
from awarl.data.evidence import gold_evidence
from awarl.data.paths import HubUnavailable
from awarl.data.types import QAExample, example_key
from awarl.io import DataError, atomic_write_text, loads_json
from awarl.locks import folder_lock, is_main_process
from awarl.models.loading import load_tokenizer
from awarl.retrieval import load_retriever
from awarl.retrieval.types import Retriever
from awarl.rewards.strategies import strategy
from awarl.rewards.trl_reward import AwaRLReward, load_reward_state
from awarl.stages.eval_manifest import MANIFEST, policy_identity
from awarl.stages.evaluate import run_eval
from awarl.stages.predictions import PREDICTIONS
from awarl.stages.questions import load_train_examples
from awarl.stages.resources import ensure_default_retrieval
from awarl.training.alarms import ALARMS_FILE, read_alarms
from awarl.training.checkpoints import (
    checkpoint_step,
    refuse_fresh_start_over,
    resolve_resume,
    reward_state_needed,
)
from awarl.training.rollout_adapter import RolloutAdapter
from awarl.training.trainer import (
    build_trainer,
    check_report_to,
    colocate_max_model_len,
    effective_settings,
    grpo_config,
    on_cpu,
)

log = logging.getLogger(__name__)


def training_rows(cfg: AwarlConfig, *, strict: bool = True,
                  examples: list[QAExample] | None = None) -> tuple[list[dict], dict[str, Any]]:
    """One dict per training question (the dataset columns) and a summary of the p_i join.

    Columns: prompt (the question text; the rollout function renders the template), qid (dataset/id),
    dataset, question, answers, p_i (float or None), p_n (the samples p_i rests on, or None), gold_evidence
    (the question's gold evidence as compact JSON, for the gold citation judge; None when the data marks none)."""
    if examples is None and not cfg.data.train and not strict:
        # A dry run of a template config whose questions are filled in at launch (e.g. by `awarl demo`).
        log.warning("data.train lists no files: the plan has no training questions")
        examples = []
    if examples is None:
        try:
            examples = load_train_examples(cfg.data, cfg.run.seed)
        except HubUnavailable as e:
            if strict:
                raise
            # a dry run on an offline node: the launch, online, fetches the file
            log.warning("%s; the plan has no training questions (a launch with network access fetches it)", e)
            examples = []
    path = estimates_path(cfg.estimate.out, cfg.run.out_dir, train_file=cfg.train.p_estimates)
    needs_p = strategy(cfg.reward.strategy).uses_r_ref  # R_base reads p_i
    if not path.exists():
        msg = (f"p_i estimate file not found: {path} (run `awarl estimate --config ...` first, or set "
               f"train.p_estimates)")
        if needs_p and strict:
            raise FileNotFoundError(msg)
        if needs_p:
            log.warning("%s; every question would use reward.default_p=%.3g", msg, cfg.reward.default_p)
    record = estimates_record(path)  # read once: whether it finished, and which model sampled it
    if needs_p and path.exists() and estimates_unfinished(record):
        _refuse_or_warn(f"the p_i estimate in {path} has not finished ({settings_path(path).name} says status: "
                        "running): an `awarl estimate` still writing it, or one that was stopped; rerun that "
                        "estimate to finish it before training, or every question it has not reached would train "
                        "on reward.default_p", strict)
    estimates = read_estimates(path)
    ps, missing = join_p(examples, estimates, cfg.reward.p_definition)
    ns = join_samples(examples, estimates, cfg.reward.p_definition)
    if needs_p and path.exists() and examples and missing == len(examples):
        # as bad as no file at all: the reward would rest entirely on default_p
        _refuse_or_warn(f"none of the {len(examples)} training questions has a p_i in {path} ({len(estimates)} "
                        "rows): an estimate of other questions (other data.train files, limits or run.seed); run "
                        "`awarl estimate` for this config, or set train.p_estimates", strict)
    elif missing and needs_p and path.exists():
        log.warning("%d of %d training questions have no p_i in %s; the reward uses reward.default_p=%.3g "
                    "for them", missing, len(examples), path, cfg.reward.default_p)
    rows = [{"prompt": ex.question, "qid": example_key(ex.dataset, ex.id), "dataset": ex.dataset,
             "question": ex.question, "answers": ex.gold_answers, "p_i": p, "p_n": n,
             "gold_evidence": _evidence_json(ex)}
            for ex, p, n in zip(examples, ps, ns, strict=True)]
    known = [p for p in ps if p is not None]
    sampled_with = estimates_model(record)
    standard = cfg.estimate.model or cfg.train.model
    if needs_p and sampled_with is not None and sampled_with != standard:
        log.warning("the p_i in %s were sampled with %s (%s), but this run's standard checkpoint is %s "
                    "(estimate.model, else train.model): unless that is the same model under another name, "
                    "estimate p_i again for it", path, sampled_with, settings_path(path).name, standard)
    info = {"questions": len(rows), "estimates_file": str(path), "estimates_found": path.exists(),
            "estimates_model": sampled_with,
            "with_p": len(known), "missing_p": missing,
            "mean_p": sum(known) / len(known) if known else None,
            "datasets": {d: sum(r["dataset"] == d for r in rows) for d in sorted({str(r["dataset"]) for r in rows})},
            "with_gold_evidence": sum(r["gold_evidence"] is not None for r in rows)}
    return rows, info


def _refuse_or_warn(msg: str, strict: bool) -> None:
    """A DataError for a launch, a warning for a dry run (which plans, and says what a launch would refuse)."""
    if strict:
        raise DataError(msg)
    log.warning("%s", msg)


def _evidence_json(ex: QAExample) -> str | None:
    ev = compact_evidence(gold_evidence(ex))
    return None if ev is None else json.dumps(ev, ensure_ascii=False, separators=(",", ":"))


def build_dataset(rows: list[dict]) -> Any:
    from datasets import Dataset, Features, Sequence, Value

    features = Features({"prompt": Value("string"), "qid": Value("string"), "dataset": Value("string"),
                         "question": Value("string"), "answers": Sequence(Value("string")),
                         "p_i": Value("float64"), "p_n": Value("float64"), "gold_evidence": Value("string")})
    return Dataset.from_list(rows, features=features)


def build_reward(cfg: AwarlConfig, rows: list[dict]) -> Any:
    """AwaRLReward with the configured judge (none when reward.lambda_cite is 0), the p table and the sample
    counts behind it."""
    judge = make_judge(cfg.critic, critic_cache_dir(cfg.critic, cfg.run.out_dir)) \
        if cfg.reward.lambda_cite > 0 else None
    p_table = {r["qid"]: r["p_i"] for r in rows if r["p_i"] is not None}
    n_table = {r["qid"]: r["p_n"] for r in rows if r["p_i"] is not None and r.get("p_n") is not None}
    return AwaRLReward(cfg.reward, judge, p_table, n_table)


def questions_per_step(t: Any, n_procs: int) -> int:
    """Distinct questions in one generation batch (one optimizer step): completions / group size."""
    return t.per_device_train_batch_size * t.gradient_accumulation_steps * n_procs // t.num_generations


def check_enough_questions(n_questions: int, cfg: AwarlConfig, n_procs: int, source: str = "data.train") -> None:
    """ConfigError unless one generation batch can be filled. TRL samples each batch as distinct questions,
    `per_device_train_batch_size × gradient_accumulation_steps × processes / num_generations` of them, and
    drops a batch it cannot fill: with fewer questions it trains 0 steps without a word and the run writes
    its untrained base model as final/. `source`: the setting the questions come from, named in the error."""
    t = cfg.train
    need = questions_per_step(t, n_procs)
    if n_questions < need:
        raise ConfigError(
            f"only {n_questions} training question(s), but one generation batch takes {need} distinct ones "
            f"(train.per_device_train_batch_size {t.per_device_train_batch_size} x gradient_accumulation_steps "
            f"{t.gradient_accumulation_steps} x {n_procs} process(es) / num_generations {t.num_generations}): "
            f"TRL would train 0 steps; add training questions ({source}) or make the batch smaller")


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def make_plan(cfg: AwarlConfig, info: dict[str, Any], reward: Any, *, cpu: bool, n_procs: int = 1) -> dict:
    """Everything a launch will do, as plain data (printed by --dry-run, logged by a real run)."""

    t, r = cfg.train, cfg.reward
    eff, notes = effective_settings(cfg.train, cpu)
    completions_per_step = t.per_device_train_batch_size * t.gradient_accumulation_steps * n_procs
    gen = ("vLLM " + t.vllm_mode + (f" at {t.vllm_server_host}:{t.vllm_server_port}" if t.vllm_mode == "server"
                                     else f", gpu_memory_utilization={cfg.generation.gpu_memory_utilization}")
           if t.use_vllm else "transformers generate on the live policy")
    if cfg.generation.backend == "scripted":
        gen = f"scripted replay of {cfg.generation.script}"
    elif t.use_vllm and not eff["use_vllm"]:
        gen += " (not on this machine: transformers generation here, see device.forced)"
    return {
        "run": {"name": cfg.run.name, "out_dir": cfg.run.out_dir, "seed": cfg.run.seed},
        "model": {"policy": t.model, "lora": t.lora.model_dump() if t.lora.enabled else None,
                  "standard_checkpoint_for_p": cfg.estimate.model or t.model},
        "data": info,
        "steps": {"max_steps": t.max_steps, "save_steps": t.save_steps, "eval_every_steps": cfg.eval.every_steps,
                  "questions_per_step": questions_per_step(t, n_procs),
                  # passes over the training questions; unknown before they are (a dry run without them)
                  "epochs_approx": round(t.max_steps * completions_per_step / t.num_generations
                                         / info["questions"], 2) if info["questions"] else "unknown (no questions)"},
        "batch": {"processes": n_procs, "per_device_train_batch_size": t.per_device_train_batch_size,
                  "gradient_accumulation_steps": t.gradient_accumulation_steps,
                  "num_generations (group size)": t.num_generations, "completions_per_step": completions_per_step},
        "optim": {"learning_rate": t.learning_rate, "loss_type": t.loss_type, "scale_rewards": t.scale_rewards,
                  "kl_beta": t.kl_beta,
                  "epsilon": t.epsilon, "warmup_ratio": t.warmup_ratio},
        "generation": {"backend": gen, "temperature": cfg.generation.temperature, "top_p": cfg.generation.top_p,
                       "template": cfg.agent.template, "max_turns": cfg.agent.max_turns,
                       "max_trajectory_tokens": cfg.agent.max_trajectory_tokens,
                       "max_new_tokens_per_turn": cfg.agent.max_new_tokens_per_turn},
        "retrieval": {"kind": cfg.retrieval.kind, "topk": cfg.retrieval.topk,
                      "where": cfg.retrieval.server_url if cfg.retrieval.kind == "server"
                      else (cfg.retrieval.index_dir or cfg.retrieval.corpus or "shipped closed corpus"),
                      "status": retrieval_status(cfg)},
        "reward": {"strategy": r.strategy, "gamma": r.gamma, "p_min": r.p_min, "beta": r.beta,
                   "penalty_steps": [list(s) for s in r.penalty_steps], "penalty_max": r.penalty_max,
                   "expected_rate": r.expected_rate, "p_definition": r.p_definition, "ema_start": r.ema_start,
                   "r_ref_margin": r.r_ref_margin, "p_online": r.p_online,
                   "outcome_rewards": {"correct": r.r_correct, "wrong": r.r_wrong, "invalid": r.r_invalid},
                   "lambda_cite": r.lambda_cite,
                   "judge": type(reward.judge).__name__ if getattr(reward, "judge", None) else "none",
                   "p_table_size": len(getattr(reward, "p_table", {})), "default_p": r.default_p,
                   "correctness": cfg.metrics.correctness + (f" (LLM grader {cfg.critic.model} at "
                                                             f"{cfg.critic.base_url})"
                                                             if cfg.metrics.correctness == "judge" else "")},
        "critic": critic_plan(cfg, info),
        "device": {"cpu": cpu, **eff, "forced": notes},
        "logging": {"report_to": list(t.report_to), "logging_steps": t.logging_steps},
        "alarms": {"signals": list(t.collapse.signals) or "off", "window_steps": t.collapse.window,
                   "on_alarm": "save a checkpoint and stop (exit 3)" if t.stop_on_collapse else "warn and train on",
                   "file": str(Path(cfg.run.out_dir) / ALARMS_FILE)},
    }


def vllm_engine_options(cfg: AwarlConfig) -> tuple[str, dict[str, tuple[str, Any]]] | None:
    """The model and the `vllm.LLM` options this config gives a vLLM engine, keyed by the config key path
    that sets each: TRL's colocated engine (train.use_vllm, colocate), else awarl's own for estimate/eval
    (generation.backend=vllm); None when no vLLM engine is configured (a `trl vllm-serve` server takes its
    options from scripts/serve_vllm.sh)."""
    t, g = cfg.train, cfg.generation
    colocate = t.use_vllm and t.vllm_mode == "colocate"
    if not colocate and g.backend != "vllm":
        return None
    # engine_kwargs: the mapping the engines themselves are built from, so the check sees what they get
    kw = engine_kwargs(g, max_model_len=colocate_max_model_len(cfg.generation, cfg.agent) if colocate else None)
    opts: dict[str, tuple[str, Any]] = {f"generation.{name}": (name, value) for name, value in kw.items()}
    if colocate and not g.max_model_len:   # training derived it
        opts["agent.max_trajectory_tokens (+ 2048 for the colocated engine)"] = \
            ("max_model_len", opts.pop("generation.max_model_len")[1])
    return (t.model if colocate else cfg.estimate.model or t.model), opts


def check_vllm(cfg: AwarlConfig) -> str | None:
    """ConfigError (with the key path) for a vLLM option vLLM rejects, or one awarl cannot drive; a note of
    what was checked."""
    engine = vllm_engine_options(cfg)
    note = None if engine is None else check_engine_options(*engine)  # what vLLM itself rejects, first
    t = cfg.train
    if t.use_vllm and t.vllm_mode == "colocate" and cfg.generation.tensor_parallel_size > 1:
        # The ranks of a tensor-parallel engine must call generate together with the same prompts; TRL gathers
        # them across the group, awarl's multi-turn rollout does not: each rank would run its own turns.
        raise ConfigError(f"generation.tensor_parallel_size: {cfg.generation.tensor_parallel_size} with "
                          "train.vllm_mode colocate is not supported (the rollout's turns are not gathered across "
                          "the tensor-parallel group); use train.vllm_mode server (`trl vllm-serve` with its own "
                          "tensor parallelism) or tensor_parallel_size 1")
    return note


def critic_plan(cfg: AwarlConfig, info: dict[str, Any]) -> dict[str, Any]:
    """The citation judge of the run, as the dry run shows it. It does not contact an endpoint (a dry run must
    work before the judge server is up): a real launch checks it before loading any model."""
    c = cfg.critic
    use = "reward and evaluation" if cfg.reward.lambda_cite > 0 else "evaluation only (reward.lambda_cite = 0)"
    plan: dict[str, Any] = {"judge": c.judge, "used_for": use if c.judge != "none" else "nothing"}
    if c.judge == "gold":
        n, with_ev = info.get("questions", 0), info.get("with_gold_evidence", 0)
        plan["gold_evidence"] = f"{with_ev} of {n} training questions"
        plan["without_evidence"] = (f"{n - with_ev} -> {c.gold_fallback} fallback" if c.gold_fallback == "lexical"
                                    else f"{n - with_ev} not judged (gold_fallback: none)")
    if c.judge == "openai" or cfg.metrics.correctness == "judge":
        key = "set" if os.environ.get(c.api_key_env) else "not set (fine for a local vLLM server)"
        plan.update({"endpoint": c.base_url, "model": c.model, "response_format": c.response_format,
                     "api_key": f"${c.api_key_env} {key}",
                     "endpoint_check": ("not contacted in a dry run; a launch checks it before any model loads"
                                        if c.check_endpoint else "off (critic.check_endpoint: false)"),
                     "cache": str(critic_cache_dir(c, cfg.run.out_dir))})
    return plan


def retrieval_status(cfg: AwarlConfig) -> str:
    """Whether the retriever a launch needs is there, without loading it (dry runs)."""
    r = cfg.retrieval
    if r.kind == "server":
        return f"server expected at {r.server_url} (start it with scripts/serve_retriever.sh)"
    if r.index_dir and (Path(r.index_dir) / "index_meta.json").is_file():
        return "index ready"
    if r.index_dir and r.corpus and Path(r.corpus).is_file():
        return "index will be built from retrieval.corpus on first use"
    if r.index_dir:
        log.warning("retrieval.index_dir=%s does not exist and no retrieval.corpus to build it from", r.index_dir)
        return "MISSING: build it with `awarl index build` before launching"
    if r.corpus and not Path(r.corpus).is_file():
        log.warning("retrieval.corpus=%s does not exist", r.corpus)
        return f"MISSING: retrieval.corpus {r.corpus} is no file"
    if r.corpus:
        return "index of retrieval.corpus built into the cache on first use"
    return "shipped closed corpus, built into the cache on first use"


def print_plan(plan: dict) -> None:
    """Human-readable plan (the --dry-run output)."""
    print("awarl train: dry run (no model weights loaded)")
    for section, body in plan.items():
        print(f"[{section}]")
        for k, v in body.items():
            print(f"  {k}: {v}")


def evaluate_policy(cfg: AwarlConfig, model: Any, tokenizer: Any, retriever: Retriever, out_dir: str | Path,
                    *, step: int, limit: int | None = None) -> dict:
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


def _eval_metrics(results: dict, prefix: str = "eval") -> dict[str, float]:
    out: dict[str, float] = {}
    for k in ("ra_f1", "precision", "accuracy", "abstention_rate"):
        v = results.get("macro", {}).get(k)
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[f"{prefix}/macro_{k}"] = float(v)
    for ds, m in results.get("per_dataset", {}).items():
        if isinstance(m.get("ra_f1"), (int, float)):
            out[f"{prefix}/{ds}_ra_f1"] = float(m["ra_f1"])
    return out


def run_train(cfg: AwarlConfig, *, resume: str | None = None, dry_run: bool = False, model: Any = None,
              tokenizer: Any = None, retriever: Retriever | None = None, examples: list[QAExample] | None = None,
              final_eval: bool = True, backend_factory: Any = None, callbacks: list | None = None,
              on_trainer: Any = None, reset_reward_state: bool = False, processes: int | None = None) -> dict:
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


def _run_train(cfg: AwarlConfig, *, resume: str | None, dry_run: bool, model: Any, tokenizer: Any, retriever: Retriever,
               examples: list[QAExample] | None, final_eval: bool, backend_factory: Any, callbacks: list | None,
               on_trainer: Any, reset_reward_state: bool, processes: int | None) -> dict:
    """`run_train` (its docstring), under the run folder's lock for a launch."""
    n_procs = processes or world_size()
    t = cfg.train
    if resume is None:
        refuse_fresh_start_over(cfg.run.out_dir)  # first: a dry run says it too, before anything is loaded
    else:
        refuse_other_advantages(cfg)
    if t.lora.enabled and t.use_vllm and t.vllm_mode == "server":
        log.info("LoRA + vLLM server: TRL merges the adapters before each weight sync")
    cpu = on_cpu()
    rows, info = training_rows(cfg, strict=not dry_run, examples=examples)
    reward = build_reward(cfg, rows)
    plan = make_plan(cfg, info, reward, cpu=cpu, n_procs=n_procs)
    if rows or not dry_run:  # a dry run of a config whose questions come at launch has none yet
        check_enough_questions(len(rows), cfg, n_procs)
    if dry_run or plan["device"]["use_vllm"]:  # before any weights load
        plan["generation"]["vllm_check"] = check_vllm(cfg)
    if dry_run:
        load_template(cfg.agent.template)  # a bad template name/path fails here, not hours into a launch
        g = cfg.generation
        if g.backend == "scripted" and not (g.script and Path(g.script).is_file()):  # else the first rollout fails
            raise ConfigError(f"generation.backend: scripted needs generation.script, a replay file; got "
                              f"{g.script!r}" + ("" if g.script is None else " (no such file)"))
        check_report_to(list(t.report_to))  # so does a logger whose package is missing (e.g. wandb)
        if rows:
            build_dataset(rows)  # the dataset must build (column types), even though nothing trains
        return plan
    grader = make_answer_grader(cfg.metrics, cfg.critic, Path(cfg.run.out_dir) / "critic_cache")
    try:
        check_endpoints(cfg.critic, reward.judge, grader)  # a dead endpoint fails here, before the policy loads
        ckpt = resolve_resume(cfg.run.out_dir, resume, reward_state_needed=reward_state_needed(cfg.reward),
                              reset_reward_state=reset_reward_state)
        return _train(cfg, plan, rows, reward, grader, ckpt=ckpt, model=model, tokenizer=tokenizer,
                      retriever=retriever, final_eval=final_eval, backend_factory=backend_factory,
                      extra_callbacks=callbacks or [], on_trainer=on_trainer)
    finally:
        if grader is not None:
            grader.close()


# What an awarl run before train.scale_rewards trained with: it passed nothing, and TRL's default is "group".
SCALE_REWARDS_BEFORE_THE_KEY = "group"


def refuse_other_advantages(cfg: AwarlConfig) -> None:
    """ConfigError when resuming the run in run.out_dir under another train.scale_rewards than it trained with
    (its resolved_config.yaml): the advantage normalisation is the objective, and a run that changes it midway
    is neither run (a new γ or a longer max_steps only warns, keep_config_of_resumed_run). Nothing to compare
    without the file."""
    resolved = read_resolved(cfg.run.out_dir, "which advantages the run trained with")
    if resolved is None or not isinstance(resolved[1], dict):
        return
    train = resolved[1].get("train")
    before = (train.get("scale_rewards") if isinstance(train, dict) else None) or SCALE_REWARDS_BEFORE_THE_KEY
    if before != cfg.train.scale_rewards:
        raise ConfigError(
            f"train.scale_rewards: the run in {cfg.run.out_dir} trained with {before!r} advantages (its "
            f"resolved_config.yaml); resuming it under {cfg.train.scale_rewards!r} would change the objective "
            f"midway. Resume with train.scale_rewards={before}, or start a new run (another run.out_dir)")


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


def _train(cfg: AwarlConfig, plan: dict, rows: list[dict], reward: Any, grader: Any, *, ckpt: Path | None,
           model: Any, tokenizer: Any, retriever: Retriever, final_eval: bool, backend_factory: Any,
           extra_callbacks: list, on_trainer: Any) -> dict:
    from awarl.training.callbacks import (
        CollapseAlarms,
        PeriodicEval,
        RewardStateCallback,
        ScheduleFromResumedStep,
    )

    out = Path(cfg.run.out_dir)
    for note in plan["device"]["forced"]:
        log.warning("CPU run: %s", note)
    if plan["device"]["cpu"]:
        log.info("CPU run: bf16=False, use_cpu=True, gradient checkpointing off, %s generation",
                 "colocated vLLM (CPU build)" if plan["device"]["use_vllm"] else "transformers")
    args = grpo_config(cfg, cpu=plan["device"]["cpu"])
    if args.process_index == 0:
        out.mkdir(parents=True, exist_ok=True)
        if ckpt is not None:
            keep_config_of_resumed_run(out, cfg, ckpt)
        save_resolved(cfg, out)
    if tokenizer is None:
        tokenizer = load_tokenizer(cfg.train.model, "train.model")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if retriever is None:
        cfg = ensure_default_retrieval(cfg)
        retriever = load_retriever(cfg.retrieval)
    dataset = build_dataset(rows)
    adapter = RolloutAdapter(cfg, tokenizer, retriever, load_template(cfg.agent.template), rows,
                             backend_factory=backend_factory, grader=grader)

    holder: dict[str, Any] = {}

    def periodic_eval(_model: Any, step: int) -> None:
        res = _eval_live(cfg, holder["trainer"], tokenizer, retriever, out / "eval" / f"step-{step}", step)
        if res is not None:
            holder["trainer"].log(_eval_metrics(res))

    alarms = CollapseAlarms(cfg.train.collapse, out, stop=cfg.train.stop_on_collapse,
                            logging_steps=cfg.train.logging_steps)
    callbacks = [RewardStateCallback(reward), ScheduleFromResumedStep(), alarms, *extra_callbacks]
    if cfg.eval.every_steps:
        callbacks.append(PeriodicEval(cfg.eval.every_steps, periodic_eval))
    # A checkpoint already at max_steps: the Trainer would still run one more step on resume (its stop check
    # comes after a step), sampling and scoring a batch at learning rate 0 and moving Ē. Its weights are
    # loaded as the policy instead and nothing is trained (a plain full-weights checkpoint; others resume).
    finished = ckpt is not None and model is None and checkpoint_step(ckpt) >= cfg.train.max_steps
    done = finished and not cfg.train.lora.enabled and (ckpt / "model.safetensors").is_file()  # type: ignore[operator]
    trainer = build_trainer(cfg, model=str(ckpt) if done else model if model is not None else cfg.train.model,
                            tokenizer=tokenizer, train_dataset=dataset, reward=reward, rollout_func=adapter,
                            callbacks=callbacks, args=args)
    holder["trainer"] = trainer
    if on_trainer is not None:
        on_trainer(trainer)
    if finished and cfg.train.lora.enabled and ckpt is not None:
        # LoRA: the base weights with the checkpoint's adapters are the final policy (every rerun of a finished
        # `awarl demo-real` trained one more step through the Trainer, and moved Ē)
        done = _load_adapters(trainer, ckpt)
    if ckpt is not None:
        load_reward_state(reward, ckpt)
        log.info("resuming from %s (Ē=%.4f after %d reward updates)", ckpt, reward.e_bar, reward.updates)
    if done and ckpt is not None:
        log.info("%s is at train.max_steps (%d): nothing left to train; its weights are the final policy", ckpt,
                 cfg.train.max_steps)
        from transformers import TrainerState

        # the step count and the log history (the demo's dynamics plot reads it), as a resume restores them
        trainer.state = TrainerState.load_from_json(str(ckpt / "trainer_state.json"))
        training_loss = None
    else:
        log.info("training %s for %d steps -> %s", cfg.train.model, cfg.train.max_steps, out)
        training_loss = trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None).training_loss
    if alarms.stopped is not None:
        return _stopped_summary(out, trainer, training_loss, reward, alarms)
    final_dir = out / "final"
    lora = cfg.train.lora.enabled
    # With LoRA the trainer saves adapters only; they go to final/adapter and final/ gets the merged model
    # (below), because vLLM, `trl vllm-serve` and a warm start load a full model folder.
    trainer.save_model(str(final_dir / "adapter" if lora else final_dir))
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(str(final_dir))
    summary: dict[str, Any] = {"out_dir": str(out), "final": str(final_dir), "global_step": trainer.state.global_step,
                               "train_loss": training_loss, "reward_state": reward.state_dict(),
                               "alarms": read_alarms(out) or [], "stopped": None, "trainer": trainer, "reward": reward}
    if final_eval:
        res = _eval_live(cfg, trainer, tokenizer, retriever, out / "eval" / "final", trainer.state.global_step)
        if res is not None:
            summary["eval"] = _eval_metrics(res)
            trainer.log(summary["eval"])
    if lora:
        _save_merged(trainer, final_dir)  # last: merging folds the adapters into the live model
    return summary


def _stopped_summary(out: Path, trainer: Any, training_loss: Any, reward: Any, alarms: Any) -> dict:
    """A run stopped by a collapse alarm (train.stop_on_collapse): its checkpoint is the state to look at or
    resume; no final/ is written and no final evaluation runs (the policy is the collapsed one)."""
    step = trainer.state.global_step
    log.warning("training stopped at step %d by a collapse alarm (%s); checkpoint: %s", step,
                alarms.stopped["signal"], out / f"checkpoint-{step}")
    return {"out_dir": str(out), "final": None, "global_step": step, "train_loss": training_loss,
            "reward_state": reward.state_dict(), "alarms": list(alarms.records) or read_alarms(out) or [],
            "stopped": alarms.stopped, "checkpoint": str(out / f"checkpoint-{step}"), "trainer": trainer,
            "reward": reward}


def _load_adapters(trainer: Any, ckpt: Path) -> bool:
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


def _save_merged(trainer: Any, final_dir: Path) -> None:
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


def _eval_live(cfg: AwarlConfig, trainer: Any, tokenizer: Any, retriever: Retriever, out_dir: Path,
               step: int) -> dict | None:
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
