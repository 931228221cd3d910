"""The environment seam: what a rollout of several turns talks with (a tool, a user simulator, a game).

An episode is one sample: the runtime makes one environment object per episode (`cls(**args)` from the
spec's `env` block), calls `reset(row)` with the data row it starts from, then, after each of the model's
turns, `step(turn)`. The model's turn arrives as text *and* the exact token ids it generated; the
environment answers with an `Observation`: text (rendered by the runtime as a reply of the tool role, see
`rlgraph.workers.envs.tools`) or token ids of its own, the reward so far, and whether the episode is over.

Token-in, token-out: the runtime never re-tokenises the history. The ids the model generated are the ids
trained on; an observation is appended as ids, attended to by later turns and left out of the loss.

Tool calls are parsed by the runtime from the model's turn (`Turn.tool_calls`, `Turn.tool_call_errors`), in
the format `rlgraph.workers.envs.tools` documents, against the tools the environment lists in `tools`
(OpenAI function-call JSON schemas, the form verl's tool configurations use). `ToolEnvironment` runs them.

Environments run in processes of their own (rlgraph/workers/envs/pool.py): one that raises, hangs, returns
something else than an Observation or ends its process fails its sample only. This module is pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call of a tool the environment lists."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """The model's turn, as the environment receives it."""

    index: int  # 0 for the first turn of the episode
    text: str  # the turn's ids decoded, special tokens (tool-call tags) kept, end-of-sequence left out
    token_ids: list[int]  # exactly the ids the model generated, the stop token included
    tool_calls: list[ToolCall]  # the calls found in the turn, in order, that parse against `tools`
    tool_call_errors: list[str]  # why each of the other calls found could not be used (parse, name, arguments)
    ended_by_eos: bool  # the model ended its turn with end-of-sequence (not a tool-call tag or the budget)


@dataclass
class Observation:
    """The environment's answer to a reset or a turn.

    Give `text` (the runtime renders it as the tool's reply and tokenises it alone) or `token_ids` (appended
    as they are), or neither (nothing is inserted). `reward` is the episode's reward so far; the last one an
    episode returns is the sample's `env_reward` (rlgraph.workers.envs:episode_reward scores with it).
    `tool_errors`: the calls of this turn that failed when run (bad values, a tool that raised).
    """

    text: str | None = None
    token_ids: list[int] | None = None
    reward: float = 0.0
    done: bool = False
    tool_errors: int = 0


class Environment:
    """Subclass and override `reset` and `step`. One object per episode; `close` is called when it ends."""

    tools: list[dict[str, Any]] = []  # OpenAI function schemas: {"type": "function", "function": {...}}

    def reset(self, row: dict[str, Any]) -> Observation | None:
        """Start an episode from a data row (`prompt_text`, `data_source`, `ground_truth`, `extra_info`).
        An observation returned here is inserted before the model's first turn; None inserts nothing."""
        return None

    def step(self, turn: Turn) -> Observation:
        raise NotImplementedError

    def close(self) -> None:
        """Free what the episode holds (a sandbox, a connection)."""


def tool_schema(name: str, description: str, parameters: dict[str, dict[str, Any]],
                required: list[str] | None = None) -> dict[str, Any]:
    """An OpenAI function-call schema: `parameters` maps each argument to its JSON schema."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": parameters,
                       "required": list(parameters) if required is None else required}}}


class ToolEnvironment(Environment):
    """An environment whose turns are tool calls: each call runs `call_tool`, the results (one per line) are
    the reply, and a turn without any call ends the episode. Subclasses set `tools` and override `call_tool`
    (and `final_reward` to judge the last turn)."""

    def call_tool(self, call: ToolCall) -> str:
        raise NotImplementedError

    def final_reward(self, turn: Turn) -> float:
        return 0.0

    def step(self, turn: Turn) -> Observation:
        if not turn.tool_calls and not turn.tool_call_errors:
            return Observation(reward=self.final_reward(turn), done=True)
        replies, errors = [], 0
        for call in turn.tool_calls:
            try:
                replies.append(str(self.call_tool(call)))
            except Exception as err:  # a tool's own error is the model's to read, not the run's
                replies.append(f"error: {err}")
                errors += 1
        replies += [f"error: {message}" for message in turn.tool_call_errors]
        return Observation(text="\n".join(replies), tool_errors=errors)
