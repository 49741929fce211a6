"""Trajectory parser: a state machine over the response's tag stream -> ParsedTrajectory.

A lexer splits the response into protocol tags and text; a small state machine walks that stream and
records searches, shown passage numbers, citations and the answer, or the first protocol violation.
It never raises: any string gets a verdict. Only the response (never the prompt) is parsed, because
prompts such as Search-R1's contain an example `<answer>`.

Rules (the first violation found is the `invalid_reason`):
- blocks do not nest ("nested tag"); a close tag must match the open block ("tags out of order");
- `<information>` is environment output: it must directly follow a `</search>` ("tags out of order");
- more than `max_turns` searches: "search beyond max turns"; an empty query: "empty search";
- `<cite>` holds comma/space separated passage numbers ("malformed citation"), each one shown in an
  earlier information block ("cited passage never shown");
- the response ends after `</answer>` (whitespace only, "text after </answer>"); the answer is non-empty
  ("empty answer"); every block is closed ("unclosed tag"); an answer exists ("no answer");
- with `require_citations`, a non-abstaining answer needs a `<cite>` block ("missing citations").
Free text outside blocks is allowed (released checkpoints write some).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

try:
    from awarl.metrics import is_abstention as _is_abstention
except ImportError:  # pragma: no cover - metrics always ships it; kept so the parser stands alone
    _is_abstention = None

_DEFAULT_TAGS = {"think": "think", "search": "search", "information": "information", "cite": "cite",
                 "answer": "answer"}
_DEFAULT_NUMBER = re.compile(r"\[(\d+)\] Title:")
_CITE_SPLIT = re.compile(r"[\s,;]+")


@dataclass
class ParsedTrajectory:
    searches: list[str] = field(default_factory=list)
    shown: list[int] = field(default_factory=list)      # passage numbers from <information> blocks
    citations: list[int] = field(default_factory=list)
    answer: str | None = None
    abstained: bool = False
    valid: bool = False
    invalid_reason: str | None = None
    num_turns: int = 0                                   # model turns: information blocks + 1


def _abstained(answer: str | None, phrases: Sequence[str]) -> bool:
    if _is_abstention is not None:
        return _is_abstention(answer, phrases)
    return False  # pragma: no cover


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


def _parse_citations(content: str) -> list[int] | None:
    parts = [p.strip("[]") for p in _CITE_SPLIT.split(content.strip()) if p]
    if not parts or not all(p.isdigit() and p.isascii() for p in parts):
        return None
    return [int(p) for p in parts]


def parse_trajectory(response_text: str, *, max_turns: int, phrases: Sequence[str],
                     require_citations: bool = False, tags: dict[str, str] | None = None,
                     passage_pattern: re.Pattern[str] | None = None) -> ParsedTrajectory:
    """Parse one response. `tags` maps role -> tag name (default: the protocol names); `passage_pattern`
    finds passage numbers in information blocks (group 1; default `[n] Title:`)."""
    tag_of = {**_DEFAULT_TAGS, **(tags or {})}
    role_of = {name: role for role, name in tag_of.items()}
    number_re = passage_pattern or _DEFAULT_NUMBER
    out = ParsedTrajectory()
    reason: str | None = None

    def fail(why: str) -> None:
        nonlocal reason
        if reason is None:
            reason = why

    state: str | None = None          # role of the open block, None outside blocks
    buf: list[str] = []
    done = False                      # seen </answer>
    last_closed: str | None = None    # role of the previous block, if only whitespace since
    info_blocks = 0
    tail_after_info = False           # any non-whitespace model text after the last information block
    cited = False

    try:
        for kind, value in lex(response_text, list(role_of)):
            if kind == "text":
                if state is not None:
                    buf.append(value)
                elif value.strip():
                    if done:
                        fail("text after </answer>")
                    last_closed = None
                    tail_after_info = True
                continue
            role = role_of[value]
            if done:
                fail("text after </answer>")
                continue
            if kind == "open":
                if state is not None:
                    fail("nested tag")
                    continue
                if role == "information" and last_closed != "search":
                    fail("tags out of order")
                if role != "information":
                    tail_after_info = True
                state, buf = role, []
                continue
            # close tag
            if state is None or state != role:
                fail("tags out of order")
                continue
            content = "".join(buf)
            state, buf = None, []
            last_closed = role
            if role == "search":
                out.searches.append(content.strip())
                if not content.strip():
                    fail("empty search")
                if len(out.searches) > max_turns:
                    fail("search beyond max turns")
            elif role == "information":
                info_blocks += 1
                tail_after_info = False
                out.shown.extend(int(m.group(1)) for m in number_re.finditer(content))
            elif role == "cite":
                cited = True
                nums = _parse_citations(content)
                if nums is None:
                    fail("malformed citation")
                else:
                    out.citations.extend(nums)
                    if any(n not in out.shown for n in nums):
                        fail("cited passage never shown")
            elif role == "answer":
                out.answer = content.strip()
                done = True
                if not out.answer:
                    fail("empty answer")
        if state is not None:
            fail("unclosed tag")
        elif out.answer is None:
            fail("no answer")
        out.abstained = _abstained(out.answer, phrases)
        if require_citations and out.answer and not out.abstained and not cited:
            fail("missing citations")
        out.num_turns = info_blocks + (1 if tail_after_info or info_blocks == 0 and response_text.strip() else 0)
    except Exception as e:  # pragma: no cover - a bug must not crash a training run; report it instead
        fail(f"parser error: {type(e).__name__}")
    out.valid = reason is None
    out.invalid_reason = reason
    return out
