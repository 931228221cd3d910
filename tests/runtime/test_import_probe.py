"""rlgraph/runtime/import_probe.py: a user module that exits or blocks at import is a PreflightError naming it,
found in one child before the driver imports it (issue 29: `os._exit(0)` at import made `rlgraph run` exit 0
without a word; `time.sleep` at import hung pre-flight)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import REPO, SPECS, plan_from_spec
from rlgraph.runtime.errors import PreflightError
from rlgraph.runtime.import_probe import DEADLINE_ENV, probe_user_code, user_modules
from rlgraph.runtime.preflight import Checked, prepare

SCORE = "\ndef score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"


def reward_file(folder: Path, name: str, top_level: str) -> Path:
    path = folder / name
    path.write_text(top_level + SCORE)
    return path


def plan_with_reward(path: Path, spec: str = "grpo_arith.rl", *overrides: str):
    return plan_from_spec(SPECS / spec, f'exact.fn="{path}:score"', *overrides)


def refused(plan) -> str:
    """What pre-flight's second part says; it probes before it needs what the first part found."""
    with pytest.raises(PreflightError) as error:
        prepare(plan, Checked(model_paths={}, rows={}))
    return str(error.value)


def test_a_reward_that_calls_os_exit_at_import_is_named_not_a_silent_exit(tmp_path):
    path = reward_file(tmp_path, "exits.py", "import os\nos._exit(0)\n")
    message = refused(plan_with_reward(path))
    assert message.startswith(f"reward `exact` (fn = '{path}:score'): importing {path}: the process importing it "
                              "exited with code 0 while importing")
    assert "os._exit" in message


def test_sys_exit_at_import_says_the_status_and_what_the_module_wrote(tmp_path):
    path = reward_file(tmp_path, "sys_exits.py", "import sys\nprint('no GPU here', file=sys.stderr)\nsys.exit(3)\n")
    message = refused(plan_with_reward(path))
    assert "exited with code 3 while importing; it wrote: no GPU here" in message


def test_a_reward_that_blocks_at_import_meets_the_deadline(tmp_path, monkeypatch):
    path = reward_file(tmp_path, "blocks.py", "import time\ntime.sleep(1000)\n")
    monkeypatch.setenv(DEADLINE_ENV, "0.5")
    message = refused(plan_with_reward(path))
    assert message.startswith(f"reward `exact` (fn = '{path}:score'): importing {path} did not finish within 0.5 s")
    assert DEADLINE_ENV in message


def test_a_raise_at_import_is_still_reported_by_the_drivers_own_import(tmp_path):
    path = reward_file(tmp_path, "raises.py", "raise ValueError('needs the answers table')\n")
    message = refused(plan_with_reward(path))
    assert message == (f"reward `exact`: reward function '{path}:score': running {path} failed with ValueError: "
                       "needs the answers table")


def test_a_bad_deadline_setting_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(DEADLINE_ENV, "soon")
    assert f"{DEADLINE_ENV}='soon'" in refused(plan_with_reward(reward_file(tmp_path, "ok.py", "")))


def test_all_user_modules_are_imported_in_one_child_without_torch(tmp_path):
    log = tmp_path / "imports.log"
    record = f"import os, sys\nopen({str(log)!r}, 'a').write(f\"{{os.getpid()}} {{'torch' in sys.modules}}\\n\")\n"
    reward = reward_file(tmp_path, "reward.py", record)
    transform = tmp_path / "transform.py"
    transform.write_text(record + "def leave_one_out(scores, index, baseline_weight):\n    return scores\n")
    plan = plan_with_reward(reward, "custom_transform_arith.rl", f'leave_one_out.fn="{transform}:leave_one_out"')
    probe_user_code(plan)
    lines = log.read_text().split()
    pids, torch_imported = set(lines[0::2]), set(lines[1::2])
    assert len(lines) == 4 and len(pids) == 1 and pids != {str(os.getpid())}, lines
    assert torch_imported == {"False"}


def test_the_plans_user_modules_are_its_rewards_functions_and_environments():
    plan = plan_from_spec(SPECS / "custom_transform_arith.rl")
    assert [(m.what.split(" (")[0], m.ref) for m in user_modules(plan)] == [
        ("reward `exact`", "rlgraph.tasks.arith:exact_match"),
        ("transform `leave_one_out`", "algos/my_advantage.py:leave_one_out"),
        ("loss `clipped_token_mean`", "algos/my_advantage.py:clipped_token_mean")]
    tool = plan_from_spec(SPECS / "grpo_arith_tool.rl")
    assert [m.what.split(" (")[0] for m in user_modules(tool)] == ["reward `exact`", "environment `calc`"]


def test_rlgraph_run_with_a_reward_that_exits_at_import_exits_1_naming_it(tmp_path):
    path = reward_file(tmp_path, "exits.py", "import os\nos._exit(0)\n")
    done = subprocess.run([sys.executable, "-m", "rlgraph.cli", "run", str(SPECS / "grpo_arith.rl"), "-s",
                           f'exact.fn="{path}:score"', "--output", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "reward `exact`" in out and "exited with code 0 while importing" in out and "Traceback" not in out


def test_a_judges_parser_function_is_a_user_module_a_builtin_parser_is_not():
    plan = plan_from_spec(SPECS / "grpo_arith_judge.rl")
    assert [(m.what, m.ref) for m in user_modules(plan)] == [
        ("reward `exact`", "rlgraph.tasks.arith:exact_match"),
        ("the parser of judge `judge`", "rlgraph.tasks.arith_judge:same_answer")]
    builtin = plan_from_spec(SPECS / "grpo_arith_judge.rl", 'judge.parser="yes_no"')
    assert [m.what for m in user_modules(builtin)] == ["reward `exact`"]
