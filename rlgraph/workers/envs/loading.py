"""Importing an environment class and checking its interface: `run`'s pre-flight calls this in the driver,
before any model is loaded, and each process of the pool (rlgraph/workers/envs/pool.py) calls it again.

Pure Python: importing this module imports neither torch nor Ray (only the environment's own module is
imported, by `load_env_class`).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from rlgraph.workers.envs.base import Environment, ToolEnvironment
from rlgraph.workers.reward_process import RewardFunctionError, load_reward_fn, shown

if TYPE_CHECKING:
    from rlgraph.contract.settings import EnvSettings


class EnvError(Exception):
    """An environment cannot be used at all: its class cannot be imported, or breaks the interface."""


def load_env_class(settings: EnvSettings) -> type:
    """The class `settings.cls` names, imported and checked: a class with `step`, `tools` a list of OpenAI
    function schemas, and a constructor that takes `settings.args`. EnvError with one clear message otherwise."""
    where = f"environment {settings.name} (class {settings.cls!r}, declared at {settings.declared_at})"
    try:
        cls = load_reward_fn(settings.cls, settings.base_dir, kind="environment class")
    except RewardFunctionError as err:
        raise EnvError(f"{where}: {err}") from None
    if not inspect.isclass(cls):
        raise EnvError(f"{where}: {settings.cls!r} is a {type(cls).__name__}, not a class; name the class "
                       "(a subclass of rlgraph.workers.envs.Environment) whose objects run one episode each")
    if not callable(getattr(cls, "step", None)) or getattr(cls, "step", None) is Environment.step:
        raise EnvError(f"{where}: class {cls.__name__} has no `step` method; an environment answers each of the "
                       "model's turns with `step(turn) -> Observation`")
    if issubclass(cls, ToolEnvironment) and cls.call_tool is ToolEnvironment.call_tool:
        raise EnvError(f"{where}: class {cls.__name__} is a ToolEnvironment without a `call_tool` method; it runs "
                       "each of the model's tool calls with `call_tool(call) -> str`")
    problem = tools_problem(getattr(cls, "tools", []))
    if problem:
        raise EnvError(f"{where}: class {cls.__name__}'s `tools` {problem}")
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # a constructor without a signature (a builtin): the first episode will tell
        return cls
    try:
        signature.bind(**settings.args)
    except TypeError as err:
        given = ", ".join(f"{key} = {shown(value)}" for key, value in settings.args.items()) or "none"
        plain = signature.replace(parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                                  return_annotation=signature.empty)  # annotations may be strings: noise here
        raise EnvError(f"{where}: the constructor {cls.__name__}{plain} does not take the spec's args "
                       f"({given}): {err}") from None
    return cls


def tools_problem(tools: Any) -> str | None:
    """What is wrong with `tools` as a list of OpenAI function schemas, or None when nothing is."""
    if not isinstance(tools, (list, tuple)):
        return f"is a {type(tools).__name__}, not a list of OpenAI function schemas (set it on the class)"
    names = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            return (f"[{i}] is {shown(tool)}, not an OpenAI function schema "
                    '{"type": "function", "function": {"name": ..., "parameters": {...}}} (see tool_schema)')
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return f"[{i}] has no function name (a non-empty string at function.name)"
        if name in names:
            return f"[{i}] repeats the name {name!r}"
        names.add(name)
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        if not isinstance(parameters, dict) or parameters.get("type") != "object" or not isinstance(properties, dict):
            return (f"[{i}] ({name}): function.parameters is {shown(parameters)}, not a JSON schema "
                    '{"type": "object", "properties": {...}}')
        bad = [key for key, value in properties.items() if not isinstance(value, dict)]
        if bad:
            return f"[{i}] ({name}): the schema of parameter {bad[0]!r} is {shown(properties[bad[0]])}, not a dict"
        required = parameters.get("required", [])
        if not isinstance(required, list) or any(key not in properties for key in required):
            return f"[{i}] ({name}): parameters.required is {shown(required)}, not a list of its parameters' names"
    return None
