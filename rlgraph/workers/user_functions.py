"""Functions a spec declares (`transform NAME { ... }`, `loss NAME { ... }`): loaded as a reward's function is
(rlgraph/workers/reward_process.py: `module:function` or `file.py:function`, the spec's folder on the path),
and held to their declaration.

Pre-flight loads and checks each one before Ray starts; the process that runs one (the driver, the one
process of a single-device plan, or an actor's process for a loss) loads it again from its settings.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from rlgraph.contract.settings import UserFunctionSettings
from rlgraph.workers.reward_process import RewardFunctionError, load_reward_fn

# What a transform may ask for by naming the parameter (rlgraph.compiler.builtins.TRANSFORM_CONTEXT).
TRANSFORM_CONTEXT = ("response_mask", "index", "rollout")
# The arguments a policy loss is called with, as the built-in ones are (rlgraph/algos/losses.py).
LOSS_POSITIONAL = ("old_log_prob", "log_prob", "advantages", "response_mask")
LOSS_KEYWORDS = ("clip_low", "clip_high", "agg")

_LOADED: dict[tuple[str, str], Callable] = {}


class UserFunctionError(Exception):
    """A declared function does not load, or cannot be called as the spec declares it."""


def describe(settings: UserFunctionSettings, kind: str) -> str:
    """`transform `my_adv` (specs/x.rl:5, fn = "my_algos.py:leave_one_out")`: how messages name it."""
    return f"{kind} `{settings.name}` ({settings.declared_at}, fn = {settings.fn!r})"


def load_user_function(settings: UserFunctionSettings, kind: str) -> Callable:
    """The function, imported once per process."""
    key = (settings.fn, settings.base_dir)
    if key not in _LOADED:
        try:
            _LOADED[key] = load_reward_fn(settings.fn, settings.base_dir, kind=f"{kind} function")
        except RewardFunctionError as err:
            raise UserFunctionError(f"{describe(settings, kind)}: {err}") from None
    return _LOADED[key]


def transform_arguments(fn: Callable) -> tuple[str, ...]:
    """The batch's arguments (TRANSFORM_CONTEXT) that `fn` names, and so is given."""
    return tuple(name for name in TRANSFORM_CONTEXT if name in _parameters(fn))


def check_transform(fn: Callable, settings: UserFunctionSettings) -> None:
    """A UserFunctionError unless fn takes each declared input and argument by name."""
    call = {**{name: None for name in settings.inputs}, **settings.args,
            **{name: None for name in transform_arguments(fn)}}
    shown = ", ".join([*(f"{n}=<tensor>" for n in settings.inputs), *(f"{k}={v!r}" for k, v in settings.args.items())])
    _bind(fn, settings, "transform", (), call, f"fn({shown})",
          f"Give it a parameter for each declared input ({', '.join(settings.inputs)})"
          + (f" and argument ({', '.join(settings.args)})" if settings.args else "")
          + f"; it may also name {', '.join(TRANSFORM_CONTEXT)} to be given them.")


def check_loss(fn: Callable, settings: UserFunctionSettings, rollout_is: bool) -> None:
    """A UserFunctionError unless fn takes what a policy loss is called with, and the declared arguments."""
    keywords = {**{name: None for name in LOSS_KEYWORDS}, **settings.args}
    if "clip_c" in _parameters(fn):  # given where named, as to the built-in losses
        keywords["clip_c"] = None
    if rollout_is:
        keywords["rollout_is_weights"] = None
    shown = ", ".join([*LOSS_POSITIONAL, *(f"{k}=..." for k in keywords)])
    _bind(fn, settings, "loss", LOSS_POSITIONAL, keywords, f"fn({shown})",
          "Write it as `def fn(old_log_prob, log_prob, advantages, response_mask, *, clip_low, clip_high, agg"
          + "".join(f", {k}" for k in settings.args) + (", rollout_is_weights" if rollout_is else "")
          + ")`, returning (loss, metrics); it may also name clip_c to be given it.")


def _parameters(fn: Callable) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        return {}


def _bind(fn: Callable, settings: UserFunctionSettings, kind: str, positional: tuple, keywords: dict[str, Any],
          shown: str, fix: str) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: the call will tell
        return
    try:
        signature.bind(*positional, **keywords)
    except TypeError as err:
        code = getattr(fn, "__code__", None)
        where = f" (in {code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        raise UserFunctionError(
            f"{describe(settings, kind)}: the function {getattr(fn, '__name__', 'fn')}{signature}{where} cannot be "
            f"called as the spec declares it, {shown} ({err}). {fix}") from None


def loss_result(returned: Any, settings: UserFunctionSettings) -> tuple[Any, dict[str, float]]:
    """(loss, metrics) from what a declared loss returned, or a UserFunctionError saying what it returned."""
    import torch

    if isinstance(returned, torch.Tensor):
        returned = (returned, {})  # a loss alone: no metrics of its own
    if not (isinstance(returned, tuple) and len(returned) == 2 and isinstance(returned[0], torch.Tensor)
            and returned[0].numel() == 1 and isinstance(returned[1], dict)):
        raise UserFunctionError(f"{describe(settings, 'loss')} returned {type(returned).__name__}; a loss returns "
                                "(loss, metrics): a tensor with one value that backward runs from, and a dict of "
                                "numbers")
    loss, metrics = returned
    if not loss.requires_grad:
        raise UserFunctionError(f"{describe(settings, 'loss')} returned a loss without a gradient: compute it from "
                                "log_prob (the policy's), not from detached values")
    numbers = {key: float(value) for key, value in metrics.items()  # as a reward's extras: others left out
               if isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and value.numel() == 1)}
    return loss.reshape(()), numbers
