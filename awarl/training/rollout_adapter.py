"""TRL `rollout_func` for multi-turn search rollouts: the bridge between GRPOTrainer and our RolloutEngine.

What TRL 1.16 does with it (trl/trainer/grpo_trainer.py, `_generate`):
- it is called as `rollout_func(prompts, trainer)` with this process's slice of the generation batch. The
  sampler has already repeated every prompt `num_generations` times (a group may straddle processes), so
  we return exactly one trajectory per prompt received, in order;
- it must return `prompt_ids`, `completion_ids` and `logprobs` (one float per completion token; TRL only
  uses them for vLLM importance-sampling correction). Every other key is forwarded to the reward
  functions, except `env_mask`, which TRL pops and multiplies into the loss mask: 1 = model token (trained),
  0 = environment token (retrieved passages, never trained on);
- before calling it under vLLM, TRL pushes the current policy weights to vLLM (`sync_weights`).

Generation runs either on the live policy with transformers (unwrapped from DDP / DeepSpeed ZeRO-3 / FSDP
for the whole multi-turn loop; the HF backend switches to eval mode + no_grad and restores train mode), or
on TRL's vLLM engine: colocated (`trainer.vllm_generation.llm`) or the `trl vllm-serve` server, which each
process calls directly for its own prompts (turn counts differ across processes, so no collective is used).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from awarl.agent.backends import Backend, backend_kind, make_backend
from awarl.agent.rollout import RolloutEngine, RolloutSettings, Trajectory
from awarl.agent.templates import Template, abstention_phrases, render_prompt
from awarl.config import MetricsConfig
from awarl.critic.correctness import AnswerGrader, Grade, grade_trajectories, trajectory_outcome
from awarl.metrics import Outcome
from awarl.retrieval.types import Retriever
from awarl.upstream import trl as upstream_trl

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------- the adapter
def enforce_budget(completion_ids: list[int], env_mask: list[int], logprobs: list[float],
                   budget: int) -> tuple[list[int], list[int], list[float], bool]:
    """Cut a trajectory to `budget` tokens (model + environment); True when it had to be cut.

    Logprobs are aligned to completion_ids first (padded with NaN, which TRL treats as "no correction")."""
    lps = [float(x) if x is not None else math.nan for x in logprobs][: len(completion_ids)]
    lps += [math.nan] * (len(completion_ids) - len(lps))
    if len(env_mask) != len(completion_ids):
        raise ValueError(f"env_mask has {len(env_mask)} entries for {len(completion_ids)} completion tokens")
    if len(completion_ids) <= budget:
        return list(completion_ids), list(env_mask), lps, False
    return list(completion_ids[:budget]), list(env_mask[:budget]), lps[:budget], True


class AdapterSettings(RolloutSettings, Protocol):
    """The sections of a run config the rollout function reads: the engine's and `metrics` (the outcome
    rule); an AwarlConfig is one."""

    metrics: MetricsConfig


class RolloutAdapter:
    """`rollout_func` for GRPOTrainer: `RolloutAdapter(cfg, tokenizer, retriever, template, rows)`.

    `rows` are the training dataset's rows (prompt, qid, dataset, question, answers, p_i, p_n, and optionally
    gold_evidence, passed on to the reward for the gold citation judge); TRL hands the
    rollout function only the prompt strings, so rows are looked up by prompt (training questions are
    deduplicated by text for that reason)."""

    def __init__(self, cfg: AdapterSettings, tokenizer: Any, retriever: Retriever, template: Template,
                 rows: list[dict], *, backend_factory: Callable[[Any], Backend] | None = None,
                 grader: AnswerGrader | None = None) -> None:
        self.cfg = cfg
        # The LLM answer grader under `metrics.correctness: judge` (awarl.critic.correctness), else None.
        self.grader = grader
        # backend_factory(trainer) -> Backend replaces the live policy as the generator (tests, replays).
        self.backend_factory = backend_factory
        self.tokenizer = tokenizer
        self.retriever = retriever
        self.template = template
        self.phrases = abstention_phrases(template, cfg.agent.abstention_phrases)
        self.by_prompt = {r["prompt"]: r for r in rows}
        self._prompt_cache: dict[str, list[int]] = {}
        self.calls = 0
        self.last: list[Trajectory] = []  # the trajectories of the latest call (tests, debugging)
        self._vllm: tuple[tuple, Backend] | None = None   # (what it drives, the backend over TRL's vLLM)

    def _prompt_ids(self, question: str) -> list[int]:
        ids = self._prompt_cache.get(question)
        if ids is None:
            ids = self._prompt_cache[question] = render_prompt(self.template, question, self.tokenizer)
        return ids

    def _vllm_backend(self, trainer: Any, policy_gen_cfg: Any) -> Backend:
        """The backend over TRL's vLLM (its colocated engine, or `trl vllm-serve`), built once per engine or
        server and kept across steps: building reads the model's generation config from disk (in process) or
        health-checks the server and opens a connection pool (TRL's client)."""
        args = trainer.args
        if args.vllm_mode == "server":
            base = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
            key: tuple = ("server", base)
        else:
            key = ("colocate", trainer.vllm_generation.llm)   # the engine object itself (compared by identity)
        if self._vllm is None or self._vllm[0] != key:
            backend: Backend
            if args.vllm_mode == "server":
                from awarl.agent.backends.vllm import VLLMServerBackend

                backend = VLLMServerBackend(base, self.tokenizer, generation_config=policy_gen_cfg,
                                            connection_timeout=args.vllm_server_timeout)
            else:
                backend = make_backend(self.cfg.generation, trainer.vllm_generation.llm, self.tokenizer,
                                       kind="vllm", generation_config=policy_gen_cfg)
            self._vllm = (key, backend)
        return self._vllm[1]

    @contextlib.contextmanager
    def _backend(self, trainer: Any) -> Iterator[Backend]:
        """The generator of this step: a replacement (tests), the scripted replay, TRL's vLLM engine
        (colocated or server), or transformers on the live policy, unwrapped for the whole multi-turn loop."""
        gen = self.cfg.generation
        if self.backend_factory is not None:
            yield self.backend_factory(trainer)
            return
        if backend_kind(gen.backend).replays_script:
            # Replay of written turns (CPU demos): the policy is still trained on them, off-policy.
            yield make_backend(gen, None, self.tokenizer)
            return
        policy_gen_cfg = getattr(getattr(trainer, "model", None), "generation_config", None)
        if getattr(trainer, "use_vllm", False):
            yield self._vllm_backend(trainer, policy_gen_cfg)
            return
        from trl.models import unwrap_model_for_generation

        summon = upstream_trl.fsdp_summon(trainer)
        with contextlib.ExitStack() as stack:
            model = stack.enter_context(unwrap_model_for_generation(
                trainer.model_wrapped, trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs))
            if summon is not None:  # FSDP: full parameters for the whole multi-turn loop
                stack.enter_context(summon(trainer.model_wrapped, recurse=False))
            yield make_backend(gen, model, self.tokenizer, kind="hf")

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        rows = []
        for p in prompts:
            row = self.by_prompt.get(p) if isinstance(p, str) else None
            if row is None:
                raise ValueError(f"rollout: prompt {str(p)[:80]!r} is not a training question of this run "
                                 "(the dataset's `prompt` column must be the question text)")
            rows.append(row)
        cfg = self.cfg
        questions = [r["question"] for r in rows]
        prompt_ids = [self._prompt_ids(q) for q in questions]
        with self._backend(trainer) as backend:
            engine = RolloutEngine.from_config(cfg, self.tokenizer, self.retriever, backend=backend,
                                               template=self.template)
            trajs = engine.run(questions, temperature=cfg.generation.temperature, top_p=cfg.generation.top_p,
                               seed=None, prompt_ids=prompt_ids)
        if len(trajs) != len(rows):
            raise RuntimeError(f"rollout engine returned {len(trajs)} trajectories for {len(rows)} prompts")
        grades = grade_trajectories(self.grader, questions, trajs, [r["answers"] for r in rows], self.phrases)
        self.calls += 1
        self.last = trajs
        return self.collate(rows, trajs, trainer, grades)

    def collate(self, rows: list[dict], trajs: list[Trajectory], trainer: Any = None,
                grades: list[Grade] | None = None) -> dict[str, list]:
        """The dict TRL expects, from rows, their trajectories and the answer grader's verdicts (pure apart
        from metric logging)."""
        cfg = self.cfg
        budget = min(cfg.agent.max_trajectory_tokens,
                     getattr(getattr(trainer, "args", None), "max_completion_length", None) or 10**9)
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "outcome",
                                                "qid", "p_i", "p_n", "question", "answer", "citations",
                                                "passages", "gold_evidence")}
        cut = 0
        graded: list[Grade | None] = list(grades) if grades else [None] * len(trajs)
        for row, t, grade in zip(rows, trajs, graded, strict=True):
            ids, mask, lps, was_cut = enforce_budget(list(t.completion_ids), list(t.env_mask), list(t.logprobs),
                                                     budget)
            p = t.parsed
            if was_cut or not ids:
                cut += was_cut
                outcome = Outcome.INVALID
            else:
                outcome = trajectory_outcome(p, row["answers"], cfg.metrics, self.phrases, grade)
            if not ids:  # TRL needs at least one completion token per row
                ids, mask, lps = [self._pad_id()], [0], [math.nan]
            out["prompt_ids"].append(list(t.prompt_ids))
            out["completion_ids"].append(ids)
            out["logprobs"].append(lps)
            out["env_mask"].append(mask)
            out["outcome"].append(outcome.value)
            out["qid"].append(row["qid"])
            out["p_i"].append(row["p_i"])
            out["p_n"].append(row.get("p_n"))
            out["question"].append(row["question"])
            out["answer"].append(p.answer)
            out["citations"].append(list(p.citations))
            out["passages"].append([dict(d) for d in t.passages])
            out["gold_evidence"].append(row.get("gold_evidence"))
        if cut:
            log.warning("rollout: %d trajectory(ies) exceeded %d tokens and were cut (counted invalid)", cut, budget)
        self._log(trainer, trajs, out, grades)
        return out

    def _pad_id(self) -> int:
        tok = self.tokenizer
        return int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)

    @staticmethod
    def _log(trainer: Any, trajs: list[Trajectory], out: dict[str, list], grades: list[Grade] | None) -> None:
        log_metric = upstream_trl.metric_logger(trainer)
        if log_metric is None or not trajs:
            return
        n = len(trajs)
        env = sum(len(m) - sum(m) for m in out["env_mask"])
        total = sum(len(m) for m in out["env_mask"])
        log_metric("rollout/searches_mean", sum(len(t.parsed.searches) for t in trajs) / n)
        log_metric("rollout/env_token_share", env / total if total else 0.0)
        log_metric("rollout/valid_share", sum(bool(t.parsed.valid) for t in trajs) / n)
        # cut at a token budget, the turn's or the response's (TRL's completions/clipped_ratio counts every
        # trajectory that does not end on eos, and one that ends at its answer's stop string does not)
        log_metric("rollout/truncated_share", sum(t.stop_reason == "token_budget" for t in trajs) / n)
        if grades and any(g.correct is not None for g in grades):  # metrics.correctness: judge
            log_metric("rollout/grader_failed_share", sum(g.failed for g in grades) / n)
