"""docs/extending.md runs: its example format, judge, strategy, reading and backend are read from the page,
installed the way the page says (one file, or one function appended to abstention.py, and one registry line;
here in a fresh interpreter, in temporary modules, the checkout untouched) and used end to end: the config
accepts them, --help and docs/config.md list them, and the loader, the citation scoring path, the training
reward, the simulator and `awarl eval` run them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "extending.md"
_BLOCK = re.compile(r"^```python (?:(file|append)=(\S+)|(registry))\n(.*?)^```$", re.M | re.S)


def guide_blocks() -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(new files, code appended to existing files, registry lines) of the guide, by path."""
    files: dict[str, str] = {}
    appends: dict[str, str] = {}
    lines: list[str] = []
    for kind, path, registry, code in _BLOCK.findall(GUIDE.read_text(encoding="utf-8")):
        if registry:
            lines.append(code)
        else:
            (files if kind == "file" else appends)[path] = code
    return files, appends, lines


def test_each_example_is_one_file_or_one_function_and_one_registry_line():
    files, appends, lines = guide_blocks()
    assert sorted(files) == ["awarl/agent/backends/abstain.py", "awarl/critic/containment_judge.py",
                             "awarl/data/nq_open.py", "awarl/rewards/awarl_bapo.py"]
    assert list(appends) == ["awarl/rewards/abstention.py"] and (REPO / "awarl/rewards/abstention.py").is_file()
    assert not any((REPO / f).exists() for f in files)  # the examples are not shipped: the test installs them
    modules = {p.removesuffix(".py").replace("/", ".") for p in [*files, *appends]}
    targets = []
    for line in lines:
        calls = re.findall(r'^(\w+)\.add\("([\w\-]+)", "([\w.]+):([\w.]+)"', line, re.M)
        assert len(calls) == 1, line  # one registry line (one call, however it is wrapped)
        targets.append(calls[0][2])
    assert sorted(targets) == sorted(modules)  # every example file is registered, once


_DRIVER = r'''
import importlib, importlib.util, json, sys
from pathlib import Path

guide, tmp, mode = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), sys.argv[3]
# 1. the registry lines, before anything builds a Literal from the names (the config does, at import)
import awarl.choices
for line in guide["registry"]:
    exec(line, vars(awarl.choices))
# 2. a function appended to an existing module: run in that module's namespace
for path, code in guide["appends"].items():
    exec(code, vars(importlib.import_module(path.removesuffix(".py").replace("/", "."))))
# 3. the new files, as the modules their registry lines name (written to tmp, not into the checkout)
for path, code in guide["files"].items():
    name = path.removesuffix(".py").replace("/", ".")
    file = tmp / path.replace("/", "__")
    file.write_text(code)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
out = {}
exec(Path(sys.argv[4]).read_text())
print("RESULT " + json.dumps(out))
'''

