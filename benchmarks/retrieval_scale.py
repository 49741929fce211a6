"""Retrieval at scale: build/serve costs of a BM25 index over N synthetic wiki-18-like passages.

Used by `benchmarks/retrieval_bench.py --scale N[,N...]`. Every measurement runs in a fresh child process
(so its peak RSS is its own): build (wall time, peak RSS), disk, load (RSS added by loading, with and
without memory-mapping), query latency (single queries, batched), and the HTTP server's throughput at 1
and 64 concurrent single-query clients against in-process batched search.

The corpus is synthetic, generated with a fixed seed from the shipped wiki-18 sample's statistics:
passage lengths and word frequencies are the sample's, and a Zipf tail of new words makes the vocabulary
grow with the corpus the way the sample's does (Heaps' law fitted on the sample: V = K * tokens^beta).
Queries are the shipped HotpotQA dev questions (real questions: their common words drive the cost).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
WIKI18 = ROOT / "data" / "wiki18" / "wiki18_sample1000.jsonl"
HOTPOT = ROOT / "data" / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"
WIKI18_PASSAGES = 21_015_324
_WORD = re.compile(r"(?u)\b\w\w+\b")
# letters the S-stemmer never strips at the end of a word, so a tail word is one token as written
_TAIL_ALPHABET = np.array(list("bcdfghjklmnpqrtvwxz"))
GEN_VERSION = 2


# ----------------------------------------------------------------------------------- synthetic corpus
def sample_stats() -> dict[str, Any]:
    """Word frequencies (lower-case `\\w\\w+` words, stopwords kept), words per passage, title lengths, and
    the Heaps' law fit of the sample's vocabulary growth (after the index's tokenization)."""
    sys.path.insert(0, str(ROOT))
    from awarl.retrieval.bm25 import make_tokenizer

    tok = make_tokenizer("en", "s")
    rows = [json.loads(line) for line in WIKI18.read_text(encoding="utf-8").splitlines() if line.strip()]
    words: Counter[str] = Counter()
    lengths, title_lengths = [], []
    seen: set[str] = set()
    n, xs, ys = 0, [], []
    for r in rows:
        title, _, text = r["contents"].partition("\n")
        ws = _WORD.findall(text.lower())
        words.update(ws)
        lengths.append(len(ws))
        title_lengths.append(max(1, len(_WORD.findall(title))))
        for t in tok(r["contents"]):
            n += 1
            seen.add(t)
            if n % 1000 == 0:
                xs.append(n)
                ys.append(len(seen))
    beta, log_k = np.polyfit(np.log(xs[10:]), np.log(ys[10:]), 1)
    vocab, counts = zip(*words.most_common(), strict=True)
    return {"vocab": list(vocab), "p": np.array(counts, dtype=np.float64) / sum(counts),
            "lengths": np.array(lengths), "title_lengths": np.array(title_lengths),
            "heaps_beta": float(beta), "heaps_k": float(math.exp(log_k)), "tokens_per_passage": n / len(rows),
            "chars_per_passage": float(np.mean([len(r["contents"]) for r in rows]))}


def _tail_word(rank: int) -> str:
    digits = []
    while True:
        rank, d = divmod(rank, len(_TAIL_ALPHABET))
        digits.append(_TAIL_ALPHABET[d])
        if not rank:
            break
    return "q" + "".join(digits)


def write_synthetic_corpus(path: Path, n: int, seed: int = 0, tail_share: float = 0.1, tail_scale: float = 5500.0,
                           chunk: int = 20_000) -> dict[str, Any]:
    """N passages drawn from the sample's statistics; `tail_share` of the words come from an unbounded
    power-law (Pareto, exponent 1/beta, scale `tail_scale`) distribution of new words, which makes the
    vocabulary grow like the sample's Heaps' law, exponent and size (calibrated: 101k terms at 20k passages
    where the fit predicts 98k)."""
    stats = sample_stats()
    rng = np.random.default_rng(seed)
    vocab = np.array(stats["vocab"], dtype=object)
    cdf = np.cumsum(stats["p"])
    zipf_a = 1.0 / stats["heaps_beta"]
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as f:
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            lengths = rng.choice(stats["lengths"], m) + rng.choice(stats["title_lengths"], m)
            total = int(lengths.sum())
            words = vocab[np.minimum(np.searchsorted(cdf, rng.random(total)), len(vocab) - 1)]
            tail = np.flatnonzero(rng.random(total) < tail_share)
            x = tail_scale * rng.random(len(tail)) ** (-1.0 / (zipf_a - 1.0)) - tail_scale
            ranks = np.minimum(x, 2.0**62).astype(np.int64)
            words[tail] = [_tail_word(r) for r in ranks.tolist()]
            ends = np.cumsum(lengths)
            lines = []
            for i in range(m):
                ws = words[ends[i] - lengths[i]:ends[i]]
                t = int(rng.choice(stats["title_lengths"]))
                contents = '"' + " ".join(ws[:t]).title() + '"\n' + " ".join(ws[t:])
                lines.append(json.dumps({"id": str(start + i), "contents": contents}, ensure_ascii=False))
            f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return {"passages": n, "seed": seed, "tail_share": tail_share, "tail_scale": tail_scale, "tail_exponent": zipf_a, "gen_version": GEN_VERSION,
            "bytes": path.stat().st_size}


def synthetic_corpus(work: Path, n: int, seed: int = 0) -> Path:
    """The cached synthetic corpus of n passages (regenerated when the generator or its seed changed)."""
    path = work / f"synthetic_{n}_s{seed}.jsonl"
    info = path.with_suffix(".info.json")
    want = {"passages": n, "seed": seed, "gen_version": GEN_VERSION}
    if path.is_file() and info.is_file():
        have = json.loads(info.read_text())
        if all(have.get(k) == v for k, v in want.items()):
            return path
    t0 = time.perf_counter()
    meta = write_synthetic_corpus(path, n, seed)
    meta["generate_s"] = round(time.perf_counter() - t0, 1)
    info.write_text(json.dumps(meta))
    return path


def questions() -> list[str]:
    return [q["question"] for q in json.loads(HOTPOT.read_text(encoding="utf-8"))]


# ------------------------------------------------------------------------------------- child processes
def _proc_mem() -> dict[str, int]:
    """This process's memory from /proc (bytes): rss, anon (heap), file (mapped file pages), peak (VmHWM)."""
    out = {}
    names = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file", "VmHWM": "peak"}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, val = line.partition(":")
        if key in names:
            out[names[key]] = int(val.split()[0]) * 1024
    return out


def child_build(corpus: str, out: str, extra: dict[str, Any]) -> dict[str, Any]:
    from awarl.retrieval import build_index

    base = _proc_mem()
    t0 = time.perf_counter()
    build_index(corpus, "bm25", out, overwrite=True, show_progress=False, **extra)
    build_s = time.perf_counter() - t0
    peak = max(_proc_mem()["peak"], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"build_s": build_s, "peak_rss": peak, "base_rss": base["rss"]}


def child_load(index: str, mmap: bool, single_n: int, workers: int | None) -> dict[str, Any]:
    import inspect

    from awarl.retrieval import load_index

    qs = questions()
    kwargs: dict[str, Any] = {"verify_corpus": False, "mmap": mmap}
    if workers is not None and "workers" in inspect.signature(load_index).parameters:
        kwargs["workers"] = workers
    before = _proc_mem()
    t0 = time.perf_counter()
    r = load_index(index, **kwargs)
    load_s = time.perf_counter() - t0
    after = _proc_mem()
    r.search(qs[:4], 3)  # first touch
    lat = []
    for q in (qs * (1 + single_n // len(qs)))[:single_n]:
        t = time.perf_counter()
        r.search([q], 3)
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    rounds = 3
    for _ in range(rounds):
        for i in range(0, len(qs), 64):
            r.search(qs[i:i + 64], 3)
    batched_qps = rounds * len(qs) / (time.perf_counter() - t)
    served = _proc_mem()
    ref = _bm25s_reference_ms(index, r, qs[:single_n]) if mmap else {}
    return {**ref, "load_s": load_s, "load_rss": after["rss"] - before["rss"], "load_anon": after["anon"] - before["anon"],
            "served_rss": served["rss"] - before["rss"], "served_anon": served["anon"] - before["anon"],
            "ms_median": 1000 * float(np.median(lat)), "ms_p90": 1000 * float(np.percentile(lat, 90)),
            "batched_qps": batched_qps}


def _top_k_before(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """awarl's top-k selection before the change (over all N scores), for the side-by-side reference."""
    k = min(k, len(scores))
    cand = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    kth = scores[cand].min()
    cand = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores > 0)
    order = np.lexsort((cand, -scores[cand]))[:k]
    return [(int(cand[j]), float(scores[cand[j]])) for j in order if scores[cand[j]] > 0]


def _bm25s_reference_ms(index: str, r: Any, qs: list[str]) -> dict[str, float]:
    """Median ms/query of this index scored the way awarl did before (bm25s get_scores_from_ids over all N
    passages, then top-k over all N) and of awarl's scorer, side by side in one process, so the speedup
    does not depend on what else the shared CPU was doing."""
    import bm25s

    if not hasattr(r, "score"):
        return {}
    model = bm25s.BM25.load(index, mmap=True, load_vocab=False)
    ids = [r.query_ids(q) for q in qs]
    old, new = [], []
    for i in ids:
        t = time.perf_counter()
        if i:
            _top_k_before(model.get_scores_from_ids(i), 3)
        old.append(time.perf_counter() - t)
        t = time.perf_counter()
        r.score(i, 3)
        new.append(time.perf_counter() - t)
    return {"score_ms_bm25s": 1000 * float(np.median(old)), "score_ms_awarl": 1000 * float(np.median(new))}


def run_child(func: str, **kwargs: Any) -> dict[str, Any]:
    """Run `func(**kwargs)` of this module in a fresh Python; returns its JSON result."""
    code = (f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); import retrieval_scale as m; "
            f"print('@@' + json.dumps(m.{func}(**json.loads(sys.argv[1]))))")
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    p = subprocess.run([sys.executable, "-c", code, json.dumps(kwargs)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{func} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.rsplit("@@", 1)[1])


# ---------------------------------------------------------------------------------- server throughput
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _client(port: int, bodies: list[bytes], stop_at: float, counts: list[int]) -> None:
    """A keep-alive HTTP/1.1 client sending one single-query request at a time (minimal client overhead,
    so the figure is the server's)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while time.perf_counter() < stop_at:
            body = bodies[i % len(bodies)]
            i += 1
            writer.write(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            head = await reader.readuntil(b"\r\n\r\n")
            found = re.search(rb"(?i)content-length: *(\d+)", head)
            if found is None:
                raise RuntimeError(f"no Content-Length in {head[:100]!r}")
            length = int(found.group(1))
            await reader.readexactly(length)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head[:100])
            counts[0] += 1
    finally:
        writer.close()


def load_test(port: int, clients: int, seconds: float) -> float:
    qs = questions()
    bodies = [json.dumps({"queries": [q], "topk": 3, "return_scores": True}).encode() for q in qs]

    async def main() -> float:
        counts = [0]
        warm = time.perf_counter() + 0.5
        await asyncio.gather(*[_client(port, bodies[j::clients] or bodies, warm, [0]) for j in range(clients)])
        t0 = time.perf_counter()
        await asyncio.gather(*[_client(port, bodies[j::clients] or bodies, t0 + seconds, counts)
                               for j in range(clients)])
        return counts[0] / (time.perf_counter() - t0)

    return asyncio.run(main())


def server_throughput(index: Path, server_args: list[str], seconds: float = 5.0) -> dict[str, float]:
    port = _free_port()
    cmd = [sys.executable, "-m", "awarl.cli", "serve", "retriever", "--index", str(index), "--port", str(port),
           "--no-verify-corpus", *server_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    err = proc.stderr.read()[-2000:] if proc.stderr else ""
                    raise RuntimeError(f"server did not start: {err}") from None
                time.sleep(0.2)
        return {"rps_1": load_test(port, 1, seconds), "rps_64": load_test(port, 64, seconds)}
    finally:
        proc.terminate()
        proc.wait(30)


# ------------------------------------------------------------------------------------------- one scale
def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure_scale(n: int, work: Path, *, build_args: dict[str, Any], server_args: list[str], single_n: int = 200,
                  workers: int | None = None, serve: bool = True, keep: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    corpus = synthetic_corpus(work, n)
    gen = json.loads(corpus.with_suffix(".info.json").read_text())
    print(f"[{n}] corpus ready ({time.perf_counter() - t0:.0f}s)", flush=True)
    index = work / f"bm25_{n}"
    row: dict[str, Any] = {"passages": n, "corpus_bytes": gen["bytes"]}
    row.update(run_child("child_build", corpus=str(corpus), out=str(index), extra=build_args))
    meta = json.loads((index / "index_meta.json").read_text())
    row["vocab_size"] = meta["settings"].get("vocab_size")
    row["disk"] = du(index)
    row["docstore_bytes"] = meta["docstore_bytes"]
    print(f"[{n}] built in {row['build_s']:.1f}s, peak {row['peak_rss'] / 2**20:.0f} MiB", flush=True)
    for mmap in (True, False):
        res = run_child("child_load", index=str(index), mmap=mmap, single_n=single_n, workers=workers)
        row.update({f"{k}_{'mmap' if mmap else 'ram'}": v for k, v in res.items()})
    print(f"[{n}] {row['ms_median_mmap']:.2f} ms/query (mmap), load +{row['load_rss_mmap'] / 2**20:.0f} MiB",
          flush=True)
    if serve:
        row.update(server_throughput(index, server_args))
        print(f"[{n}] server {row['rps_1']:.0f} req/s (1 client), {row['rps_64']:.0f} req/s (64)", flush=True)
    if not keep:
        shutil.rmtree(index, ignore_errors=True)
    return row


BYTES_PER_TERM = 125      # a vocabulary entry in a Python dict (str -> int), measured on this machine
BYTES_PER_PASSAGE_BUILD = 12  # build: int32 length + int64 docstore offset a passage, held to the end


def extrapolate(rows: list[dict[str, Any]], target: int = WIKI18_PASSAGES) -> dict[str, float]:
    """The figures at `target` passages. Linear in N: build time, disk, RAM of arrays read into RAM. The
    build's peak is bounded by its memory budget except for the vocabulary and 12 bytes a passage, so it is
    the largest measured peak plus those for the extra terms and passages; likewise the RAM an mmap load adds
    is the vocabulary's (plus the accumulators a query touches). The vocabulary follows the Heaps' law
    fitted to the measured sizes."""
    ns = np.array([r["passages"] for r in rows], dtype=np.float64)
    last = rows[-1]
    out: dict[str, float] = {"passages": target}

    def linear(key: str) -> float:
        ys = np.array([r[key] for r in rows], dtype=np.float64)
        if len(ns) == 1:
            return float(ys[0] / ns[0] * target)
        slope, icpt = np.polyfit(ns[-2:], ys[-2:], 1)  # the two largest scales
        return float(icpt + slope * target)

    for key in ("build_s", "disk", "docstore_bytes", "load_rss_ram"):
        out[key] = linear(key)
    vs = np.array([r["vocab_size"] for r in rows], dtype=np.float64)
    if len(rows) > 1:
        beta, logk = np.polyfit(np.log(ns), np.log(vs), 1)
        out["vocab_size_heaps"] = float(math.exp(logk) * target ** beta)
    else:
        out["vocab_size_heaps"] = float(vs[-1] * (target / ns[-1]) ** 0.63)
    extra_terms = out["vocab_size_heaps"] - last["vocab_size"]
    out["peak_rss"] = last["peak_rss"] + BYTES_PER_TERM * extra_terms + BYTES_PER_PASSAGE_BUILD * (target - ns[-1])
    out["load_rss_mmap"] = last["load_rss_mmap"] + BYTES_PER_TERM * extra_terms
    out["served_anon_mmap"] = last["served_anon_mmap"] + BYTES_PER_TERM * extra_terms + 4 * (target - ns[-1])
    return out


# ------------------------------------------------------------------------------------------------ main
def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def run_scale(args: Any) -> int:
    """`retrieval_bench.py --scale ...`: measure each scale, extrapolate to wiki-18, write JSON/markdown."""
    scales = [int(float(x)) for x in args.scale.split(",")]
    build_args = dict((k, _parse_value(v)) for k, _, v in (a.partition("=") for a in args.build_arg))
    args.work.mkdir(parents=True, exist_ok=True)
    stats = sample_stats()
    rows = []
    for n in scales:
        rows.append(measure_scale(n, args.work, build_args=build_args, server_args=args.server_arg,
                                  serve=not args.no_serve, workers=args.workers))
        _write_json(args, rows, stats)
    if args.md:
        write_markdown(args.md, _result(args, rows, stats))
    return 0


def _mib(x: float) -> str:
    return f"{x / 2**20:,.0f} MiB" if x < 10 * 2**30 else f"{x / 2**30:,.1f} GiB"


def markdown_table(result: dict[str, Any]) -> str:
    """The run's figures as a markdown table, one row a scale plus the wiki-18 extrapolation."""
    lines = ["| passages | build | peak build RSS | on disk (BM25 + docstore) | vocabulary | RAM after load, mmap "
             "(in RAM) | ms/query, median (p90) | batched q/s in-process | server req/s, 1 client | "
             "server req/s, 64 clients | 64 clients / in-process |", "|" + "---|" * 11]
    for r in result["rows"]:
        inproc = r["batched_qps_mmap"]
        lines.append(
            f"| {r['passages']:,} | {r['build_s']:.1f} s | {_mib(r['peak_rss'])} | {_mib(r['disk'])} | "
            f"{r['vocab_size']:,} | +{_mib(r['load_rss_mmap'])} (+{_mib(r['load_rss_ram'])}) | "
            f"{r['ms_median_mmap']:.2f} ({r['ms_p90_mmap']:.2f}) | {inproc:,.0f} | "
            f"{r.get('rps_1', float('nan')):,.0f} | {r.get('rps_64', float('nan')):,.0f} | "
            f"{100 * r.get('rps_64', float('nan')) / inproc:.0f}% |")
    w = result["wiki18"]
    lines.append(f"| 21,015,324 (extrapolated) | {w['build_s'] / 60:,.0f} min | {_mib(w['peak_rss'])} | "
                 f"{_mib(w['disk'])} | {w['vocab_size_heaps']:,.0f} (Heaps) | +{_mib(w['load_rss_mmap'])} "
                 f"(+{_mib(w['load_rss_ram'])}) | | | | | |")
    return "\n".join(lines)


def write_markdown(path: Path, result: dict[str, Any]) -> None:
    """Write (or replace) this run's table between `<!-- retrieval-scale:LABEL:start/end -->` in `path`."""
    label = result.get("label") or "run"
    start, end = f"<!-- retrieval-scale:{label}:start -->", f"<!-- retrieval-scale:{label}:end -->"
    section = f"{start}\n{markdown_table(result)}\n{end}"
    body = path.read_text() if path.is_file() else "# Benchmarks\n"
    if start in body and end in body:
        pre, rest = body.split(start, 1)
        body = pre + section + rest.split(end, 1)[1]
    else:
        body = body.rstrip() + "\n\n" + section + "\n"
    path.write_text(body)


def _result(args: Any, rows: list[dict[str, Any]], stats: dict[str, Any]) -> dict[str, Any]:
    import platform
    from datetime import date

    heaps = (stats["heaps_beta"], stats["heaps_k"])
    ext = extrapolate(rows)
    ext["vocab_size_sample_heaps"] = heaps[1] * (WIKI18_PASSAGES * stats["tokens_per_passage"]) ** heaps[0]
    return {"label": args.label, "date": date.today().isoformat(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "command": " ".join(sys.argv), "build_args": args.build_arg,
            "server_args": args.server_arg, "heaps_beta": heaps[0], "heaps_k": heaps[1], "rows": rows,
            "wiki18": ext}


def _write_json(args: Any, rows: list[dict[str, Any]], stats: dict[str, Any]) -> None:
    result = _result(args, rows, stats)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1), flush=True)


# ------------------------------------------------------------------------------------ dense at scale
def recall_at(approx: np.ndarray, exact: np.ndarray, k: int) -> float:
    """Mean share of the exact top-k found in the approximate top-k."""
    return float(np.mean([len(set(a[:k]) & set(e[:k])) / k for a, e in zip(approx, exact, strict=True)]))


def clustered_vectors(n: int, dim: int, seed: int, clusters: int = 2000, latent: int = 48,
                      chunk: int = 100_000, draw_seed: int | None = None) -> np.ndarray:
    """n unit vectors with the structure of text embeddings: a seeded Gaussian mixture (topics) in a
    `latent`-dimensional space, mapped linearly into `dim` dimensions, plus a little isotropic noise.
    (Vectors drawn straight in 768 dimensions have no neighbourhood structure: all distances concentrate,
    and every compressed index looks useless on them.) `draw_seed` draws other points of the same mixture."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, latent)).astype(np.float32)
    lift = (rng.standard_normal((latent, dim)) / math.sqrt(latent)).astype(np.float32)
    draws = np.random.default_rng(seed if draw_seed is None else draw_seed)
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        z = centers[draws.integers(0, clusters, m)] + 0.5 * draws.standard_normal((m, latent)).astype(np.float32)
        x = z @ lift + 0.05 * draws.standard_normal((m, dim)).astype(np.float32)
        out[s:s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def ivfpq_vs_flat(base: np.ndarray, queries: np.ndarray, ks: tuple[int, ...] = (1, 10, 100), nlist: int | None = None,
                  pq_m: int | None = None, nprobes: tuple[int, ...] = (16, 64, 256)) -> dict[str, Any]:
    """Recall@k of IVF-PQ (awarl's VectorIndexBuilder) against exact flat search, index sizes, timings."""
    import faiss

    sys.path.insert(0, str(ROOT))
    from awarl.retrieval.dense import VectorIndexBuilder

    dim = base.shape[1]
    t0 = time.perf_counter()
    flat = faiss.IndexFlatIP(dim)
    flat.add(base)
    _, exact = flat.search(queries, max(ks))
    flat_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    vb = VectorIndexBuilder(dim, "ivfpq", nlist=nlist, pq_m=pq_m, expected=len(base), use_gpu=False)
    for s in range(0, len(base), 50_000):
        vb.add(base[s:s + 50_000])
    index = vb.finish()
    build_s = time.perf_counter() - t0
    out: dict[str, Any] = {"vectors": len(base), "dim": dim, "flat_bytes": len(base) * dim * 4,
                           "ivfpq_bytes": int(faiss.serialize_index(index).nbytes), "build_s": build_s,
                           "flat_search_s": flat_s, **vb.settings, "recall": {}}
    for nprobe in nprobes:
        index.nprobe = min(nprobe, index.nlist)
        t0 = time.perf_counter()
        _, got = index.search(queries, max(ks))
        ms = 1000 * (time.perf_counter() - t0) / len(queries)
        out["recall"][str(index.nprobe)] = {"ms_per_query": ms, **{f"r@{k}": recall_at(got, exact, k) for k in ks}}
    return out


def dense_shipped(ks: tuple[int, ...] = (1, 10, 100)) -> dict[str, Any]:
    """IVF-PQ vs flat on the shipped closed corpus embedded with the offline MiniLM model, queried with the
    shipped dev questions."""
    sys.path.insert(0, str(ROOT))
    from awarl.data.corpus import shipped_closed_corpus
    from awarl.data.loaders import SHIPPED_DEV, load_shipped
    from awarl.retrieval.dense import DEFAULT_MODEL, embed, load_encoder

    with tempfile.TemporaryDirectory() as tmp:
        corpus = shipped_closed_corpus(Path(tmp) / "closed.jsonl")
        texts = [json.loads(line)["contents"] for line in corpus.read_text(encoding="utf-8").splitlines()]
    enc = load_encoder(DEFAULT_MODEL, "cpu")
    t0 = time.perf_counter()
    base = embed(enc, texts, "", 64)
    embed_s = time.perf_counter() - t0
    qs = [ex.question for name in SHIPPED_DEV for ex in load_shipped(name)]
    res = ivfpq_vs_flat(base, embed(enc, qs, "", 64), ks, nprobes=(8, 32, 128))
    return {"corpus": "shipped closed corpus", "passages": len(texts), "queries": len(qs), "model": DEFAULT_MODEL,
            "embed_s": embed_s, **res}


def dense_synthetic(n: int, dim: int = 768, seed: int = 0) -> dict[str, Any]:
    """IVF-PQ vs flat on n synthetic vectors (e5-base's 768 dimensions) and 200 queries of the same mixture."""
    base = clustered_vectors(n, dim, seed)
    queries = clustered_vectors(200, dim, seed, draw_seed=seed + 1)
    return {"corpus": f"synthetic unit vectors ({dim}-d, 48-d latent topic mixture)",
            **ivfpq_vs_flat(base, queries, nlist=1024)}


def run_dense(args: Any) -> int:
    """`retrieval_bench.py --dense 0,1000000`: 0 = the shipped corpus, N = N synthetic vectors."""
    results = []
    for n in (int(float(x)) for x in args.dense.split(",")):
        t0 = time.perf_counter()
        results.append(dense_shipped() if n == 0 else dense_synthetic(n))
        print(json.dumps(results[-1]), f"({time.perf_counter() - t0:.0f}s)", flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=1))
    return 0
