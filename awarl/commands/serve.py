"""`awarl serve retriever`: serve an index over HTTP with Search-R1's /retrieve contract."""

from __future__ import annotations

import argparse

from awarl.commands.common import port_number


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser("serve", help=help_text, description="Run awarl services over HTTP.")
    sub = p.add_subparsers(dest="serve_command", metavar="SERVICE", required=True)
    r = sub.add_parser("retriever", help="serve a BM25/dense index (POST /retrieve, GET /health)",
                       description="Serve an index built by `awarl index build` with Search-R1's contract: "
                                   "POST /retrieve {\"queries\": [...], \"topk\": k, \"return_scores\": b}. "
                                   "Concurrent requests are merged into batched searches.")
    r.add_argument("--index", required=True, help="index folder")
    r.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: local only)")
    r.add_argument("--port", type=port_number, default=8000, help="TCP port, 1-65535 (default 8000)")
    r.add_argument("--max-batch", type=int, default=512, help="most queries per request and per merged search "
                   "(Search-R1's agent posts every query of a generation batch, 256 or more, in one request)")
    r.add_argument("--topk", type=int, default=3, help="topk when a request gives none (Search-R1 default 3)")
    r.add_argument("--max-topk", type=int, default=100)
    r.add_argument("--batch-wait-ms", type=float, default=0.0, help="extra time a batch is held open while more "
                   "requests are being received (default 0: requests queued while the workers are busy are "
                   "merged anyway, and a lone request is answered at once)")
    r.add_argument("--workers", type=int, default=None, help="search threads (default: CPU count, at most 8); "
                   "BM25 also splits each batch over them")
    r.add_argument("--mmap", default="auto", choices=["auto", "on", "off"], help="memory-map the index and "
                   "docstore (auto: for indexes over 1 GiB)")
    r.add_argument("--body-timeout-s", type=float, default=30.0, help="a request body must arrive within this "
                   "(else 408), so stalled clients do not hold connections")
    r.add_argument("--header-timeout-s", type=float, default=10.0, help="a request head must be complete within "
                   "this of connecting or of the previous response, else the connection is closed")
    r.add_argument("--idle-timeout-s", type=float, default=15.0, help="a connection that sends nothing for this "
                   "long (new or kept alive) is closed")
    r.add_argument("--max-connections", type=int, default=None, help="open connections at most (default 1024, "
                   "fewer under a low `ulimit -n`); past it the oldest idle one is closed to make room")
    r.add_argument("--access-log", action="store_true", help="log every request (costs throughput)")
    r.add_argument("--device", default=None, help="dense: cpu / cuda (default: cuda when available)")
    r.add_argument("--no-verify-corpus", action="store_true", help="skip hashing the corpus at start-up")
    r.set_defaults(func=run_retriever)


def run_retriever(args: argparse.Namespace) -> int:
    from awarl.retrieval.index import load_index
    from awarl.retrieval.server import default_workers, serve

    if args.max_batch < 1 or args.max_topk < 1 or not 1 <= args.topk <= args.max_topk:
        raise ValueError("--max-batch and --max-topk must be >= 1 and --topk in [1, --max-topk]")
    workers = default_workers() if args.workers is None else args.workers
    if workers < 1 or args.batch_wait_ms < 0 or args.body_timeout_s <= 0:
        raise ValueError("--workers must be >= 1, --batch-wait-ms >= 0 and --body-timeout-s > 0")
    if args.header_timeout_s <= 0 or args.idle_timeout_s <= 0 or (args.max_connections or 1) < 1:
        raise ValueError("--header-timeout-s and --idle-timeout-s must be > 0 and --max-connections >= 1")
    mmap_modes: dict[str, bool | str] = {"auto": "auto", "on": True, "off": False}
    mmap = mmap_modes[args.mmap]
    retriever = load_index(args.index, verify_corpus=not args.no_verify_corpus, device=args.device, mmap=mmap,
                           workers=workers)
    serve(retriever, retriever.meta, host=args.host, port=args.port, max_batch=args.max_batch,
          default_topk=args.topk, max_topk=args.max_topk, batch_wait_ms=args.batch_wait_ms, workers=workers,
          body_timeout_s=args.body_timeout_s, access_log=args.access_log, header_timeout_s=args.header_timeout_s,
          idle_timeout_s=args.idle_timeout_s, max_connections=args.max_connections)
    return 0
