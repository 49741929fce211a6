"""One writer per output (awarl.locks): the lock itself, and for every command that writes a run folder or a
cache entry, two real `awarl` processes on one output.

The first process is the real command, stopped (SIGSTOP) the moment it holds its lock
(tests/faults/stop_after_lock.py); the second, started on the same output, must be refused in one line naming
the first (pid and command), or, for a cache entry, wait for it and take its result. Then the first goes on
(SIGCONT) and must finish as if alone, or is killed (SIGKILL) and its lock taken over by the next run.
Before this, two evaluations started together on one folder both passed the settings check and wrote 60 lines
for 30 questions, of two models, under a manifest naming one (docs/reliability.md, round 4).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from awarl import locks
from awarl.io import atomic_write_text, shipped_data_dir

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# PYTHONPATH: the processes run from other folders and must import this checkout's awarl
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
HOTPOT = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"


# ------------------------------------------------------------------------------------------- the lock
def test_a_second_holder_is_refused_naming_the_first_and_the_lock_is_reentrant(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from awarl.locks import folder_lock\n"
        f"with folder_lock({str(tmp_path / 'run')!r}):\n"
        "    print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(locks.OutputInUse, match=rf"is in use by process {holder.pid} on .* since .*: -c; wait"), \
                locks.folder_lock(tmp_path / "run", remedy="or use another --out"):
            pass
        assert locks.lock_holder(tmp_path / "run" / locks.LOCK_NAME)["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
    # its process gone, the lock is free; this process takes it, and again inside (a demo and its training stage)
    with locks.folder_lock(tmp_path / "run"):
        with locks.folder_lock(tmp_path / "run"):
            assert locks.lock_holder(tmp_path / "run" / locks.LOCK_NAME)["pid"] == os.getpid()
        assert (tmp_path / "run" / locks.LOCK_NAME).exists()
    assert not (tmp_path / "run" / locks.LOCK_NAME).exists()


def test_a_refused_run_leaves_no_folder_it_created(tmp_path):
    with locks.folder_lock(tmp_path / "a"):
        pass
    assert not (tmp_path / "a").exists()  # nothing was written: the folder it made is gone again
    (tmp_path / "b").mkdir()
    with locks.folder_lock(tmp_path / "b"):
        pass
    assert (tmp_path / "b").is_dir()      # a folder that was there stays


def test_taking_a_folder_sweeps_the_temporaries_of_killed_atomic_writes(tmp_path):
    """The flaky CI failure: a kill inside the manifest's atomic write left `.manifest.json.<random>.tmp`."""
    run = tmp_path / "run"
    run.mkdir()
    left = [".manifest.json.k3x_9abq.tmp", ".predictions.jsonl.append-0.abcd1234.tmp", ".results.png.tmp.png"]
    kept = ["manifest.json", ".hidden.tmp", "notes.tmp", ".x.toolongrandom.tmp"]
    for name in left + kept:
        (run / name).write_text("x")
    with locks.folder_lock(run):
        pass
    assert sorted(p.name for p in run.iterdir()) == sorted(kept)


def test_a_cache_entry_waits_for_its_maker(tmp_path):
    target = tmp_path / "entry"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from awarl.locks import path_lock\n"
        f"with path_lock({str(target)!r}, wait=True):\n"
        "    print('held', flush=True); time.sleep(1.5)")], stdout=subprocess.PIPE, text=True, env=ENV)
    assert holder.stdout.readline().strip() == "held"
    t0 = time.monotonic()
    with locks.path_lock(target, wait=True):
        waited = time.monotonic() - t0
    holder.wait()
    assert waited > 0.5


def test_an_atomic_temporary_is_told_apart_from_other_dot_files():
    assert locks.is_atomic_temporary(".manifest.json.a_b2c3d4.tmp")
    assert locks.is_atomic_temporary(".compare.png.tmp.png")
    assert not locks.is_atomic_temporary("manifest.json.a_b2c3d4.tmp")
    assert not locks.is_atomic_temporary(".awarl.lock")
    assert not locks.is_atomic_temporary(".p.jsonl.append-0")


# ------------------------------------------------------------------------------------- two processes
def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "gone"


