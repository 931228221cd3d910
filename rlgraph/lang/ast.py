"""The spec's syntax tree: frozen dataclasses, each carrying the Span of its text.

This is the parser's output before any meaning is given to it: blocks are
generic `key = value` containers; rlgraph/lang/schema.py says which keys exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from rlgraph.diagnostics import Span

# ---- values -------------------------------------------------------------------


@dataclass(frozen=True)
class Number:
    value: float | int
    unit: str | None  # "GiB", "B" (billion), ... ; None for a plain number
    text: str
    span: Span


@dataclass(frozen=True)
class String:
    value: str
    span: Span


@dataclass(frozen=True)
class Bool:
    value: bool
    span: Span


@dataclass(frozen=True)
class Ident:
    """A bare word used as a value: `cpu`, `hf`, `k3`, or a reference to a declared name."""

    value: str
    span: Span


@dataclass(frozen=True)
class List:
    items: tuple["Value", ...]
    span: Span


Value = Union[Number, String, Bool, Ident, List]

# ---- blocks -------------------------------------------------------------------


@dataclass(frozen=True)
class Assign:
    key: str
    value: Value
    span: Span  # the whole `key = value`
    key_span: Span


@dataclass(frozen=True)
class Block:
    """`keyword name { entries }` at the top level, or `keyword { entries }` nested."""

    keyword: str
    name: str | None
    entries: tuple[Union[Assign, "Block"], ...]
    span: Span
    keyword_span: Span
    name_span: Span | None = None

    def get(self, key: str):
        """The last entry with this key (later entries win), or None."""
        found = None
        for entry in self.entries:
            if (entry.key if isinstance(entry, Assign) else entry.keyword) == key:
                found = entry
        return found


# ---- the step -------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRef:
    name: str
    span: Span


@dataclass(frozen=True)
class Call:
    target: str  # a role name or a built-in / reward name
    method: str | None  # `generate` in `rollout.generate`; None for `gae(...)`
    kwargs: tuple[Assign, ...]
    span: Span
    target_span: Span
    method_span: Span | None = None

    @property
    def label(self) -> str:
        return f"{self.target}.{self.method}" if self.method else self.target


@dataclass(frozen=True)
class Flow:
    inputs: tuple[FieldRef, ...]
    call: Call
    outputs: tuple[FieldRef, ...]
    span: Span


@dataclass(frozen=True)
class Sync:
    source: FieldRef  # the trained role
    target: FieldRef  # the rollout
    span: Span


@dataclass(frozen=True)
class Step:
    statements: tuple[Union[Flow, Sync], ...]
    span: Span


# ---- files --------------------------------------------------------------------


@dataclass(frozen=True)
class Include:
    path: str
    span: Span


@dataclass(frozen=True)
class Header:
    version: Number
    span: Span


@dataclass(frozen=True)
class Comment:
    text: str
    span: Span


@dataclass(frozen=True)
class SpecFile:
    """One parsed file, in source order."""

    path: str
    header: Header | None
    items: tuple[Union[Include, Block, Step], ...]
    comments: tuple[Comment, ...] = field(default=())
