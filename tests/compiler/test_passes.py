"""rlgraph/compiler/passes/__init__.py: the passes in order, clean on the shipped spec, robust to broken specs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlgraph.compiler import compile_spec
from rlgraph.compiler.passes import PASSES

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "specs").glob("*.rl"))
GOLDEN = sorted((Path(__file__).parent / "golden").glob("*.rl"))


def test_passes_are_listed_once_in_order():
    assert [p.__name__ for p in PASSES] == ["paths", "resolve", "rewards", "judges", "dataflow", "roles", "algorithm",
                                            "user_functions", "batch", "offload", "asynchrony", "sampling", "training",
                                            "environments", "runtime_support"]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_specs_have_no_diagnostics(path):
    result = compile_spec(str(path))
    assert result.diagnostics == []


@pytest.mark.parametrize("path", [ROOT / "specs" / "ppo_arith.rl"] + GOLDEN, ids=lambda p: p.stem)
def test_passes_never_raise_on_a_spec_missing_any_one_line(path, tmp_path):
    lines = path.read_text().splitlines(keepends=True)
    for i in range(len(lines)):
        broken = tmp_path / f"without_{i + 1}.rl"
        broken.write_text("".join(lines[:i] + lines[i + 1:]))
        compile_spec(str(broken))  # must report, not raise


def test_checking_imports_no_torch_ray_or_transformers():
    code = ("import sys; from rlgraph.compiler import compile_spec; compile_spec(sys.argv[1]); "
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "specs" / "ppo_arith.rl")],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
