"""The checked, typed form of a spec: declarations with their values, defaults and spans.

Everything downstream (graph, passes, plan) reads a Program, never raw AST
blocks. Each value keeps the Span it came from, so a late pass can still point
at the text that set it; a defaulted value points at its block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlgraph.diagnostics import Span
from rlgraph.lang import ast


class InvalidValue(ValueError):
    """A read of a value the spec wrote wrongly (reported once, as `wrong-type`, where it was written).

    Reading it raises instead of handing out the default, so a check or plan step that depends on it is
    skipped rather than computed with a value the user never wrote (`n = 5.0` is not `n = 1`)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"`{key}` has a wrong value (reported where it is written)")
        self.key = key


class Values(dict):
    """A block's values; reading a key in `invalid` (by `[]` or `get`) raises InvalidValue.

    The default stays stored under an invalid key, so copies (`dict(values)`) keep the old shape."""

    def __init__(self, values=(), invalid=()) -> None:
        super().__init__(values)
        self.invalid = set(invalid)

    def __getitem__(self, key):
        if key in self.invalid:
            raise InvalidValue(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        if key in self.invalid:
            raise InvalidValue(key)
        return super().get(key, default)


@dataclass(frozen=True)
class Decl:
    keyword: str  # model | pool | role | reward | transform | loss | env | data | train
    name: str | None
    values: dict[str, Any]  # key -> value; nested blocks as dicts; defaults filled in
    spans: dict[str, Span]  # dotted key -> span of the value that set it
    span: Span  # the declaration's name (or keyword) in the text
    kind: str | None = None  # a role's kind

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        value = self.values.get(key)
        return default if value is None else value

    def span_of(self, key: str) -> Span:
        """Where `key` was set, or the declaration itself when it was defaulted."""
        return self.spans.get(key, self.span)

    def is_set(self, key: str) -> bool:
        return key in self.spans

    def is_valid(self, key: str) -> bool:
        """False when the spec wrote `key` with a wrong value (reading it raises InvalidValue)."""
        return key not in getattr(self.values, "invalid", ())

    def mark_invalid(self, key: str) -> None:
        """A later check found the value of `key` unusable (a model path that is not there): reported there,
        and from now on skipped by every check that reads it."""
        if isinstance(self.values, Values):
            self.values.invalid.add(key)


@dataclass
class Program:
    path: str
    sources: dict[str, str]
    models: dict[str, Decl] = field(default_factory=dict)
    pools: dict[str, Decl] = field(default_factory=dict)
    roles: dict[str, Decl] = field(default_factory=dict)
    rewards: dict[str, Decl] = field(default_factory=dict)
    transforms: dict[str, Decl] = field(default_factory=dict)  # user transforms (`transform NAME { fn = ... }`)
    losses: dict[str, Decl] = field(default_factory=dict)  # user policy losses (`loss NAME { fn = ... }`)
    envs: dict[str, Decl] = field(default_factory=dict)  # environments (`env NAME { class = ... }`)
    data: Decl | None = None
    train: Decl | None = None
    step: ast.Step | None = None

    def names(self) -> dict[str, Decl]:
        """Every named declaration, by name."""
        return {**self.models, **self.pools, **self.roles, **self.rewards, **self.transforms, **self.losses,
                **self.envs}
