"""Preflight of `awarl train`: what a launch will do (the plan `--dry-run` prints) and every check that can fail
before model weights load (enough questions for one generation batch, the vLLM options, the template, the
scripted replay, the loggers, the dataset's column types), so a bad setting is a one-line error in seconds,
not hours into a launch. Nothing here loads a model or contacts an endpoint.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from awarl.agent.backends import backend_kind
from awarl.agent.backends.vllm import check_engine_options, engine_kwargs
from awarl.agent.templates import load_template
from awarl.config import AwarlConfig, ConfigError, TrainConfig
from awarl.critic import critic_cache_dir, judge_kind
from awarl.lr_schedule import run_refusal_warmup_steps
from awarl.metrics import correctness_rule
from awarl.retrieval.kinds import retrieval_kind
from awarl.rewards.trl_reward import AwaRLReward
from awarl.stages.train_data import build_dataset
from awarl.training.alarms import ALARMS_FILE
from awarl.training.trainer import check_report_to, colocate_max_model_len, effective_settings, on_cpu

log = logging.getLogger(__name__)


def preflight(cfg: AwarlConfig, rows: list[dict[str, Any]], info: dict[str, Any], reward: AwaRLReward, *,
              n_procs: int, dry_run: bool) -> dict[str, Any]:
    """The run's plan, once every check a launch can make before weights load has passed (a dry run: every
    check a launch makes at all, short of loading the weights and contacting an endpoint)."""
    t = cfg.train
    if t.lora.enabled and t.use_vllm and t.vllm_mode == "server":
        log.info("LoRA + vLLM server: TRL merges the adapters before each weight sync")
    plan = make_plan(cfg, info, reward, cpu=on_cpu(), n_procs=n_procs)
    if rows or not dry_run:  # a dry run of a config whose questions come at launch has none yet
        check_enough_questions(len(rows), cfg, n_procs)
    if dry_run or plan["device"]["use_vllm"]:  # before any weights load
        plan["generation"]["vllm_check"] = check_vllm(cfg)
    if dry_run:
        check_launchable(cfg, rows)
    return plan


def check_launchable(cfg: AwarlConfig, rows: list[dict[str, Any]]) -> None:
    """What a dry run checks beyond the plan: what a launch would otherwise find only once it has started."""
    load_template(cfg.agent.template)  # a bad template name/path fails here, not hours into a launch
    g = cfg.generation
    # a replay without its file: else the first rollout fails
    if backend_kind(g.backend).replays_script and not (g.script and Path(g.script).is_file()):
        raise ConfigError(f"generation.backend: {g.backend} needs generation.script, a replay file; got "
                          f"{g.script!r}" + ("" if g.script is None else " (no such file)"))
    check_report_to(list(cfg.train.report_to))  # so does a logger whose package is missing (e.g. wandb)
    if rows:
        build_dataset(rows)  # the dataset must build (column types), even though nothing trains


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def questions_per_step(t: TrainConfig, n_procs: int) -> int:
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


def make_plan(cfg: AwarlConfig, info: dict[str, Any], reward: AwaRLReward, *, cpu: bool,
              n_procs: int = 1) -> dict[str, Any]:
    """Everything a launch will do, as plain data (printed by --dry-run, logged by a real run)."""

    t, r = cfg.train, cfg.reward
    eff, notes = effective_settings(cfg.train, cpu)
    completions_per_step = t.per_device_train_batch_size * t.gradient_accumulation_steps * n_procs
    gen = ("vLLM " + t.vllm_mode + (f" at {t.vllm_server_host}:{t.vllm_server_port}" if t.vllm_mode == "server"
                                     else f", gpu_memory_utilization={cfg.generation.gpu_memory_utilization}")
           if t.use_vllm else "transformers generate on the live policy")
    if backend_kind(cfg.generation.backend).replays_script:
        gen = f"{cfg.generation.backend} replay of {cfg.generation.script}"
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
                  "epsilon": t.epsilon, "warmup_ratio": t.warmup_ratio, "lr_scheduler_type": t.lr_scheduler_type},
        "generation": {"backend": gen, "temperature": cfg.generation.temperature, "top_p": cfg.generation.top_p,
                       "template": cfg.agent.template, "max_turns": cfg.agent.max_turns,
                       "max_trajectory_tokens": cfg.agent.max_trajectory_tokens,
                       "max_new_tokens_per_turn": cfg.agent.max_new_tokens_per_turn},
        "retrieval": {"kind": cfg.retrieval.kind, "topk": cfg.retrieval.topk,
                      "where": cfg.retrieval.server_url if retrieval_kind(cfg.retrieval.kind).remote
                      else (cfg.retrieval.index_dir or cfg.retrieval.corpus or "shipped closed corpus"),
                      "status": retrieval_status(cfg)},
        "reward": {"strategy": r.strategy, "gamma": r.gamma, "p_min": r.p_min, "beta": r.beta,
                   "penalty_steps": [list(s) for s in r.penalty_steps], "penalty_max": r.penalty_max,
                   "expected_rate": r.expected_rate, "p_definition": r.p_definition, "ema_start": r.ema_start,
                   "r_ref_margin": r.r_ref_margin, "p_online": r.p_online, "abstain_line": r.abstain_line,
                   "refusal_gate": r.refusal_gate, "refusal_gate_weight": r.refusal_gate_weight,
                   # the share for train.scale_rewards, of the run's learning under train.lr_scheduler_type, in steps
                   "refusal_warmup": f"{r.warmup_share(t.scale_rewards):g} of the learning (scale_rewards "
                                     f"{t.scale_rewards}) = the first {run_refusal_warmup_steps(cfg)} of "
                                     f"{t.max_steps} steps",
                   "outcome_rewards": {"correct": r.r_correct, "wrong": r.r_wrong, "invalid": r.r_invalid},
                   "lambda_cite": r.lambda_cite,
                   "judge": type(reward.judge).__name__ if reward.judge is not None else "none",
                   "p_table_size": len(reward.p_table), "default_p": r.default_p,
                   "correctness": cfg.metrics.correctness + (f" (LLM grader {cfg.critic.model} at "
                                                             f"{cfg.critic.base_url})"
                                                             if correctness_rule(cfg.metrics.correctness).graded
                                                             else "")},
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
    if not colocate and not backend_kind(g.backend).vllm_engine:
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
    kind = judge_kind(c.judge) if c.judge != "none" else None
    if kind is not None and kind.oracle:
        n, with_ev = info.get("questions", 0), info.get("with_gold_evidence", 0)
        plan["gold_evidence"] = f"{with_ev} of {n} training questions"
        plan["without_evidence"] = (f"{n - with_ev} -> {c.gold_fallback} fallback" if c.gold_fallback == "lexical"
                                    else f"{n - with_ev} not judged (gold_fallback: none)")
    if (kind is not None and kind.endpoint) or correctness_rule(cfg.metrics.correctness).graded:
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
    if retrieval_kind(r.kind).remote:
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


def print_plan(plan: dict[str, Any]) -> None:
    """Human-readable plan (the --dry-run output)."""
    print("awarl train: dry run (no model weights loaded)")
    for section, body in plan.items():
        print(f"[{section}]")
        for k, v in body.items():
            print(f"  {k}: {v}")