_FAST = r'''
from awarl.cli import build_parser, main
from awarl.commands.common import registered_choices
from awarl.config import ConfigError, load_config
from awarl.config_docs import render_config_markdown
from awarl.critic import make_judge
from awarl.data.loaders import SHIPPED_DEV, SHIPPED_OTHER, detect_format, load_examples, load_shipped
from awarl.stages.questions import load_eval_set
from awarl.io import shipped_data_dir
from awarl.rewards import abstention as A
from awarl.rewards.citation import CitationItem, judge_citations
from awarl.rewards.trl_reward import AwaRLReward
from awarl.simulate import make_population, run_specs, simulate_run

# the format: detected, converted, named in a config, refused when misspelt, through `awarl data prepare`
exs = load_shipped("hotpotqa", limit=3, seed=1)
nq = tmp / "nq.jsonl"
nq.write_text("".join(json.dumps({"question": e.question, "answer": e.answers}) + "\n" for e in exs))
out["detected"] = detect_format(nq)
res = load_examples(nq)
out["loaded"] = [[e.id, e.dataset, e.question, e.answers] for e in res.examples]
out["shipped_detected"] = {rel: detect_format(shipped_data_dir() / rel)
                           for rel in [*SHIPPED_DEV.values(), *SHIPPED_OTHER.values()]}
cfg = load_config(None, [f"data.eval=[{{path: '{nq}', format: nq_open}}]", "eval.limit=2"])
out["eval_set"] = [e.dataset for e in load_eval_set(cfg.data, cfg.eval, cfg.run.seed).examples]
try:
    load_config(None, [f"data.eval=[{{path: '{nq}', format: nq-open}}]"])
except ConfigError as e:
    out["misspelt"] = str(e)
out["prepare_rc"] = main(["data", "prepare", str(nq), "--out", str(tmp / "u.jsonl")])
out["unified"] = [[e.id, e.dataset] for e in load_examples(tmp / "u.jsonl").examples]

# the judge: built from the config, scored through the one citation path (training and evaluation's)
judge = make_judge(load_config(None, ["critic.judge=containment"]).critic)
ex = exs[0]
gold = next(p for p in ex.context if ex.answers[0].lower() in p.text.lower())
other = next(p for p in ex.context if ex.answers[0].lower() not in f"{p.title} {p.text}".lower())
passages = [{"number": 1, "id": "a", "title": gold.title, "text": gold.text},
            {"number": 2, "id": "b", "title": other.title, "text": other.text}]
items = [CitationItem(ex.question, ex.answers[0], cites, passages, "correct") for cites in ([1], [1, 2], [2])]
got = judge_citations(judge, items, 0.5)
out["judge"] = [judge.name, [(j.verdict.verified_claims[0].status, j.score.reward) for j in got]]
out["research_judge"] = load_config(None, ["research.judge=containment"]).research.judge

# the strategy and the reading: in the training reward (hand-checkable batch) and the simulator
batch = dict(prompts=["p"] * 4, completions=["c"] * 4, completion_ids=[[1]] * 4,
             outcome=["abstain", "abstain", "correct", "abstain"], qid=["h", "h", "e", "e"], p_i=[0.04, 0.04, 0.81, 0.81])
spec = ["reward.gamma=0.5", "reward.expected_rate=threshold", "reward.r_ref_margin=null", "reward.penalty_dither=0",
        "reward.r_ref_floor_margin=null", "reward.p_online=off", "reward.refusal_gate=off", "reward.refusal_warmup=0"]
plain = AwaRLReward(load_config(None, spec + ["reward.strategy=awarl"]).reward)
mixed = AwaRLReward(load_config(None, spec + ["reward.strategy=awarl_bapo"]).reward)
out["strategy"] = [plain(**batch), mixed(**batch), sorted(mixed.last_stats)]
reading = AwaRLReward(load_config(None, ["reward.expected_rate=failure_share", "reward.p_online=off"]).reward, total_steps=10)
reading(**batch)
out["reading"] = [A.expected_abstain(0.25, 0.5, 0.1, "failure_share"), reading.last_stats["rho_hat"],
                  "failure_share" in A.EXPECTED_RATES]
sim = load_config(None, ["simulate.strategies=[awarl_bapo, bapo]", "simulate.steps=30", "simulate.n_queries=60",
                         "reward.expected_rate=failure_share"])
specs = run_specs(sim)
import numpy as np
pop = make_population(sim.simulate, np.random.default_rng(0))
run = simulate_run(pop, sim.simulate, sim.reward, seed=0, **specs[0])
out["simulate"] = [[s["label"] for s in specs], len(run.history["E_bar"]), run.history["rho_hat"][0]]

# every derived surface lists them
cli = build_parser()
fmt = next(a for a in cli._subparsers._group_actions[0].choices["data"]._subparsers._group_actions[0]
           .choices["prepare"]._actions if a.dest == "format")
out["surfaces"] = {"help": registered_choices(), "docs": render_config_markdown(), "cli_format": list(fmt.choices)}
'''

_EVAL = r'''
from transformers import AutoTokenizer
from awarl.config import load_config
from awarl.data.loaders import load_shipped
from awarl.retrieval import load_index
from awarl.stages.evaluate import run_eval
from awarl.stages.predictions import read_done

tiny, bm25 = sys.argv[5], sys.argv[6]
retriever, tok = load_index(bm25), AutoTokenizer.from_pretrained(tiny)
a, b = load_shipped("hotpotqa", limit=2, seed=3)
nq = tmp / "nq.jsonl"  # HotpotQA questions written in NQ-open's layout, so the closed corpus has their passages
nq.write_text("".join(json.dumps({"question": e.question, "answer": e.answers}) + "\n" for e in (a, b)))
title = next(p.title for p in a.context if p.is_supporting and a.answers[0].lower() in p.text.lower())
shown = retriever.search([title], 3)[0]
hit = next(n for n, p in enumerate(shown, 1) if a.answers[0].lower() in f"{p.title} {p.text}".lower())
script = tmp / "script.jsonl"
script.write_text(json.dumps({"question": a.question, "turns": [f"<search> {title} </search>",
                              f"<cite> {hit} </cite> <answer> {a.answers[0]} </answer>"]}) + "\n"
                  + json.dumps({"question": b.question, "turns": ["<answer> not enough information </answer>"]}) + "\n")
base = [f"data.eval=[{{path: '{nq}'}}]", "metrics.bootstrap_samples=0", "critic.judge=containment",
        "agent.max_trajectory_tokens=8192"]
runs = {}
for name, over in {"scripted": ["generation.backend=scripted", f"generation.script={script}"],
                   "abstain": ["generation.backend=abstain"]}.items():
    res = run_eval(load_config(None, base + over), tmp / name, model=tiny, tokenizer=tok, retriever=retriever)
    rows = sorted(read_done(tmp / name / "predictions.jsonl").values(), key=lambda r: r["question"] != a.question)
    runs[name] = {"rows": [[r["dataset"], r["outcome"], (r.get("critic") or {}).get("judge"),
                            (r.get("critic") or {}).get("reward")] for r in rows],
                  "datasets": sorted(res["per_dataset"])}
out["eval"] = runs
'''


