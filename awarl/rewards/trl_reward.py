"""The stateful AWA-RL reward function for TRL's `GRPOTrainer`, and its state file (the callback that
saves it with every checkpoint is `awarl.training.callbacks.RewardStateCallback`).

Contract with the rollout function (its extra fields reach reward functions as kwargs, one list entry per
completion, aligned with `completions`):

    outcome    str, an `awarl.metrics.Outcome` value                       (required)
    qid        query id; the completions of one query form a GRPO group    (required)
    p_i        float, or None when unknown (then p_table, then reward.default_p, counted); the pre-RL
               estimate (`p_online: group` adds the group's own outcomes to it here)
    p_n        optional: the samples p_i rests on (for expected_rate=posterior; then n_table, then
               reward.posterior_samples; a query on reward.default_p counts 0: the prior alone)
    question, answer (str | None), citations (list[int] cited passage numbers),
    passages   list of {"number", "id", "title", "text"}: everything retrieved, original text
    gold_evidence  optional: the question's gold evidence (compact JSON or dict; None without), read by the
               gold citation judge (`critic.judge: gold`)
    training   optional bool: False marks an evaluation batch (statistics are computed, state is not updated)

TRL itself adds `trainer_state`, `log_metric(name, value)` and `log_extra(column, values)`.

TRL calls reward functions once per *generation batch* (`GRPOTrainer._prepare_inputs` generates and scores
every `steps_per_generation × num_iterations` steps and replays the buffered slices in between), so one call
is one AWA-RL step t: Ē is updated exactly once per call. Under several processes each rank sees only its
slice of the generation batch, and a GRPO group may straddle ranks; ρ_t, ρ̂_t and the logged statistics are
therefore all-reduced, and per-query counts (BAPO's "any correct in the group", `p_online: ema`) gathered,
with `torch.distributed` whenever it is initialised. Every rank then holds identical state.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from awarl.config import RewardConfig
from awarl.critic.gold_judge import evidence_from
from awarl.critic.schema import Judge
from awarl.io import atomic_write_json, loads_json
from awarl.metrics import Outcome
from awarl.rewards import abstention as A
from awarl.rewards.citation import CitationItem, judge_citations, judged
from awarl.rewards.strategies import abstain_reward, needs_group_counts, strategy

log = logging.getLogger(__name__)

STATE_FILE = "awarl_reward_state.json"
STATE_FORMAT = "awarl-reward-state/1"


# ------------------------------------------------------------------------------------- distributed
def _dist():
    """torch.distributed when a multi-process group is running, else None."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """Sum a short vector over all processes (identity without torch.distributed)."""
    dist = _dist()
    if dist is None:
        return [float(v) for v in values]
    import torch

    # NCCL only reduces CUDA tensors; gloo (CPU tests, CPU clusters) only CPU ones.
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu().tolist()


def gather_group_counts(local: Mapping[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
    """Sum per-query count tuples, e.g. (correct, total, sum of p), over every process."""
    dist = _dist()
    parts: list[Any] = [dict(local)]
    if dist is not None:
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, dict(local))
    merged: dict[str, list[float]] = {}
    for part in parts:
        for qid, vals in (part or {}).items():
            acc = merged.setdefault(qid, [0.0] * len(vals))
            for k, v in enumerate(vals):
                acc[k] += float(v)
    return {q: tuple(v) for q, v in merged.items()}


def _sample_count(name: str, n: Any) -> float:
    """A sample count behind a p_i: a finite number >= 0 (a bool is not a count)."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or n < 0:
        raise ValueError(f"{name} must be a sample count >= 0, got {n!r}")
    return float(n)


