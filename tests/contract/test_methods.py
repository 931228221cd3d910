"""The compiler's call signatures and the runtime's dispatch come from one table
(rlgraph/contract/methods.py); here each side is held to it, key by key."""

from __future__ import annotations

import inspect

import pytest

import rlgraph.workers as workers
from rlgraph.compiler.builtins import ROLE_METHODS as SIGNATURES
from rlgraph.contract.methods import DISPATCH_MODES, RESPONSES, ROLE_METHODS, WORKERS
from rlgraph.runtime.group import DISPATCH_MODES as GROUP_DISPATCH_MODES

WORKER_CLASSES = {"policy": workers.PolicyWorker, "critic": workers.CriticWorker,
                  "reward_model": workers.RewardModelWorker, "judge": workers.JudgeWorker,
                  "rollout": workers.RolloutWorker}


def test_the_compiler_offers_exactly_the_table_s_methods_with_its_ports():
    offered = {(kind, method) for kind, methods in SIGNATURES.items() for method in methods}
    assert offered == set(ROLE_METHODS)
    for (kind, method), entry in ROLE_METHODS.items():
        signature = SIGNATURES[kind][method]
        assert (signature.inputs, signature.outputs, signature.least_outputs) == \
            (entry.inputs, entry.outputs, entry.min_outputs if entry.min_outputs is not None else len(entry.outputs))


def test_every_dispatch_mode_is_one_the_worker_group_implements():
    assert set(DISPATCH_MODES) == set(GROUP_DISPATCH_MODES)
    assert all(entry.dispatch in DISPATCH_MODES for entry in ROLE_METHODS.values())


def _hosts(kind: str) -> list[type]:
    # a rollout generates with its own RolloutWorker, or in place with the policy it is colocated with
    return [WORKER_CLASSES[WORKERS[kind]]] + ([workers.PolicyWorker] if kind == "rollout" else [])


@pytest.mark.parametrize("key", list(ROLE_METHODS), ids=lambda k: ".".join(k))
def test_every_worker_that_hosts_a_kind_takes_each_call_as_the_driver_makes_it(key):
    """The driver calls worker_method(rollout or prompts, *token inputs in port order, settings=...,
    **step arguments): the parameters must be there, in that order, by the ports' names."""
    entry = ROLE_METHODS[key]
    for cls in _hosts(entry.kind):
        method = getattr(cls, entry.worker_method, None)
        assert callable(method), f"{cls.__name__} has no {entry.worker_method}"
        params = list(inspect.signature(method).parameters.values())[1:]  # without self
        positional = [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
        assert positional[: 1 + len(entry.token_inputs)] == \
            [positional[0]] + [port.name for port in entry.token_inputs], cls.__name__
        for port in entry.token_inputs:
            default = inspect.signature(method).parameters[port.name].default
            assert (default is None) == port.optional, (cls.__name__, port.name)
        keywords = {p.name for p in params if p.kind == p.KEYWORD_ONLY}
        assert {"settings", *entry.step_args} <= keywords, cls.__name__
        assert inspect.signature(method).parameters["settings"].annotation in (entry.settings.__name__,
                                                                                entry.settings), cls.__name__


def test_optional_inputs_come_last():
    """The driver leaves out an optional input the spec does not name: only a trailing one can go."""
    for entry in ROLE_METHODS.values():
        flags = [port.optional for port in entry.token_inputs]
        assert flags == sorted(flags), entry.method
        assert all(port.kind != RESPONSES for port in entry.token_inputs)


def test_every_role_kind_of_the_spec_has_a_worker():
    from rlgraph.lang.schema import ROLE_KINDS

    assert set(WORKERS) == set(ROLE_KINDS)
