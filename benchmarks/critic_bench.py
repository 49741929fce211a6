"""The citation judge's HTTP client and its citation scores on the cases of issue 12, before and after.

HTTP (the OpenAI-compatible judge's public API, `OpenAIJudge(cfg).verify(items)`, against a fake endpoint on
loopback: a real HTTP server whose replies are scripted), each case in a child process:

- trickle: the endpoint sends its headers, then one byte a second; `timeout_s=2`, no retry. Wall time of
  the call (a per-read timeout never fires; one deadline per request does).
- huge: a 200 MB reply. Peak RSS of the child process minus its RSS before the call.
- retry_after: HTTP 503 with `Retry-After: 3`, then a valid verdict. Seconds between the two requests.
- hang: an endpoint that accepts and never answers, 32 items, `timeout_s=1`, 2 retries, 8 in flight.
  Wall time and requests sent (a circuit breaker stops calling a dead endpoint).

Citation scores (pure, in process): r_cite of the lexical judge on "Arthur's Magazine" (possessive), on a
yes/no comparison question of the shipped HotpotQA sample, and on its two-hop "Rush" question; the same
two-hop question with a distractor whose title the question holds (issue 22), the same
two-hop question under a scripted LLM verdict (before: one claim, one source, as the old prompt asked;
after: the claim rests on both hops' passages, as the new prompt asks) and under the gold judge.

    python benchmarks/critic_bench.py [--json OUT.json]

To measure an older checkout: `git archive COMMIT awarl | tar -x -C /tmp/old` and
`PYTHONPATH=/tmp/old AWARL_DATA_DIR=$PWD/data python benchmarks/critic_bench.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERDICT = {"verified_claims": [{"claim": "Paris", "status": "grounded", "source_id": "w1", "confidence": 0.9}],
           "overall_groundedness": 1.0, "flags": []}
REPLY = json.dumps({"choices": [{"message": {"role": "assistant", "content": json.dumps(VERDICT)}}]}).encode()
HUGE_MB = 200


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # noqa: ANN002
        pass

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # /<case>/v1/models: the start-up check of newer clients
        self._send(200, json.dumps({"data": [{"id": "m"}]}).encode())

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        case = self.path.split("/")[1]
        srv = self.server
        assert isinstance(srv, _Server)
        with srv.lock:
            srv.seen.setdefault(case, []).append(time.monotonic())
            n = len(srv.seen[case])
        try:
            if case == "trickle":
                self.send_response(200)
                self.send_header("Content-Length", "30")
                self.end_headers()
                for _ in range(30):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(1.0)
            elif case == "huge":
                head, tail = b'{"choices":[{"message":{"content":"', b'"}}]}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(head) + HUGE_MB * (1 << 20) + len(tail)))
                self.end_headers()
                self.wfile.write(head)
                chunk = b"a" * (1 << 20)
                for _ in range(HUGE_MB):
                    self.wfile.write(chunk)
                self.wfile.write(tail)
            elif case.startswith("retry"):
                if n == 1:
                    self._send(503, b'{"error": "busy"}', {"Retry-After": "3"})
                else:
                    self._send(200, REPLY)
            elif case == "hang":
                time.sleep(60)
            else:
                self._send(200, REPLY)
        except (BrokenPipeError, ConnectionResetError):
            pass


class _Server(ThreadingHTTPServer):
    """The fake endpoint: the arrival times of each case's requests (what the client's retries did)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: dict[str, list[float]] = {}
        self.lock = threading.Lock()


def serve() -> _Server:
    srv = _Server()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# ------------------------------------------------------------------------------------------ child side
def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(case: str, url: str) -> dict:
    from awarl.config import CriticConfig
    from awarl.critic.openai_judge import OpenAIJudge
    from awarl.critic.schema import CriticInput, PassageRef

    ps = [PassageRef(number=1, id="w1", title="Paris", text="Paris is the capital of France.")]
    settings = {"trickle": dict(timeout_s=2.0, retries=0), "huge": dict(timeout_s=60.0, retries=0),
                "retry": dict(timeout_s=10.0, retries=2, backoff_s=0.5),
                "hang": dict(timeout_s=1.0, retries=2, backoff_s=0.2, concurrency=8)}[case]
    n = 32 if case == "hang" else 1
    cfg = CriticConfig(judge="openai", base_url=f"{url}/{case}/v1", model="m", **settings)
    judge = OpenAIJudge(cfg)
    items = [CriticInput(question=f"q{i}", answer="Paris", cited=ps, passages=ps) for i in range(n)]
    rss0 = _rss_mib()
    t0 = time.monotonic()
    out = judge.verify(items)
    wall = time.monotonic() - t0
    return {"wall_s": round(wall, 2), "rss_before_mib": round(rss0, 1), "peak_mib": round(_peak_mib(), 1),
            "peak_delta_mib": round(_peak_mib() - rss0, 1), "ok": sum(v is not None for v in out),
            "failures": judge.failures, "requests": getattr(judge, "requests", None)}


