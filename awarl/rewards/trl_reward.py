"""The stateful AWA-RL reward function for TRL's `GRPOTrainer`, and the callback that checkpoints its state.

Contract with the rollout function (its extra fields reach reward functions as kwargs, one list entry per
completion, aligned with `completions`):

    outcome    str, an `awarl.metrics.Outcome` value                       (required)
    qid        query id; the completions of one query form a GRPO group    (required)
    p_i        float, or None when unknown (then p_table, then reward.default_p, counted)
    question, answer (str | None), citations (list[int] cited passage numbers),
    passages   list of {"number", "id", "title", "text"}: everything retrieved, original text
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

import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from awarl.config import RewardConfig
from awarl.io import atomic_write_json
from awarl.metrics import Outcome
from awarl.rewards import abstention as A
from awarl.rewards.citation import build_critic_input, citation_reward, passages_from_rollout
from awarl.rewards.strategies import abstain_reward

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


# ----------------------------------------------------------------------------------------- reward
class AwaRLReward:
    """Callable reward for `GRPOTrainer(reward_funcs=[AwaRLReward(cfg, judge, p_table)])`.

    `judge`: any object with `verify(list[CriticInput]) -> list[CriticOutput | None]` (see awarl.critic), or
    None for no citation reward. `p_table`: qid -> p_i from `awarl estimate`, used when the rollout passes
    `p_i=None`.
    """

    __name__ = "awarl_reward"

    def __init__(self, cfg: RewardConfig, judge: Any = None, p_table: dict[str, float] | None = None) -> None:
        self.cfg = cfg
        self.judge = judge
        self.p_table = {str(k): A._check_prob(f"p_table[{k!r}]", v) for k, v in (p_table or {}).items()}
        self.__name__ = "awarl_reward"  # TRL names the logged reward column after this
        self.e_bar = 0.0  # Ē_0 = 0: the penalty starts inactive and ramps in as evidence accumulates
        self.updates = 0
        self.p_online: dict[str, float] = {}
        self.judge_failures_total = 0
        self.unknown_p_total = 0
        self.last_stats: dict[str, float] = {}
        # Set by RewardStateCallback: True inside a training step, False elsewhere (evaluation); None when no
        # callback drives it (stand-alone use), which means "update".
        self.training: bool | None = None

    # ---------------------------------------------------------------------------------- helpers
    @staticmethod
    def _column(kwargs: dict, key: str, n: int, required: bool = False) -> list:
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

    def _should_update(self, kwargs: dict) -> bool:
        flags = kwargs.get("training")
        if isinstance(flags, (list, tuple)) and flags:
            return all(bool(f) for f in flags)
        if isinstance(flags, bool):
            return flags
        return self.training is not False

    def _resolve_p(self, qid: str, p: Any) -> tuple[float, bool]:
        if self.cfg.p_online == "ema" and qid in self.p_online:
            return self.p_online[qid], False
        if p is not None:
            return A._check_prob(f"p_i of query {qid!r}", p), False
        if qid in self.p_table:
            return self.p_table[qid], False
        return self.cfg.default_p, True

    # ------------------------------------------------------------------------------------- call
    def __call__(self, prompts: list, completions: list, completion_ids: list | None = None,
                 **kwargs: Any) -> list[float]:
        cfg = self.cfg
        n = len(completions)
        raw_outcomes = self._column(kwargs, "outcome", n, required=True)
        outcomes: list[Outcome] = []
        for j, o in enumerate(raw_outcomes):
            try:
                outcomes.append(Outcome(o))
            except ValueError:
                raise ValueError(f"AwaRLReward: outcome[{j}] = {o!r} is not one of "
                                 f"{[x.value for x in Outcome]}") from None
        qids = [str(q) for q in self._column(kwargs, "qid", n, required=True)]
        p_col = self._column(kwargs, "p_i", n)
        update = self._should_update(kwargs)

        ps: list[float] = []
        unknown = 0
        for q, p in zip(qids, p_col, strict=True):
            val, was_unknown = self._resolve_p(q, p)
            ps.append(val)
            unknown += was_unknown
        if unknown:
            log.warning("AwaRLReward: %d completion(s) without a p_i estimate use reward.default_p=%.3g",
                        unknown, cfg.default_p)

        # Per-query counts over the whole generation batch: groups may straddle processes.
        # Each entry: (correct, completions, sum of the p used), so every rank derives the same online p.
        groups: dict[str, tuple[float, ...]] = {}
        if cfg.strategy == "bapo" or cfg.p_online == "ema":
            local: dict[str, list[float]] = {}
            for q, o, p in zip(qids, outcomes, ps, strict=True):
                acc = local.setdefault(q, [0.0, 0.0, 0.0])
                acc[0] += o is Outcome.CORRECT
                acc[1] += 1
                acc[2] += p
            groups = gather_group_counts({q: tuple(v) for q, v in local.items()})

        # Steps 4-5: observed and expected refusal rates of the whole generation batch.
        exp_sum = sum(A.expected_abstain(p, cfg.gamma, cfg.p_min, cfg.expected_rate, cfg.soft_tau) for p in ps)
        counts = [float(n), float(sum(o is Outcome.ABSTAIN for o in outcomes)), exp_sum,
                  float(sum(o is Outcome.CORRECT for o in outcomes)), float(sum(o is Outcome.WRONG for o in outcomes)),
                  float(sum(o is Outcome.INVALID for o in outcomes)), float(unknown)]
        tot_n, tot_abs, tot_exp, tot_c, tot_w, tot_inv, tot_unknown = all_reduce_sum(counts)
        rho = tot_abs / tot_n if tot_n else 0.0
        rho_hat = tot_exp / tot_n if tot_n else 0.0
        e_t = A.excess(rho, rho_hat)
        # Steps 6-8: smoothed excess -> stepwise penalty -> clipped refusal reward.
        # An evaluation batch is scored with the training state as it stands; it does not feed Ē.
        e_bar = A.ema(self.e_bar, e_t, cfg.beta) if (tot_n and update) else self.e_bar
        penalty = A.stepwise_penalty(e_bar, cfg.penalty_steps, cfg.penalty_max)

        abstain_r: list[float] = []
        for q, p in zip(qids, ps, strict=True):
            r_ref = A.refusal_reward(A.base_refusal_reward(p, cfg.gamma, cfg.p_min), penalty, cfg.r_clip)
            any_correct = groups.get(q, (0.0,))[0] > 0
            abstain_r.append(abstain_reward(cfg.strategy, cfg, r_ref, any_correct))

        r_cite, failures = self._citations(kwargs, outcomes, n)

        rewards: list[float] = []
        for o, r_ab, rc in zip(outcomes, abstain_r, r_cite, strict=True):
            r_out = A.outcome_reward(o, r_ab, cfg.r_correct, cfg.r_wrong, cfg.r_invalid)
            rewards.append(A.total_reward(o, r_out, rc, cfg.lambda_cite))

        cite_vals = [rc for rc in r_cite if rc is not None]
        n_judged = sum(1 for o in outcomes if o in (Outcome.CORRECT, Outcome.WRONG)) if self.judge else 0
        r_ref_sum, cite_sum, cite_n, fail_sum, judged_sum = all_reduce_sum(
            [sum(abstain_r), sum(cite_vals), len(cite_vals), failures, n_judged])

        if update and tot_n:
            self.e_bar = e_bar
            self.updates += 1
            if cfg.p_online == "ema":
                # The group's own outcomes do not change its own reward this step (p was read above): the
                # estimate only moves for the next time the query is drawn.
                for q, (c, t, p_sum) in groups.items():
                    if t:
                        prev = self.p_online.get(q, p_sum / t)
                        self.p_online[q] = min(1.0, max(0.0, A.ema(prev, c / t, cfg.p_online_beta)))
            self.judge_failures_total += int(fail_sum)
            self.unknown_p_total += int(tot_unknown)

        stats = {
            "rho": rho, "rho_hat": rho_hat, "E": e_t, "E_bar": e_bar, "penalty": penalty,
            "r_ref_mean": r_ref_sum / tot_n if tot_n else 0.0,
            "share_correct": tot_c / tot_n if tot_n else 0.0, "share_wrong": tot_w / tot_n if tot_n else 0.0,
            "share_abstain": rho, "share_invalid": tot_inv / tot_n if tot_n else 0.0,
            "r_cite_mean": cite_sum / cite_n if cite_n else 0.0, "judged": judged_sum,
            "judge_failures": fail_sum, "unknown_p": tot_unknown, "n": tot_n, "updated": float(update),
        }
        self.last_stats = stats
        log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
        if log_metric is not None:
            for k, v in stats.items():
                if k != "updated":
                    log_metric(f"awarl/{k}", float(v))
        log_extra = kwargs.get("log_extra")
        if log_extra is not None:
            log_extra("p_i", ps)
            log_extra("r_cite", [float("nan") if rc is None else rc for rc in r_cite])
        return rewards

    def _citations(self, kwargs: dict, outcomes: list[Outcome], n: int) -> tuple[list[float | None], int]:
        """r_cite per completion (None when not applicable or the judge failed) and the failure count."""
        out: list[float | None] = [None] * n
        if self.judge is None or self.cfg.lambda_cite == 0:
            return out, 0
        questions = self._column(kwargs, "question", n)
        answers = self._column(kwargs, "answer", n)
        cites = self._column(kwargs, "citations", n)
        passages_col = self._column(kwargs, "passages", n)
        idx: list[int] = []
        items = []
        refs = []
        for j, o in enumerate(outcomes):
            if o not in (Outcome.CORRECT, Outcome.WRONG):
                continue
            refs_j = passages_from_rollout(passages_col[j], where=f"passages of completion {j}")
            items.append(build_critic_input(str(questions[j] or ""), str(answers[j] or ""), cites[j], refs_j))
            refs.append(refs_j)
            idx.append(j)
        if not items:
            return out, 0
        try:
            verdicts = list(self.judge.verify(items))
            if len(verdicts) != len(items):
                raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(items)} items")
        except Exception as e:  # a judge must never crash training
            log.warning("AwaRLReward: citation judge failed on the whole batch: %s", e)
            return out, len(items)
        failures = 0
        for j, v, refs_j in zip(idx, verdicts, refs, strict=True):
            if v is None:
                failures += 1
                continue
            out[j] = citation_reward(v, cites[j], refs_j, self.cfg.inferred_weight).reward
        return out, failures

    # ------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {"format": STATE_FORMAT, "e_bar": self.e_bar, "updates": self.updates,
                "p_online": dict(self.p_online), "judge_failures_total": self.judge_failures_total,
                "unknown_p_total": self.unknown_p_total, "last_stats": dict(self.last_stats)}

    def load_state_dict(self, state: Mapping[str, Any], source: str = "<state>") -> None:
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"{source}: not an AWA-RL reward state (expected format {STATE_FORMAT!r})")
        e_bar = state.get("e_bar")
        if not isinstance(e_bar, (int, float)) or not math.isfinite(e_bar):
            raise ValueError(f"{source}: key 'e_bar' must be a finite number, got {e_bar!r}")
        p_online = state.get("p_online") or {}
        if not isinstance(p_online, Mapping):
            raise ValueError(f"{source}: key 'p_online' must be a mapping qid -> p")
        self.p_online = {str(k): A._check_prob(f"{source}: p_online[{k!r}]", v) for k, v in p_online.items()}
        self.e_bar = float(e_bar)
        self.updates = int(state.get("updates", 0))
        self.judge_failures_total = int(state.get("judge_failures_total", 0))
        self.unknown_p_total = int(state.get("unknown_p_total", 0))
        self.last_stats = {str(k): float(v) for k, v in (state.get("last_stats") or {}).items()}


def save_reward_state(reward: AwaRLReward, checkpoint_dir: str | os.PathLike) -> Path:
    path = Path(checkpoint_dir) / STATE_FILE
    atomic_write_json(path, reward.state_dict())
    return path


def load_reward_state(reward: AwaRLReward, checkpoint_dir: str | os.PathLike) -> bool:
    """Restore Ē and the online p estimates saved with a checkpoint. False (and a warning) when the checkpoint
    has no reward state, e.g. one written before this callback was installed."""
    path = Path(checkpoint_dir) / STATE_FILE
    if not path.is_file():
        log.warning("no %s in %s: the AWA-RL reward restarts with Ē=0", STATE_FILE, checkpoint_dir)
        return False
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: invalid JSON: {e}") from None
    reward.load_state_dict(state, source=str(path))
    return True


def _make_callback_class() -> type:
    # transformers is imported only when the callback is asked for: importing it costs seconds, and the
    # reward itself (and every process that only scores) does not need it.
    from transformers import TrainerCallback

    class RewardStateCallback(TrainerCallback):
        """Saves the reward state into every checkpoint and tells the reward when it is inside a training
        step (evaluation batches between steps then leave Ē untouched)."""

        def __init__(self, reward: AwaRLReward) -> None:
            self.reward = reward
            reward.training = False

        def on_step_begin(self, args, state, control, **kwargs):
            self.reward.training = True

        def on_step_end(self, args, state, control, **kwargs):
            self.reward.training = False

        def on_save(self, args, state, control, **kwargs):
            # Written wherever the Trainer writes the checkpoint: with save_on_each_node (node-local disks)
            # every node needs its copy, or a resume would restart Ē at 0 on some ranks only.
            if state.is_local_process_zero if args.save_on_each_node else state.is_world_process_zero:
                # Same folder name the Trainer just wrote (transformers' PREFIX_CHECKPOINT_DIR-global_step).
                save_reward_state(self.reward, Path(args.output_dir) / f"checkpoint-{state.global_step}")

    RewardStateCallback.__module__ = __name__
    return RewardStateCallback


_CALLBACK: type | None = None


def __getattr__(name: str) -> Any:
    """`RewardStateCallback` (a transformers TrainerCallback) is built on first access (PEP 562)."""
    global _CALLBACK
    if name == "RewardStateCallback":
        if _CALLBACK is None:
            _CALLBACK = _make_callback_class()
        return _CALLBACK
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