# ----------------------------------------------------------------------------------------- reward
class AwaRLReward:
    """Callable reward for `GRPOTrainer(reward_funcs=[AwaRLReward(cfg, judge, p_table)])`.

    `judge`: any object with `verify(list[CriticInput]) -> list[CriticOutput | None]` (see awarl.critic), or
    None for no citation reward. `p_table`: qid -> p_i from `awarl estimate`, used when the rollout passes
    `p_i=None`; `n_table`: qid -> the samples that p_i rests on (expected_rate=posterior); `total_steps`: the run's
    training steps, of which `reward.refusal_warmup` is a share (else the trainer_state TRL passes says);
    `lr_multipliers`: each step's learning rate over the peak; `scale_rewards`: the trainer's advantage
    normalisation (TRL's `scale_rewards`), which picks the warm-up's share when it is given per normalisation.
    """

    __name__ = "awarl_reward"

    def __init__(self, cfg: RewardConfig, judge: Judge | None = None, p_table: dict[str, float] | None = None,
                 n_table: dict[str, float] | None = None, total_steps: int | None = None,
                 lr_multipliers: Sequence[float] | None = None, scale_rewards: str = "group") -> None:
        self.cfg = cfg
        # the advantage normalisation the trainer uses (TRL's scale_rewards): the warm-up's share depends on it
        self.warm_share = cfg.warmup_share(scale_rewards)
        self.total_steps = total_steps  # the run's training steps (reward.refusal_warmup is a share of them)
        # lr_multipliers: each step's learning rate over the peak (awarl.lr_schedule; None: constant). The warm-up
        # is a share of the run's learning, which a decaying schedule does early; its length is fixed once the
        # run's is known, so it is computed here, not per batch.
        if lr_multipliers is not None and total_steps != len(lr_multipliers):
            raise ValueError(f"AwaRLReward: {len(lr_multipliers)} learning-rate multipliers for a run of "
                             f"total_steps={total_steps}")
        self._warm_of_run = A.warmup_steps(self.warm_share, total_steps, lr_multipliers) \
            if isinstance(total_steps, int) and total_steps > 0 else None
        self.judge = judge
        self.p_table = {str(k): A.check_prob(f"p_table[{k!r}]", v) for k, v in (p_table or {}).items()}
        self.n_table = {str(k): _sample_count(f"n_table[{k!r}]", v) for k, v in (n_table or {}).items()}
        self.__name__ = "awarl_reward"  # TRL names the logged reward column after this
        self.e_ema = 0.0  # the running EMA m_t of the excess, m_0 = 0; Ē_t derives from it (reward.ema_start)
        self.e_bar = 0.0
        self.updates = 0
        self.f_ema = 0.0  # reward.abstain_line=ra_f1: the running RA-F1's EMA (m_0 = 0, bias-corrected when read)
        self.p_online: dict[str, float] = {}
        self.judge_failures_total = 0
        self.unknown_p_total = 0
        self.last_stats: dict[str, float] = {}
        # Set by RewardStateCallback: True inside a training step, False elsewhere (evaluation); None when no
        # callback drives it (stand-alone use), which means "update".
        self.training: bool | None = None

    # ---------------------------------------------------------------------------------- helpers
    @staticmethod
    def _column(kwargs: dict[str, Any], key: str, n: int, required: bool = False) -> list[Any]:
        if key not in kwargs or kwargs[key] is None:
            if required:
                raise ValueError(f"AwaRLReward: the rollout must pass `{key}` (one entry per completion); "
                                 f"got keys {sorted(k for k in kwargs if k not in ('trainer_state', 'log_metric', 'log_extra'))}")
            return [None] * n
        col = kwargs[key]
        if not isinstance(col, (list, tuple)) or len(col) != n:
            got = len(col) if isinstance(col, (list, tuple)) else type(col).__name__
            raise ValueError(f"AwaRLReward: `{key}` must be a list with one entry per completion ({n}), got {got}")
        return list(col)

    def _warm_steps(self, kwargs: dict[str, Any]) -> int:
        """The warm-up's length in training steps (`reward.refusal_warmup` of the run's learning): of `total_steps`
        under `lr_multipliers` when given, else of the trainer's `max_steps` (TRL passes its `trainer_state`) at a
        constant learning rate."""
        if self.warm_share == 0:
            return 0
        if self._warm_of_run is not None:
            return self._warm_of_run
        total = self.total_steps
        if total is None:
            total = getattr(kwargs.get("trainer_state"), "max_steps", None)
        if not isinstance(total, int) or total <= 0:
            raise ValueError("reward.refusal_warmup is a share of the run: give AwaRLReward total_steps "
                             "(awarl train passes train.max_steps) or call it from a trainer that passes trainer_state")
        return A.warmup_steps(self.warm_share, total)

    def _should_update(self, kwargs: dict[str, Any]) -> bool:
        flags = kwargs.get("training")
        if isinstance(flags, (list, tuple)) and flags:
            return all(bool(f) for f in flags)
        if isinstance(flags, bool):
            return flags
        return self.training is not False

    def _resolve_p(self, qid: str, p: Any, n: Any) -> tuple[float, float, bool]:
        """(p, the samples it rests on, whether it was unknown). An online estimate keeps the pre-RL count: the
        posterior reading then stays as sure of it as of the estimate it started from."""
        count = _sample_count(f"p_n of query {qid!r}", n) if n is not None else \
            self.n_table.get(qid, float(self.cfg.posterior_samples))
        if self.cfg.p_online == "ema" and qid in self.p_online:
            # a query that had no pre-RL estimate (default_p) keeps its count of 0, the prior alone
            known = p is not None or qid in self.p_table
            return self.p_online[qid], count if known else 0.0, False
        if p is not None:
            return A.check_prob(f"p_i of query {qid!r}", p), count, False
        if qid in self.p_table:
            return self.p_table[qid], count, False
        return self.cfg.default_p, 0.0, True

    # ------------------------------------------------------------------------------------- call
    def __call__(self, prompts: list[Any], completions: list[Any], completion_ids: list[Any] | None = None,
                 **kwargs: Any) -> list[float]:
        """One AWA-RL step t over this process's slice of the generation batch (module docstring)."""
        cfg = self.cfg
        n = len(completions)
        outcomes, qids, ps, ns, unknown = self._read_batch(kwargs, n)
        update = self._should_update(kwargs)
        groups = self._group_counts(qids, outcomes, ps)
        if cfg.p_online == "group":
            ps, ns = self._with_group_outcomes(qids, ps, ns, groups)
        rates = self._batch_rates(outcomes, ps, ns, unknown, update)
        # reward.refusal_warmup: plain GRPO's abstention reward, and Ē held at its start, until it ends
        warm = strategy(cfg.strategy).uses_r_ref and A.warming_up(self.updates, self._warm_steps(kwargs))
        smoothing = self._smoothing(rates, update and bool(rates["n"]) and not warm)
        penalty = smoothing["penalty"] if smoothing else 0.0
        penalties = [0.0] * n if warm else self._group_penalties(qids, smoothing)
        abstain_r = [float(cfg.r_wrong)] * n if warm else \
            self._abstain_rewards(qids, ps, penalties, groups, rates.get("line"))
        r_cite, failures, cite_counts = self._citations(kwargs, outcomes, n)
        rewards = [A.total_reward(o, A.outcome_reward(o, r_ab, cfg.r_correct, cfg.r_wrong, cfg.r_invalid),
                                  rc, cfg.lambda_cite)
                   for o, r_ab, rc in zip(outcomes, abstain_r, r_cite, strict=True)]
        cite_vals = [rc for rc in r_cite if rc is not None]
        n_judged = sum(1 for o in outcomes if judged(o)) if self.judge else 0
        r_ref_sum, pen_sum, cite_sum, cite_n, fail_sum, judged_sum, *cite_extra = all_reduce_sum(
            [sum(abstain_r), sum(penalties), sum(cite_vals), len(cite_vals), failures, n_judged,
             *cite_counts.values()])
        if update and rates["n"]:
            self._update_state(smoothing, groups, fail_sum, rates)
        tot = rates["n"]
        # E, Ē and P exist for AWA-RL only; ρ̂ is logged for every strategy as the reference refusal rate.
        stats = {"rho": rates["rho"], "rho_hat": rates["rho_hat"],
                 **({"E": rates["E"], "E_bar": smoothing["e_bar"], "penalty": penalty,
                     "penalty_applied": pen_sum / tot if tot else 0.0} if smoothing else {}),
                 **({"ra_f1_hat": rates["ra_f1_hat"], "line": rates["line"]} if "line" in rates else {}),
                 "r_ref_mean": r_ref_sum / tot if tot else 0.0,
                 **{k: rates[k] for k in ("share_correct", "share_wrong", "share_abstain", "share_invalid")},
                 "r_cite_mean": cite_sum / cite_n if cite_n else 0.0, "judged": judged_sum,
                 "judge_failures": fail_sum, **dict(zip(cite_counts, cite_extra, strict=True)),
                 "unknown_p": rates["unknown_p"], "n": tot, "updated": float(update)}
        self.last_stats = stats
        self._log(kwargs, stats, ps, r_cite)
        return rewards

    # ----------------------------------------------------------------------------------- steps
    def _read_batch(self, kwargs: dict[str, Any], n: int) -> tuple[list[Outcome], list[str], list[float], list[float], int]:
        """The batch's outcomes, query ids, p_i (resolved: online estimate, rollout column, p table, default_p)
        and the samples each rests on, and how many p_i were unknown."""
        outcomes: list[Outcome] = []
        for j, o in enumerate(self._column(kwargs, "outcome", n, required=True)):
            try:
                outcomes.append(Outcome(o))
            except ValueError:
                raise ValueError(f"AwaRLReward: outcome[{j}] = {o!r} is not one of "
                                 f"{[x.value for x in Outcome]}") from None
        qids = []
        for j, q in enumerate(self._column(kwargs, "qid", n, required=True)):
            if not isinstance(q, (str, int)) or isinstance(q, bool) or not str(q).strip():
                # None became the string "None": every such completion one GRPO group, one online p
                raise ValueError(f"AwaRLReward: qid[{j}] = {q!r:.40} is not a query id")
            qids.append(str(q))
        ps: list[float] = []
        ns: list[float] = []
        unknown = 0
        for q, p, c in zip(qids, self._column(kwargs, "p_i", n), self._column(kwargs, "p_n", n), strict=True):
            val, count, was_unknown = self._resolve_p(q, p, c)
            ps.append(val)
            ns.append(count)
            unknown += was_unknown
        if unknown:
            log.warning("AwaRLReward: %d completion(s) without a p_i estimate use reward.default_p=%.3g",
                        unknown, self.cfg.default_p)
        return outcomes, qids, ps, ns, unknown

    def _group_counts(self, qids: list[str], outcomes: list[Outcome], ps: list[float]) -> dict[str, tuple[float, ...]]:
        """Per-query (correct, answered, completions, sum of the p used) over the whole generation batch
        (groups may straddle processes), so every rank derives the same BAPO rule and online p. Empty when
        unused."""
        if not needs_group_counts(self.cfg):
            return {}
        local: dict[str, list[float]] = {}
        for q, o, p in zip(qids, outcomes, ps, strict=True):
            acc = local.setdefault(q, [0.0, 0.0, 0.0, 0.0])
            acc[0] += o is Outcome.CORRECT
            acc[1] += o is not Outcome.ABSTAIN
            acc[2] += 1
            acc[3] += p
        return gather_group_counts({q: tuple(v) for q, v in local.items()})

    def _with_group_outcomes(self, qids: list[str], ps: list[float], ns: list[float],
                             groups: dict[str, tuple[float, ...]]) -> tuple[list[float], list[float]]:
        """Step 4, `p_online: group`: each completion's (p, n) once its whole group's answered outcomes (counted
        across processes) join the pre-RL estimate (`abstention.group_estimate`). Read before any reward is paid,
        so the group's own outcomes shape its own ρ̂ share and R_base this very step."""
        lam = self.cfg.p_prior_weight
        pairs = [A.group_estimate(p, n, groups[q][0], groups[q][1], lam) for q, p, n in zip(qids, ps, ns, strict=True)]
        return [p for p, _ in pairs], [n for _, n in pairs]

    def _batch_rates(self, outcomes: list[Outcome], ps: list[float], ns: list[float], unknown: int,
                     update: bool) -> dict[str, float]:
        """Steps 4-5 over the whole generation batch (counts summed across processes): ρ_t, ρ̂_t, E_t, the outcome
        shares, and under `reward.abstain_line: ra_f1` the step's line (`_ra_f1_line`), which ρ̂ reads."""
        cfg = self.cfg
        counts = [float(len(outcomes)), float(unknown)] + [
            float(sum(o is kind for o in outcomes))
            for kind in (Outcome.ABSTAIN, Outcome.CORRECT, Outcome.WRONG, Outcome.INVALID)]
        tot, tot_unknown, n_abs, n_c, n_w, n_inv = all_reduce_sum(counts)
        out = self._ra_f1_line(n_c, tot - n_abs, tot, update) if tot else {}
        line = out.get("line")
        (tot_exp,) = all_reduce_sum([sum(A.expected_share(p, c, cfg, line) for p, c in zip(ps, ns, strict=True))])

        def share(x: float) -> float:
            return x / tot if tot else 0.0

        rho, rho_hat = share(n_abs), share(tot_exp)
        return {"n": tot, "rho": rho, "rho_hat": rho_hat, "E": A.excess(rho, rho_hat), "unknown_p": tot_unknown,
                "share_correct": share(n_c), "share_wrong": share(n_w), "share_abstain": rho,
                "share_invalid": share(n_inv), **out}

    def _ra_f1_line(self, correct: float, answered: float, total: float, update: bool) -> dict[str, float]:
        """`reward.abstain_line: ra_f1` (AWA-RL only; empty otherwise): the running RA-F1 F̂ with this batch in it
        (a training batch, the warm-up's too; an evaluation batch reads the state, or itself before any training
        step) and the step's line F̂/2 (`abstention.ra_f1_line`)."""
        cfg = self.cfg
        if cfg.abstain_line != "ra_f1" or not strategy(cfg.strategy).uses_r_ref:
            return {}
        f = A.ra_f1_of_counts(correct, answered, total)
        if update or not self.updates:
            f_ema, f_hat = A.running_ra_f1(self.f_ema, f, self.updates + 1, cfg.ra_f1_beta)
        else:
            f_ema, f_hat = self.f_ema, A.bias_corrected(self.f_ema, self.updates, cfg.ra_f1_beta)
        return {"f_ema": f_ema, "ra_f1_hat": f_hat, "line": A.ra_f1_line(f_hat)}

    def _smoothing(self, rates: dict[str, float], update: bool) -> dict[str, float] | None:
        """Steps 6-7 for AWA-RL (None for the baselines, which have no penalty): the EMA m_t, Ē_t and P(Ē_t).
        An evaluation batch is scored with the training state as it stands; it does not feed Ē."""
        cfg = self.cfg
        if not strategy(cfg.strategy).uses_r_ref:
            return None
        e_ema, updates = (A.ema(self.e_ema, rates["E"], cfg.beta), self.updates + 1) if update else \
            (self.e_ema, self.updates)
        e_bar = A.smoothed_excess(e_ema, updates, cfg.beta, cfg.ema_start)
        return {"e_ema": e_ema, "e_bar": e_bar, "updates": updates,
                "penalty": A.stepwise_penalty(e_bar, cfg.penalty_steps, cfg.penalty_max)}

    def _group_penalties(self, qids: list[str], smoothing: dict[str, float] | None) -> list[float]:
        """Step 7 per completion: its group's P(Ē + u) (`abstention.group_penalty`; u = 0 without
        `penalty_dither`), the offset drawn from the query id and the step, so a group straddling processes gets
        one penalty. 0 for the baselines."""
        if smoothing is None:
            return [0.0] * len(qids)
        cfg = self.cfg
        by_query = {q: A.group_penalty(smoothing["e_bar"], q, int(smoothing["updates"]), cfg.penalty_steps,
                                       cfg.penalty_max, cfg.penalty_dither) for q in dict.fromkeys(qids)}
        return [by_query[q] for q in qids]

    def _abstain_rewards(self, qids: list[str], ps: list[float], penalties: list[float],
                         groups: dict[str, tuple[float, ...]], line: float | None = None) -> list[float]:
        """What an abstention earns per completion under the strategy (step 8 for `awarl`; R_base at the step's
        `line` under `reward.abstain_line: ra_f1`; weighted for the gate by its group's answered count under
        `reward.refusal_gate_weight: tie_at_line`)."""
        cfg = self.cfg
        r_max = A.refusal_cap(cfg.r_correct, cfg.r_ref_margin)
        r_min = A.refusal_floor(cfg.r_wrong, cfg.r_ref_floor_margin)
        weighted = A.weights_gate(cfg, strategy(cfg.strategy).uses_r_ref)
        out = []
        for q, p, pen in zip(qids, ps, penalties, strict=True):
            r_ref = A.refusal_reward(A.base_reward(p, cfg, line), pen, cfg.r_clip, r_max, r_min)
            correct, answered = groups.get(q, (0.0, 0.0))[:2]
            if weighted and correct == 0:  # reward.refusal_gate_weight: the tie back at the line
                r_ref = A.gated_refusal_reward(r_ref, A.line_of(p, cfg, line), answered, cfg.r_wrong, cfg.r_clip,
                                               r_max, r_min)
            out.append(abstain_reward(cfg.strategy, cfg, r_ref, correct > 0))
        return out

    def _update_state(self, smoothing: dict[str, float] | None, groups: dict[str, tuple[float, ...]], failures: float,
                      rates: dict[str, float]) -> None:
        """Advance Ē, the running RA-F1, the online p estimates and the counters by one training step."""
        if smoothing is not None:
            self.e_ema, self.e_bar = smoothing["e_ema"], smoothing["e_bar"]
        if "f_ema" in rates:
            self.f_ema = rates["f_ema"]
        unknown = rates["unknown_p"]
        self.updates += 1
        if self.cfg.p_online == "ema":
            # The group's own outcomes do not change its own reward this step (p was read above): the
            # estimate only moves for the next time the query is drawn.
            for q, (c, answered, t, p_sum) in groups.items():
                if t:
                    prev = self.p_online.get(q, p_sum / t)
                    self.p_online[q] = A.online_p(prev, c, answered, self.cfg.p_online_beta)
        self.judge_failures_total += int(failures)
        self.unknown_p_total += int(unknown)

    @staticmethod
    def _log(kwargs: dict[str, Any], stats: dict[str, float], ps: list[float], r_cite: list[float | None]) -> None:
        """Step 11's logging, through TRL's `log_metric` / `log_extra` when present."""
        log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
        if log_metric is not None:
            for k, v in stats.items():
                if k != "updated":
                    log_metric(f"awarl/{k}", float(v))
        log_extra = kwargs.get("log_extra")
        if log_extra is not None:
            log_extra("p_i", ps)
            log_extra("r_cite", [float("nan") if rc is None else rc for rc in r_cite])

    def _citations(self, kwargs: dict[str, Any], outcomes: list[Outcome], n: int
                   ) -> tuple[list[float | None], int, dict[str, float]]:
        """Step 10: r_cite per completion (None when not applicable, not judged or the judge failed), the
        failure count, and the per-step counts logged with it: answers a gold judge left to its fallback or
        did not judge (no gold evidence), and the judge's HTTP requests and tokens this step (an
        OpenAI-compatible judge; 0 otherwise). Through the same `judge_citations` as evaluation."""
        counts = dict.fromkeys(("judge_fallbacks", "judge_skipped", "judge_requests", "judge_prompt_tokens",
                                "judge_completion_tokens"), 0.0)
        if self.judge is None or self.cfg.lambda_cite == 0:
            return [None] * n, 0, counts
        cols = {k: self._column(kwargs, k, n) for k in ("question", "answer", "citations", "passages",
                                                        "gold_evidence")}
        golds = [evidence_from(g, where=f"AwaRLReward: gold_evidence[{j}]") for j, g in enumerate(cols["gold_evidence"])]
        items = [CitationItem(str(q or ""), a, list(c or []), ps, o, g) for q, a, c, ps, o, g in
                 zip(cols["question"], cols["answer"], cols["citations"], cols["passages"], outcomes, golds,
                     strict=True)]
        before = self.judge.usage() if hasattr(self.judge, "usage") else {}
        results = judge_citations(self.judge, items, self.cfg.inferred_weight)
        after = self.judge.usage() if hasattr(self.judge, "usage") else {}
        for key in ("requests", "prompt_tokens", "completion_tokens"):
            counts[f"judge_{key}"] = float(after.get(key, 0) - before.get(key, 0))
        counts["judge_fallbacks"] = float(sum(1 for r in results if r is not None and r.fallback))
        counts["judge_skipped"] = float(sum(1 for r in results if r is not None and r.skipped is not None))
        return ([r.score.reward if r is not None and r.score is not None else None for r in results],
                sum(1 for r in results if r is not None and r.failed), counts)

    # ------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "e_bar": self.e_bar, "e_ema": self.e_ema, "f_ema": self.f_ema,
                "updates": self.updates,
                "p_online": dict(self.p_online), "judge_failures_total": self.judge_failures_total,
                "unknown_p_total": self.unknown_p_total, "last_stats": dict(self.last_stats)}

    def load_state_dict(self, state: Mapping[str, Any], source: str = "<state>") -> None:
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"{source}: not an AWA-RL reward state (expected format {STATE_FORMAT!r})")
        e_bar = _excess_value(source, "e_bar", state.get("e_bar"))
        # States written before reward.ema_start existed hold only Ē, which then equalled the EMA itself.
        e_ema = _excess_value(source, "e_ema", state.get("e_ema", e_bar))
        # States written before reward.abstain_line existed have no running RA-F1: it starts again from 0.
        f_ema = state.get("f_ema", 0.0)
        if isinstance(f_ema, bool) or not isinstance(f_ema, (int, float)) or not 0.0 <= f_ema <= 1.0:
            raise ValueError(f"{source}: key 'f_ema' must be a number in [0, 1] (an average of RA-F1 values), "
                             f"got {f_ema!r:.40}")
        p_online = state.get("p_online") or {}
        if not isinstance(p_online, Mapping):
            raise ValueError(f"{source}: key 'p_online' must be a mapping qid -> p")
        self.p_online = {str(k): A.check_prob(f"{source}: p_online[{k!r}]", v) for k, v in p_online.items()}
        counts = {}
        for key in ("updates", "judge_failures_total", "unknown_p_total"):
            v = state.get(key, 0)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:  # null raised a bare TypeError
                raise ValueError(f"{source}: key {key!r} must be an integer >= 0, got {v!r:.40}")
            counts[key] = v
        last = state.get("last_stats") or {}
        if not isinstance(last, Mapping) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                    for v in last.values()):
            raise ValueError(f"{source}: key 'last_stats' must be a mapping name -> number, got {last!r:.80}")
        self.e_bar = float(e_bar)
        self.e_ema = float(e_ema)
        self.f_ema = float(f_ema)
        self.updates = counts["updates"]
        self.judge_failures_total = counts["judge_failures_total"]
        self.unknown_p_total = counts["unknown_p_total"]
        self.last_stats = {str(k): float(v) for k, v in last.items()}


