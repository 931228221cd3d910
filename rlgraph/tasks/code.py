"""Code tasks' reward: the response's program run against the row's tests, each in a sandbox of its own
(rlgraph/tasks/sandbox.py), scored by the share of tests it passes, as verl's prime_code and Sandbox Fusion
rewards score `codecontests`, `apps`, `codeforces` and `taco` rows.

The tests are the row's `reward_model.ground_truth`, a JSON string (what verl's parquet files hold) or an
object, in one of two shapes:

- `{"inputs": [...], "outputs": [...]}`: each input is the program's stdin, and its stdout must hold the same
  whitespace-separated tokens as the output (so a trailing newline or a different line break does not
  matter, as in APPS' checker). With `"fn_name": "f"` (APPS, TACO: call-based) each input is instead the
  list of arguments of `f(*args)`, a top-level function or a method of a `Solution` class, and its return
  value must equal the output as JSON sees it (an output stored wrapped in a one-element list also matches).
- `{"asserts": ["assert f(1) == 2", ...]}`: each is run after the program, in its namespace (MBPP's
  `test_list`); it passes when it raises nothing.

The program is the last ```python fenced block of the response (or the last fenced block, or the text after
an opening fence the response never closed, or else the whole response), after any <think>...</think>.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from rlgraph.tasks.sandbox import Limits, Run, run_python

ROW_S = 30.0  # one row's tests together: less than a reward's default timeout_s (60 s), so a slow row scores 0
_FENCED = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Case:
    """One test: `stdin` and the `expected` stdout; or `args` of `fn_name` and the `expected` value; or `test`."""

    stdin: str = ""
    expected: Any = None
    fn_name: str | None = None
    args: list | None = None
    test: str | None = None

    def run(self, program: str, limits: Limits) -> Run:
        if self.test is not None:
            return run_python(program, mode="assert", test=self.test, limits=limits)
        if self.fn_name is not None:
            return run_python(program, mode="call", fn_name=self.fn_name, args=self.args, limits=limits)
        return run_python(program, stdin=self.stdin, limits=limits)

    def passed(self, run: Run) -> bool:
        if not run.ok:
            return False
        if self.test is not None:
            return run.result == "passed"
        if self.fn_name is not None:
            try:
                returned = json.loads(run.result or "")  # none: it exited before returning
            except ValueError:  # not what the harness writes: the program wrote on its channel
                return False
            wrapped = isinstance(self.expected, list) and len(self.expected) == 1
            return returned == self.expected or (wrapped and returned == self.expected[0])
        return run.stdout.split() == _text(self.expected).split()


def extract_code(solution_str: str) -> str:
    """The program in a response (see the module doc)."""
    text = _THINK.sub("", solution_str)
    blocks = _FENCED.findall(text)
    python = [code for language, code in blocks if language.lower() in ("python", "py", "python3")]
    if python or blocks:
        return (python or [code for _, code in blocks])[-1]
    opening = text.rfind("```")
    if opening >= 0:  # cut off before the closing fence
        return text[opening:].split("\n", 1)[1] if "\n" in text[opening:] else ""
    return text


def parse_tests(ground_truth: Any) -> list[Case]:
    """The test cases of a row's ground truth; ValueError saying what is wrong with it otherwise."""
    tests = ground_truth
    if isinstance(tests, (str, bytes)):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as err:
            raise ValueError(f"a code task's ground_truth must be JSON test cases, and this is not JSON ({err}); "
                             'write {"inputs": [...], "outputs": [...]} or {"asserts": [...]}') from None
    if not isinstance(tests, dict) or not ({"inputs", "outputs"} <= tests.keys() or "asserts" in tests):
        keys = sorted(tests) if isinstance(tests, dict) else type(tests).__name__
        raise ValueError(f"a code task's ground_truth needs 'inputs' and 'outputs', or 'asserts'; it has {keys}")
    if "asserts" in tests:
        asserts = tests["asserts"]
        if not isinstance(asserts, list) or not asserts or not all(isinstance(a, str) for a in asserts):
            raise ValueError("a code task's ground_truth 'asserts' must be a non-empty list of strings of Python")
        return [Case(test=test) for test in asserts]
    inputs, outputs = tests["inputs"], tests["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        raise ValueError(f"a code task's ground_truth 'inputs' and 'outputs' must be lists of the same, non-zero "
                         f"length; they have {_length(inputs)} and {_length(outputs)}")
    fn_name = tests.get("fn_name")
    if fn_name:
        if not all(isinstance(args, list) for args in inputs):
            raise ValueError(f"with fn_name {fn_name!r}, each of a code task's ground_truth 'inputs' is a list of "
                             "arguments")
        return [Case(fn_name=str(fn_name), args=args, expected=expected) for args, expected in zip(inputs, outputs)]
    return [Case(stdin=_text(stdin), expected=expected) for stdin, expected in zip(inputs, outputs)]


def score_code(solution_str: str, ground_truth: Any, *, limits: Limits = Limits(), all_or_nothing: bool = False,
               row_s: float = ROW_S, max_tests: int | None = None) -> dict[str, float]:
    """Run the response's program on each test (the first `max_tests` of them, when given); `score` is the
    share passed (1 or 0 with `all_or_nothing`, which stops at the first failure). The tests share `row_s`
    seconds: those it leaves no time for fail. SandboxError when the sandbox itself cannot run a program.
    The other keys are metrics (rlgraph logs a dict's numbers as `reward/<name>/<key>`): `all_passed`, and
    the shares of tests that ran out of time or CPU (`timed_out`) and that ended in an error (`crashed`)."""
    cases = parse_tests(ground_truth)[:max_tests]
    program = extract_code(solution_str)
    passed = timed_out = crashed = 0
    deadline = time.monotonic() + row_s
    for case in cases:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out += 1
            if all_or_nothing:
                break
            continue
        run = case.run(program, dataclasses.replace(limits, wall_s=min(limits.wall_s, remaining)))
        if case.passed(run):
            passed += 1
            continue
        timed_out += run.status in ("timeout", "cpu_limit")
        crashed += run.status in ("exited", "killed") and run.returncode != 0
        if all_or_nothing:
            break
    share = passed / len(cases)
    return {"score": float(share == 1.0) if all_or_nothing else share, "all_passed": float(share == 1.0),
            "timed_out": timed_out / len(cases), "crashed": crashed / len(cases)}


def passes_tests(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict:
    """The share of the row's tests the response's program passes (verl's continuous code score)."""
    del data_source, extra_info
    return score_code(solution_str, ground_truth)


def passes_all_tests(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict:
    """1 when the response's program passes every test of the row, else 0."""
    del data_source, extra_info
    return score_code(solution_str, ground_truth, all_or_nothing=True)


def _text(value: Any) -> str:
    """A test's stdin or stdout: a string, or a list of lines (as some data sets store them)."""
    if isinstance(value, list):
        return "\n".join(map(str, value)) + "\n"
    return str(value)


def _length(value: Any) -> str:
    return str(len(value)) if isinstance(value, list) else f"a {type(value).__name__}"
