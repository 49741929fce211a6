"""Fault injection, round 3 (issue 25): hostile inputs at every reader and service, each the issue's own case.

Config files (alias bombs, deep nesting, duplicate keys, a wrong `extends:`, integers written as floats or
booleans), datasets and corpora (100k-deep JSON lines), retrieval answers (200k-deep JSON, a 400-digit,
NaN or infinite score, a 3xx with a JSON body) through the client and the rollout engine, the retrieval
server under a flood of idle connections, the LLM judge's optional `usage` field, and duplicate passage
ids. Each must end in a one-line error naming the file and line, or the endpoint, or cost only the one item
it spoiled. Real parts throughout: loopback HTTP servers, the `awarl` CLI in subprocesses (under a hard
memory limit where the old behaviour was to grow without bound), the tiny tokenizer, the shipped data.
docs/reliability.md lists the cases and their results.
"""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from conftest import fake_chat_app, free_port, serve_app

from awarl.config import AwarlConfig, ConfigError, integers_only, load_config, section_model
from awarl.io import DataError, shipped_data_dir

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false"}
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def awarl_cli(*args: str, cwd: Path, memory_mb: int = 2048, timeout: float = 120,
              preexec: object = None) -> tuple[int, list[str], float]:
    """Run `awarl ARGS` under a hard address-space limit; (exit code, non-blank stderr lines, seconds)."""
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "awarl.cli", *args], env=ENV, cwd=cwd, capture_output=True,
                       text=True, timeout=timeout, preexec_fn=limits)
    return r.returncode, [x for x in r.stderr.splitlines() if x.strip() and "%|" not in x], time.monotonic() - t0


def one_line_error(lines: list[str]) -> str:
    """The one line of an `awarl ... error:` exit, ignoring INFO/WARNING log lines."""
    errors = [x for x in lines if " error: " in x or "Traceback" in x or "Error" in x.split(":")[0]]
    assert len(errors) == 1 and "Traceback" not in errors[0], lines[-5:]
    return errors[0]


# ------------------------------------------------------------------------------------------ config files
def billion_laughs(levels: int = 9, width: int = 9) -> str:
    rows = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        rows.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(rows) + "\n"


def test_a_billion_laughs_config_is_refused_at_once_within_a_small_memory(tmp_path: Path) -> None:
    """The issue's 9-line alias bomb: 2.8 GB and a MemoryError after 52 s before; now one line in seconds."""
    cfg = tmp_path / "laughs.yaml"
    cfg.write_text(billion_laughs())
    # the 2 GB address-space cap is the bound (before: MemoryError under it); no wall-clock bound, which a loaded
    # CI machine broke (40 s only to start the command); awarl_cli's subprocess timeout catches a hang
    rc, lines, _ = awarl_cli("train", "--config", str(cfg), "--dry-run", cwd=tmp_path, memory_mb=2048)
    assert rc == 2
    assert "laughs.yaml:" in one_line_error(lines) and "100,000 values once its aliases are expanded" in lines[-1]


def test_aliases_within_the_bound_still_work_and_each_copy_is_its_own(tmp_path: Path) -> None:
    shipped = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data:\n  train:\n    - &file {{path: {shipped}, limit: 4}}\n  eval:\n    - *file\n"
                   "retrieval: &r {topk: 5}\n")
    c = load_config(cfg, ["data.train=[{path: other.json}]"])
    assert c.data.eval[0].limit == 4 and c.data.train[0].path == "other.json" and c.retrieval.topk == 5


