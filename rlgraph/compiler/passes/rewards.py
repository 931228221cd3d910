"""Declared rewards: each is a function (`fn`) or a service (`url`), not both, with only its own kind's keys,
and a service's address is an http(s) URL. Checked as text: nothing is imported or contacted."""

from __future__ import annotations

from urllib.parse import urlsplit

from rlgraph.compiler.graph import StepGraph
from rlgraph.compiler.passes._common import names_python_object, quoted
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang.program import Decl, Program

FUNCTION_KEYS = ("batched", "workers")  # what only a reward function (`fn`) reads
SERVICE_KEYS = ("rows_per_request", "concurrency", "retries", "backoff_s")  # ... only a service (`url`)
_EXAMPLE_URL = "http://127.0.0.1:8000/score"


def rewards(program: Program, graph: StepGraph) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for reward in program.rewards.values():
        has_fn, has_url = reward.is_set("fn"), reward.is_set("url")
        if has_fn and has_url:
            fn_at, url_at = reward.span_of("fn"), reward.span_of("url")
            merged = (f"; `fn` comes from {fn_at.file}:{fn_at.line} (the blocks of an include merge): declare the "
                      "service under a name of its own and call that in the step") if fn_at.file != url_at.file else ""
            out.append(error("conflicting-keys", f"reward `{reward.name}` sets both `fn` and `url`", url_at,
                             "a reward is scored by a Python function (`fn`) or by a service over HTTP (`url`): "
                             f"keep one{merged}"))
        elif not has_fn and not has_url:
            out.append(error("missing-key", f"reward `{reward.name}` names no function and no service", reward.span,
                             'add `fn = "package.module:function"` (or `"path/to/file.py:function"`), or '
                             f'`url = "{_EXAMPLE_URL}"` for a service that scores the rows'))
        if has_fn:
            out += _function(reward, has_url)
        if has_url:
            out += _service(reward, has_fn)
    return out


def _function(reward: Decl, has_url: bool) -> list[Diagnostic]:
    fn = reward.get("fn") or ""
    if reward.is_valid("fn") and not names_python_object(fn):
        return [error("wrong-type", f"`{fn}` does not name a Python function", reward.span_of("fn"),
                      'write `fn = "package.module:function"` or `fn = "path/to/file.py:function"`')]
    return [] if has_url else _other_kind(reward, SERVICE_KEYS, "a service's (`url`)", "a function",
                                              FUNCTION_KEYS)


def _service(reward: Decl, has_fn: bool) -> list[Diagnostic]:
    out = [] if has_fn else _other_kind(reward, FUNCTION_KEYS, "a function's (`fn`)", "a service",
                                                    SERVICE_KEYS)
    if not reward.is_valid("url"):
        return out
    url = reward["url"]
    problem = _url_problem(url)
    if problem:
        reward.mark_invalid("url")  # planning leaves the reward out rather than hand a bad address to the run
        out.append(error("wrong-type", f"`{url}` is not a service address: {problem}", reward.span_of("url"),
                         f'write the full address of the service\'s scoring route, e.g. `url = "{_EXAMPLE_URL}"`'))
    return out


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is no number or out of range
    except ValueError as err:
        return str(err)
    if parts.scheme not in ("http", "https"):
        return f"the scheme is {parts.scheme or 'missing'}, not http or https"
    if not parts.hostname:
        return "it names no host"
    return None


def _other_kind(reward: Decl, keys: tuple[str, ...], whose: str, this: str, own: tuple[str, ...]) -> list[Diagnostic]:
    """A key of the other kind of reward, which this one would ignore."""
    return [error("reward-kind", f"`{key}` is {whose} key; reward `{reward.name}` is {this}", reward.span_of(key),
                  f"remove `{key}` (the keys of {this}: {quoted(('max_invalid_fraction', 'timeout_s') + own)})")
            for key in keys if reward.is_set(key)]
