"""The code reward: verl's code rows, scored by the share of their tests a response's program passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlgraph.data.rows import load_rows
from rlgraph.tasks import DATA_SOURCES, default_compute_score
from rlgraph.tasks.code import extract_code, parse_tests, passes_all_tests, passes_tests, score_code
from rlgraph.workers.reward_process import RewardPool, score_rows
from rlgraph.tasks.sandbox import Limits

ROWS = Path(__file__).parent / "data" / "code_rows.jsonl"
FAST = Limits(cpu_s=2, wall_s=5.0, memory_mb=256)


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```\nIt reads the input and prints the answer."


RIGHT = [  # one right answer per row of ROWS
    fenced("a, b = map(int, input().split())\nprint(a + b)\n"),
    fenced("def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)\n"),
    fenced("class Solution:\n    def maxPair(self, nums):\n        return sum(sorted(nums)[-2:])\n"),
    fenced("def is_even(n):\n    return n % 2 == 0\n"),
]
PARTLY = [  # right on some tests only: 2 of 3, 2 of 3, 1 of 3, 3 of 4
    fenced("a, b = map(int, input().split())\nprint(a + b if a > 0 else 'no')\n"),
    fenced("def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n"),
    fenced("class Solution:\n    def maxPair(self, nums):\n        return max(nums) * 2\n"),
    fenced("def is_even(n):\n    return n % 2 == 0 and n >= 0\n"),
]


def rows():
    return load_rows(ROWS)


def test_the_example_rows_are_verl_rows_and_right_answers_pass_every_test_in_the_reward_process():
    loaded = rows()  # rlgraph's own row check accepts them
    assert [row["data_source"] for row in loaded] == ["codecontests", "apps", "taco", "mbpp"]
    hostile = fenced("import socket\nsocket.create_connection(('127.0.0.1', 9))\n")
    batch = [(row["data_source"], answer, row["reward_model"]["ground_truth"], row["extra_info"])
             for row, answer in zip(loaded + loaded[:1], RIGHT + [hostile])]
    # as a run scores: rows in parallel, each in a process of its own with a deadline
    pool = RewardPool("rlgraph.tasks.code:passes_tests", "rlgraph.tasks.code:passes_tests", timeout_s=60.0,
                      workers=2)
    try:
        values, error, extras = pool.score(batch)
    finally:
        pool.close()
    assert error is None
    assert values == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert sorted(extras["all_passed"]) == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert sorted(extras["crashed"]) == [0.0, 0.0, 0.0, 0.0, 1.0] and extras["timed_out"] == [0.0] * 5


def test_a_partly_right_answer_scores_the_share_it_passes():
    loaded = rows()
    assert default_compute_score("taco", PARTLY[0], loaded[0]["reward_model"]["ground_truth"]) == pytest.approx(
        {"score": 2 / 3, "all_passed": 0.0, "timed_out": 0.0, "crashed": 0.0})
    for source in ("codecontests", "apps", "codeforces", "taco"):  # verl's code data sources
        assert DATA_SOURCES[source] == "rlgraph.tasks.code:passes_tests"
    for row, answer, share in zip(loaded[1:], PARTLY[1:], [2 / 3, 1 / 3, 3 / 4]):
        truth = row["reward_model"]["ground_truth"]
        assert passes_tests(row["data_source"], answer, truth)["score"] == pytest.approx(share), row["data_source"]
    first_only = score_code(PARTLY[0], loaded[0]["reward_model"]["ground_truth"], limits=FAST, max_tests=1)
    assert first_only["score"] == 1.0  # the test it fails is the second
    all_or_nothing = passes_all_tests("mbpp", PARTLY[3], loaded[3]["reward_model"]["ground_truth"])
    assert all_or_nothing["score"] == 0.0 and all_or_nothing["all_passed"] == 0.0


def test_output_is_compared_by_tokens():
    truth = {"inputs": [""], "outputs": ["1 2\n3\n"]}
    for printed in ("print('1 2 3')", "print('1\\n2\\n3   \\n\\n')", "print(1, 2)\nprint(3, end='')"):
        assert score_code(printed, truth, limits=FAST)["score"] == 1.0, printed
    assert score_code("print('1 23')", truth, limits=FAST)["score"] == 0.0
    as_lines = {"inputs": [["4", "5"]], "outputs": [["9"]]}  # stdin and stdout stored as lists of lines
    assert score_code("print(int(input()) + int(input()))", as_lines, limits=FAST)["score"] == 1.0


def test_the_program_is_the_last_python_block_of_the_response():
    assert extract_code("```python\nx = 1\n```\nthen\n```python\nx = 2\n```") == "x = 2\n"
    assert extract_code("```\nplain\n```") == "plain\n"
    assert extract_code("```text\nnot this\n```\n```py\nthis\n```") == "this\n"
    assert extract_code("<think>```python\nscratch\n```</think>print(1)") == "print(1)"
    assert extract_code("Let me write it.\n```python\nprint(1)\nprint(") == "print(1)\nprint("  # cut off
    assert extract_code("print(42)") == "print(42)"


def test_hostile_answers_score_zero_and_say_why():
    truth = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    sleeper = score_code(fenced("import time\ntime.sleep(60)\n"), truth, limits=Limits(wall_s=0.3))
    assert sleeper["score"] == 0.0 and sleeper["timed_out"] == 1.0
    bomb = score_code(fenced("import os\nwhile True:\n    os.fork()\n"), truth, limits=FAST)
    assert bomb["score"] == 0.0 and bomb["crashed"] == 1.0
    exits = score_code(fenced("import sys\nsys.exit(0)\n"), {"asserts": ["assert False"]}, limits=FAST)
    assert exits["score"] == 0.0  # leaving before the asserts run passes none of them
    # writing on the harness's channel (its fd is in config.json) and leaving: a failed test, not an error
    forger = fenced("import json, os\nos.write(json.load(open('config.json'))['result_fd'], b'{oops')\nos._exit(0)\n")
    forged = score_code(forger, {"fn_name": "f", "inputs": [[1]], "outputs": [2]}, limits=FAST)
    assert forged["score"] == 0.0


def test_a_rows_tests_share_its_time_budget():
    # the first test takes the whole budget; the others are not run, and count as out of time
    scores = score_code(fenced("import time\ntime.sleep(60)\n"), rows()[0]["reward_model"]["ground_truth"],
                        limits=Limits(wall_s=60.0), row_s=0.5)
    assert scores == {"score": 0.0, "all_passed": 0.0, "timed_out": 1.0, "crashed": 0.0}


@pytest.mark.parametrize("truth, message", [
    ("4 5", "not JSON"),
    ({"input": ["1"], "output": ["1"]}, "needs 'inputs' and 'outputs', or 'asserts'; it has ['input', 'output']"),
    ({"inputs": ["1", "2"], "outputs": ["1"]}, "same, non-zero length; they have 2 and 1"),
    ({"inputs": [], "outputs": []}, "same, non-zero length; they have 0 and 0"),
    ({"fn_name": "f", "inputs": [1], "outputs": [1]}, "ground_truth 'inputs' is a list of arguments"),
    (json.dumps({"asserts": "assert f()"}), "'asserts' must be a non-empty list of strings"),
    ([1, 2], "it has list"),
])
def test_a_bad_ground_truth_says_what_is_wrong(truth, message):
    with pytest.raises(ValueError, match="ground_truth") as err:
        parse_tests(truth)
    assert message in str(err.value)


def test_a_bad_ground_truth_names_its_row_in_the_reward():
    # the error RuleReward turns into a message naming the row and its arguments
    values, error, _ = score_rows(passes_tests, [("apps", RIGHT[1], "[1, 2]", {})])
    row, what, _, _ = error
    assert values == [] and row == 0
    assert what == "ValueError: a code task's ground_truth needs 'inputs' and 'outputs', or 'asserts'; it has list"
