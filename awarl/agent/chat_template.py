"""A tokenizer's chat template rendered under a time and a size bound.

A chat template is a Jinja program that comes with the model: a GGUF file, a hub checkpoint. transformers
renders it in Jinja's sandbox, which keeps it from reaching Python but not from running long or growing large:
two nested `range(100000)` loops that print hang the first prompt and grow memory by gigabytes. awarl renders
it here instead, the way transformers does (the same sandbox, options, filters and globals, so the text is the
same; tests compare the two), with three bounds:

- the output: rendering stops once the text passes `MAX_RENDER_CHARS` (chunks are checked as the template
  yields them);
- the time: `MAX_RENDER_SECONDS`, checked between chunks and, on the main thread, by a timer signal that also
  stops a loop which yields nothing;
- single values: `*`, `**` and `+` refuse to build a string or list longer than `MAX_RENDER_CHARS` or a
  number of more than `MAX_INT_BITS` bits, which one expression could otherwise allocate at once.

A template that passes a bound raises ChatTemplateError naming the bound; prompts are small (a system prompt,
a question, a few worked examples), so a real template never comes near them.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from functools import lru_cache
from typing import Any

MAX_RENDER_CHARS = 2_000_000
MAX_RENDER_SECONDS = 5.0
MAX_INT_BITS = 4096


class ChatTemplateError(ValueError):
    """A chat template that cannot be rendered within the bounds, or fails; the message says which."""


class _TooLong(Exception):
    pass


class _Timeout(Exception):
    pass


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, list, tuple)) else None


@lru_cache(maxsize=16)
def _compile(source: str) -> Any:
    """The template compiled as transformers compiles it (chat_template_utils), in a sandbox whose `*`, `**`
    and `+` are bounded."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """`{% generation %}...{% endgeneration %}` (transformers' assistant-mask tag): renders its body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            a, b = _size(left), _size(right)
            if operator == "*":
                for size, n in ((a, right), (b, left)):
                    if size is not None and isinstance(n, int) and size * n > MAX_RENDER_CHARS:
                        raise _TooLong(f"a value of {size * n:,} items (more than {MAX_RENDER_CHARS:,})")
            if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 \
                    and max(abs(left), 1).bit_length() * right > MAX_INT_BITS:
                raise _TooLong(f"a number of more than {MAX_INT_BITS} bits")
            if operator == "+" and a is not None and b is not None and a + b > MAX_RENDER_CHARS:
                raise _TooLong(f"a value of more than {MAX_RENDER_CHARS:,} items")
            return super().call_binop(context, operator, left, right)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise _Timeout in the main thread after `seconds` (a loop that yields nothing is stopped too); a no-op
    elsewhere, and where a real-time timer is already armed (a test runner's timeout, say: it must not be
    cancelled), where only the checks between chunks apply."""
    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield
        return

    def ring(signum: int, frame: Any) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def render_chat_template(tokenizer: Any, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                         max_chars: int = MAX_RENDER_CHARS, max_seconds: float = MAX_RENDER_SECONDS) -> str:
    """The text `tokenizer.apply_chat_template(messages, add_generation_prompt=..., tokenize=False)` gives,
    rendered within the bounds (module docstring); ChatTemplateError when the template passes one or fails."""
    import jinja2

    source = tokenizer.get_chat_template()
    what = f"the chat template of {getattr(tokenizer, 'name_or_path', None) or 'the tokenizer'}"
    try:
        template = _compile(source)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"{what} does not compile: {e}") from None
    kwargs = {**tokenizer.special_tokens_map, "messages": messages, "tools": None, "documents": None,
              "add_generation_prompt": add_generation_prompt}
    chunks: list[str] = []
    total, t0 = 0, time.monotonic()
    try:
        with _alarm(max_seconds):
            for chunk in template.generate(**kwargs):
                chunks.append(chunk)
                total += len(chunk)
                if total > max_chars:
                    raise _TooLong(f"more than {max_chars:,} characters of prompt")
                if time.monotonic() - t0 > max_seconds:
                    raise _Timeout
    except _TooLong as e:
        raise ChatTemplateError(f"{what} was stopped: it builds {e} (a prompt is a few thousand); a template "
                                "that loops without end?") from None
    except _Timeout:
        raise ChatTemplateError(f"{what} was stopped after {max_seconds:g} s (a prompt takes milliseconds); a "
                                "template that loops without end?") from None
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"{what} failed: {e}") from None
    return "".join(chunks)
