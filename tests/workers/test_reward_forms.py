"""The forms a reward function may take, as a verl user writes them: a file path or a module next to the
spec, a float or a dict with `score` and extra values; and the clear errors when one cannot be used."""

from __future__ import annotations

import pickle
import re
import sys
import uuid

import pytest

from rlgraph.contract.settings import RewardSettings
from rlgraph.plan.model import Plan
from rlgraph.runtime.errors import PreflightError
from rlgraph.runtime.preflight import _load_rewards
from rlgraph.workers.reward import RewardFunctionError, RuleReward

from .test_batch import make_rollout

VERL_STYLE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    row = int(ground_truth)
    return {"score": float(row % 2), "acc": row >= 2, "pred": solution_str, "length": None if row == 0 else row}
"""


def write(folder, text: str, stem: str | None = None):
    """A reward module with a name no other test uses (a module is imported once per process)."""
    path = folder / f"{stem or 'reward_' + uuid.uuid4().hex[:8]}.py"
    path.write_text(text)
    return path


def plan_with(tmp_path, fn: str) -> Plan:
    """A plan of a spec in tmp_path that names `fn` (the rest of the plan plays no part in loading rewards)."""
    spec = tmp_path / "task.rl"
    spec.write_text("rlgraph 1\n")
    guards = RewardSettings(0.0, 30.0, False, 1, url=None, rows_per_request=64, concurrency=8, retries=3, backoff_s=0.5)
    return Plan(spec=str(spec), rewards={"exact": fn}, reward_settings={"exact": guards})


@pytest.mark.parametrize("timeout_s", [None, 30.0])  # in this process, and in a process of its own
def test_a_dict_gives_its_score_and_the_batch_mean_of_its_numeric_extras(tmp_path, timeout_s):
    fn = f"{write(tmp_path, VERL_STYLE)}:compute_score"  # verl's absolute file form
    result = RuleReward(fn, timeout_s=timeout_s).score_rows(make_rollout())
    assert result.token_level_scores.sum(-1).tolist() == [0.0, 1.0, 0.0, 1.0]
    # like verl's metrics, text extras are left out; a None is left out of its key's mean
    assert result.extras == {"acc": 0.5, "length": 2.0}


def test_a_dict_without_a_score_is_not_a_usable_score(tmp_path):
    file = write(tmp_path, "def f(a, b, c, d=None):\n    return {'acc': 1.0}\n")
    fn = f"{file}:f"
    with pytest.raises(RewardFunctionError, match=r"returned \{'acc': 1\.0\} on row 0 .*a dict holding one under 'score'"):
        RuleReward(fn).score(make_rollout())


def test_a_relative_file_path_and_a_module_are_found_next_to_the_spec(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the spec's folder is added to it
    folder = tmp_path / "task"
    folder.mkdir()
    file = write(folder, VERL_STYLE)
    rewards = _load_rewards(plan_with(folder, f"{file.name}:compute_score"))
    assert rewards["exact"].fn("src", "x", "3") == {"score": 1.0, "acc": True, "pred": "x", "length": 3}
    module = write(folder, VERL_STYLE).stem
    reward = _load_rewards(plan_with(folder, f"{module}:compute_score"))["exact"]
    assert reward.score_rows(make_rollout()).extras == {"acc": 0.5, "length": 2.0}  # in its own process
    # a copy sent to another process loads it by name again (a file's module cannot be unpickled by reference)
    copy = pickle.loads(pickle.dumps(_load_rewards(plan_with(folder, f"{file.name}:compute_score"))["exact"]))
    assert copy.fn("src", "x", "0")["score"] == 0.0


@pytest.mark.parametrize("fn, words", [
    ("missing.py:compute_score", ["file", "missing.py not found", "(relative to"]),
    ("no_such_reward_module_xyz:compute_score", ["module 'no_such_reward_module_xyz' not found", "PYTHONPATH",
                                                 "the spec's folder"]),
    ("{file}:nope", ["has no attribute 'nope'"]),
])
def test_a_missing_file_module_or_function_is_one_paragraph_at_preflight(tmp_path, fn, words):
    file = write(tmp_path, VERL_STYLE)
    with pytest.raises(PreflightError) as info:
        _load_rewards(plan_with(tmp_path, fn.format(file=file)))
    text = str(info.value)
    assert text.startswith("reward `exact`: ") and "\n" not in text
    assert all(word in text for word in words), text


@pytest.mark.parametrize("signature", ["(solution_str, ground_truth)", "(a, b, c, d, e)", "(*, data_source, solution_str)"])
def test_a_function_that_cannot_take_the_reward_arguments_is_found_at_preflight(tmp_path, signature):
    file = write(tmp_path, f"def compute_score{signature}:\n    return 1.0\n")
    with pytest.raises(PreflightError) as info:
        _load_rewards(plan_with(tmp_path, f"{file}:compute_score"))
    text = str(info.value)
    assert f"compute_score{signature}" in text and str(file) in text
    assert "data_source, solution_str, ground_truth, extra_info" in text and "\n" not in text


def test_a_function_with_defaults_or_var_args_is_accepted(tmp_path):
    file = write(tmp_path, "def a(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):\n"
                           "    return scale\n\ndef b(*args, **kwargs):\n    return 1.0\n")
    for name in "ab":
        assert RuleReward(f"{file}:{name}").score(make_rollout()).sum() == 4.0


def test_the_extras_are_logged_as_reward_metrics(tmp_path):
    from rlgraph.plan.model import CallPlan
    from rlgraph.runtime.transforms import DriverCalls

    call = CallPlan("exact", "exact", "reward", "exact", None, None, [["responses", "responses"]],
                    [["scores", "scores"]], 1, None)
    reward = RuleReward(f"{write(tmp_path, VERL_STYLE)}:compute_score")
    _, metrics = DriverCalls(Plan(spec="", calls=[call]), {"exact": reward}).run(call, {}, make_rollout())
    assert metrics == {"reward/exact/acc": 0.5, "reward/exact/length": 2.0}


BATCHED = """
def compute_score(data_sources, solution_strs, ground_truths, extra_infos=None):
    return [{"score": float(int(truth) % 2), "rows": len(ground_truths)} for truth in ground_truths]

