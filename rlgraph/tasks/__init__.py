"""Built-in tasks: prompts with a verifiable answer and the reward function that checks it.

A task module makes the rows of its splits (`make_rows(split)`, verl's schema) and exports a reward
function with verl's `compute_score` shape. `BUILTIN_TASKS` names them for `builtin:<task>/<split>`
data paths; adding a task is a module and a line here. `gsm8k` and `math` are rewards alone (their data
are downloaded by the user), and `default_compute_score` picks a rule by a row's `data_source`, as verl does.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

BUILTIN_TASKS: dict[str, str] = {
    "arith": "rlgraph.tasks.arith",
    "arith-tool": "rlgraph.tasks.arith_tool",
}


def get_task(name: str) -> ModuleType:
    """The module of built-in task `name`; KeyError with the known names otherwise."""
    try:
        module = BUILTIN_TASKS[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_TASKS))
        raise KeyError(f"no built-in task {name!r}; the built-in tasks are: {known}") from None
    return importlib.import_module(module)


# verl's data_source names (verl/utils/reward_score/__init__.py: default_compute_score) -> "module:function"
DATA_SOURCES: dict[str, str] = {
    "openai/gsm8k": "rlgraph.tasks.gsm8k:compute_score",
    "lighteval/MATH": "rlgraph.tasks.math:compute_score",
    "DigitalLearningGmbH/MATH-lighteval": "rlgraph.tasks.math:compute_score",
    "HuggingFaceH4/MATH-500": "rlgraph.tasks.math:compute_score",
    "rlgraph/arith": "rlgraph.tasks.arith:exact_match",
    "rlgraph/arith-tool": "rlgraph.tasks.arith_tool:exact_match",
    # verl's code data sources: the share of the row's tests the program passes, run in a sandbox
    "codecontests": "rlgraph.tasks.code:passes_tests",
    "apps": "rlgraph.tasks.code:passes_tests",
    "codeforces": "rlgraph.tasks.code:passes_tests",
    "taco": "rlgraph.tasks.code:passes_tests",
}


def default_compute_score(data_source: str, solution_str: str, ground_truth: Any,
                          extra_info: dict | None = None) -> float:
    """Score a row by the rule of its `data_source`, as verl's `default_compute_score` does, so a parquet
    made by verl's data scripts trains with `reward r { fn = "rlgraph.tasks:default_compute_score" }`."""
    try:
        module, _, function = DATA_SOURCES[data_source].partition(":")
    except KeyError:
        known = ", ".join(sorted(DATA_SOURCES))
        raise NotImplementedError(
            f"no built-in reward for data_source {data_source!r} (the built-in ones: {known}); "
            "write a reward function for it and name it in the reward's `fn`") from None
    return getattr(importlib.import_module(module), function)(data_source, solution_str, ground_truth, extra_info)
