"""Failures a user can act on: one clear paragraph and exit code 1, never Ray's wall of text."""

from __future__ import annotations

import shutil
from pathlib import Path

from .helpers import fast

SPEC = "specs/ppo_arith.rl"


def assert_clean(out: str) -> None:
    assert "Traceback" not in out, out
    assert "RayTaskError" not in out and "ActorDiedError" not in out, out


def test_reward_module_missing(run_cli, tmp_path):
    code, out = run_cli(SPEC, "--output", tmp_path, *fast(), "-s", 'exact.fn="no_such_module:score"')
    assert code == 1
    assert "reward `exact`" in out and "no_such_module" in out
    assert_clean(out)


def test_reward_that_raises_names_the_row(run_cli, tmp_path, monkeypatch):
    (tmp_path / "broken_reward.py").write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    raise ValueError('cannot parse ' + solution_str)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = run_cli(SPEC, "--output", tmp_path / "run", *fast(), "-s", 'exact.fn="broken_reward:score"')
    assert code == 1
    assert "broken_reward:score raised ValueError: cannot parse" in out and "on row 0" in out
    assert "failed in validation at step 0" in out
    assert_clean(out)


def test_bad_data_row_names_file_and_line(run_cli, tmp_path):
    data = tmp_path / "train.jsonl"
    good = '{"prompt": "1+1=", "reward_model": {"ground_truth": "2"}}\n'
    data.write_text(good + '{"reward_model": {"ground_truth": "3"}}\n' + good * 20)
    code, out = run_cli(SPEC, "--output", tmp_path / "run", *fast(), "-s", f'data.train="{data}"')
    assert code == 1
    assert f"{data}:2" in out and '"prompt"' in out
    assert_clean(out)


def test_missing_model_path(run_cli, tmp_path):
    code, out = run_cli(SPEC, "--output", tmp_path / "run", *fast(), "-s", 'policy.path="/nowhere/model"')
    assert code == 1
    assert "model `policy`" in out and "/nowhere/model" in out
    assert_clean(out)


def test_failure_inside_a_worker_names_role_replica_and_node(run_cli, tmp_path, arith_model):
    broken = tmp_path / "broken-model"
    shutil.copytree(arith_model, broken)
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    code, out = run_cli(SPEC, "--output", tmp_path / "run", *fast(), "-s", f'policy.path="{broken}"')
    assert code == 1, out
    assert "role `actor` (replica 0, node 0" in out and "process actor/0" in out
    assert "The worker's traceback" in out  # the worker's own frames, for the one who debugs it
    assert "RayTaskError" not in out and "ActorDiedError" not in out
    assert "rlgraph/cli.py" not in out  # but not the driver's


def test_spec_errors_stop_before_anything_starts(run_cli, tmp_path):
    code, out = run_cli(SPEC, "--output", tmp_path / "run", "-s", "train.steps=0")
    assert code == 1 and "nothing was started" in out
    assert not Path(tmp_path / "run").exists()