# E_t = ρ_t − ρ̂_t is a difference of two rates in [0, 1], so it lies in [−1, 1]; the EMA of such values from
# m_0 = 0, and Ē (that EMA, or its bias-corrected weighted average), stay in [−1, 1] too. A saved value outside
# (plus rounding) was not written by this reward: a hand edit or a damaged file, which would pin the penalty at
# its maximum for the rest of the run.
EXCESS_BOUND = 1.0 + 1e-9


def _excess_value(source: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or abs(value) > EXCESS_BOUND:
        raise ValueError(f"{source}: key {key!r} must be a number in [-1, 1] (an excess refusal rate ρ − ρ̂, or an "
                         f"average of them), got {value!r:.40}")
    return float(value)


def save_reward_state(reward: AwaRLReward, checkpoint_dir: str | os.PathLike[str]) -> Path:
    path = Path(checkpoint_dir) / STATE_FILE
    atomic_write_json(path, reward.state_dict())
    return path


def load_reward_state(reward: AwaRLReward, checkpoint_dir: str | os.PathLike[str]) -> bool:
    """Restore Ē and the online p estimates saved with a checkpoint. False (and a warning) when the checkpoint
    has no reward state, e.g. one written before this callback was installed."""
    path = Path(checkpoint_dir) / STATE_FILE
    if not path.is_file():
        log.warning("no %s in %s: the AWA-RL reward restarts with Ē=0", STATE_FILE, checkpoint_dir)
        return False
    try:
        state = loads_json(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: invalid JSON: {e}") from None
    reward.load_state_dict(state, source=str(path))
    return True