def run_http() -> dict:
    srv = serve()
    url = f"http://127.0.0.1:{srv.server_port}"
    out = {}
    for case in ("trickle", "huge", "retry", "hang"):
        r = subprocess.run([sys.executable, __file__, "--child", case, "--url", url], capture_output=True,
                           text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
        if r.returncode:
            out[case] = {"error": r.stderr.strip().splitlines()[-1:]}
            continue
        res = json.loads(r.stdout.strip().splitlines()[-1])
        seen = srv.seen.get(case, [])
        res["server_requests"] = len(seen)
        if case == "retry" and len(seen) >= 2:
            res["gap_s"] = round(seen[1] - seen[0], 2)
        out[case] = res
    srv.shutdown()
    return out


# ------------------------------------------------------------------------------------- citation cases
ARTHUR = [("Arthur's Magazine", "Arthur's Magazine (1844-1846) was an American literary periodical published "
           "in Philadelphia in the 19th century. Edited by T.S. Arthur, it featured work by Edgar A. Poe, J.H. "
           "Ingraham, Sarah Josepha Hale, Thomas G. Spear, and others. In May 1846 it was merged into "
           "\"Godey's Lady's Book\"."),
          ("First for Women", "First for Women is a woman's magazine published by Bauer Media Group in the USA. "
           "The magazine was started in 1989. It is based in Englewood Cliffs, New Jersey."),
          ("Woman's Day", "Woman's Day is an American monthly women's magazine that covers homemaking, food, "
           "health and family life.")]


def _refs(pairs):
    from awarl.critic.schema import PassageRef

    return [PassageRef(number=i + 1, id=f"doc-{i + 1}", title=t, text=x) for i, (t, x) in enumerate(pairs)]


def _score(judge, question, answer, cites, passages, gold=None):
    from awarl.rewards.citation import build_critic_input, citation_reward

    item = build_critic_input(question, answer, cites, passages)
    if gold is not None:
        item = item.model_copy(update={"gold": gold})
    return round(citation_reward(judge.verify([item])[0], cites, passages).reward, 2)


def _shipped(pred):
    from awarl.data import load_shipped

    return next(ex for ex in load_shipped("hotpotqa") if pred(ex))


def load_shipped_all():
    from awarl.data import load_shipped

    return load_shipped("hotpotqa")


def _context(ex, titles):
    by = {p.title: p.text for p in ex.context}
    return _refs([(t, by[t]) for t in titles])


def run_cite() -> dict:
    from awarl.config import CriticConfig
    from awarl.critic.lexical_judge import LexicalJudge
    from awarl.critic.schema import CriticOutput
    from awarl.rewards.citation import citation_reward

    lex = LexicalJudge(CriticConfig())
    out: dict = {}
    q = "Which magazine was started first Arthur's Magazine or First for Women?"
    ps = _refs(ARTHUR)
    out["arthur_lexical"] = {f"cite {c}": _score(lex, q, "Arthur's Magazine", c, ps)
                             for c in ([1], [2], [3], [1, 2], [])}
    yn = _shipped(lambda e: e.question.startswith("Are Eve Beglarian"))
    ps = _context(yn, ["Eve Beglarian", "Zach Bogosian", "Kitty Brazelton"])
    out["yes_no_lexical"] = {f"cite {c}": _score(lex, yn.question, yn.answers[0], c, ps)
                             for c in ([1, 2], [1], [3], [])}
    rush = _shipped(lambda e: e.answers == ["Rush"])
    ps = _context(rush, ["Nobody's Hero", "Neil Peart", "Jeff Porcaro"])
    out["two_hop_lexical"] = {f"cite {c}": _score(lex, rush.question, "Rush", c, ps) for c in ([1, 2], [1], [])}
    # issue 22: a distractor whose title the question holds ("rock band" ~ "Band (rock and pop)")
    band = next(p.text for e in load_shipped_all() for p in e.context if p.title == "Band (rock and pop)")
    named = [*ps[:2], ps[2].model_copy(update={"title": "Band (rock and pop)", "text": band})]
    out["two_hop_lexical_named_distractor"] = {f"cite {c}": _score(lex, rush.question, "Rush", c, named)
                                               for c in ([1, 2], [1, 2, 3], [1, 3])}
    one = CriticOutput.model_validate({"verified_claims": [
        {"claim": "Rush", "status": "grounded", "source_id": ps[0].id, "confidence": 0.9}],
        "overall_groundedness": 1.0, "flags": []})
    out["two_hop_llm_one_source"] = {f"cite {c}": round(citation_reward(one, c, ps).reward, 2)
                                     for c in ([1, 2], [1])}
    try:
        joint = CriticOutput.model_validate({"verified_claims": [
            {"claim": "Rush", "status": "grounded", "source_ids": [ps[0].id, ps[1].id], "confidence": 0.9}],
            "overall_groundedness": 1.0, "flags": []})
        if len(getattr(joint.verified_claims[0], "source_ids", [])) == 2:
            out["two_hop_llm_joint_sources"] = {f"cite {c}": round(citation_reward(joint, c, ps).reward, 2)
                                                for c in ([1, 2], [1])}
    except Exception as e:  # noqa: BLE001 - an older checkout has no multi-source claims
        out["two_hop_llm_joint_sources"] = f"n/a ({type(e).__name__})"
    try:
        from awarl.critic.gold_judge import GoldJudge
        from awarl.data.evidence import gold_evidence

        gold = GoldJudge(CriticConfig(judge="gold"))
        ev = gold_evidence(rush)
        out["two_hop_gold"] = {f"cite {c}": _score(gold, rush.question, "Rush", c, ps, ev)
                               for c in ([1, 2], [1], [])}
    except ImportError:
        out["two_hop_gold"] = "n/a (no gold judge)"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--only", choices=["http", "cite"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.url)))
        return 0
    res = {}
    if args.only in (None, "cite"):
        res["citation"] = run_cite()
    if args.only in (None, "http"):
        res["http"] = run_http()
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
