"""The checked, typed form of a spec: declarations with their values, defaults and spans.

Everything downstream (graph, passes, plan) reads a Program, never raw AST
blocks. Each value keeps the Span it came from, so a late pass can still point
at the text that set it; a defaulted value points at its block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlgraph.diagnostics import Span
from rlgraph.spec import ast


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
