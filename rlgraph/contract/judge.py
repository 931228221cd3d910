"""An LLM judge's prompt template and verdict parsers: what `check` reads and the judge worker runs.

A judge role (`role NAME { kind = judge ... }`) asks a model about each sample: its `template` (jinja2) is
rendered over the sample's fields (TEMPLATE_FIELDS) into the judge's prompt, the model generates a verdict,
and a `parser` turns the verdict into a score, or into None when the verdict holds none (it did not parse).

Parsers:
- `yes_no`: 1.0 for a verdict whose first word is yes (any case, punctuation around it), 0.0 for no.
- `tag:NAME`: the number inside the last `<NAME>...</NAME>` of the verdict (`tag:score` reads
  `<score>7</score>` as 7.0). A verdict cut before its closing tag does not parse.
- `module:function` or `file.py:function` (looked for as a reward's `fn` is): a user function called as
  fn(verdict, prompt, response, ground_truth), returning a number, or None for a verdict that holds none.

Pure Python with jinja2: the compiler imports it (no torch).
"""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import Any, Callable

# what a template may read of each sample (the reward function's arguments, and the prompt)
TEMPLATE_FIELDS = ("prompt", "response", "ground_truth", "data_source", "extra_info")
BUILTIN_PARSERS = ("yes_no", "tag:NAME")
TEMPLATE_FILE_SUFFIXES = (".jinja", ".j2", ".jinja2")  # a `template` ending so is a file, read from the spec's folder

_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_YES_NO = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)

Parser = Callable[[str, str, str, Any], "float | None"]


class JudgeVerdictError(Exception):
    """More verdicts of a batch than the judge's `max_invalid_fraction` allows hold no score, or its parser
    raised: a user's error (the template, the parser, the judge model), said without a traceback."""


class TemplateProblem(Exception):
    """A template that does not compile or reads a field a sample does not have: `line` is within the template."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


def is_template_file(template: str) -> bool:
    return template.endswith(TEMPLATE_FILE_SUFFIXES)


def template_text(template: str, base_dir: str | Path | None) -> str:
    """The template itself: `template` as written, or, when it names a .jinja/.j2 file, that file's text
    (a relative path from `base_dir`, the spec's folder). OSError for a file that cannot be read."""
    if not is_template_file(template):
        return template
    path = Path(template)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    return path.read_text()


def _environment() -> Any:
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    # StrictUndefined: a misspelt field is an error, not an empty string in every judge prompt. Sandboxed: a
    # template from someone else's spec reads the sample's fields, not Python's internals (`''.__class__`)
    return SandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def compile_template(text: str) -> Any:
    """The compiled template; TemplateProblem for a syntax error or a field that is not in TEMPLATE_FIELDS."""
    import jinja2
    from jinja2 import meta

    environment = _environment()
    try:
        parsed = environment.parse(text)
    except jinja2.TemplateSyntaxError as err:
        raise TemplateProblem(f"the judge's template does not parse: {err.message}", err.lineno or 1) from None
    unknown = meta.find_undeclared_variables(parsed) - set(TEMPLATE_FIELDS)
    if unknown:
        # the first one the template reads, at the line of its first use within {{ }} or {% %}
        line, name = next((line, value) for line, kind, value in environment.lex(text)
                          if kind == "name" and value in unknown)
        hint = f" (did you mean `{close[0]}`?)" if (close := difflib.get_close_matches(name, TEMPLATE_FIELDS, 1)) else ""
        raise TemplateProblem(f"the judge's template reads `{name}`, which a sample does not have{hint}", line)
    return environment.from_string(text)


def render(template: Any, *, prompt: str, response: str, ground_truth: Any, data_source: str = "",
           extra_info: Any = None) -> str:
    return template.render(prompt=prompt, response=response, ground_truth=ground_truth, data_source=data_source,
                           extra_info=extra_info if extra_info is not None else {})


def parser_problem(parser: str) -> str | None:
    """What is wrong with how `parser` is written, or None (a user function is found at run time)."""
    if parser == "yes_no":
        return None
    if parser.startswith("tag:"):
        tag = parser[len("tag:"):]
        return None if _TAG_NAME.fullmatch(tag) else f"`{parser}` names no tag: write it as `tag:score`"
    where, sep, attr = parser.rpartition(":")
    if sep and where and attr.isidentifier():
        return None
    return (f"`{parser}` is neither a built-in parser ({', '.join(BUILTIN_PARSERS)}) nor a function "
            "`module:function` / `file.py:function`")


def yes_no(verdict: str, *_: Any) -> float | None:
    match = _YES_NO.match(verdict)
    return None if match is None else float(match.group(1).lower() == "yes")


def tag_number(tag: str) -> Parser:
    pattern = re.compile(rf"<{re.escape(tag)}>\s*({_NUMBER})\s*</{re.escape(tag)}>", re.DOTALL)

    def parse(verdict: str, *_: Any) -> float | None:
        found = pattern.findall(verdict)
        return float(found[-1]) if found else None

    return parse


def builtin_parser(parser: str) -> Parser | None:
    """The built-in parser `parser` names, or None for a user function."""
    if parser == "yes_no":
        return yes_no
    if parser.startswith("tag:"):
        return tag_number(parser[len("tag:"):])
    return None


def as_verdict_score(value: Any) -> float | None:
    """A parser's answer as a score: a finite number (a bool counts as 0/1), else None (no usable score)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None
