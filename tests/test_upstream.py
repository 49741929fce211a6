"""awarl.upstream, the one room for other libraries' private or version-specific API.

- Every shim's probe passes against the installed libraries (the vLLM ones in the vLLM tier), and a probe
  whose upstream shape changed fails loudly: the error names the shim and the installed and checked versions.
- No code outside the room reads another library's private attribute (an AST scan of awarl/ and scripts/:
  a private name read on anything but `self` / `cls`), imports a private upstream module or probes a
  signature; the scan itself is checked on the lines the room replaced. It cannot see a private name an
  awarl subclass inherits from an upstream class and reads on `self` (none does today).
- The shims do what the code they replaced did: the colocated-engine options reach TRL's `LLM` call and are
  restored (a stand-in for vLLM's `LLM`: it is not installed in this tier; the vLLM tier builds the real
  one in tests/test_vllm_training.py), and on vLLM's CPU build a real engine exposes its worker, takes weights
  through the reload API and then computes what transformers computes with those weights (except for tied
  embeddings, a strict xfail: vLLM 0.32 leaves the output head at its initial weights).

Outside the scan on purpose: tests/ (they spy on TRL internals, e.g. `trainer._compute_loss`, to probe
gradients) and benchmarks/ (they time TRL internals such as `_generate_single_turn`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from awarl import upstream

REPO = Path(__file__).resolve().parents[1]
ROOM = REPO / "awarl" / "upstream"
SCANNED = [REPO / "awarl", REPO / "scripts"]


def _params():
    out = []
    for name, s in upstream.all_shims().items():
        marks = [pytest.mark.vllm] if "vllm" in (s.dist, *s.needs) else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("name", _params())
def test_every_shim_matches_the_installed_library(name):
    upstream.check(name)


def test_each_shim_lives_in_the_module_of_its_library_and_names_a_checked_version():
    import re

    for name, s in upstream.all_shims().items():
        module = name.split(".")[0]
        assert s.probe.__module__ == f"awarl.upstream.{module}" and module in upstream.MODULES, name
        assert s.dist == module and re.search(r"\d+\.\d+", s.checked) and s.reaches, name


# ------------------------------------------------------------------------------------- loud failures
def _expect_changed(name: str, *fragments: str) -> str:
    with pytest.raises(upstream.UpstreamChanged) as e:
        upstream.check(name)
    msg = str(e.value)
    s = upstream.all_shims()[name]
    assert msg.startswith(f"awarl.upstream.{name}: ")
    assert f"{s.dist} {upstream.installed(s.dist)} is installed" in msg
    assert f"checked against {s.dist} {s.checked}" in msg
    for f in fragments:
        assert f in msg
    return msg


def test_a_missing_trl_attribute_names_the_shim_and_the_versions(monkeypatch):
    from trl.generation.vllm_generation import VLLMGeneration

    monkeypatch.delattr(VLLMGeneration, "_iter_named_params")
    _expect_changed("trl.named_params", "VLLMGeneration has no _iter_named_params")


def test_a_changed_trl_signature_is_named(monkeypatch):
    from trl import GRPOTrainer

    monkeypatch.setattr(GRPOTrainer, "_log_metric", lambda self, name, value, step: None)
    _expect_changed("trl.log_metric", "GRPOTrainer._log_metric takes ['self', 'name', 'value', 'step']")


def test_a_changed_httpcore_backend_signature_is_named(monkeypatch):
    import httpcore

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None, interface=None):
        raise AssertionError("not called")

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", connect_tcp)
    _expect_changed("httpx.transport_pool", "httpcore.SyncBackend.connect_tcp takes")


def test_a_transport_without_its_pool_fails_at_the_call_not_deep_in_a_request(monkeypatch):
    import httpx

    original = httpx.HTTPTransport.__init__

    def init(self, *a, **kw):
        original(self, *a, **kw)
        del self._pool

    monkeypatch.setattr(httpx.HTTPTransport, "__init__", init)
    with pytest.raises(upstream.UpstreamChanged, match=r"awarl\.upstream\.httpx\.transport_pool: .*httpx "):
        from awarl.http import deadline_client

        deadline_client(1.0)
    _expect_changed("httpx.transport_pool", "keeps no httpcore.ConnectionPool in _pool")


def test_a_changed_cache_constructor_is_named(monkeypatch):
    from transformers.cache_utils import Cache

    def init(self, layer_class_to_replicate=None, offloading=False):
        raise AssertionError("not called")

    monkeypatch.setattr(Cache, "__init__", init)
    _expect_changed("transformers.cache", "Cache.__init__ takes no `layers`")


def test_a_missing_torch_function_is_named(monkeypatch):
    import torch._dynamo

    monkeypatch.delattr(torch._dynamo, "mark_static_address")
    _expect_changed("torch.mark_static_address", "torch._dynamo has no mark_static_address")
    with pytest.raises(upstream.UpstreamChanged, match=r"torch \S+ is installed"):
        from awarl.upstream.torch import mark_static_address

        mark_static_address(torch.zeros(1))


def test_a_renamed_scheduler_attribute_is_named(monkeypatch):
    """torch keeping the last rates under another name: the probe sees get_last_lr() ignore `_last_lr`, and the
    shim refuses a scheduler without it instead of setting an attribute nothing reads."""
    from torch.optim.lr_scheduler import LRScheduler

    from awarl.upstream.torch import set_last_lr

    monkeypatch.setattr(LRScheduler, "get_last_lr", lambda self: [1.0])   # as if it read `_last_lrs` now
    _expect_changed("torch.last_lr", "get_last_lr() gave [1.0] after _last_lr was set to [0.25]")
    with pytest.raises(upstream.UpstreamChanged, match=r"awarl\.upstream\.torch\.last_lr: object keeps no list "
                                                       r"in _last_lr \(torch \S+ is installed"):
        set_last_lr(object(), [0.1])


def test_the_runtime_shims_fail_with_the_same_message_on_a_changed_object():
    from awarl.upstream.trl import named_params

    with pytest.raises(upstream.UpstreamChanged, match=r"awarl\.upstream\.trl\.named_params: object has no "
                                                       r"_iter_named_params \(trl \S+ is installed"):
        named_params(object())


# ------------------------------------------------------------------------------------- the shims' behaviour
def test_colocated_llm_options_reach_trls_llm_call_and_are_restored(monkeypatch):
    """A stand-in for vLLM's `LLM` (vLLM is not in this tier): the wrapper TRL calls while the trainer is built
    adds the options without overriding TRL's own, and the module's name is restored afterwards."""
    import trl.generation.vllm_generation as tvg

    from awarl.training.trainer import colocated_engine_options

    calls = []

    def fake_llm(*args, **kwargs):   # stand-in: the real vllm.LLM needs the vLLM tier
        calls.append(kwargs)

    monkeypatch.setattr(tvg, "LLM", fake_llm, raising=False)
    with colocated_engine_options({"enforce_eager": True, "max_model_len": 99}):
        assert tvg.LLM is not fake_llm
        tvg.LLM(model="m", max_model_len=4096)
    assert tvg.LLM is fake_llm
    assert calls == [{"enforce_eager": True, "max_model_len": 4096, "model": "m"}]


def test_colocated_llm_options_without_trls_llm_name_warn_with_the_trl_version(monkeypatch, caplog):
    import trl.generation.vllm_generation as tvg

    from awarl.training.trainer import colocated_engine_options

    monkeypatch.delattr(tvg, "LLM", raising=False)
    with caplog.at_level("WARNING"), colocated_engine_options({"enforce_eager": True}):
        assert not hasattr(tvg, "LLM")
    assert f"(trl {upstream.installed('trl')})" in caplog.text and "generation.enforce_eager" in caplog.text


def test_report_to_names_come_from_transformers():
    from awarl.config import ConfigError
    from awarl.training.trainer import check_report_to

    assert check_report_to(["tensorboard"]) == ["tensorboard"]
    with pytest.raises(ConfigError, match=r"unknown logger 'nope'; known: none, .*tensorboard"):
        check_report_to(["nope"])


def test_the_slot_session_hands_the_model_its_cache_under_the_forwards_own_name(tiny_dir):
    """transformers 5.24 renamed forward's `past_key_values` to `cache` (the old name warns, and goes in 5.40):
    the slot session passes the name the installed forward takes, so a decode never warns."""
    import warnings

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.agent.backends.hf import HFBackend
    from awarl.upstream.transformers import cache_argument, forward_parameters

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert cache_argument(model) in forward_parameters(model)
    prompt = tok("The capital of France is")["input_ids"]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values.*")
        session = HFBackend(model, tok).open_session(n_sequences=1, max_len=len(prompt) + 8, max_new_total=8,
                                                     temperature=0.0, top_p=1.0, stop_strings=(), seed=0)
        session.add(0, prompt, max_new_tokens=8)
        ends = []
        while not ends:
            ends += session.step()
        stats = session.close()
    assert stats["model_tokens"] == len(ends[0].token_ids) > 0


def test_the_hub_revision_comes_from_the_config_or_the_hub_cache(tmp_path, monkeypatch, tiny_dir):
    """transformers <= 5.17 keeps the commit on the config; later releases do not, and the hub cache's snapshot
    folder of the default revision tells (a cache laid out here by hand: no hub download in the tests)."""
    from types import SimpleNamespace

    import huggingface_hub.constants as hub_constants

    from awarl.upstream.transformers import commit_hash

    repo = tmp_path / "models--org--name"
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    assert commit_hash(SimpleNamespace(config=SimpleNamespace(_commit_hash="fromconfig")), "org/name") == "fromconfig"
    assert commit_hash(SimpleNamespace(config=SimpleNamespace()), "org/name") == "abc123"
    assert commit_hash(None, "org/other") is None          # not in the cache
    assert commit_hash(None, str(tiny_dir)) is None        # a local folder: its files are hashed instead


# ------------------------------------------------------------------------------------- the scan
def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def stdlib_names(tree: ast.AST) -> frozenset[str]:
    """The names a module's imports bind to the standard library (`import argparse`, `import os.path as p`,
    `from concurrent import futures`). Only these: a name that merely is a stdlib module's (`sched`, `code`,
    `token`) may be any local, e.g. the torch scheduler whose private `_last_lr` callbacks.py once wrote."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in node.names
                         if a.name.split(".")[0] in sys.stdlib_module_names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] in sys.stdlib_module_names:
            names.update(a.asname or a.name for a in node.names)
    return frozenset(names)


