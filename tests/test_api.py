"""rlgraph.compile / Spec / run's refusals / load's errors: the Python API, without Ray or torch.

The API is the commands' own path: `rlgraph check` prints what `compile` returns, byte for byte.
(tests/runtime/test_api.py runs docs/api.md's notebook and compares its run with `rlgraph run`'s.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import rlgraph
from rlgraph.api import SpecError
from rlgraph.cli import main
from rlgraph.runtime.export import ExportError

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "grpo_arith.rl"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(ROOT)  # diagnostics name files relative to the working directory


def test_importing_rlgraph_and_compiling_loads_no_torch_ray_or_transformers():
    code = ("import sys, rlgraph\nspec = rlgraph.compile('specs/grpo_arith.rl')\nassert spec.ok\n"
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_overrides_as_a_mapping_plan_what_the_same_s_strings_plan():
    mapping = rlgraph.compile(str(SPEC), overrides={"train.steps": 5, "actor.optim.lr": 1e-3, "main.memory": "80GiB",
                                                    "data.val": "builtin:arith/val", "rollout.n": 4})
    strings = rlgraph.compile(str(SPEC), overrides=["train.steps=5", "actor.optim.lr=1e-3", "main.memory=80GiB",
                                                    'data.val="builtin:arith/val"', "rollout.n=4"])
    assert mapping.ok, mapping.render()
    assert mapping.plan().to_json() == strings.plan().to_json()
    plan = mapping.plan()
    assert plan.train.steps == 5 and plan.pools[0].device_memory_bytes == 80 * 2**30
    assert plan.role("actor").settings.optim.lr == 1e-3


def test_a_spec_with_errors_gives_diagnostic_objects_and_raises_only_when_asked(capsys):
    text = SPEC.read_text().replace("lr = 1e-4", "lr = fast").replace("model = policy\n  pool", "model = polcy\n  pool")
    spec = rlgraph.compile(text=text, name="specs/my_grpo.rl")  # includes resolve beside the name
    assert not spec.ok
    errors = {(d.code, d.span.file, d.span.line) for d in spec.errors}
    assert errors == {("wrong-type", "specs/my_grpo.rl", 14), ("unknown-model", "specs/my_grpo.rl", 12)}
    assert all(isinstance(d, rlgraph.Diagnostic) for d in spec.diagnostics)
    assert not spec.plan().ok
    with pytest.raises(SpecError) as raised:
        spec.raise_for_errors()
    assert "specs/my_grpo.rl:14:16" in str(raised.value) and "Found 2 errors in the spec." in str(raised.value)
    assert rlgraph.compile(str(SPEC)).raise_for_errors().ok


def test_check_prints_what_compile_renders(tmp_path, capsys):
    bad = tmp_path / "bad.rl"
    bad.write_text(SPEC.read_text().replace('include "common/arith_base.rl"', f'include "{ROOT}/specs/common/arith_base.rl"')
                   .replace("n = 8", "n = 0"))
    overrides = ["train.steps=x"]
    for fmt in ("concise", "full", "json"):
        assert main(["check", str(bad), "--format", fmt, *(a for o in overrides for a in ("-s", o))]) == 1
        printed = capsys.readouterr().out
        spec = rlgraph.compile(bad, overrides=overrides)
        if fmt == "json":
            assert json.loads(printed) == json.loads(spec.render("json"))
        else:
            assert printed.startswith(spec.render(fmt)) and spec.render(fmt)
    assert {d.code for d in spec.errors} >= {"wrong-type"}
    assert any(d.span.file == "<override 1>" for d in spec.errors)  # the bad value points into the override


def test_compile_takes_a_file_or_text():
    with pytest.raises(TypeError, match="one of them"):
        rlgraph.compile()
    with pytest.raises(TypeError, match="one of them"):
        rlgraph.compile(str(SPEC), text="rlgraph 1\n")
    with pytest.raises(TypeError, match="list of KEY=VALUE"):
        rlgraph.compile(str(SPEC), overrides="train.steps=5")
    missing = rlgraph.compile("specs/no_such.rl")
    assert not missing.ok and missing.errors[0].code == "io"


def test_run_refuses_a_spec_with_errors_before_anything_is_written(tmp_path):
    spec = rlgraph.compile(str(SPEC), overrides={"rollout.n": 0})
    with pytest.raises(SpecError, match="nothing was started"):
        rlgraph.run(spec, tmp_path / "run")
    with pytest.raises(SpecError, match="has errors"):  # its Plan too, as `rlgraph run plan.json` refuses it
        rlgraph.run(spec.plan(), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(TypeError, match="a Spec"):
        rlgraph.run(str(SPEC), tmp_path / "run")


def test_load_says_why_there_is_nothing_to_load(tmp_path):
    with pytest.raises(ExportError, match="does not exist"):
        rlgraph.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match="no checkpoint"):
        rlgraph.load(tmp_path / "empty")


def test_a_run_stopped_by_a_signal_says_so_to_a_python_caller():
    import pickle
    import signal

    from rlgraph.runtime.signals import Stopped

    stopped = Stopped(signal.SIGINT, 3, Path("runs/x/checkpoints/step_3"))
    assert str(stopped) == "stopped by Ctrl-C after step 3; checkpointed in runs/x/checkpoints/step_3"
    again = pickle.loads(pickle.dumps(stopped))
    assert (again.signum, again.step, again.checkpoint, again.exit_code) == (signal.SIGINT, 3, stopped.checkpoint, 130)
    assert str(Stopped(signal.SIGTERM, 0, None)).endswith("nothing was trained")
