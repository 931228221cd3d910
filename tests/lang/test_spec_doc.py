"""docs/spec.md's tables of blocks, keys, calls and error codes are generated from the code.

The sections between `<!-- BEGIN GENERATED name -->` and `<!-- END GENERATED name -->`
are rendered from rlgraph.lang.schema, rlgraph.compiler.builtins and
rlgraph.diagnostics.CODES. The test fails when the doc is out of date; rewrite it with

    RLGRAPH_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/lang/test_spec_doc.py
    # or: .venv/bin/python tests/lang/test_spec_doc.py
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from rlgraph.compiler import compile_spec
from rlgraph.compiler.builtins import REWARD_CALL, ROLE_METHODS, TRANSFORMS, Signature
from rlgraph.diagnostics import CODES
from rlgraph.lang import schema
from rlgraph.lang.formatter import format_text
from rlgraph.lang.schema import BLOCKS, LORA, OPTIM, ROLE_KEYS, ROLLOUT_VAL, Key

DOC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"
SECTION = re.compile(r"(<!-- BEGIN GENERATED (\w+) -->\n)(.*?)(<!-- END GENERATED \2 -->)", re.S)


# ---- rendering ------------------------------------------------------------------------


def _number(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _range(low, high) -> str:
    if low is not None and high is not None:
        return f" {_number(low)}–{_number(high)}"
    return f" >= {_number(low)}" if low is not None else f" <= {_number(high)}" if high is not None else ""


def _type(t) -> str:
    if isinstance(t, schema.Int):
        return "integer" + _range(t.min, t.max)
    if isinstance(t, schema.Float) and t.min_exclusive:  # top_p, timeout_s: 0 itself is no value
        return f"number > {_number(t.min)}" + (f", <= {_number(t.max)}" if t.max is not None else "")
    if isinstance(t, schema.Float):
        return "number" + _range(t.min, t.max)
    if isinstance(t, schema.Bytes):
        return "bytes (`80GiB`)"
    if isinstance(t, schema.Count):
        return "count (`7B`)"
    if isinstance(t, schema.Str):
        return "string"
    if isinstance(t, schema.Files):
        return "string or list of strings"
    if isinstance(t, schema.TopK):
        return "integer >= 0, or -1 (= 0)"
    if isinstance(t, schema.Bool):
        return "`true` / `false`"
    if isinstance(t, schema.Choice):
        return " \\| ".join(f"`{o}`" for o in t.options)
    if isinstance(t, schema.Ref):
        return f"{t.target} name"
    if isinstance(t, schema.FieldNames):
        return "list of field names (`[scores]`)"
    if isinstance(t, schema.Names):
        return "string or list of strings"
    if isinstance(t, schema.ListOf):
        size = f"{t.length} " if t.length is not None else ""
        return f"list of {size}({_type(t.item)})"
    return type(t).__name__


def _default(key: Key) -> str:
    if key.required:
        return "required"
    if key.default is None:
        return "—"
    if isinstance(key.default, bool):
        return f"`{str(key.default).lower()}`"
    if isinstance(key.default, list):
        return "`[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in key.default) + "]`"
    if isinstance(key.default, float):
        return f"`{key.default:g}`"
    return f"`{key.default}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def key_table(keys: dict[str, Key]) -> str:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{name}` | {_type(key.type)} | {_default(key)} | {_cell(key.doc)} |" for name, key in keys.items()]
    return "\n".join(rows) + "\n"


def blocks_section() -> str:
    out = []
    for keyword, block in BLOCKS.items():
        if keyword == "role":
            continue
        head = f"{keyword} NAME {{ ... }}" if block.named else f"{keyword} {{ ... }}"
        out += [f"#### `{head}`", "", block.doc[0].upper() + block.doc[1:] + ".", "", key_table(block.keys)]
    return "\n".join(out)


def roles_section() -> str:
    out = []
    for kind, keys in ROLE_KEYS.items():
        out += [f"#### `kind = {kind}`", "", key_table(keys)]
    out += ["#### `optim { ... }` (actor and critic)", "", OPTIM.doc[0].upper() + OPTIM.doc[1:] + ".", "",
            key_table(OPTIM.keys)]
    out += ["#### `lora { ... }` (actor)", "", LORA.doc[0].upper() + LORA.doc[1:] + ".", "",
            key_table(LORA.keys)]
    out += ["#### `val { ... }` (rollout)", "", ROLLOUT_VAL.doc[0].upper() + ROLLOUT_VAL.doc[1:] + ".", "",
            key_table(ROLLOUT_VAL.keys)]
    return "\n".join(out)


def _shape(signature: Signature, label: str) -> str:
    inputs = ", ".join(p.name + ("?" if p.optional else "") for p in signature.inputs) or "nothing"
    outputs = ", ".join(p.name for p in signature.outputs)
    return f"{inputs} -> {label}" + (f" -> {outputs}" if outputs else "")


def _call(signature: Signature, label: str) -> list[str]:
    out = [f"`{_shape(signature, label)}`", "", signature.doc[0].upper() + signature.doc[1:] + "."]
    if signature.min_outputs is not None and signature.min_outputs < len(signature.outputs):
        out[-1] += f" The first {signature.min_outputs} output(s) are required, the rest optional."
    out.append("")
    if signature.kwargs:
        out.append(key_table(signature.kwargs))
    return out


def calls_section() -> str:
    out = ["#### Role calls", "", "Written with the role's name, `ROLE.method`; listed here by the role's kind.", ""]
    for kind, methods in ROLE_METHODS.items():
        for method, signature in methods.items():
            out += _call(signature, f"{kind}.{method}")
    out += ["#### Rewards", ""] + _call(REWARD_CALL, "NAME")
    out += ["#### Built-in transforms", ""]
    for name, signature in TRANSFORMS.items():
        out += _call(signature, name)
    return "\n".join(out)


def codes_section() -> str:
    rows = ["| code | severity | meaning |", "|---|---|---|"]
    rows += [f"| `{code.name}` | {code.severity} | {_cell(code.summary)} |" for code in CODES.values()]
    return "\n".join(rows) + "\n"


GENERATORS = {"blocks": blocks_section, "roles": roles_section, "calls": calls_section, "codes": codes_section}


def rendered(doc: str) -> str:
    """The doc with every generated section rendered afresh."""
    return SECTION.sub(lambda m: m.group(1) + "\n" + GENERATORS[m.group(2)]() + "\n" + m.group(4), doc)


# ---- the test ----------------------------------------------------------------------------


def test_every_generated_section_has_a_generator():
    names = [m.group(2) for m in SECTION.finditer(DOC.read_text())]
    assert sorted(names) == sorted(GENERATORS)


def test_doc_is_up_to_date():
    doc = DOC.read_text()
    fresh = rendered(doc)
    if os.environ.get("RLGRAPH_UPDATE_GOLDEN") == "1":
        DOC.write_text(fresh)
    assert doc == fresh or os.environ.get("RLGRAPH_UPDATE_GOLDEN") == "1", (
        "docs/spec.md is out of date: run "
        "`RLGRAPH_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/lang/test_spec_doc.py`")


def test_every_block_key_and_code_is_documented():
    doc = DOC.read_text()
    for keyword, block in BLOCKS.items():
        assert f"`{keyword}" in doc
        for key in block.keys:
            assert f"`{key}`" in doc, key
    for code in CODES:
        assert f"`{code}`" in doc, code


def _examples(doc: str) -> list[str]:
    return [block for block in re.findall(r"^```\n(.*?)^```", doc, re.S | re.M) if block.startswith("rlgraph 1")]


def test_the_examples_are_formatted_and_the_first_one_checks(tmp_path):
    examples = _examples(DOC.read_text())
    assert len(examples) >= 2
    for example in examples:
        assert format_text(example, "doc.rl") == example
    path = tmp_path / "first.rl"
    path.write_text(examples[0])
    result = compile_spec(str(path))
    assert result.ok, [d.message for d in result.diagnostics]


if __name__ == "__main__":
    DOC.write_text(rendered(DOC.read_text()))
    sys.exit(0)
