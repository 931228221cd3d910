"""The built-in calculator environment of `builtin:arith-tool`: one tool, `calc(expression)`.

    env calc { class = "rlgraph.workers.envs.calculator:Calculator"  max_turns = 3 }

Each call is answered with the expression's value (`rlgraph.tasks.arith_tool.evaluate`: integers,
+ - * / and parentheses, never `eval`), or `error: ...` when it does not parse; a turn without a call ends
the episode. The reward is the task's (`rlgraph.tasks.arith_tool:exact_match` on the final answer), so the
environment's own reward is 0.
"""

from __future__ import annotations

from rlgraph.tasks.arith_tool import TOOL_NAME, evaluate
from rlgraph.workers.envs.base import ToolCall, ToolEnvironment, Turn, tool_schema


class Calculator(ToolEnvironment):
    tools = [tool_schema(
        TOOL_NAME,
        "Evaluate an arithmetic expression on integers: + - * / and parentheses.",
        {"expression": {"type": "string", "description": "for example 37*48"}},
    )]

    def call_tool(self, call: ToolCall) -> str:
        return evaluate(call.arguments["expression"])

    def final_reward(self, turn: Turn) -> float:
        return 0.0