def _own(node: ast.AST, stdlib: frozenset[str]) -> bool:
    """An object whose private names are awarl's own (`self`, `cls`) or the standard library's (which does not
    change under the pins: `argparse._SubParsersAction`), the latter reached from a name the module imports
    from it (`stdlib`)."""
    if isinstance(node, ast.Name) and node.id in ("self", "cls"):
        return True
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in stdlib


def _private_read(node: ast.AST, stdlib: frozenset[str]) -> bool:
    """`x._attr`, or getattr/hasattr/setattr(x, "_attr", ...), on an object that is not awarl's own."""
    if isinstance(node, ast.Attribute):
        return _private(node.attr) and not _own(node.value, stdlib)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2 and \
        isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) and \
        _private(node.args[1].value) and not _own(node.args[0], stdlib)


def _private_import(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(not a.name.startswith("awarl") and any(_private(p) for p in a.name.split("."))
                   for a in node.names)
    return isinstance(node, ast.ImportFrom) and bool(node.module) and not node.module.startswith("awarl") and \
        node.level == 0 and any(_private(p) for p in [*node.module.split("."), *(a.name for a in node.names)])


def private_upstream_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) of every private upstream use in `source`: a private name read on anything but `self` /
    `cls` (awarl reads no private name of its own objects from outside them), an import of a private upstream
    module or name, an `inspect.signature` probe."""
    found = []
    tree = ast.parse(source)
    stdlib = stdlib_names(tree)
    for node in ast.walk(tree):
        signature = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr == "signature"
        if _private_read(node, stdlib) or _private_import(node) or signature:
            found.append((node.lineno, ast.unparse(node)))
    return found


def _scanned_files() -> list[Path]:
    return [p for root in SCANNED for p in sorted(root.rglob("*.py")) if ROOM not in p.parents]


def test_no_private_upstream_attribute_outside_the_room():
    uses = [f"{p.relative_to(REPO)}:{line}: {what}" for p in _scanned_files()
            for line, what in private_upstream_uses(p.read_text(encoding="utf-8"))]
    assert not uses, ("private or version-specific upstream API outside awarl/upstream (add a shim there, "
                      "with its probe):\n" + "\n".join(uses))


def _awarl_imports(source: str) -> list[str]:
    """The awarl modules `source` imports (absolute imports only: the room uses no relative ones)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "awarl"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "awarl":
            found.append(node.module)
    return found