@pytest.mark.parametrize("text, says", [
    ("run: " + "[" * 20_000 + "]" * 20_000 + "\n", "c.yaml:1:37: invalid YAML: nested deeper than 32 levels"),
    ("".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "x: 1\n", "nested deeper than 32 levels"),
    ("retrieval:\n  topk: 5\n  kind: bm25\n  topk: 7\n", "c.yaml:4:3: invalid YAML: duplicate key 'topk' (first at "
                                                         "line 2)"),
    ("run: {seed: 1}\nrun: {seed: 2}\n", "duplicate key 'run' (first at line 1)"),
    ("a: &a [1, *a]\n", "c.yaml:1:11: invalid YAML: recursive alias (a value that contains itself)"),
    ("extends: 5\n", "`extends:` must be a file name or a list of file names, got 5"),
    ("extends: [base.yaml, 7]\n", "`extends:` must be a file name or a list of file names"),
    ("extends: {a: 1}\n", "`extends:` must be a file name or a list of file names"),
    ("extends: []\n", "`extends:` must be a file name or a list of file names"),
])
def test_bad_config_files_are_one_line_errors_naming_the_file(tmp_path: Path, text: str, says: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert says in str(e.value) and str(cfg) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_a_deep_config_through_the_cli_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Before: a 3000-line RecursionError traceback."""
    cfg = tmp_path / "deep.yaml"
    cfg.write_text("run: " + "[" * 20_000 + "]" * 20_000 + "\n")
    rc, lines, _ = awarl_cli("train", "--config", str(cfg), "--dry-run", cwd=tmp_path)
    assert rc == 2 and len(lines) == 1 and "nested deeper than 32 levels" in lines[0]


def test_an_override_value_is_read_within_the_same_bounds() -> None:
    with pytest.raises(ConfigError, match="override run.name:1:.*nested deeper than 32 levels"):
        load_config(None, ["run.name=" + "[" * 5000])


def _int_fields(model: type = AwarlConfig, prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        inner = section_model(field.annotation)
        if inner is not None:
            if field.annotation is inner:   # a section (lists of sections have no dotted key)
                yield from _int_fields(inner, f"{prefix}{name}.")
        elif integers_only(field.annotation):
            yield prefix + name


INT_FIELDS = list(_int_fields())


def test_every_integer_option_is_found() -> None:
    assert {"retrieval.topk", "train.max_steps", "run.seed", "train.lora.r", "eval.limit"} <= set(INT_FIELDS)
    assert "reward.gamma" not in INT_FIELDS and "retrieval.timeout_s" not in INT_FIELDS


@pytest.mark.parametrize("value", ["false", "true", "0.0", "3.0", "2.5", "1e3"])
def test_every_integer_option_refuses_booleans_and_floats(value: str) -> None:
    """`topk: false` and `topk: 0.0` meant the default before (through the server's topk); every integer key
    of every section refuses them, from one rule in the config base class."""
    for key in INT_FIELDS:
        with pytest.raises(ConfigError) as e:
            load_config(None, [f"{key}={value}"])
        assert key in str(e.value), (key, str(e.value))
    assert load_config(None, ["retrieval.topk=5"]).retrieval.topk == 5


def test_the_server_refuses_topk_false_and_0_0_instead_of_reading_the_default() -> None:
    from awarl.retrieval.server import ServerLimits, _BadRequest, parse_request

    for topk in ("false", "true", "0.0", "3.0"):
        with pytest.raises(_BadRequest, match='"topk" must be an integer') as e:
            parse_request(f'{{"queries": ["q"], "topk": {topk}}}'.encode(), ServerLimits())
        assert e.value.status == 422
    assert parse_request(b'{"queries": ["q"], "topk": 0}', ServerLimits())[1] == 3   # Search-R1: 0 = default


# --------------------------------------------------------------------------------- datasets and corpora
@pytest.mark.slow
def test_a_100k_deep_dataset_line_is_a_one_line_error_naming_the_line(tmp_path: Path) -> None:
    good = json.dumps({"id": "1", "question": "q?", "golden_answers": ["a"]})
    deep = '{"id": "2", "question": "q?", "golden_answers": ["a"], "x": ' + DEEP_JSON + "}"
    second, first = tmp_path / "second.jsonl", tmp_path / "first.jsonl"
    second.write_text(good + "\n" + deep + "\n")
    first.write_text(deep + "\n" + good + "\n")
    for path, where in ((second, "second.jsonl:2"), (first, "first.jsonl:1")):
        rc, lines, _ = awarl_cli("data", "prepare", str(path), "--out", str(tmp_path / "out.jsonl"), cwd=tmp_path)
        assert rc == 2 and len(lines) == 1 and where in lines[0] and "nested too deeply" in lines[0], lines


def test_a_deep_json_array_dataset_is_a_data_error(tmp_path: Path) -> None:
    from awarl.data.loaders import load_examples

    path = tmp_path / "deep.json"
    path.write_text('[{"id": "1", "question": "q?", "golden_answers": ["a"], "x": ' + DEEP_JSON + "}]")
    with pytest.raises(DataError, match="deep.json: invalid JSON: nested too deeply"):
        load_examples(path, format="flashrag")


def test_a_100k_deep_corpus_line_is_a_one_line_error_naming_the_line(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "0", "contents": "\\"T\\"\\nhello"}\n{"id": "1", "contents": ' + DEEP_JSON + "}\n")
    rc, lines, _ = awarl_cli("index", "build", "--corpus", str(corpus), "--kind", "bm25", "--out",
                             str(tmp_path / "idx"), cwd=tmp_path)
    error = one_line_error(lines)
    assert rc == 2 and "corpus.jsonl:2: malformed JSON line: nested too deeply" in error
    assert not (tmp_path / "idx").exists()


def dup_corpus(path: Path) -> Path:
    """The issue's 100-line corpus with 50 distinct ids (lines 51-100 repeat the ids of lines 1-50)."""
    with open(path, "w") as f:
        for i in range(100):
            f.write(json.dumps({"id": str(i % 50), "contents": f'"Title {i % 50}"\nabout apples number {i % 50}'})
                    + "\n")
    return path


def test_duplicate_passage_ids_are_refused_naming_both_lines(tmp_path: Path) -> None:
    from awarl.retrieval import build_index

    with pytest.raises(DataError, match=r"corpus.jsonl:51: duplicate passage id '0' \(first at line 1\)"):
        build_index(dup_corpus(tmp_path / "corpus.jsonl"), "bm25", tmp_path / "idx", show_progress=False)
    assert not (tmp_path / "idx").exists() and not list(tmp_path.glob(".idx.building-*"))


@pytest.mark.parametrize("ids, problem", [(["", "1"], r"corpus.jsonl:1: corpus record needs a non-blank \"id\""),
                                          (["1", " 1"], r"corpus.jsonl:2: duplicate passage id '1' \(first at line 1\)")])
def test_a_blank_id_or_one_equal_to_another_but_for_spaces_is_refused(tmp_path: Path, ids, problem) -> None:
    """"" and " 1" were indexed beside "1": every judge compares ids stripped, so two passages answered to one
    id and a blank one named none (retrieval.md: a line with no id stops the build)."""
    from awarl.retrieval import build_index

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "contents": f'"T{n}"\ntext {n}'}) + "\n" for n, i in enumerate(ids)))
    with pytest.raises(DataError, match=problem):
        build_index(corpus, "bm25", tmp_path / "idx", show_progress=False)


