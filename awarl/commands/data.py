"""`awarl data`: prepare datasets into unified JSONL, build closed corpora, print statistics."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from awarl.choices import DEV_SETS, FORMATS
from awarl.commands.common import seed_number


def _add_load_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", default="auto", choices=FORMATS.choices,
                   help="input format (default: detected from the content; docs/formats.md)")
    p.add_argument("--dataset", default=None, help="dataset name recorded on every example")
    p.add_argument("--on-error", default="fail", choices=["fail", "skip"],
                   help="a malformed record stops the command (fail) or is counted and skipped (skip)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="keep a seeded random subsample of N examples (file order kept)")
    p.add_argument("--seed", type=seed_number, default=0, help="subsample seed, 0 to 2**32 - 1")


def _load(args: argparse.Namespace, path: str, require_answers: bool = True):
    from awarl.data.loaders import load_examples
    from awarl.data.paths import resolve_data_path

    if args.limit is not None and args.limit < 1:
        from awarl.io import DataError

        raise DataError(f"--limit must be >= 1, got {args.limit}")
    res = load_examples(resolve_data_path(path), format=args.format, dataset=args.dataset,
                        on_error=args.on_error, limit=args.limit, seed=args.seed, require_answers=require_answers)
    for msg in res.skipped:
        print(f"skipped: {msg}")
    return res  # malformed optional metadata: the loader logs one warning with the count


def _nothing_to_write(what: str, skipped: list[str]) -> Exception:
    """The error for an output that would be empty: raised before the file is touched, so an earlier one stays."""
    from awarl.io import DataError

    why = f"; {len(skipped)} malformed record(s) skipped, first: {skipped[0]}" if skipped else ""
    return DataError(f"{what}{why}; nothing written")


def _refuse_input_as_out(out: str, inputs: list[str | Path]) -> None:
    """A DataError when --out names one of the input files: writing it would replace the dataset it reads
    (HotpotQA's JSON by its unified JSONL, say). Checked before anything is read."""
    from awarl.data.paths import HF_PREFIX, resolve_data_path
    from awarl.io import DataError

    target = Path(out)
    if not target.exists():
        return
    for path in inputs:
        if str(path).startswith(HF_PREFIX):
            continue
        src = resolve_data_path(path)
        if src.exists() and os.path.samefile(src, target):
            raise DataError(f"--out {out} is the input file {path}: writing it would replace the dataset; "
                            "choose another --out")


def _prepare(args: argparse.Namespace) -> int:
    from awarl.io import write_jsonl

    _refuse_input_as_out(args.out, [args.input])
    res = _load(args, args.input, require_answers=not args.allow_no_answers)
    if not res.examples:
        raise _nothing_to_write(f"{args.input}: no examples", res.skipped)
    n = write_jsonl(args.out, (ex.to_dict() for ex in res.examples))
    no_answer = sum(1 for ex in res.examples if not ex.answers)
    print(f"{args.input} ({res.format}): wrote {n} examples to {args.out}"
          + (f"; skipped {len(res.skipped)} malformed record(s)" if res.skipped else "")
          + (f"; dropped malformed optional metadata of {len(res.warnings)} record(s)" if res.warnings else "")
          + (f"; {no_answer} without a gold answer (not usable for eval, estimate or train)" if no_answer else ""))
    return 0


def _stats(args: argparse.Namespace) -> int:
    from awarl.data.stats import dataset_stats, print_stats_table

    examples, formats = [], []
    for path in args.inputs:
        res = _load(args, path, require_answers=False)  # stats count the questions without answers
        examples += res.examples
        formats.append(res.format)
    stats = dataset_stats(examples)
    print_stats_table(stats, title=f"dataset stats ({', '.join(sorted(set(formats)))})")
    for ds, st in stats.items():
        if st["no_answer"] and ds != "all":
            print(f"{ds}: {st['no_answer']} question(s) without a gold answer (an unlabeled split: not usable "
                  "for eval, estimate or train)")
    return 0


def _corpus(args: argparse.Namespace) -> int:
    from awarl.data.corpus import build_corpus, write_corpus
    from awarl.data.loaders import SHIPPED_DEV, load_shipped, shipped_path

    skipped: list[str] = []
    _refuse_input_as_out(args.out, list(args.inputs) or [shipped_path(name) for name in SHIPPED_DEV])
    if args.inputs:
        # a corpus needs only the paragraphs: test splits without answers give theirs too
        loaded = [_load(args, path, require_answers=False) for path in args.inputs]
        examples = [ex for res in loaded for ex in res.examples]
        skipped = [msg for res in loaded for msg in res.skipped]
        what = ", ".join(args.inputs)
    else:
        examples = [ex for name in SHIPPED_DEV for ex in load_shipped(name, limit=args.limit, seed=args.seed)]
        what = "the shipped dev samples (" + ", ".join(SHIPPED_DEV) + ")"
    rows = build_corpus(examples)
    if not rows:  # `awarl index build` refuses an empty corpus: say so here, where the cause is
        raise _nothing_to_write(f"{what}: no context paragraphs in {len(examples)} question(s) (a closed corpus "
                                "is built from the datasets' own contexts)", skipped)
    n = write_corpus(rows, args.out)
    n_par = sum(len(ex.context) for ex in examples)
    print(f"closed corpus of {what}: {n} unique passages from {n_par} context paragraphs "
          f"of {len(examples)} questions -> {args.out}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser("data", help=help_text, description=help_text + ". Input formats (--format): "
                              + ", ".join(FORMATS.names) + " (docs/formats.md, docs/config.md).")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)

    prep = sub.add_parser("prepare", help="convert a dataset file into unified JSONL",
                          description="Convert one dataset file into unified JSONL (one QAExample a line).")
    prep.add_argument("input", help="dataset file")
    prep.add_argument("--out", required=True, metavar="FILE.jsonl", help="output unified JSONL")
    prep.add_argument("--allow-no-answers", action="store_true",
                      help="keep answerable records without any gold answer (an unlabeled test split); "
                           "eval, estimate and train still refuse them")
    _add_load_args(prep)
    prep.set_defaults(func=_prepare)

    st = sub.add_parser("stats", help="per-dataset statistics table",
                        description="Counts, answerable share, question length, answers, paragraphs and "
                                    "supporting facts per dataset (any input format, unified JSONL too).")
    st.add_argument("inputs", nargs="+", metavar="INPUT", help="dataset file(s)")
    _add_load_args(st)
    st.set_defaults(func=_stats)

    co = sub.add_parser("corpus", help="closed passage corpus from the datasets' context paragraphs",
                        description="Build a wiki-18-format corpus ({id, contents}) from the context "
                                    "paragraphs of the inputs (default: the shipped dev samples, "
                                    + ", ".join(DEV_SETS.names) + "), "
                                    "deduplicated, with content-hash ids.")
    co.add_argument("inputs", nargs="*", metavar="INPUT", help="dataset file(s); none = shipped dev samples")
    co.add_argument("--out", required=True, metavar="corpus.jsonl", help="output corpus JSONL")
    _add_load_args(co)
    co.set_defaults(func=_corpus)