def test_the_room_imports_nothing_of_awarl_but_itself():
    """The room is the ground floor: what a probe checks against (the generate fallback's neutral processors)
    lives in it, so no import runs from it up into the code that uses it (upstream/transformers.py once imported
    agent/backends/hf.py, which imports the room: a circle)."""
    outside = [f"{p.relative_to(REPO)}: {m}" for p in sorted(ROOM.glob("*.py"))
               for m in _awarl_imports(p.read_text(encoding="utf-8"))
               if m != "awarl.upstream" and not m.startswith("awarl.upstream.")]
    assert not outside, outside


@pytest.mark.parametrize("line", [
    "transport._pool = httpcore.ConnectionPool()",
    "worker.reload_weights(weights_iterator=gen._iter_named_params())",
    'summon = getattr(getattr(trainer, "_dist", None), "summon_full_params", None)',
    "self._attention = self.model.config._attn_implementation",
    "ref = model.config._name_or_path",
    "import torch._dynamo",
    "from torch._dynamo import mark_static_address",
    "params = inspect.signature(base.forward).parameters",
    'commit = getattr(getattr(model, "config", None), "_commit_hash", None)',
    "sched._last_lr = lrs",
])
def test_the_scan_finds_what_the_room_replaced(line):
    assert private_upstream_uses(line), line


