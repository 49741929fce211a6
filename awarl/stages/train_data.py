"""Step 1 of the training recipe (awarl/stages/train.py): the training rows, each question joined to its p_i.

p_i join policy (documented in docs/training.md): training rows are joined to the estimate file on
(dataset, qid). A question without an estimate keeps p_i = None in the dataset and the reward falls back
to `reward.default_p`; the stage logs how many there are. A *missing estimate file* with the `awarl`
refusal strategy is an error for a real run (the reward would rest entirely on default_p, which is almost
certainly a forgotten `awarl estimate`), and a warning in a dry run.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from awarl.config import AwarlConfig
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
from awarl.io import DataError
from awarl.rewards.strategies import strategy
from awarl.stages.questions import load_train_examples

log = logging.getLogger(__name__)


def training_rows(cfg: AwarlConfig, *, strict: bool = True,
                  examples: list[QAExample] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
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


def build_dataset(rows: list[dict[str, Any]]) -> Any:
    """The rows as a `datasets.Dataset` with fixed column types (what GRPOTrainer samples from)."""
    from datasets import Dataset, Features, Sequence, Value

    features = Features({"prompt": Value("string"), "qid": Value("string"), "dataset": Value("string"),
                         "question": Value("string"), "answers": Sequence(Value("string")),
                         "p_i": Value("float64"), "p_n": Value("float64"), "gold_evidence": Value("string")})
    return Dataset.from_list(rows, features=features)
