"""The registries of awarl/choices.py: each is the one list of its choice. The config's Literals, every CLI
`choices=`, `--help`, docs/config.md, the docs' tables and prose mentions (`critic.judge: X`, `--format X`)
and the configs' comments list no value their registry lacks; every registered target loads and is what its
registry says it must be."""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest

from awarl import choices
from awarl.config import (
    REGISTERED_KEYS,
    SIMULATOR_ONLY_STRATEGIES,
    AwarlConfig,
    ConfigError,
    CriticConfig,
    GenerationConfig,
    RewardConfig,
    allowed_values,
    load_config,
    section_model,
)
from awarl.registry import Registry

REPO = Path(__file__).resolve().parents[1]

# The only values a registry-backed key may hold that its registry does not: the simulator's ablation.
KEY_EXTRAS = {"simulate.strategies": set(SIMULATOR_ONLY_STRATEGIES)}
# Short names that docs and configs use for a registry-backed key.
ALIASES = {"expected_rate": "reward.expected_rate", "--format": "data.train[].format",
           "format": "data.train[].format", "judge": "critic.judge", "strategy": "reward.strategy",
           "backend": "generation.backend"}


def accepted(key: str) -> set[str]:
    return set(REGISTERED_KEYS[key].choices) | KEY_EXTRAS.get(key, set())


# ------------------------------------------------------------------------------------------ Registry
def test_registry_add_refuses_what_would_break_the_config_or_the_docs():
    reg = Registry("widget", "x.widget", "a callable", extras={"auto": "pick one"}, kind="builtins:object")
    reg.add("plain", "json:dumps", "the standard library's dumps")
    for bad, match in [(("plain", "json:loads", "again"), "registered already"),
                       (("auto", "json:loads", "an extra's name"), "registered already"),
                       (("Bad Name", "json:loads", "x"), "lowercase"),
                       (("two", "json.loads", "x"), "package.module:attr"),
                       (("three", "json:loads", "  "), "needs a description")]:
        with pytest.raises(ValueError, match=match):
            reg.add(*bad)
    assert reg.names == ("plain",) and reg.choices == ("auto", "plain")
    assert get_args(reg.literal()) == ("auto", "plain") and get_args(reg.literal(extras=False)) == ("plain",)
    assert reg.describe() == "`auto`: pick one; `plain`: the standard library's dumps"


def test_registry_loads_lazily_once_and_names_what_is_wrong():
    reg: Registry[object] = Registry("widget", "x.widget", "a callable", kind="builtins:object")
    reg.add("dumps", "json:dumps", "json.dumps")
    reg.add("method", "json:JSONDecoder.decode", "a dotted attribute")
    reg.add("gone", "json:no_such_function", "a typo in the target")
    reg.add("nomodule", "awarl.no_such_module:x", "a module that does not exist")
    import json

    assert reg.load("dumps") is json.dumps and reg.load("dumps") is reg.load("dumps")
    assert reg.load("method") is json.JSONDecoder.decode
    with pytest.raises(ValueError, match=r"x\.widget: unknown widget 'dump'; choose one of dumps, method, gone"):
        reg.load("dump")
    for name in ("gone", "nomodule"):
        with pytest.raises(ImportError, match=rf"x\.widget: widget '{name}' is registered as '[\w.:]+', which "
                                              "cannot be loaded"):
            reg.load(name)


def test_load_returns_the_registry_s_kind_and_refuses_another():
    from awarl.critic.schema import JudgeKind
    from awarl.rewards.abstention import Reading

    reg: Registry[JudgeKind] = Registry("widget", "x.widget", "an awarl.critic.schema.JudgeKind",
                                        kind="awarl.critic.schema:JudgeKind")
    reg.add("kind", "awarl.critic.gold_judge:GOLD", "a judge kind")
    reg.add("factory", "awarl.critic.gold_judge:build", "the bare factory: what a judge was registered as before")
    assert isinstance(reg.load("kind"), JudgeKind) and reg.load("kind").oracle
    with pytest.raises(TypeError, match=r"x\.widget: widget 'factory' is registered as 'awarl\.critic\.gold_judge:"
                                        r"build', which is a function, not a JudgeKind \(an awarl"):
        reg.load("factory")
    # a Protocol kind (the readings'): a function is one, a constant is not
    readings: Registry[Reading] = Registry("reading", "x.r", "a Reading", kind="awarl.rewards.abstention:Reading")
    readings.add("soft", "awarl.rewards.abstention:soft_reading", "a reading")
    readings.add("prior", "awarl.rewards.abstention:EMA_STARTS", "a tuple")
    assert readings.load("soft")(0.5, None, RewardConfig(gamma=1.0, p_min=0.1)) == pytest.approx(0.5)
    with pytest.raises(TypeError, match="which is a tuple, not a Reading"):
        readings.load("prior")
    # a registry of code names its kind; one of data files has none
    for bad in ({}, {"kind": "JudgeKind"}, {"kind": "a:B", "data_files": True}):
        with pytest.raises(ValueError, match="names its kind"):
            Registry("widget", "x.widget", "a thing", **bad)  # type: ignore[arg-type]


