"""Trajectory parser: a state machine over the response's tag stream -> ParsedTrajectory.

A lexer splits the response into protocol tags and text; a small state machine walks that stream and
records searches, shown passage numbers, citations and the answer, or the first protocol violation.
It never raises: any string gets a verdict. Only the response (never the prompt) is parsed, because
prompts such as Search-R1's contain an example `<answer>`.

Rules (the first violation found is the `invalid_reason`):
- blocks do not nest ("nested tag"); a close tag must match the open block ("tags out of order");
- `<information>` is environment output: it must directly follow a `</search>` ("tags out of order");
- more than `max_turns` searches: "search beyond max turns"; an empty query: "empty search";
- `<cite>` holds passage numbers as models write them (`awarl.agent.citations.read_citations`: `2, 5`,
  `1 and 2`, `[1][2]`, `passages 1-3`, full-width digits, ...). Citation faults are not protocol breaks:
  a block that cannot be read cites nothing and its text is listed in `malformed_citations`; a number
  no earlier information block showed is kept in `citations` and listed in `unshown_citations` (the
  citation reward judges citations against every passage the trajectory retrieved: a number never shown
  supports nothing, one shown only by a later search is judged as that passage);
- the response ends after `</answer>` (whitespace only, "text after </answer>"). The rollout engine hands
  the parser each turn cut right after the stop string that ended it, so the trailing text of a token that
  completed `</answer>` (`>.` in Qwen's vocabulary) never reaches this rule; the answer is non-empty
  ("empty answer"); every block is closed ("unclosed tag"); an answer exists ("no answer"). Bracketed
  passage markers inside the answer (`Paris [1]`) are not part of it (`strip_inline_citations`);
- with `require_citations`, a non-abstaining answer needs a `<cite>` block ("missing citations").
Free text outside blocks is allowed (released checkpoints write some).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from awarl.agent.citations import read_citations, strip_inline_citations
from awarl.metrics import is_abstention

_DEFAULT_TAGS = {"think": "think", "search": "search", "information": "information", "cite": "cite",
                 "answer": "answer"}
_DEFAULT_NUMBER = re.compile(r"\[(\d+)\] Title:")


@dataclass
class ParsedTrajectory:
    searches: list[str] = field(default_factory=list)
    shown: list[int] = field(default_factory=list)      # passage numbers from <information> blocks
    citations: list[int] = field(default_factory=list)
    unshown_citations: list[int] = field(default_factory=list)  # cited numbers no information block showed
    malformed_citations: list[str] = field(default_factory=list)  # <cite> contents that name no passage numbers
    answer: str | None = None
    abstained: bool = False
    valid: bool = False
    invalid_reason: str | None = None
    num_turns: int = 0                                   # model turns: information blocks + 1


def lex(text: str, names: Sequence[str]) -> list[tuple[str, str]]:
    """Split into ("open", name) / ("close", name) / ("text", chunk) tokens for the given tag names."""
    alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    out: list[tuple[str, str]] = []
    pos = 0
    for m in re.finditer(rf"<(/?)({alt})>", text):
        if m.start() > pos:
            out.append(("text", text[pos:m.start()]))
        out.append(("close" if m.group(1) else "open", m.group(2)))
        pos = m.end()
    if pos < len(text):
        out.append(("text", text[pos:]))
    return out


class _Walker:
    """The state machine of `parse_trajectory` over the lexer's tokens; records the first violation."""

    def __init__(self, role_of: dict[str, str], max_turns: int, number_re: re.Pattern[str]) -> None:
        self.role_of, self.max_turns, self.number_re = role_of, max_turns, number_re
        self.out = ParsedTrajectory()
        self.reason: str | None = None
        self.state: str | None = None        # role of the open block, None outside blocks
        self.buf: list[str] = []
        self.done = False                    # seen </answer>
        self.last_closed: str | None = None  # role of the previous block, if only whitespace since
        self.info_blocks = 0
        self.tail_after_info = False         # any non-whitespace model text after the last information block
        self.cited = False

    def fail(self, why: str) -> None:
        if self.reason is None:
            self.reason = why

    def text(self, value: str) -> None:
        if self.state is not None:
            self.buf.append(value)
        elif value.strip():
            if self.done:
                self.fail("text after </answer>")
            self.last_closed = None
            self.tail_after_info = True

    def tag(self, kind: str, name: str) -> None:
        role = self.role_of[name]
        if self.done:
            self.fail("text after </answer>")
        elif kind == "open":
            self.open(role)
        elif self.state is None or self.state != role:
            self.fail("tags out of order")
        else:
            content = "".join(self.buf)
            self.state, self.buf, self.last_closed = None, [], role
            self.close(role, content)

    def open(self, role: str) -> None:
        if self.state is not None:
            self.fail("nested tag")
            return
        if role == "information" and self.last_closed != "search":
            self.fail("tags out of order")
        if role != "information":
            self.tail_after_info = True
        self.state, self.buf = role, []

    def close(self, role: str, content: str) -> None:
        out = self.out
        if role == "search":
            out.searches.append(content.strip())
            if not content.strip():
                self.fail("empty search")
            if len(out.searches) > self.max_turns:
                self.fail("search beyond max turns")
        elif role == "information":
            self.info_blocks += 1
            self.tail_after_info = False
            out.shown.extend(int(m.group(1)) for m in self.number_re.finditer(content))
        elif role == "cite":
            self.cited = True
            nums = read_citations(content)
            if nums is None:
                out.malformed_citations.append(content.strip())
            else:
                out.citations.extend(nums)
                out.unshown_citations.extend(n for n in nums if n not in out.shown)
        elif role == "answer":
            out.answer = strip_inline_citations(content.strip())
            self.done = True
            if not out.answer:
                self.fail("empty answer")

    def finish(self, response_text: str, phrases: Sequence[str], require_citations: bool) -> None:
        out = self.out
        if self.state is not None:
            self.fail("unclosed tag")
        elif out.answer is None:
            self.fail("no answer")
        out.abstained = is_abstention(out.answer, phrases)
        if require_citations and out.answer and not out.abstained and not self.cited:
            self.fail("missing citations")
        spoke = self.tail_after_info or self.info_blocks == 0 and response_text.strip()
        out.num_turns = self.info_blocks + (1 if spoke else 0)


def parse_trajectory(response_text: str, *, max_turns: int, phrases: Sequence[str],
                     require_citations: bool = False, tags: dict[str, str] | None = None,
                     passage_pattern: re.Pattern[str] | None = None) -> ParsedTrajectory:
    """Parse one response. `tags` maps role -> tag name (default: the protocol names); `passage_pattern`
    finds passage numbers in information blocks (group 1; default `[n] Title:`)."""
    tag_of = {**_DEFAULT_TAGS, **(tags or {})}
    role_of = {name: role for role, name in tag_of.items()}
    w = _Walker(role_of, max_turns, passage_pattern or _DEFAULT_NUMBER)
    try:
        for kind, value in lex(response_text, list(role_of)):
            if kind == "text":
                w.text(value)
            else:
                w.tag(kind, value)
        w.finish(response_text, phrases, require_citations)
    except Exception as e:  # pragma: no cover - a bug must not crash a training run; report it instead
        w.fail(f"parser error: {type(e).__name__}")
    w.out.valid = w.reason is None
    w.out.invalid_reason = w.reason
    return w.out
