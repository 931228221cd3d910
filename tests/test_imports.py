"""`check`, `fmt` and `plan` never import torch, ray or transformers (docs/architecture.md).

Each command runs in a fresh interpreter, through rlgraph.cli.main as the
`rlgraph` script does, and reports which heavy modules ended up in sys.modules.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("specs/*.rl"))
HEAVY = ("torch", "ray", "transformers")

SCRIPT = """
import contextlib, io, json, sys
from rlgraph.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(json.loads(sys.argv[1]))
print(json.dumps({"code": code, "heavy": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)

COMMANDS = {
    "check": ["check", *SPECS],
    "fmt": ["fmt", "--check", *SPECS],
    "plan": ["plan", "specs/ppo_arith.rl"],
}


@pytest.mark.parametrize("name", COMMANDS)
def test_command_imports_nothing_heavy(name):
    if name == "plan" and importlib.util.find_spec("rlgraph.commands.plan") is None:
        pytest.skip("rlgraph.commands.plan does not exist yet")
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(COMMANDS[name])], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [], f"`rlgraph {name}` imported {result['heavy']}"
    assert result["code"] == 0