def test_keep_first_indexes_each_id_once_and_reports_the_rest(tmp_path: Path) -> None:
    corpus = dup_corpus(tmp_path / "corpus.jsonl")
    rc, lines, _ = awarl_cli("index", "build", "--corpus", str(corpus), "--kind", "bm25", "--out",
                             str(tmp_path / "idx"), "--duplicate-ids", "keep-first", cwd=tmp_path)
    assert rc == 0 and any("left out 50 passage(s) whose id repeats an earlier one" in x for x in lines)
    from awarl.retrieval import load_index

    r = load_index(tmp_path / "idx")
    assert r.meta["passage_count"] == 50 and r.meta["duplicate_ids"]["dropped"] == 50
    assert r.meta["duplicate_ids"]["examples"][0] == "0 (line 51)"
    ids = [p.id for p in r.search(["Title 17 apples number 17"], 3)[0]]
    assert ids[0] == "17" and len(set(ids)) == len(ids)   # before: ['17', '17', ...]


def test_seen_ids_finds_repeats_within_and_across_chunks() -> None:
    from awarl.retrieval.passage_ids import SeenIds

    seen = SeenIds()
    marks = []
    for start in range(0, 5000, 700):   # uneven chunks: runs of every size get merged
        ids = [str(i % 3000) for i in range(start, min(start + 700, 5000))] + ["x"]
        marks.extend(seen.add(ids).tolist())
    expected = []
    first = set()
    for start in range(0, 5000, 700):
        for pid in [str(i % 3000) for i in range(start, min(start + 700, 5000))] + ["x"]:
            expected.append(pid in first)
            first.add(pid)
    assert marks == expected and len(seen) == 3001
    assert all((a[:-1] < a[1:]).all() for a in seen.runs) and len(seen.runs) <= 13


