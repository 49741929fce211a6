"""The question sets of a run: training questions (`data.train`) and evaluation questions (`data.eval`, else
the shipped dev samples of `eval.datasets`), loaded the same way by every stage that needs them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from awarl.config import DataConfig, DataFile, EvalConfig
from awarl.data.loaders import SHIPPED_DEV, load_examples, subsample
from awarl.data.paths import resolve_data_path
from awarl.data.types import QAExample, example_key
from awarl.io import DataError, shipped_data_dir

log = logging.getLogger(__name__)


def load_train_examples(data: DataConfig, seed: int, files: Sequence[DataFile] | None = None) -> list[QAExample]:
    """The training questions of `data.train` (or of `files`), each file subsampled by its own `limit` with
    `seed` (run.seed).

    Questions are deduplicated by their text (first occurrence wins, with a warning): the TRL rollout
    function only sees the prompt text, so two examples with the same question could not be told apart.
    Two questions of other text under one (dataset, id) are an error naming both files: p_i, the GRPO group
    and the reward's state are keyed by it, so one would train on the other's p_i.
    """
    files = list(data.train if files is None else files)
    if not files:
        raise DataError("no training questions: data.train lists no files")
    out: list[QAExample] = []
    seen: set[str] = set()
    keys: dict[str, tuple[str, str]] = {}  # example_key -> (question, file)
    dup = 0
    for f in files:
        res = load_examples(resolve_data_path(f.path), format=f.format, dataset=f.dataset,
                            on_error=data.on_error, limit=f.limit, seed=seed)
        for ex in res.examples:
            q = ex.question.strip()
            if q in seen:
                dup += 1
                continue
            key = example_key(ex.dataset, ex.id)
            if key in keys:
                raise DataError(f"training question id {key} names two questions: {keys[key][0]!r:.80} "
                                f"({keys[key][1]}) and {q!r:.80} ({f.path}); p_i and the reward are keyed by "
                                "(dataset, id): give the files distinct `dataset` names or ids")
            keys[key] = (q, f.path)
            seen.add(q)
            out.append(ex)
    if dup:
        log.warning("dropped %d training question(s) whose text duplicates an earlier one", dup)
    if not out:
        raise DataError(f"no training questions in {[f.path for f in files]}")
    return out


@dataclass
class EvalSet:
    """The questions of one evaluation run, grouped by dataset, with the files they came from."""

    examples: list[QAExample]
    # dataset -> its source files, in the order they were read (two data.eval entries may share a dataset)
    files: dict[str, list[str]] = field(default_factory=dict)


def _per_dataset_limit(examples: list[QAExample], limit: int | None, seed: int) -> list[QAExample]:
    """At most `limit` questions of each dataset, the seeded subsample of its questions from every file (a
    dataset split over two data.eval files gets `limit`, not `limit` a file); one file of one dataset gets the
    subsample `load_examples(limit=...)` draws."""
    if limit is None:
        return examples
    by_ds: dict[str, list[QAExample]] = {}
    for ex in examples:
        by_ds.setdefault(ex.dataset, []).append(ex)
    kept = {id(ex) for group in by_ds.values() for ex in subsample(group, limit, seed)}
    return [ex for ex in examples if id(ex) in kept]


def load_eval_set(data: DataConfig, evaluation: EvalConfig, seed: int, datasets: list[str] | None = None,
                  limit: int | None = None) -> EvalSet:
    """`data.eval` files when configured, else the shipped dev samples of `eval.datasets` (or `datasets`).

    `limit` (default eval.limit) applies per dataset, as a subsample drawn with `seed` (run.seed), so runs
    with the same seed see the same questions.
    """
    limit = limit if limit is not None else evaluation.limit
    out: list[QAExample] = []
    files: dict[str, list[str]] = {}
    if data.eval and not datasets:
        # Predictions are keyed by (dataset, id): the same key in two files must be the same question, or
        # one of the two would silently go unscored.
        seen: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (question, file)
        for f in data.eval:
            path = resolve_data_path(f.path)  # hf://datasets/... files come from the Hub cache
            res = load_examples(path, format=f.format, dataset=f.dataset, on_error=data.on_error,
                                limit=f.limit, seed=seed)
            for msg in res.skipped:
                log.warning("skipped: %s", msg)
            for ex in res.examples:
                question = ex.question.strip()
                first_question, first = seen.setdefault((ex.dataset, ex.id), (question, str(path)))
                if question != first_question:
                    raise DataError(f"{path}: question id {ex.id!r} of dataset {ex.dataset!r} is also in {first} "
                                    "with another question text; give the two files different `dataset` "
                                    "names in data.eval, or fix the ids")
                if str(path) not in files.setdefault(ex.dataset, []):
                    files[ex.dataset].append(str(path))
            out.extend(res.examples)
        return EvalSet(_per_dataset_limit(out, limit, seed), files)
    for ds in datasets or evaluation.datasets:
        if ds not in SHIPPED_DEV:
            raise ValueError(f"unknown evaluation dataset {ds!r}; shipped: {', '.join(SHIPPED_DEV)} "
                             "(or list your own files under data.eval)")
        path = shipped_data_dir() / SHIPPED_DEV[ds]
        res = load_examples(path, dataset=ds, limit=limit, seed=seed)
        out.extend(res.examples)
        files[ds] = [str(path)]
    return EvalSet(out, files)