def test_the_scan_leaves_awarls_own_and_the_standard_librarys_private_names_alone():
    assert private_upstream_uses("self._support = self._why_no_session()") == []
    assert private_upstream_uses('cls._cache = getattr(self, "_cache", None)') == []
    assert private_upstream_uses("import argparse\ndef f(sub: argparse._SubParsersAction) -> None: ...") == []
    assert private_upstream_uses("import argparse as ap\nap._SubParsersAction") == []
    assert private_upstream_uses("from concurrent import futures\nfutures._base") == []


# callbacks.py before the `torch.last_lr` shim: `sched` is also a stdlib module's name, and the scan once
# exempted every such name, so this write of torch's private attribute passed it.
_SCHED_WRITE = """
from torch.optim.lr_scheduler import LambdaLR

def on_train_begin(kwargs, lrs):
    sched = kwargs.get("lr_scheduler")
    if isinstance(sched, LambdaLR):
        sched._last_lr = lrs
"""


def test_a_private_name_on_a_local_named_like_a_stdlib_module_is_found():
    assert private_upstream_uses(_SCHED_WRITE) == [(7, "sched._last_lr")]
    # exempt only where the module imports that stdlib module: then the name is the module
    assert private_upstream_uses("import sched\nsched._last_lr") == []
    assert private_upstream_uses('code = compile("1", "f", "eval")\ncode._x') == [(2, "code._x")]


# ------------------------------------------------------------------------------------- vLLM, for real
LP_TOL = 1e-3   # float32 log-probs of vLLM's CPU kernels against transformers' forward


@pytest.fixture(scope="module")
def engine(tiny_dir):
    from awarl.agent.backends.vllm import VLLMBackend

    return VLLMBackend.from_pretrained(str(tiny_dir), dtype="float32", enforce_eager=True, max_model_len=256)


def _teacher_forced(model, prompt: list[int], ids: list[int]) -> list[float]:
    """transformers' log-probs of `ids` after `prompt`."""
    import torch

    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([prompt + ids])).logits[0].float(), -1)
    return [lp[len(prompt) - 1 + i, t].item() for i, t in enumerate(ids)]


def _reload_changed(engine, tiny_dir, changed):
    """Reload the tiny model into the engine with the parameters `changed(name)` selects moved; returns the
    moved transformers model, the original one and the engine's greedy completion of a prompt."""
    import torch
    from transformers import AutoModelForCausalLM

    from awarl.upstream import vllm as uv

    original = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    moved = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in moved.named_parameters():
            if changed(name):
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    worker = uv.engine_worker(engine.llm)
    uv.reload_weights(worker, ((n, t.detach().clone()) for n, t in moved.named_parameters()))
    engine.llm.reset_prefix_cache()
    prompt = engine.tokenizer("The capital of France is")["input_ids"]
    return moved, original, prompt, engine.generate([prompt], max_new_tokens=8, temperature=0.0)[0]


@pytest.mark.vllm
def test_a_real_engine_exposes_what_the_shims_reach(engine):
    from vllm.inputs.engine import tokens_input

    from awarl.upstream import vllm as uv

    worker = uv.engine_worker(engine.llm)
    assert worker is not None and uv.reload_takes_weights(worker)
    assert isinstance(uv.generation_config(engine.llm), dict)
    assert uv.tokens_input() is tokens_input


@pytest.mark.vllm
def test_weights_reloaded_through_the_shims_are_what_the_engine_then_computes(engine, tiny_dir):
    """The transformer layers moved (what LoRA on the attention and MLP projections moves): after the reload
    the engine's log-probs are the moved model's, no longer the original's."""
    moved, original, prompt, g = _reload_changed(engine, tiny_dir, lambda name: "layers." in name)
    assert g.logprobs == pytest.approx(_teacher_forced(moved, prompt, g.token_ids), abs=LP_TOL)
    assert g.logprobs != pytest.approx(_teacher_forced(original, prompt, g.token_ids), abs=LP_TOL)


@pytest.mark.vllm
@pytest.mark.xfail(strict=True, reason="vLLM 0.32's layerwise reload leaves the lm_head of a model with tied "
                                       "embeddings (the tiny model, Qwen2.5 0.5B-3B) at its initial weights "
                                       "('ParallelLMHead: Failed to load weights'): moved embeddings reach the "
                                       "input side only; docs/dependencies.md")
def test_reloaded_tied_embeddings_reach_the_output_head_too(engine, tiny_dir):
    moved, _, prompt, g = _reload_changed(engine, tiny_dir, lambda name: "embed_tokens" in name)
    assert g.logprobs == pytest.approx(_teacher_forced(moved, prompt, g.token_ids), abs=LP_TOL)