# ------------------------------------------------------------------------------------- retrieval answers
def bad_retrieval_app(state: SimpleNamespace):  # noqa: ANN201 - an ASGI app
    """A Search-R1-shaped server whose answer to a query containing "poison" is `state.mode`'s fault;
    `state.calls` gets the queries of every request."""
    from fastapi import FastAPI
    from fastapi.responses import Response

    app = FastAPI()

    @app.post("/retrieve")
    def retrieve(req: dict) -> Response:
        queries = req["queries"]
        mode = state.mode if any("poison" in q for q in queries) else "ok"
        score = {"bigint": "9" * 400, "nan": "NaN", "inf": "Infinity", "1e400": "1e400"}.get(mode, "1.5")
        status = {"redirect": 302, "moved": 301}.get(mode, 200)
        if mode == "deep":
            body = b'{"result": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
        else:
            doc = '{"document": {"id": "7", "contents": "\\"Lake\\"\\nA lake."}, "score": ' + score + "}"
            body = ('{"result": [' + ", ".join(f"[{doc}]" for _ in queries) + "]}").encode()
        state.calls.append(list(queries))
        headers = {"location": "http://127.0.0.1:9/retrieve"} if status in (301, 302) else None
        return Response(body, status_code=status, headers=headers, media_type="application/json")

    return app


@pytest.fixture()
def bad_server() -> Iterator[SimpleNamespace]:
    state = SimpleNamespace(mode="ok", calls=[])
    with serve_app(bad_retrieval_app(state)) as url:
        state.url = url
        yield state