def start_stopped(lock_file: Path, args: list[str], cwd: Path) -> subprocess.Popen:
    """`awarl ARGS`, stopped once it holds `lock_file`."""
    p = subprocess.Popen([sys.executable, str(TESTS / "faults" / "stop_after_lock.py"), str(lock_file), *args],
                         env=ENV, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while _state(p.pid) != "T":
        if p.poll() is not None:
            raise AssertionError(f"{args[:2]} ended before taking its lock: {p.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, f"{args[:2]} never took its lock"
        time.sleep(0.05)
    return p


def awarl(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "awarl.cli", *args], env=ENV, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def finish(p: subprocess.Popen, how: str) -> tuple[int, str]:
    os.kill(p.pid, signal.SIGCONT if how == "continue" else signal.SIGKILL)
    _, err = p.communicate(timeout=300)
    return p.returncode, err


def refusal(r: subprocess.CompletedProcess, first: subprocess.Popen, what: str) -> str:
    errors = [x for x in r.stderr.splitlines() if " error: " in x or "Traceback" in x]
    assert r.returncode == 2 and len(errors) == 1, r.stderr[-3000:]
    assert f"{what} is in use by process {first.pid} on " in errors[0], errors[0]
    assert "wait for it to finish or stop it" in errors[0]
    return errors[0]


@pytest.fixture()
def common(tmp_path, tiny_dir, shipped_bm25_dir):
    return {"tmp": tmp_path, "tiny": tiny_dir, "index": shipped_bm25_dir}


def eval_args(c: dict, out: Path) -> list[str]:
    return ["eval", "--model", str(c["tiny"]), "--index", str(c["index"]), "--limit", "1", "--out", str(out),
            "agent.max_turns=1", "agent.max_new_tokens_per_turn=8", "agent.max_trajectory_tokens=120",
            "metrics.bootstrap_samples=10", "critic.judge=lexical"]


@pytest.mark.slow
def test_two_evaluations_on_one_folder_and_a_killed_holder_taken_over(common):
    out = common["tmp"] / "e"
    first = start_stopped(out / ".awarl.lock", eval_args(common, out), common["tmp"])
    try:
        line = refusal(awarl(eval_args(common, out), common["tmp"]), first, f"evaluation folder {out}")
        assert "awarl eval --model" in line and str(out) in line
    finally:
        rc, err = finish(first, "continue")
    assert rc == 0, err[-2000:]
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 3 and not (out / ".awarl.lock").exists()
    # a holder killed with its lock held: the next run takes the lock over and says whose it was
    second = start_stopped(out / ".awarl.lock", eval_args(common, out), common["tmp"])
    finish(second, "kill")
    assert json.loads((out / ".awarl.lock").read_text())["pid"] == second.pid
    r = awarl(eval_args(common, out), common["tmp"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"took over the lock of process {second.pid} on " in r.stderr and "(that process is gone)" in r.stderr


def _train_config(c: dict) -> Path:
    cfg = {"run": {"out_dir": str(c["tmp"] / "run")}, "retrieval": {"index_dir": str(c["index"])},
           "data": {"train": [{"path": str(HOTPOT), "limit": 4}]},
           "estimate": {"out": str(c["tmp"] / "p.jsonl"), "k": 2},
           "train": {"model": str(c["tiny"]), "max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2,
                     "report_to": ["none"]}}
    path = c["tmp"] / "train.yaml"
    atomic_write_text(path, yaml.safe_dump(cfg))
    return path


def _sweep_file(c: dict) -> Path:
    path = c["tmp"] / "sweep.yaml"
    atomic_write_text(path, yaml.safe_dump({"sweep": {
        "name": "g", "base": str(_train_config(c)), "out_dir": str(c["tmp"] / "sweep"),
        "grid": {"reward.gamma": [0.1, 0.2]}, "mode": "local", "launcher": []}}))
    return path


def _predictions(c: dict) -> Path:
    out = c["tmp"] / "made"
    r = awarl(eval_args(c, out), c["tmp"])
    assert r.returncode == 0, r.stderr[-2000:]
    return out / "predictions.jsonl"


# name -> (the command's arguments, its lock file, what the refusal names, then: continue or kill the first)
COMMANDS = {
    "estimate": (lambda c: ["estimate", "--model", str(c["tiny"]), "--out", str(c["tmp"] / "p.jsonl"), "-k", "2",
                            f"data.train=[{{path: {HOTPOT}, limit: 2}}]", f"retrieval.index_dir={c['index']}",
                            f"run.out_dir={c['tmp']}", "agent.max_turns=1", "agent.max_new_tokens_per_turn=8",
                            "agent.max_trajectory_tokens=120"],
                 lambda c: c["tmp"] / ".p.jsonl.lock", lambda c: f"p_i estimate {c['tmp'] / 'p.jsonl'}", "continue"),
    "train": (lambda c: ["train", "--config", str(_train_config(c))], lambda c: c["tmp"] / "run" / ".awarl.lock",
              lambda c: f"training run folder {c['tmp'] / 'run'}", "kill"),
    "index build": (lambda c: ["index", "build", "--corpus", str(c["index"].parent / "corpus.jsonl"), "--kind", "bm25",
                               "--out", str(c["tmp"] / "idx")],
                    lambda c: c["tmp"] / ".idx.lock", lambda c: f"index {c['tmp'] / 'idx'}", "continue"),
    "model tiny": (lambda c: ["model", "tiny", "--out", str(c["tmp"] / "tiny"), "--vocab-size", "300",
                              "--hidden", "16", "--layers", "1", "--heads", "2"],
                   lambda c: c["tmp"] / ".tiny.lock", lambda c: str(c["tmp"] / "tiny"), "continue"),
    "research": (lambda c: ["research", "Who was born first?", "--model", str(c["tiny"]), "--out",
                            str(c["tmp"] / "r.json"), f"retrieval.index_dir={c['index']}"],
                 lambda c: c["tmp"] / ".r.json.lock", lambda c: f"research report {c['tmp'] / 'r.json'}", "kill"),
    "research regression": (
        lambda c: ["research", "--regression", str(ROOT / "data" / "research" / "regression.jsonl"), "--model",
                   str(c["tiny"]), "--out", str(c["tmp"] / "reg"), "generation.backend=scripted",
                   f"generation.script={ROOT / 'data' / 'research' / 'regression_script.jsonl'}"],
        lambda c: c["tmp"] / "reg" / ".awarl.lock", lambda c: f"regression folder {c['tmp'] / 'reg'}", "kill"),
    "demo": (lambda c: ["demo", "--out", str(c["tmp"] / "demo")], lambda c: c["tmp"] / "demo" / ".awarl.lock",
             lambda c: f"demo folder {c['tmp'] / 'demo'}", "kill"),
    "demo-real": (lambda c: ["demo-real", "--out", str(c["tmp"] / "dr")], lambda c: c["tmp"] / "dr" / ".awarl.lock",
                  lambda c: f"demo folder {c['tmp'] / 'dr'}", "kill"),
    "sweep": (lambda c: ["sweep", "--config", str(_sweep_file(c)), "--aggregate"],
              lambda c: c["tmp"] / "sweep" / ".awarl.lock", lambda c: f"sweep folder {c['tmp'] / 'sweep'}", "continue"),
    "score": (lambda c: ["score", str(_predictions(c)), "--out", str(c["tmp"] / "rep")],
              lambda c: c["tmp"] / "rep" / ".awarl.lock", lambda c: f"report folder {c['tmp'] / 'rep'}", "continue"),
    "compare": (lambda c: ["compare", str(_predictions(c)), str(c["tmp"] / "made"), "--out", str(c["tmp"] / "cmp")],
                lambda c: c["tmp"] / "cmp" / ".awarl.lock", lambda c: f"comparison folder {c['tmp'] / 'cmp'}",
                "continue"),
    "simulate": (lambda c: ["simulate", "--out", str(c["tmp"] / "sim"), "--steps", "5", "--seeds", "1",
                            "--no-progress"],
                 lambda c: c["tmp"] / "sim" / ".awarl.lock", lambda c: f"simulation folder {c['tmp'] / 'sim'}",
                 "continue"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_second_process_on_the_same_output_is_refused_naming_the_first(common, name):
    make_args, lock_file, what, then = COMMANDS[name]
    args = make_args(common)   # once: files it writes (a config, predictions) are made before either runs
    first = start_stopped(lock_file(common), args, common["tmp"])
    try:
        line = refusal(awarl(args, common["tmp"]), first, what(common))
        assert f"awarl {name.split()[0]}" in line
    finally:
        rc, err = finish(first, then)
    if then == "continue":   # the first, alone on its output again, finishes as if nobody had knocked
        assert rc == 0, err[-3000:]
        assert not lock_file(common).exists()


@pytest.mark.slow
def test_a_second_conversion_of_one_gguf_waits_and_takes_the_first_ones_folder(tmp_path):
    """A cache entry is not refused but waited for: both processes print the one converted folder, converted
    once."""
    from test_pretrained_errors import write_model_gguf

    f = write_model_gguf(tmp_path / "m.gguf")
    env_cache = {"AWARL_CACHE": str(tmp_path / "cache")}
    os.environ.update(env_cache)
    try:
        from awarl.io import file_sha256

        entry = tmp_path / "cache" / "models" / f"gguf-{file_sha256(f)[:16]}"
        first = subprocess.Popen([sys.executable, str(TESTS / "faults" / "stop_after_lock.py"),
                                  str(entry.with_name(f".{entry.name}.lock")), "model", "from-gguf", str(f)],
                                 env={**ENV, **env_cache}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while _state(first.pid) != "T":
            assert first.poll() is None, first.stderr.read()[-2000:]
            time.sleep(0.05)
        second = subprocess.Popen([sys.executable, "-m", "awarl.cli", "model", "from-gguf", str(f)],
                                  env={**ENV, **env_cache}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(4)
        assert second.poll() is None  # waiting, not refused
        os.kill(first.pid, signal.SIGCONT)
        out1, err1 = first.communicate(timeout=300)
        out2, err2 = second.communicate(timeout=300)
    finally:
        for k in env_cache:
            os.environ.pop(k, None)
    assert first.returncode == 0 and second.returncode == 0, (err1[-2000:], err2[-2000:])
    assert out1.strip() == out2.strip() == str(entry)
    assert f"being written by process {first.pid}" in err2 and "converting" not in err2


def test_taking_a_file_sweeps_its_own_temporaries_and_its_records_only(tmp_path):
    for name in (".p.jsonl.abcdefgh.tmp", ".p.manifest.json.abcdefgh.tmp", ".other.json.abcdefgh.tmp"):
        (tmp_path / name).write_text("x")
    with locks.path_lock(tmp_path / "p.jsonl", companions=("p.manifest.json",)):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.abcdefgh.tmp"]
