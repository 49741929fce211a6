"""Prompt templates: the prompt text, protocol tag names, abstention phrases and information-block format.

Templates are data (YAML files in `awarl/agent/templates/`, or any user file), so matching another
checkpoint's training prompt needs no code. Two ship with awarl:

- `awarl`: search, cite passage numbers in `<cite> 2, 5 </cite>` before `<answer>`, abstain with
  `not enough information`; passages numbered cumulatively over the trajectory.
- `search-r1`: Search-R1's prompt and information format verbatim (no citations, no abstention).

YAML keys: name, user_prompt (must contain `{question}`), system_prompt, examples (few-shot exchanges:
[{question, response}], shown as earlier user/assistant turns), abstention_phrases, citations,
ensure_question_mark (append "?" to a question without one, as Search-R1's data processing does), tags ({think, search, information, cite, answer} -> tag name without brackets), information
({prefix, passage, suffix, strip, numbering}); `passage` may use {number}, {title}, {text}, {id}.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from awarl.agent.chat_template import render_chat_template
from awarl.config import ConfigError, load_yaml, read_text_file

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
# A passage format's placeholders: {title_line} is the first line of the passage's stored `contents` verbatim
# (quotes or none), what Search-R1's environment shows; {title} the title without its quotes.
_PLACEHOLDER_NAMES = "number|title_line|title|text|id"
_PLACEHOLDER = re.compile(rf"\{{({_PLACEHOLDER_NAMES})\}}")
_ANY_PLACEHOLDER = re.compile(rf"\{{(?:{_PLACEHOLDER_NAMES})\}}")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TagNames(_Frozen):
    """Tag names without brackets; `search` -> `<search>` / `</search>`."""

    think: str = "think"
    search: str = "search"
    information: str = "information"
    cite: str = "cite"
    answer: str = "answer"

    @field_validator("*")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", v):
            raise ValueError("a tag name is letters, digits, '_' or '-' (no brackets)")
        return v

    def open(self, role: str) -> str:
        return f"<{getattr(self, role)}>"

    def close(self, role: str) -> str:
        return f"</{getattr(self, role)}>"

    def roles(self) -> dict[str, str]:
        """tag name -> role (think/search/information/cite/answer)."""
        return {getattr(self, r): r for r in ("think", "search", "information", "cite", "answer")}


class InformationFormat(_Frozen):
    prefix: str = "\n<information> "
    passage: str = "[{number}] Title: {title}\n{text}\n"
    suffix: str = " </information>\n"
    strip: bool = Field(True, description="Strip whitespace around the joined passages (Search-R1 does).")
    numbering: Literal["cumulative", "per_search"] = "cumulative"

    @field_validator("passage")
    @classmethod
    def _has_number(cls, v: str) -> str:
        if "{number}" not in v:
            raise ValueError("the passage format must contain {number}")
        return v


class Example(_Frozen):
    """A worked exchange shown before the question (few-shot): the user turn for `question` and the whole
    assistant turn `response` (searches, the information blocks written as the template formats them, the
    answer). Small instruct models ignore a protocol described in words but copy one they see done."""

    question: str
    response: str


class Template(_Frozen):
    name: str
    user_prompt: str
    system_prompt: str | None = None
    abstention_phrases: tuple[str, ...] = ()
    citations: bool = False
    # Search-R1's data processing appends "?" to a question that lacks one; its checkpoints saw that.
    ensure_question_mark: bool = False
    tags: TagNames = Field(default_factory=TagNames)
    information: InformationFormat = Field(default_factory=InformationFormat)
    examples: tuple[Example, ...] = ()

    @field_validator("user_prompt")
    @classmethod
    def _has_question(cls, v: str) -> str:
        if "{question}" not in v:
            raise ValueError("user_prompt must contain {question}")
        return v

    @model_validator(mode="after")
    def _blocks_use_the_information_tag(self) -> Template:
        # The parser finds information blocks by tags.information: a renamed tag with the default prefix and
        # suffix (or the reverse) wrote blocks the parser never saw, so shown passages could not be cited.
        opening, closing = self.tags.open("information"), self.tags.close("information")
        if opening not in self.information.prefix or closing not in self.information.suffix:
            raise ValueError(f"information.prefix {self.information.prefix!r} and suffix "
                             f"{self.information.suffix!r} must hold {opening} and {closing} (tags.information)")
        return self

    # ------------------------------------------------------------------ rendering
    def user_message(self, question: str) -> str:
        if self.ensure_question_mark and question.strip() and not question.strip().endswith("?"):
            question = question.strip() + "?"
        # str.replace, not str.format: prompts legitimately contain braces (JSON examples).
        return self.user_prompt.replace("{question}", question)

    def messages(self, question: str) -> list[dict[str, str]]:
        """The conversation TRL / chat templates take: optional system message + the user message."""
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        for ex in self.examples:
            msgs += [{"role": "user", "content": self.user_message(ex.question)},
                     {"role": "assistant", "content": ex.response}]
        return msgs + [{"role": "user", "content": self.user_message(question)}]

    def format_passage(self, number: int, title: str, text: str, pid: str = "", title_line: str | None = None) -> str:
        """One passage as the format writes it; `title_line` (the stored contents' first line) defaults to the
        title in quotes, how a corpus built from titles stores it."""
        line = f'"{title}"' if title_line is None else title_line
        values = {"number": str(number), "title": self.defang(title), "title_line": self.defang(line),
                  "text": self.defang(text), "id": pid}
        # One pass over the format string, so a title containing "{text}" is never substituted again.
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.information.passage)

    def information_block(self, passages: Sequence[tuple]) -> str:
        """The environment's block for one search: passages as (number, title, text, id[, title_line])."""
        body = "".join(self.format_passage(*p) for p in passages)
        if self.information.strip:
            body = body.strip()
        return self.information.prefix + body + self.information.suffix

    def defang(self, text: str) -> str:
        """Break protocol tags inside retrieved text (`<answer>` -> `< answer>`), so a passage can never
        close the information block or inject an answer, and passage headers (`[7] Title:` -> `[ 7] Title:`),
        so it cannot add a number the model was never shown to those it may cite (the parser reads the
        shown numbers from the headers: a fake one hid a citation fault). The original text stays in the
        trajectory's `passages`; only what the model sees is changed."""
        names = "|".join(re.escape(n) for n in self.tags.roles())
        text = re.sub(rf"<(/?)({names})>", r"< \1\2>", text)
        before, after = self._header_literals()
        if not before and not after:  # a format with bare numbers: a header cannot be told from text
            return text
        return self.passage_number_pattern().sub(
            lambda m: f"{before} {m.group(1)}{after}" if before else f"{m.group(1)} {after}", text)

    def _header_literals(self) -> tuple[str, str]:
        """The passage format's literal text right before and right after `{number}` (up to the neighbouring
        placeholders): what marks a number as a passage header."""
        before, after = self.information.passage.split("{number}", 1)
        before = _PLACEHOLDER.split(before)[-1].lstrip()
        after = _ANY_PLACEHOLDER.split(after, maxsplit=1)[0]
        return before, after

    def passage_number_pattern(self) -> re.Pattern[str]:
        """Regex (group 1 = the number) matching a passage header inside an information block, derived
        from the passage format: the literal text around `{number}` up to the next placeholder."""
        before, after = self._header_literals()
        return re.compile(re.escape(before) + r"(\d+)" + re.escape(after))


def available_templates() -> list[str]:
    return sorted(p.stem for p in TEMPLATE_DIR.glob("*.yaml"))


def template_from_dict(data: dict[str, Any], source: str = "<template>") -> Template:
    try:
        return Template.model_validate(data)
    except ValidationError as e:
        lines = [f"{source}: invalid template"]
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"]) or "<root>"
            lines.append(f"  {key}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from None


def load_template(name_or_path: str | Path) -> Template:
    """A shipped template by name (`awarl`, `search-r1`) or a template YAML file by path."""
    ref = str(name_or_path)
    path = TEMPLATE_DIR / f"{ref}.yaml" if ref in available_templates() else Path(ref)
    if not path.is_file():
        raise ConfigError(f"template {ref!r}: not a shipped template ({', '.join(available_templates())}) "
                          "and no such file")
    data = load_yaml(read_text_file(path, "template"), str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a template file must be a YAML mapping")
    data.setdefault("name", path.stem)
    return template_from_dict(data, str(path))


def abstention_phrases(template: Template, configured: list[str]) -> list[str]:
    """The template's phrases (what its prompt teaches) plus the run's configured ones, in that order."""
    return list(dict.fromkeys([*template.abstention_phrases, *configured]))


def run_abstention_phrases(agent_cfg: Any) -> list[str]:
    """The phrases a run's config classifies abstentions with (`agent.template`'s and
    `agent.abstention_phrases`): what `awarl eval` scored with, so `awarl score` / `awarl compare` of its
    predictions under the same config give the same outcomes."""
    return abstention_phrases(load_template(agent_cfg.template), list(agent_cfg.abstention_phrases))


def _as_ids(out: Any) -> list[int]:
    # transformers 5 returns a BatchEncoding from apply_chat_template(tokenize=True); older ones a list.
    if hasattr(out, "keys"):
        out = out["input_ids"]
    if out and isinstance(out[0], list):
        out = out[0]
    return [int(i) for i in out]


def encode_environment(tokenizer: Any, text: str) -> list[int]:
    """Token ids of environment text (an information block) as plain text: a passage that quotes a special
    token's string (`<|im_end|>`, `<|im_start|>`) gets the string's ordinary tokens, not the special id, which
    would end the model's turn or open a fake one in its context (a template's own information prefix and
    suffix are plain text too)."""
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def render_prompt(template: Template, question: str, tokenizer: Any) -> list[int]:
    """Prompt token ids: through the tokenizer's chat template (with the generation prompt) when it has
    one, else the plain text (system prompt, blank line, worked examples, user message, blank line) with the
    tokenizer's own special tokens (a base model's <bos>). The chat template is rendered as
    `apply_chat_template` renders it, within a time and size bound (awarl.agent.chat_template: it is code
    that came with the model)."""
    if getattr(tokenizer, "chat_template", None):
        text = render_chat_template(tokenizer, template.messages(question), add_generation_prompt=True)
        return _as_ids(tokenizer(text, add_special_tokens=False)["input_ids"])
    text = "".join(f"{template.user_message(ex.question)}\n\n{ex.response}\n\n" for ex in template.examples)
    # The response starts after a blank line, as in the worked examples: a base model (no chat template, no
    # turn markers) given a prompt that ends on the question continues the question's text instead.
    text += template.user_message(question) + "\n\n"
    if template.system_prompt:
        text = f"{template.system_prompt}\n\n{text}"
    return _as_ids(tokenizer(text, add_special_tokens=True)["input_ids"])
