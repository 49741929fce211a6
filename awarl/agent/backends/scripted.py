"""Scripted backend: deterministic replay of written model turns, for tests and demos.

The script maps each question to the list of its model turns (texts). On each call the backend finds
the question in the decoded context and counts the information blocks after it to know which turn is
next; the turn text is tokenised and then handled exactly like model output (trimmed after a stop
string, cut at max_new_tokens; a turn without a stop string ends with the eos token). Once the turns
run out the model just emits eos. JSONL file format (generation.script), one object a line:
`{"question": "...", "turns": ["<search> q </search>", "<answer> x </answer>"]}`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from awarl.agent.backends.base import BackendKind, Generation, Seed, finish
from awarl.io import DataError, iter_jsonl

if TYPE_CHECKING:
    from awarl.agent.templates import Template
    from awarl.config import GenerationConfig


class ScriptedBackend:
    def __init__(self, tokenizer: Any, script: Mapping[str, Sequence[str]], *,
                 turn_marker: str = "</information>") -> None:
        self.tokenizer = tokenizer
        self.script = {str(q): [str(t) for t in turns] for q, turns in script.items()}
        self.turn_marker = turn_marker
        if tokenizer.eos_token_id is None:
            raise ValueError("ScriptedBackend: the tokenizer has no eos token")
        self.eos_id = int(tokenizer.eos_token_id)
        self.calls = 0

    def use_template(self, template: Template) -> None:
        """Count the information blocks by the template's closing tag (the engine calls this: a template that
        renames the tag, `tags: {information: documents}`, was replayed at turn 0 forever)."""
        self.turn_marker = template.tags.close("information")

    @classmethod
    def from_jsonl(cls, tokenizer: Any, path: str | Path) -> ScriptedBackend:
        script: dict[str, list[str]] = {}
        for n, obj in iter_jsonl(path):
            q, turns = obj.get("question"), obj.get("turns")
            if not isinstance(q, str) or not q:
                raise DataError(f"{path}:{n}: `question` must be a non-empty string")
            if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
                raise DataError(f"{path}:{n}: `turns` must be a list of strings")
            if q in script:
                raise DataError(f"{path}:{n}: duplicate question {q!r}")
            script[q] = turns
        return cls(tokenizer, script)

    def _next_turn(self, context: str) -> str | None:
        # The longest matching question wins, so "Who?" never shadows "Who wrote it?".
        best = None
        for q in self.script:
            pos = context.find(q)
            if pos >= 0 and (best is None or len(q) > len(best[0])):
                best = (q, pos)
        if best is None:
            raise KeyError("ScriptedBackend: no scripted question occurs in the prompt; script questions: "
                           + ", ".join(repr(q[:60]) for q in list(self.script)[:5]))
        q, pos = best
        turn = context[pos + len(q):].count(self.turn_marker)
        turns = self.script[q]
        return turns[turn] if turn < len(turns) else None

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float = 0.0,
                 top_p: float = 1.0, stop_strings: Sequence[str] = (), seed: Seed = None) -> list[Generation]:
        self.calls += 1
        out = []
        for p in prompts:
            text = self._next_turn(self.tokenizer.decode(p, skip_special_tokens=False))
            ids = [] if text is None else list(self.tokenizer.encode(text, add_special_tokens=False))
            g = finish(ids, [0.0] * len(ids), self.tokenizer, stop_strings, {self.eos_id})
            if g.finish_reason == "length":  # the written turn ends the message
                g = Generation(g.token_ids + [self.eos_id], g.logprobs + [0.0], "eos")
            if len(g.token_ids) > max_new_tokens:
                g = Generation(g.token_ids[:max_new_tokens], g.logprobs[:max_new_tokens], "length")
            out.append(g)
        return out


def build(gen_cfg: GenerationConfig, model_path_or_obj: Any, tokenizer: Any, generation_config: Any = None) -> ScriptedBackend:
    """The registered factory (awarl.choices.BACKENDS `scripted`): replays `generation.script`; the model is
    not used."""
    if not gen_cfg.script:
        raise ValueError("generation.backend=scripted needs generation.script (a JSONL of scripted turns)")
    return ScriptedBackend.from_jsonl(tokenizer, gen_cfg.script)


SCRIPTED = BackendKind(build, replays_script=True)  # awarl.choices.BACKENDS `scripted`