def not_a_list(data_sources, solution_strs, ground_truths, extra_infos=None):
    return 1.0

def raises(data_sources, solution_strs, ground_truths, extra_infos=None):
    raise ValueError("no batch today")
"""


@pytest.mark.parametrize("timeout_s", [None, 30.0])
def test_a_batched_function_takes_the_columns_as_lists_and_returns_a_score_per_row(tmp_path, timeout_s):
    file = write(tmp_path, BATCHED)
    result = RuleReward(f"{file}:compute_score", batched=True, timeout_s=timeout_s).score_rows(make_rollout())
    assert result.token_level_scores.sum(-1).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert result.extras == {"rows": 4.0}  # one call saw the four rows
    for fn, words in (("not_a_list", "returned 1.0, not a list of 4 scores (one per row)"),
                      ("raises", "raised ValueError: no batch today on a batch of 4 rows")):
        with pytest.raises(RewardFunctionError, match="batched reward function .*" + re.escape(words)):
            RuleReward(f"{file}:{fn}", batched=True, timeout_s=timeout_s).score(make_rollout())


def test_a_batched_function_past_its_timeout_is_stopped(tmp_path):
    file = write(tmp_path, "import time\n\ndef slow(a, b, c, d=None):\n    time.sleep(60)\n")
    with pytest.raises(RewardFunctionError, match=r"took longer than timeout_s = 0\.5 s on a batch"):
        RuleReward(f"{file}:slow", batched=True, timeout_s=0.5).score(make_rollout())
