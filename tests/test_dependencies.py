"""pyproject's floors are releases that have what the code calls.

An install that meets a floor too low for the code fails on a GPU machine, not here (the CPU machine has newer
releases): transformers 4.45-4.55 takes `dtype=` as an unknown keyword and loads every model in float32; torch
before 2.6 has no `torch.distributed.fsdp.fully_shard` (FSDP2 lived in `torch.distributed._composable.fsdp`).
No older release is installed here, so the tests read the code and the floors, not a run against them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = [p for folder in ("rlgraph", "bench") for p in (ROOT / folder).rglob("*.py")]


def floor(package: str) -> tuple[int, ...]:
    """The `package>=X.Y` floor of the run extra, as numbers."""
    run = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["run"]
    (version,) = [m.group(1) for r in run if (m := re.fullmatch(rf"{package}>=([\d.]+)", r.replace(" ", "")))]
    return tuple(int(part) for part in version.split("."))


def calls(pattern: str) -> list[str]:
    return [f"{p.relative_to(ROOT)}" for p in CODE if re.search(pattern, p.read_text())]


def test_the_transformers_floor_takes_dtype_as_the_code_passes_it():
    assert calls(r"\bdtype\s*=") and not calls(r"\btorch_dtype\s*=")  # the 4.56+ name, everywhere
    assert floor("transformers") >= (4, 56)


def test_the_torch_floor_has_fsdp2_where_the_code_imports_it():
    assert calls(r"from torch\.distributed\.fsdp import [^\n]*\bfully_shard\b")
    assert floor("torch") >= (2, 6)