@pytest.fixture(scope="module")
def tok(tiny_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


MODES = {"deep": "answer is not valid JSON (nested too deeply", "bigint": '"score" is out of range (400-digit',
         "nan": '"score" must be finite, got nan', "inf": '"score" must be finite, got inf',
         "1e400": '"score" must be finite, got inf', "redirect": "HTTP 302", "moved": "HTTP 301"}


@pytest.mark.parametrize("mode", list(MODES))
def test_a_malformed_retrieval_answer_is_a_client_error_naming_the_endpoint(bad_server, mode: str) -> None:
    from awarl.retrieval import RetrievalClient, RetrievalClientError

    bad_server.mode = mode
    url = bad_server.url
    with RetrievalClient(url, retries=0) as client:
        with pytest.raises(RetrievalClientError) as e:
            client.search(["poison"], 3)
        assert MODES[mode] in str(e.value) and f"{url}/retrieve" in str(e.value)
        assert client.search(["lake"], 3)[0][0].score == 1.5


@pytest.mark.parametrize("mode", ["deep", "bigint", "nan", "redirect"])
def test_one_bad_retrieval_answer_costs_only_its_search_never_the_run(bad_server, tok, mode: str) -> None:
    """Before: the RecursionError / OverflowError killed the rollout (eval, training); NaN and 3xx answers
    were taken as results."""
    from awarl.agent.backends.scripted import ScriptedBackend
    from awarl.agent.rollout import RolloutEngine
    from awarl.agent.templates import load_template
    from awarl.config import AgentConfig
    from awarl.retrieval import RetrievalClient

    bad_server.mode = mode
    q_bad, q_good = "Which lake is poisoned?", "Which lake is clean?"
    script = {q_bad: ["<search> poison lake </search>", "<answer> none </answer>"],
              q_good: ["<search> clean lake </search>", "<answer> Lake </answer>"]}
    client = RetrievalClient(bad_server.url, retries=0)
    eng = RolloutEngine(ScriptedBackend(tok, script), tok, client, load_template("awarl"), AgentConfig(), topk=3)
    bad, good = eng.run([q_bad, q_good], temperature=0.0)
    assert (bad.failed_searches, bad.passages) == (1, []) and bad.parsed.answer == "none"
    assert good.failed_searches == 0 and [p["id"] for p in good.passages] == ["7"]
    assert eng.last_stats["failed_searches"] == 1
    # the batched call failed, then each query went alone: the good one got its passages
    assert bad_server.calls == [["poison lake", "clean lake"], ["poison lake"], ["clean lake"]]


def test_a_run_of_failed_searches_stops_the_run_with_the_last_error(bad_server, tok) -> None:
    from awarl.agent.backends.scripted import ScriptedBackend
    from awarl.agent.rollout import RolloutEngine
    from awarl.agent.templates import load_template
    from awarl.config import AgentConfig
    from awarl.retrieval import RetrievalClient, RetrievalClientError

    bad_server.mode = "nan"
    questions = [f"Poisoned question {i}?" for i in range(4)]
    script = {q: [f"<search> poison {i} </search>", "<answer> x </answer>"] for i, q in enumerate(questions)}
    eng = RolloutEngine(ScriptedBackend(tok, script), tok, RetrievalClient(
        bad_server.url, retries=0), load_template("awarl"), AgentConfig(), topk=3,
        max_failed_searches=2)
    with pytest.raises(RetrievalClientError, match=r"3 searches in a row failed \(retrieval.max_failed_searches=2\)"
                                                   r"; last: .*must be finite"):
        eng.run(questions, temperature=0.0)


# ---------------------------------------------------------------------------------- the retrieval server
def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        try:
            httpx.get(url + "/health", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the server did not start")


def _closed_by_peer(s: socket.socket) -> bool:
    if not select.select([s], [], [], 0)[0]:
        return False
    try:
        return s.recv(1) == b""
    except OSError:
        return True


@pytest.mark.slow
def test_many_idle_connections_never_lock_out_a_new_client(shipped_bm25_dir: Path, tmp_path: Path) -> None:
    """The issue's idle flood, scaled to a 256-descriptor server: 400 connections that send nothing. Before,
    every new client was reset once the descriptors ran out; now the oldest idle ones are closed to make room
    and a new client gets a good answer within 1 s, then the idle ones are closed by the timeouts."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def low_fd_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    proc = subprocess.Popen([sys.executable, "-m", "awarl.cli", "serve", "retriever", "--index",
                             str(shipped_bm25_dir), "--port", str(port), "--workers", "1", "--header-timeout-s", "3",
                             "--idle-timeout-s", "3"], env=ENV, preexec_fn=low_fd_limit, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"))  # noqa: SIM115
    idle: list[socket.socket] = []
    try:
        _wait_healthy(url, proc)
        direct = httpx.post(url + "/retrieve", json={"queries": ["Twycross Zoo"], "topk": 2, "return_scores": True},
                            timeout=10).json()
        for _ in range(400):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(0.3)
        with httpx.Client(timeout=5) as c:
            t0 = time.monotonic()
            r = c.post(url + "/retrieve", json={"queries": ["Twycross Zoo"], "topk": 2, "return_scores": True})
            assert r.status_code == 200 and r.json() == direct and time.monotonic() - t0 < 1.0
            health = c.get(url + "/health").json()["connections"]
        assert health["shed"] >= 400 - 192 and health["open"] <= 192   # 256 descriptors - 64 reserved
        time.sleep(4.5)   # past the idle timeout: the silent connections that were left are closed too
        assert all(_closed_by_peer(s) for s in idle)
    finally:
        for s in idle:
            s.close()
        proc.terminate()
        proc.wait(30)


@pytest.fixture()
def guarded_server(bm25_index: Path) -> Iterator[tuple[int, object]]:
    """The app under serve()'s own uvicorn config (connection guard included), in a thread, short timeouts."""
    import uvicorn

    from awarl.retrieval import load_index
    from awarl.retrieval.connections import ConnectionLimits, uvicorn_config
    from awarl.retrieval.server import make_app

    app = make_app(load_index(bm25_index))
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, stats=app.connections,
                                           limits=ConnectionLimits(header_timeout_s=0.6, idle_timeout_s=0.4,
                                                                   max_connections=4), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield port, app
    server.should_exit = True
    thread.join(10)


@pytest.mark.slow
def test_silent_and_slow_header_connections_are_closed(guarded_server) -> None:
    port, app = guarded_server
    silent = socket.create_connection(("127.0.0.1", port), timeout=5)
    slow = socket.create_connection(("127.0.0.1", port), timeout=5)
    slow.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\n")   # a head that never ends
    time.sleep(0.3)
    slow.sendall(b"Content-Type: application/json\r\n")       # a byte now and then keeps it from idling out
    time.sleep(1.0)
    assert _closed_by_peer(silent) and _closed_by_peer(slow)
    assert app.connections.idle_closed >= 1 and app.connections.header_timeouts >= 1
    # a kept-alive client that goes on asking is never cut
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as c:
        for _ in range(4):
            assert c.post("/retrieve", json={"queries": ["Evan Morris"], "topk": 1}).status_code == 200
            time.sleep(0.1)


def test_past_max_connections_the_oldest_idle_one_makes_room(guarded_server) -> None:
    port, app = guarded_server
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(6)]
    time.sleep(0.1)
    r = httpx.post(f"http://127.0.0.1:{port}/retrieve", json={"queries": ["Evan Morris"], "topk": 1}, timeout=5)
    assert r.status_code == 200 and app.connections.shed >= 3
    assert _closed_by_peer(idle[0]) and _closed_by_peer(idle[1])   # the oldest went first
    for s in idle:
        s.close()


# ------------------------------------------------------------------------------------------ the LLM judge
@pytest.fixture()
def judge_server() -> Iterator[SimpleNamespace]:
    """A FAKE judge endpoint whose every answer is the bytes of `state.body`."""
    from fastapi.responses import Response

    state = SimpleNamespace(body=b"")
    with serve_app(fake_chat_app(lambda _: Response(state.body, media_type="application/json"))) as url:
        state.url = url
        yield state


VERDICT = {"verified_claims": [{"claim": "x is y", "status": "grounded", "source_ids": ["1"], "confidence": 0.9}],
           "overall_groundedness": 1.0, "flags": []}


def _judge_and_item(srv: SimpleNamespace) -> tuple[object, object]:
    from awarl.config import CriticConfig
    from awarl.critic.openai_judge import OpenAIJudge
    from awarl.critic.schema import CriticInput, PassageRef

    p = PassageRef(number=1, id="1", title="T", text="x is y")
    return (OpenAIJudge(CriticConfig(judge="openai", base_url=f"{srv.url}/v1", model="m",
                                     retries=0)),
            CriticInput(question="What is x?", answer="y", cited=[p], passages=[p]))


@pytest.mark.parametrize("usage", ['"1e400"', "1e400", "NaN", "-5", "9" * 400, '"12"', "[1]", "true", "null"])
def test_a_bad_usage_field_never_drops_a_valid_verdict(judge_server, usage: str) -> None:
    """Before: `int("1e400")` raised after the verdict had validated, and the verdict was counted a failure."""
    judge_server.body = ('{"choices": [{"message": {"content": ' + json.dumps(json.dumps(VERDICT)) + '}}], '
                         '"usage": {"prompt_tokens": ' + usage + ', "completion_tokens": 3}}').encode()
    judge, item = _judge_and_item(judge_server)
    (verdict,) = judge.verify([item])
    assert verdict is not None and verdict.overall_groundedness == 1.0 and judge.failures == 0
    assert (judge.prompt_tokens, judge.completion_tokens) == (0, 3)


def test_a_too_deep_judge_answer_is_a_failure_naming_the_endpoint(judge_server, caplog) -> None:
    judge_server.body = b'{"choices": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    judge, item = _judge_and_item(judge_server)
    assert judge.verify([item]) == [None]
    assert dict(judge.failure_reasons) == {"JudgeResponseError": 1}
    assert f"{judge_server.url}/v1/chat/completions: reply" in caplog.text
    assert "nested too deeply" in caplog.text


@pytest.mark.parametrize("content, says", [("null", "message content is NoneType"),
                                           ('{"verified_claims": []}', "message content is dict")])
def test_a_judge_reply_without_text_is_a_failure_naming_the_endpoint(judge_server, caplog, content: str,
                                                                   says: str) -> None:
    """Before: `None.strip()` raised AttributeError, counted under that name, the log not naming the endpoint."""
    judge_server.body = ('{"choices": [{"message": {"content": ' + content + '}}]}').encode()
    judge, item = _judge_and_item(judge_server)
    assert judge.verify([item]) == [None]
    assert dict(judge.failure_reasons) == {"JudgeResponseError": 1}
    assert f"{judge_server.url}/v1/chat/completions: reply does not match the verdict schema: {says}" in caplog.text


# ------------------------------------------------------------------------ documents without an id
def _idless_app():  # noqa: ANN202 - an ASGI app
    """A server that sends documents without an id (one with a blank id), as a custom server may."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/retrieve")
    def retrieve(req: dict) -> dict:
        docs = [{"document": {"contents": '"Eiffel Tower"\nThe Eiffel Tower stands in Paris.'}, "score": 2.0},
                {"document": {"id": "  ", "contents": '"Big Ben"\nBig Ben stands in London.'}, "score": 1.0}]
        return {"result": [docs for _ in req["queries"]]}

    return app


def test_documents_without_an_id_get_distinct_stable_ids_and_are_judged_apart() -> None:
    """Before: both passages had id "", so they were one passage to the judges: the lexical judge grounded the
    answer in "both", citing the right one scored -1, and an LLM judge naming it by number made the audit
    raise out of the reward (outside safe_verify's guard)."""
    from awarl.config import CriticConfig
    from awarl.critic.lexical_judge import LexicalJudge
    from awarl.critic.schema import CriticOutput
    from awarl.retrieval import RetrievalClient
    from awarl.rewards.citation import CitationItem, judge_citations

    with serve_app(_idless_app()) as url, RetrievalClient(url, retries=0) as client:
        hits = client.search(["where is the tower"], 3)[0]
        again = client.search(["another query"], 3)[0]
    ids = [p.id for p in hits]
    assert len(set(ids)) == 2 and all(i.startswith("sha1:") and len(i) == 5 + 16 for i in ids)
    assert ids == [p.id for p in again]  # a function of the passage, not of the call
    passages = [{"number": n, "id": p.id, "title": p.title, "text": p.text} for n, p in enumerate(hits, 1)]
    question = "In which city does the tower stand?"
    right = CitationItem(question, "Paris", [1], passages, "correct")
    wrong = CitationItem(question, "Paris", [2], passages, "correct")
    lexical = judge_citations(LexicalJudge(CriticConfig()), [right, wrong], 0.5)
    assert [j.score.reward for j in lexical] == [1.0, -1.0]

    class ByNumber:  # an LLM judge's habit: the source named by its number in the trajectory
        name = "scripted"

        def verify(self, items: list) -> list:
            return [CriticOutput.model_validate({"verified_claims": [
                {"claim": "The tower stands in Paris", "status": "grounded", "source_ids": ["1"],
                 "confidence": 0.9}], "overall_groundedness": 1.0}) for _ in items]

    scripted = judge_citations(ByNumber(), [right, wrong], 0.5)
    assert [j.score.reward for j in scripted] == [1.0, -1.0]
    assert scripted[0].verdict.verified_claims[0].source_ids == [ids[0]]


def test_a_verdict_the_audit_cannot_read_costs_only_its_own_item() -> None:
    """A custom judge (docs/extending.md) that returns something other than a CriticOutput for one item: that
    item is a judge failure; before, the audit's AttributeError escaped judge_citations into training."""
    from awarl.critic.schema import CriticOutput
    from awarl.rewards.citation import CitationItem, judge_citations

    passages = [{"number": 1, "id": "w1", "title": "Paris", "text": "Paris is the capital of France."}]

    class HalfBroken:
        name = "scripted"

        def verify(self, items: list) -> list:
            good = CriticOutput.model_validate({"verified_claims": [
                {"claim": "Paris", "status": "grounded", "source_ids": ["w1"], "confidence": 1.0}],
                "overall_groundedness": 1.0})
            return [good, {"verified_claims": "all of them"}]

    items = [CitationItem("Capital of France?", "Paris", [1], passages, "correct")] * 2
    first, second = judge_citations(HalfBroken(), items, 0.5)
    assert first.score.reward == 1.0 and second.failed and second.error == "no valid verdict"


@pytest.mark.parametrize("entry, says", [({"id": " "}, "blank passage id"), ({"number": None}, "number must be an integer, got None")])
def test_a_malformed_passage_entry_costs_only_its_item(entry: dict, says: str) -> None:
    """A blank id, or a number that is none (before: a TypeError out of judge_citations)."""
    from awarl.config import CriticConfig
    from awarl.critic.lexical_judge import LexicalJudge
    from awarl.rewards.citation import CitationItem, judge_citations

    ok = {"number": 1, "id": "w1", "title": "Paris", "text": "Paris is the capital of France."}
    items = [CitationItem("Capital of France?", "Paris", [1], [{**ok, **entry}], "correct"),
             CitationItem("Capital of France?", "Paris", [1], [ok], "correct")]
    bad, good = judge_citations(LexicalJudge(CriticConfig()), items, 0.5)
    assert bad.failed and says in bad.error and "passages of item 0[0]" in bad.error
    assert good.score.reward == 1.0


def test_awarl_files_nested_too_deeply_are_one_line_errors_not_tracebacks(tmp_path: Path) -> None:
    """The reader of a checkpoint's reward state and of its completion marker used json.loads: a file nested
    100k deep (corruption, a hand edit) was a RecursionError traceback instead of each reader's own error."""
    from awarl.config import RewardConfig
    from awarl.rewards.trl_reward import STATE_FILE, AwaRLReward, load_reward_state
    from awarl.training.checkpoints import MARKER, TRAINER_STATE, checkpoint_step, incomplete_reason

    deep = "[" * 100_000 + "]" * 100_000
    ckpt = tmp_path / "checkpoint-2"
    ckpt.mkdir()
    for name in (STATE_FILE, MARKER, TRAINER_STATE):
        (ckpt / name).write_text(deep)
    with pytest.raises(ValueError, match=f"{STATE_FILE}: invalid JSON: nested too deeply"):
        load_reward_state(AwaRLReward(RewardConfig()), ckpt)
    assert incomplete_reason(ckpt).startswith(f"unreadable {MARKER}: nested too deeply")
    assert checkpoint_step(ckpt) == -1