def _run(tmp_path: Path, scenario: str, *extra: str) -> dict:
    files, appends, lines = guide_blocks()
    (tmp_path / "guide.json").write_text(json.dumps({"files": files, "appends": appends, "registry": lines}))
    (tmp_path / "driver.py").write_text(_DRIVER)
    (tmp_path / "scenario.py").write_text(scenario)
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "guide.json"), str(tmp_path),
                           "run", str(tmp_path / "scenario.py"), *extra], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


@pytest.mark.slow
def test_the_guide_s_examples_work_end_to_end_once_registered(tmp_path):
    out = _run(tmp_path, _FAST)
    # format: auto-detected, every shipped sample still detected as before, dataset name and stable ids
    assert out["detected"] == "nq_open"
    assert set(out["shipped_detected"].values()) == {"hotpotqa", "2wikimultihopqa", "musique", "flashrag", "searchr1"}
    ids = [row[0] for row in out["loaded"]]
    assert len(set(ids)) == 3 and all(i.startswith("nq-") for i in ids)
    assert {row[1] for row in out["loaded"]} == {"nq"} and all(row[3] for row in out["loaded"])
    assert out["eval_set"] == ["nq", "nq"]
    assert "format" in out["misspelt"] and "'nq_open'" in out["misspelt"]
    assert out["prepare_rc"] == 0 and out["unified"] == [[i, "nq"] for i in ids]
    # judge: the passage holding the answer grounds it; citing a second one is redundant; the wrong one pays 0
    name, verdicts = out["judge"]
    assert name == "containment" and [s for s, _ in verdicts] == ["grounded", "grounded", "unsupported"]
    assert verdicts[0][1] == 1.0 and verdicts[0][1] > verdicts[1][1] > verdicts[2][1]
    assert out["research_judge"] == "containment"
    # strategy: the "h" group (no correct answer) keeps AWA-RL's r_ref; "e" has a correct one: r_wrong = 0
    plain, mixed, stats = out["strategy"]
    assert mixed[:3] == pytest.approx(plain[:3]) and plain[3] > 0 and mixed[3] == 0.0
    assert {"E", "E_bar", "penalty"} <= set(stats)  # uses_r_ref: the smoothed excess is kept
    # reading: ρ̂ of the batch is the mean of 1 − p_i
    assert out["reading"] == [pytest.approx(0.75), pytest.approx((0.96 * 2 + 0.19 * 2) / 4), True]
    labels, e_bar_len, rho_hat0 = out["simulate"]
    assert labels == ["awarl_bapo", "bapo (0.5)"] and e_bar_len == 30 and 0 < rho_hat0 < 1
    # the derived surfaces
    s = out["surfaces"]
    assert "nq_open" in s["cli_format"]
    for value in ("nq_open", "containment", "awarl_bapo", "failure_share", "abstain"):
        assert value in s["help"] and f"| `{value}` |" in s["docs"], value


@pytest.mark.slow
def test_the_guide_s_format_judge_and_backend_in_awarl_eval(tmp_path, tiny_dir, shipped_bm25_dir):
    """`awarl eval` on a file in the guide's format (auto-detected), with the guide's judge, through the
    scripted backend and then the guide's always-abstain backend."""
    runs = _run(tmp_path, _EVAL, str(tiny_dir), str(shipped_bm25_dir))["eval"]
    assert runs["scripted"]["rows"] == [["nq", "correct", "containment", 1.0], ["nq", "abstain", None, None]]
    assert runs["abstain"]["rows"] == [["nq", "abstain", None, None]] * 2
    assert runs["scripted"]["datasets"] == runs["abstain"]["datasets"] == ["nq"]


def test_links_to_the_guide_name_its_sections():
    """`extending.md#a-citation-judge` from the other docs and the README lands on a heading of the guide."""
    slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
             for h in re.findall(r"^#+ (.+)$", GUIDE.read_text(encoding="utf-8"), re.M)}
    links = [(p.name, a) for p in [REPO / "README.md", *(REPO / "docs").glob("*.md")]
             for a in re.findall(r"extending\.md#([\w\-]+)", p.read_text(encoding="utf-8"))]
    assert len(links) >= 4 and [link for link in links if link[1] not in slugs] == []
    assert "docs/extending.md" in (REPO / "README.md").read_text(encoding="utf-8")