def test_data_file_registry_holds_paths_not_code():
    reg = Registry("sample", "eval.x", "a file", data_files=True)
    reg.add("ok", "hotpotqa/file.json", "fine")
    for bad in ("/etc/passwd", "../outside.json", "a/../../b.json"):
        with pytest.raises(ValueError, match="relative path under data/"):
            reg.add("bad", bad, "x")
    with pytest.raises(TypeError, match="data files, not code"):
        reg.load("ok")


def test_config_import_stays_light():
    """The registries hold names only: importing the config (and the registries) loads no implementation."""
    code = ("import sys, awarl.config, awarl.choices, awarl.commands.common\n"
            "heavy = ('torch', 'httpx', 'transformers', 'vllm', 'numpy', 'pyarrow', 'awarl.critic', 'awarl.agent')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout


# ------------------------------------------------------------------------------- the implementations
def test_every_registered_format_loads_and_the_shipped_samples_each_match_exactly_one():
    from awarl.data.formats import DataFormat
    from awarl.data.loaders import SHIPPED_OTHER, _container, _first_record, detect_format, load_shipped
    from awarl.io import shipped_data_dir

    formats = {name: choices.FORMATS.load(name) for name in choices.FORMATS.names}
    assert all(isinstance(f, DataFormat) for f in formats.values())
    shipped = {**{e.name: e.target for e in choices.DEV_SETS}, "flashrag": SHIPPED_OTHER["flashrag-nq"],
               "searchr1": SHIPPED_OTHER["searchr1-train"]}
    for fmt, rel in shipped.items():
        path = shipped_data_dir() / rel
        rec = _first_record(path, _container(path))
        # exclusive sniffs: detection does not depend on the registry's order for the known formats
        assert [n for n, f in formats.items() if f.sniff(rec)] == [fmt], rel
        assert detect_format(path) == fmt
    for e in choices.DEV_SETS:
        exs = load_shipped(e.name, limit=3)
        assert len(exs) == 3 and {ex.dataset for ex in exs} == {e.name}
    unified = load_shipped("musique", limit=1)[0].to_dict()
    assert [n for n, f in formats.items() if f.sniff(unified)] == ["unified"]


def test_every_registered_judge_builds_under_its_own_name():
    cfg = CriticConfig()
    for name in choices.JUDGES.names:
        judge = choices.JUDGES.load(name)(cfg.model_copy(update={"judge": name}), None)
        # the name labels verdicts and lets the critic loop reuse the citation judge (research/records.py)
        assert judge.name == name and judge.failures == 0 and callable(judge.verify)
        if hasattr(judge, "close"):
            judge.close()


def test_every_registered_strategy_and_reading_has_its_registry_s_shape():
    from awarl.rewards.strategies import Strategy

    cfg = RewardConfig()
    for name in choices.STRATEGIES.names:
        s = choices.STRATEGIES.load(name)
        assert isinstance(s, Strategy) and isinstance(s.abstain_reward(cfg, 0.3, False), float)
    for name in choices.EXPECTED_RATES.names:
        reading = choices.EXPECTED_RATES.load(name)
        params = inspect.signature(reading).parameters
        # (p, n, cfg), and the step's line under reward.abstain_line=ra_f1, None when courage γ sets it per query
        assert list(params) == ["p", "n", "cfg", "line"] and params["line"].default is None, name
        assert "Step 4" in (reading.__doc__ or ""), f"{name}: its docstring names the formula step"
        values = [reading(p, 8.0, RewardConfig(gamma=0.5, p_min=0.1)) for p in (0.0, 0.3, 1.0)]
        assert all(0.0 <= v <= 1.0 for v in values) and values[0] >= values[-1], (name, values)


def test_every_registered_backend_loads_and_unknown_ones_are_refused(tmp_path):
    from awarl.agent.backends import make_backend

    for name in choices.BACKENDS.names:
        build = choices.BACKENDS.load(name)
        assert list(inspect.signature(build).parameters)[:3] == ["gen_cfg", "model_path_or_obj", "tokenizer"]
    with pytest.raises(ValueError, match="generation.backend: unknown generation backend 'tgi'; choose one of hf"):
        make_backend(GenerationConfig(), "m", None, kind="tgi")
    with pytest.raises(ValueError, match="needs generation.script"):
        make_backend(GenerationConfig(backend="scripted"), None, None)


def _compared_names(path: Path) -> list[str]:
    """Comparisons of a value with a registered judge, backend, correctness rule, planner, agent or retrieval
    kind name (`x == "gold"`, `x in ("openai", ...)`, `kind == "server"`) and isinstance checks against a judge,
    backend or retriever class, in one file. `critic.gold_fallback` is the gold judge's own option, not a judge's
    name; `train.vllm_mode: server` is TRL's vLLM mode, not a retrieval kind."""
    names = {n for reg in (choices.JUDGES, choices.BACKENDS, choices.CORRECTNESS, choices.PLANNERS, choices.EVAL_AGENTS,
                           choices.RETRIEVAL_KINDS) for n in reg.names}
    classes = ("OpenAIJudge", "LexicalJudge", "GoldJudge", "HFBackend", "VLLMBackend", "ScriptedBackend",
               "RetrievalClient", "BM25Retriever", "DenseRetriever")
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and not any(own in ast.unparse(node) for own in ("gold_fallback", "vllm_mode")):
            sides = [node.left, *node.comparators]
            sides += [e for c in sides if isinstance(c, (ast.Tuple, ast.List, ast.Set)) for e in c.elts]
            if any(isinstance(c, ast.Constant) and c.value in names for c in sides):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2 \
                and any(c in ast.unparse(node.args[1]) for c in classes):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_compares_a_judge_or_backend_name():
    """What a run must know of a judge or a backend is an attribute of its registered kind (JudgeKind.oracle,
    .endpoint, .settings; BackendKind.replays_script, .vllm_engine), and of a retrieval kind an attribute of its
    RetrievalKind (.remote, .identity, .index): 22 comparisons with `"gold"`, `"openai"`, `"scripted"`, ... and two
    isinstance(OpenAIJudge) checks made a plug-in judge or backend second-class (an oracle not labelled, an
    endpoint not checked, a replay not recognised), and 17 with `"bm25"`, `"dense"`, `"server"` a plug-in
    retrieval kind (no index built, no server checked, its settings not recorded with an estimate)."""
    found = [f for path in sorted((REPO / "awarl").rglob("*.py")) for f in _compared_names(path)]
    assert found == []


def test_the_name_check_finds_a_comparison_and_an_isinstance(tmp_path):
    code = tmp_path / "m.py"
    code.write_text("def f(cfg, j, r):\n    a = cfg.critic.judge == 'gold'\n    b = j in ('x', 'scripted')\n"
                    "    c = cfg.critic.gold_fallback == 'lexical'\n    d = cfg.retrieval.kind == 'server'\n"
                    "    e = cfg.train.vllm_mode == 'server'\n    g = isinstance(r, RetrievalClient)\n"
                    "    return isinstance(j, OpenAIJudge)\n")
    assert [f.split(":")[1] for f in _compared_names(code)] == ["2", "3", "5", "7", "8"]


_PLUGIN_KINDS = r'''
import awarl.choices as C
# registered before the config is imported (it builds its Literals from the names), as a plug-in would be
C.JUDGES.add("strict", "plugin_kinds:STRICT", "a plug-in oracle judge")
C.JUDGES.add("remote", "plugin_kinds:REMOTE", "a plug-in judge behind a service")
C.BACKENDS.add("replay", "plugin_kinds:REPLAY", "a plug-in replay of generation.script")
C.RETRIEVAL_KINDS.add("search-api", "plugin_kinds:SEARCH_API", "a plug-in retriever behind a service")
C.RETRIEVAL_KINDS.add("lite", "plugin_kinds:LITE", "a plug-in index kind (BM25's index side)")
import sys, tempfile, types
from pathlib import Path
from awarl.agent.backends.base import BackendKind
from awarl.agent.backends.scripted import build as replay_build
from awarl.critic.gold_judge import build as gold_build
from awarl.critic.lexical_judge import build as lexical_build
from awarl.critic.schema import JudgeKind
from awarl.retrieval.bm25_kind import KIND as BM25
from awarl.retrieval.index import open_index
from awarl.retrieval.kinds import RetrievalKind
from awarl.retrieval.types import Passage
asked, opened = [], []

class Api:
    def search(self, queries, k): return [[Passage("api-1", "Api", q)] for q in queries]

def open_api(cfg):
    opened.append(cfg.server_url)
    return Api()

class Remote:
    name, failures = "remote", 0
    def __init__(self, cfg, cache_dir=None): self.cfg = cfg
    def verify(self, items): return [None for _ in items]
    def check_reachable(self, what, *, instead=""): asked.append(what)

plugin = types.ModuleType("plugin_kinds")
plugin.STRICT = JudgeKind(gold_build, oracle=True)
plugin.REMOTE = JudgeKind(Remote, endpoint=True)
plugin.REPLAY = BackendKind(replay_build, replays_script=True)
plugin.SEARCH_API = RetrievalKind(open_api, identity=("server_url",))
plugin.LITE = RetrievalKind(open_index, identity=("index_dir",), index=BM25.index)
sys.modules["plugin_kinds"] = plugin

from awarl.config import ConfigError, load_config
from awarl.critic import check_endpoints, make_judge
from awarl.research.critic import judge_label
from awarl.stages.eval_manifest import loop_judge_fields
from awarl.stages.predictions import critic_label
from awarl.stages.train_preflight import check_launchable, critic_plan, retrieval_status
from awarl.retrieval import load_retriever
from awarl.stages.estimate import estimate_inputs
from awarl.stages.resources import ensure_default_retrieval

out = {}
cfg = load_config(None, ["critic.judge=strict", "research.judge=strict"])
out["label"] = [critic_label(cfg), judge_label("strict"), loop_judge_fields(cfg)]
out["plan"] = critic_plan(cfg, {"questions": 4, "with_gold_evidence": 3})
remote = load_config(None, ["critic.judge=remote", "critic.model=m7"])
check_endpoints(remote.critic, make_judge(remote.critic))
out["checked"], out["remote_label"] = asked, critic_label(remote)
replay = load_config(None, ["generation.backend=replay"])
try:
    check_launchable(replay, [])
except ConfigError as e:
    out["replay"] = str(e)
api = load_config(None, ["retrieval.kind=search-api", "retrieval.server_url=http://127.0.0.1:9"])
out["api"] = [estimate_inputs(api)["retrieval"], retrieval_status(api), ensure_default_retrieval(api) is api,
              load_retriever(api.retrieval).search(["q"], 1)[0][0].id, opened]
tmp = Path(tempfile.mkdtemp())
(tmp / "c.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "contents": f'"{t}"\n{x}'}) + "\n" for i, (t, x) in
                                     enumerate([("Oslo", "Oslo is the capital of Norway."),
                                                ("Horatio Hale", "Horatio Hale was an American ethnologist."),
                                                ("Lima", "Lima is the capital of Peru.")])))
lite = load_config(None, ["retrieval.kind=lite", f"retrieval.index_dir={tmp}/idx", f"retrieval.corpus={tmp}/c.jsonl"])
lite_status = retrieval_status(lite)
hit = load_retriever(lite.retrieval).search(["ethnologist Hale"], 1)[0][0]
out["lite"] = [lite_status, json.loads((tmp / "idx" / "index_meta.json").read_text())["kind"], hit.id,
               sorted(estimate_inputs(lite)["retrieval"])]
print(json.dumps(out))
'''


def test_a_plug_in_s_kind_decides_what_its_name_decided_for_the_shipped_ones():
    """A plug-in oracle judge is labelled and planned as the oracle it is, a plug-in judge behind a service is
    checked before any model loads and names its model, a plug-in replay backend is refused without its
    script, a plug-in retriever behind a service is opened and recorded as a server, a plug-in index kind is
    built and opened by index.py: each was decided by comparing the shipped ones' names (`gold`, `openai`,
    `scripted`, `server`, `bm25`)."""
    import json

    run = subprocess.run([sys.executable, "-c", "import json\n" + _PLUGIN_KINDS], capture_output=True, text=True,
                         timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["label"] == ["strict", "strict (oracle)", {"loop_judge": "strict (oracle)", "oracle": True}]
    assert out["plan"]["gold_evidence"] == "3 of 4 training questions" and "endpoint" not in out["plan"]
    assert out["checked"] == ["citation judge (critic.judge: remote)"] and out["remote_label"] == "remote:m7"
    assert out["replay"] == "generation.backend: replay needs generation.script, a replay file; got None"
    # a plug-in retriever behind a service: no index looked for, its server recorded, opened by its kind
    assert out["api"] == [{"kind": "search-api", "topk": 3, "server_url": "http://127.0.0.1:9"},
                          "server expected at http://127.0.0.1:9 (start it with scripts/serve_retriever.sh)", True,
                          "api-1", ["http://127.0.0.1:9"]]
    # a plug-in index kind: built from retrieval.corpus under its own name, checked and opened by index.py
    assert out["lite"] == ["index will be built from retrieval.corpus on first use", "lite", "p1",
                           ["index_dir", "kind", "topk"]]


def test_dev_set_files_exist():
    from awarl.io import shipped_data_dir

    assert all((shipped_data_dir() / e.target).is_file() for e in choices.DEV_SETS)


# ---------------------------------------------------------------------------------- the config
def _literal_fields(model: type, path: str = ""):
    """(key, values) of every Literal field (or list of them) of the config, sections followed."""
    for name, field in model.model_fields.items():
        key = f"{path}{name}"
        sub = section_model(field.annotation)
        if sub is not None:
            yield from _literal_fields(sub, key + ("[]." if get_origin(field.annotation) is list else "."))
            continue
        ann = field.annotation
        while get_origin(ann) is list:
            (ann,) = get_args(ann)
        for arg in (ann, *get_args(ann)):
            if get_origin(arg) is Literal:
                yield key, tuple(get_args(arg))


def test_registered_keys_accept_every_registered_name_and_nothing_else():
    for key, reg in REGISTERED_KEYS.items():
        values = set(allowed_values(key))
        assert values <= accepted(key), (key, values - accepted(key))
        assert set(reg.names) <= values, (key, set(reg.names) - values)


def test_no_other_literal_of_the_config_lists_a_registry_s_values():
    """A hand-written Literal that shares two or more names with a registry is a second list of that choice."""
    found = []
    for key, values in _literal_fields(AwarlConfig):
        for reg in choices.ALL:
            if len(set(values) & set(reg.names)) >= 2 and key not in REGISTERED_KEYS:
                found.append((key, reg.what))
    assert found == []


def test_config_refuses_an_unregistered_value_naming_the_choices():
    with pytest.raises(ConfigError, match=r"critic\.judge") as e:
        load_config(None, ["critic.judge=nli"])
    assert all(f"'{name}'" in str(e.value) for name in choices.JUDGES.choices)  # the message lists them all
    with pytest.raises(ConfigError, match=r"research\.judge"):
        load_config(None, ["research.judge=none"])  # `none` is critic.judge's extra only
    with pytest.raises(ConfigError, match=r"eval\.datasets\.0"):
        load_config(None, ["eval.datasets=[nq]"])
    assert load_config(None, ["simulate.strategies=[awarl_no_penalty, bapo]"]).simulate.strategies[0] == \
        "awarl_no_penalty"


# ------------------------------------------------------------------------------------- the CLI
def _parsers(parser: argparse.ArgumentParser, prog: str = "awarl"):
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{prog} {name}")


def test_cli_choices_and_help_list_only_registered_values():
    from awarl.cli import build_parser
    from awarl.commands.common import registered_choices

    block = registered_choices()
    with_config = 0
    for prog, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not action.choices or isinstance(action, argparse._SubParsersAction):
                continue
            near = [reg for reg in choices.ALL if len(set(action.choices) & set(reg.names)) >= 2]
            if near:  # a list of a registry's values: all of them that registry's
                assert any(set(action.choices) <= set(reg.choices) for reg in near), (prog, action.dest)
        # `overrides` as an argument, or set by hand for a command that takes them among its positionals (compare)
        if any(a.dest == "overrides" for a in parser._actions) or "overrides" in parser._defaults:
            with_config += 1
            help_text = parser.format_help()
            assert "registered choices" in help_text, prog
            if parser.formatter_class is argparse.RawDescriptionHelpFormatter:
                assert block in help_text, prog
    assert with_config >= 8  # demo, estimate, train, sweep, eval, score, research, simulate
    for key in REGISTERED_KEYS:  # the block's lines are the config's values, in order
        assert f"{key}" in block and ", ".join(allowed_values(key)) + ";" in block


# ------------------------------------------------------------------------ docs, configs, messages
def _text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "README.md", "docs", "configs", "awarl", "scripts", "benchmarks",
                          "data/README.md", "Makefile"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / f for f in out.stdout.split() if f.endswith((".md", ".py", ".yaml", ".sh", "Makefile"))]


_KEYS = "|".join(re.escape(k) for k in ["critic.judge", "research.judge", "reward.strategy", "reward.expected_rate",
                                        "generation.backend", "eval.datasets", "simulate.strategies",
                                        "retrieval.kind", "expected_rate", "--format"])
_MENTION = re.compile(rf"(?<![\w.\-])`?({_KEYS})`?(?:\s*[:=]\s*|(?<=--format)\s+)`?(\[[^\]\n]*\]|[A-Za-z0-9_\-]+)`?")


def _key(name: str) -> str:
    return ALIASES.get(name, name)


def _guide_names() -> set[str]:
    """The names docs/extending.md's examples register (the page may name them; tests/test_extending.py
    registers and runs them)."""
    return set(re.findall(r'^\w+\.add\("([\w\-]+)"', (REPO / "docs" / "extending.md").read_text(), re.M))


def test_every_mention_of_a_registered_key_names_a_registered_value():
    """`critic.judge: openai`, `generation.backend=vllm`, `--format hotpotqa`, `reward.expected_rate: [a, b]`
    anywhere in the docs, configs, scripts and code name values the registry has."""
    bad, seen, guide = [], 0, _guide_names()
    assert {"nq_open", "containment"} <= guide
    for path in _text_files():
        extra = guide if path.name == "extending.md" else set()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in _MENTION.finditer(line):
                key, raw = _key(m.group(1)), m.group(2)
                values = [v.strip(" `'\"") for v in raw.strip("[]").split(",")] if raw.startswith("[") else [raw]
                for v in values:
                    if not v or v[0].isupper() or v in {"the", "a", "an", "its", "one"} or "{" in v:
                        continue  # prose (`expected_rate: the probability ...`) or a format string
                    seen += 1
                    if v not in accepted(key) | extra:
                        bad.append(f"{path.relative_to(REPO)}:{n}: {m.group(0)}")
    assert bad == []
    assert seen >= 30  # the scan reads what it claims to (about 50 mentions when written)


def _cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


_HEADER_KEYS = {"format": "data.train[].format", "reading": "reward.expected_rate", "judge": "critic.judge",
                "strategy": "reward.strategy", "backend": "generation.backend", **{k: k for k in REGISTERED_KEYS}}


def test_docs_tables_of_choices_list_only_registered_values():
    """A markdown table headed by a choice (`| format | ...`, `| \\`critic.judge\\` | ...`) lists registered
    values in its first column; a row headed by a registered key lists them in its second."""
    bad, tables = [], 0
    for path in sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")]):
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("|") or i + 1 >= len(lines):
                continue
            first = _cells(line)[0].strip("`* ")
            if lines[i + 1].startswith("|---") and first.lower() in _HEADER_KEYS:
                key, tables = _HEADER_KEYS[first.lower()], tables + 1
                for row in lines[i + 2:]:
                    if not row.startswith("|"):
                        break
                    value = re.search(r"`([^`]+)`", _cells(row)[0])
                    if value and value.group(1) not in accepted(key):
                        bad.append(f"{path.name}: {row[:60]}")
            elif first in REGISTERED_KEYS and not lines[i + 1].startswith("|---"):
                tables += 1
                cell = _cells(line)[1] if len(_cells(line)) > 1 else ""
                bad += [f"{path.name}: {first}: {v}" for v in re.findall(r"`([^`]+)`", cell)
                        if v not in accepted(first)]
    assert bad == []
    assert tables >= 5  # formats.md, agent.md (critic.judge), method.md (reading; reward.expected_rate), research.md


def _table_values(path: Path, header: str) -> list[str]:
    """The first-column values (`name`) of the markdown table of `path` headed by `| header |`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and _cells(line)[0].lower() == header
                 and i + 1 < len(lines) and lines[i + 1].startswith("|---"))
    values = []
    for row in lines[start + 2:]:
        if not row.startswith("|"):
            break
        m = re.search(r"`([^`]+)`", _cells(row)[0])
        values.append(m.group(1) if m else "")
    return values


_DOCUMENTED = [("formats.md", "format", "FORMATS"), ("method.md", "reading", "EXPECTED_RATES")]


def _undocumented(reg: Registry[object], doc: str, header: str) -> list[str]:
    return [n for n in reg.names if n not in _table_values(REPO / "docs" / doc, header)]


def test_the_method_and_formats_pages_document_every_registered_format_and_reading():
    """docs/formats.md's table of formats and docs/method.md's table of readings list every registered one:
    a format or reading added to its registry without its row (what its keys are, what it assumes and where it
    fails) fails here, as a stale docs/config.md does in tests/test_config_docs.py."""
    for doc, header, attr in _DOCUMENTED:
        reg = getattr(choices, attr)
        assert _undocumented(reg, doc, header) == [], (doc, header)
        # the check sees a registered name its page lacks (a registry like the shipped one, one line more)
        more: Registry[object] = Registry(reg.what, reg.key, reg.contract, kind=reg.kind)
        for e in reg:
            more.add(e.name, e.target, e.description)
        more.add("nq_open", "awarl.data.formats:UNIFIED", "a format the page does not know")
        assert _undocumented(more, doc, header) == ["nq_open"]


def test_config_comments_that_list_alternatives_list_registered_values():
    """`judge: gold   # gold | lexical (heuristic) | openai | none` in configs/."""
    bad, seen = [], 0
    pattern = re.compile(r"^\s*(judge|strategy|expected_rate|backend|format):\s*\S+\s*#(\s*[\w\-]+\s*(?:\([^)]*\))?\s*\|.*)$")
    for path in sorted((REPO / "configs").rglob("*.yaml")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = pattern.match(line)
            if m:
                seen += 1
                words = [alt.split()[0] for alt in m.group(2).split("|") if alt.split()]
                bad += [f"{path.name}:{n}: {w}" for w in words if w not in accepted(_key(m.group(1)))]
    assert bad == [] and seen >= 2


def test_config_reference_lists_each_registered_key_s_values_and_every_registry():
    """docs/config.md (generated; tests/test_config_docs.py keeps it fresh): each registry-backed key's type
    cell lists exactly the config's values, and the "Registered choices" tables hold every entry."""
    text = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## `([^`]+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    for key in REGISTERED_KEYS:
        section, field = key.rsplit(".", 1)
        row = re.search(rf"^\| `{field}` \| ([^|]*) \|", sections[section], re.M)
        assert row and tuple(re.findall(r"`([^`]+)`", row.group(1))) == allowed_values(key), key
    for reg in choices.ALL:
        for value in reg.choices:
            assert f"| `{value}` |" in text.split("## Registered choices", 1)[1], (reg.what, value)


_PLUGIN_JUDGE = '''
from pydantic import Field

from awarl.config import ConfigModel
from awarl.critic.lexical_judge import LexicalJudge
from awarl.critic.schema import JudgeKind


class Options(ConfigModel):
    """critic.options.strictlex"""

    threshold: float = Field(0.9, ge=0, le=1, description="Token recall a claim needs in a passage (the plug-in's own).")


def build(cfg, cache_dir=None):
    judge = LexicalJudge(cfg.model_copy(update={"support_threshold": Options(**cfg.options.get("strictlex", {})).threshold}))
    judge.name = "strictlex"
    return judge


STRICTLEX = JudgeKind(build)
'''

_PLUGIN_OTHERS = '''
from awarl.metrics import CorrectnessRule, token_f1
from awarl.research.planner import DecompositionPlanner, PlannerKind, one_step

# a correctness rule reading an existing MetricsConfig constant (no name compared anywhere decides it)
HALF_F1 = CorrectnessRule(lambda answer, golds, metrics, verdict: token_f1(answer, golds) >= metrics.f1_threshold / 2,
                          settings=("f1_threshold",))


class OneHop(DecompositionPlanner):
    name = "onehop"

    def decompose(self, question, example=None):
        return one_step(question, rule="onehop")


ONEHOP = PlannerKind(lambda cfg, cache_dir, check: OneHop())
'''

_PLUGIN_CHECKS = r"""
import json, sys
from awarl.cli import build_parser
from awarl.config import ConfigError, load_config
from awarl.config_docs import render_config_markdown
from awarl.critic import make_judge

import argparse
sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
out = {"help": sub.choices["eval"].format_help(), "docs": render_config_markdown()}
cfg = load_config(None, ["critic.judge=strictlex"])
out["defaults"] = cfg.critic.options
from awarl.metrics import classify_outcome
from awarl.research.provenance import planner_identity
from awarl.research.records import make_planner
from awarl.stages.eval_manifest import rollout_settings
other = load_config(None, ["metrics.correctness=half_f1", "research.planner=onehop"])
out["rule"] = [classify_outcome("Obama", ["Barack Hussein Obama"], valid=True, phrases=["x"], metrics=m).value
               for m in (cfg.metrics, other.metrics)]
out["recorded"] = rollout_settings(other, {"name": "m"}, None, 0.0)["correctness"]
planner = make_planner(other)
out["planner"] = [planner_identity(planner), planner.decompose("Who?").rule]
judge = make_judge(load_config(None, ["critic.judge=strictlex", "critic.options.strictlex.threshold=0.7"]).critic)
out["built"] = [judge.name, judge.cfg.support_threshold]
for bad in (["critic.options.strictlex.threshold=2"], ["critic.options.strictlex.treshold=0.5"],
            ["critic.options.lexical.threshold=0.5"]):
    try:
        load_config(None, ["critic.judge=strictlex", *bad])
    except ConfigError as e:
        out.setdefault("refused", []).append(str(e).splitlines()[1].strip())
print(json.dumps(out))
"""


def test_a_plug_in_with_a_setting_from_its_own_module_is_a_choice_like_the_shipped_ones(tmp_path):
    """A judge of a package outside awarl, with a setting of its own, registered by a module named in
    $AWARL_PLUGINS: --help and docs/config.md list it and its setting, the config fills in its default, builds
    it with the value given, and refuses a bad value, an unknown key and settings for a judge that has none.
    A judge with a setting needed config.py too (CriticConfig's flat 'lexical:' / 'openai:' fields)."""
    import json
    import os

    pkg = tmp_path / "myplugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "strictlex.py").write_text(_PLUGIN_JUDGE, encoding="utf-8")
    (pkg / "register.py").write_text(
        'from awarl.choices import JUDGES\n\nJUDGES.add("strictlex", "myplugins.strictlex:STRICTLEX", "the lexical '
        'judge at a recall of its own", options="myplugins.strictlex:Options")\n'
        'from awarl.choices import CORRECTNESS, PLANNERS\n'
        'CORRECTNESS.add("half_f1", "myplugins.others:HALF_F1", "token F1 at half metrics.f1_threshold")\n'
        'PLANNERS.add("onehop", "myplugins.others:ONEHOP", "the question as one step")\n', encoding="utf-8")
    (pkg / "others.py").write_text(_PLUGIN_OTHERS, encoding="utf-8")
    env = {**os.environ, "AWARL_PLUGINS": "myplugins.register", "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    run = subprocess.run([sys.executable, "-c", _PLUGIN_CHECKS], capture_output=True, text=True, timeout=300,
                         cwd=REPO, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert "strictlex" in out["help"] and "critic.options.strictlex: threshold;" in out["help"]
    assert "| `strictlex` | the lexical judge at a recall of its own | `myplugins.strictlex:STRICTLEX` |" in out["docs"]
    assert "#### `critic.options.strictlex`" in out["docs"]
    assert "| `threshold` | float (≥ 0, ≤ 1) | `0.9` | Token recall a claim needs in a passage (the plug-in's own). |" \
        in out["docs"]
    assert out["defaults"] == {"strictlex": {"threshold": 0.9}}
    assert out["built"] == ["strictlex", 0.7]
    # a correctness rule and a research planner from the same module: listed, accepted, used, recorded
    for key, value in (("metrics.correctness", "half_f1"), ("research.planner", "onehop")):
        assert re.search(rf"{re.escape(key)}: [^\n]*\b{value}\b", out["help"]), key
        assert f"| `{value}` |" in out["docs"].split("## Registered choices", 1)[1]
    assert out["rule"] == ["wrong", "correct"]  # F1 0.5: below 0.8, above 0.4
    assert out["recorded"] == {"rule": "half_f1", "f1_threshold": 0.8, "grader": None}
    assert out["planner"] == [{"planner": "onehop"}, "onehop"]
    assert [r.split(":")[0] for r in out["refused"]] == ["critic.options"] * 3
    assert "strictlex.threshold: Input should be less than or equal to 1" in out["refused"][0]
    assert "strictlex.treshold: Extra inputs are not permitted" in out["refused"][1]
    assert "'lexical' is no citation judge with settings of its own; those that have some: strictlex" \
        in out["refused"][2]
    # a plug-in module that cannot be imported stops awarl with the reason
    bad = subprocess.run([sys.executable, "-c", "import awarl.config"], capture_output=True, text=True, timeout=120,
                         cwd=REPO, env={**env, "AWARL_PLUGINS": "myplugins.nope"})
    assert bad.returncode != 0
    assert "AWARL_PLUGINS: the plug-in module 'myplugins.nope' cannot be imported" in bad.stderr
