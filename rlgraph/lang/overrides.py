"""`-s path.to.key=value` overrides, applied to the merged blocks like one more file.

The path names a block, then keys: `train.steps`, `data.batch_size`,
`actor.optim.lr` (a declared name) or `role.actor.optim.lr` (kind and name).
The value is written as in a spec: `1e-6`, `80GiB`, `"text"`, `true`, `[1, 2]`.
Each override is shown to diagnostics as its own one-line source, so a bad
value points into the override itself.
"""

from __future__ import annotations

import difflib
from dataclasses import replace

from lark import UnexpectedInput

from rlgraph.diagnostics import Diagnostic, Span, error
from rlgraph.lang import ast
from rlgraph.lang.loader import Loaded, _merge
from rlgraph.lang.parser import parse_value
from rlgraph.lang.schema import BLOCKS

UNNAMED_BLOCKS = tuple(name for name, schema in BLOCKS.items() if not schema.named)


def override_source_name(index: int) -> str:
    return f"<override {index}>"


def _find_block(blocks: list[ast.Block], parts: list[str]) -> tuple[ast.Block | None, list[str]]:
    """Match `kind.name.keys`, `name.keys` or `kind.keys` (unnamed blocks) against the blocks."""
    if len(parts) >= 2:
        for block in blocks:
            if block.keyword == parts[0] and block.name == parts[1]:
                return block, parts[2:]
    for block in blocks:
        if block.name is not None and block.name == parts[0]:
            return block, parts[1:]
    for block in blocks:
        if block.name is None and block.keyword == parts[0]:
            return block, parts[1:]
    return None, parts


def _nest(keys: list[str], value: ast.Value, span: Span) -> ast.Assign | ast.Block:
    """`optim.lr`, value -> `optim { lr = value }`: the same shape a file would have."""
    if len(keys) == 1:
        return ast.Assign(keys[0], value, span, span)
    return ast.Block(keys[0], None, (_nest(keys[1:], value, span),), span, span)


def apply_overrides(loaded: Loaded, overrides: list[str]) -> None:
    for index, text in enumerate(overrides, 1):
        name = override_source_name(index)
        loaded.sources[name] = text
        problem = _apply_one(loaded, text, name)
        if problem:
            loaded.diagnostics.append(problem)


def _apply_one(loaded: Loaded, text: str, name: str) -> Diagnostic | None:
    whole = Span(name, 1, 1, 1, max(len(text), 1) + 1)
    example = "write `-s key.path=value`, e.g. `-s train.steps=50` or `-s actor.optim.lr=1e-6`"
    if "=" not in text:
        return error("bad-override", f"override `{text}` has no `=`", whole, example)
    path, value_text = text.split("=", 1)
    path_span = Span(name, 1, 1, 1, len(path) + 1)
    parts = path.strip().split(".")
    if not path.strip() or any(not p.strip() for p in parts):
        return error("bad-override", f"override `{text}` has an empty key path", path_span, example)
    if not value_text.strip():
        return error("bad-override", f"override `{path}` has no value after `=`",
                     Span(name, 1, len(path) + 1, 1, len(path) + 2), example)
    try:
        value = parse_value(" " * (len(path) + 1) + value_text, name)
    except UnexpectedInput as exc:
        column = (getattr(exc, "column", None) or len(path) + 2)
        return error("bad-override", f"cannot read the value `{value_text}` of override `{path}`",
                     Span(name, 1, column, 1, len(text) + 1),
                     "values are written as in a spec: 1e-6, 80GiB, \"text\", true, [1, 2], or a bare name")
    block, keys = _find_block(loaded.blocks, parts)
    if block is None and parts[0] in UNNAMED_BLOCKS:  # `-s train.steps=5` works without a `train` block
        block = ast.Block(parts[0], None, (), path_span, path_span)
        loaded.blocks.append(block)
        keys = parts[1:]
    if block is None:
        names = sorted({b.name or b.keyword for b in loaded.blocks})
        close = difflib.get_close_matches(parts[0], names, n=1)
        return error("bad-override", f"override `{path}` names no block: there is no `{parts[0]}`", path_span,
                     f"did you mean `{close[0]}`?" if close else "",
                     "blocks in this spec: " + ", ".join(f"`{n}`" for n in names))
    if not keys:
        return error("bad-override", f"override `{path}` names a whole block, not a key", path_span,
                     f"add the key to set, e.g. `{path}.<key>=...`")
    index = loaded.blocks.index(block)
    patch = replace(block, entries=(_nest(keys, value, Span(name, 1, 1, 1, len(path) + 1)),))
    loaded.blocks[index] = replace(_merge(block, patch), span=block.span)
    return None
