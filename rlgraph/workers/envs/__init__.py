"""Environments for rollouts of several turns: the interface (base), tool-call formats (tools), the process
pool that hosts episodes (pool) and the built-in calculator (calculator)."""

from rlgraph.workers.envs.base import Environment, Observation, ToolCall, ToolEnvironment, Turn, tool_schema

__all__ = ["Environment", "Observation", "ToolCall", "ToolEnvironment", "Turn", "tool_schema", "episode_reward"]


def episode_reward(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """A reward function (verl's signature) that scores a sample with its environment's last reward."""
    del data_source, solution_str, ground_truth
    return float((extra_info or {}).get("env_reward", 0.0))
