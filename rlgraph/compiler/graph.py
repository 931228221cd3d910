"""A thin wrapper over the step's networkx graph, with pure queries.

Nodes are calls (`rollout.generate`, `gae`, ...) plus the `data` source; an
edge carries the fields that flow from a producer to a consumer (kind "data"),
or a weight sync from a trained role's update to a rollout (kind "sync").
Imports nothing of Ray or torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from rlgraph.diagnostics import Span

DATA_NODE = "data"


@dataclass(frozen=True)
class CallNode:
    id: str  # unique in the step: the label, suffixed `#2`... when a call repeats
    label: str  # `actor.update`, `gae`, `exact`
    kind: str  # role | reward | transform
    target: str  # role, reward or transform name
    method: str | None
    role_kind: str | None
    inputs: tuple[tuple[str, str], ...]  # (port name, field name), in port order
    outputs: tuple[tuple[str, str], ...]
    kwargs: dict[str, Any]  # with defaults filled in
    span: Span
    field_spans: dict[str, Span] = field(default_factory=dict)  # field name -> where this call names it
    kwarg_spans: dict[str, Span] = field(default_factory=dict)
    # the user function the call runs (rlgraph.compiler.builtins.UserFunction): a declared transform, or the
    # declared loss of an actor update; None for built-ins
    user: Any = None

    def input(self, port: str) -> str | None:
        return dict(self.inputs).get(port)


@dataclass(frozen=True)
class SyncEdge:
    source: str  # trained role
    target: str  # rollout role
    span: Span


class StepGraph:
    def __init__(self):
        self.g = nx.DiGraph()
        self.syncs: list[SyncEdge] = []
        self.g.add_node(DATA_NODE, call=None)
        self._calls: list[CallNode] | None = None  # memo of calls() and producers(): passes ask per call
        self._producers: dict[str, list[CallNode]] | None = None

    # ---- building
    def add_call(self, node: CallNode) -> None:
        self.g.add_node(node.id, call=node)
        self._calls = self._producers = None

    def add_flow(self, producer: str, consumer: str, field_name: str) -> None:
        if self.g.has_edge(producer, consumer):
            self.g.edges[producer, consumer]["fields"].append(field_name)
        else:
            self.g.add_edge(producer, consumer, kind="data", fields=[field_name])

    # ---- queries
    def calls(self) -> list[CallNode]:
        """Every call, in the order the step wrote them."""
        if self._calls is None:
            self._calls = [d["call"] for _, d in self.g.nodes(data=True) if d["call"] is not None]
        return list(self._calls)

    def call(self, node_id: str) -> CallNode:
        return self.g.nodes[node_id]["call"]

    def _producer_table(self) -> dict[str, list[CallNode]]:
        if self._producers is None:
            self._producers = {}
            for node in self.calls():
                for _, name in node.outputs:
                    self._producers.setdefault(name, []).append(node)
        return self._producers

    def producers(self) -> dict[str, list[CallNode]]:
        return {name: list(nodes) for name, nodes in self._producer_table().items()}

    def producer(self, field_name: str) -> CallNode | None:
        """The call that produces a field (the first, if several do), or None (data field, undefined)."""
        found = self._producer_table().get(field_name)
        return found[0] if found else None

    def generate_calls(self) -> list[CallNode]:
        """The rollouts' `generate` calls, in step order; the first is the step's rollout."""
        return [n for n in self.calls() if n.role_kind == "rollout" and n.method == "generate"]

    def consumers(self, field_name: str) -> list[CallNode]:
        return [n for n in self.calls() if any(name == field_name for _, name in n.inputs)]

    def role_calls(self, role: str, method: str | None = None) -> list[CallNode]:
        return [n for n in self.calls() if n.kind == "role" and n.target == role
                and (method is None or n.method == method)]

    def upstream(self, node_id: str) -> set[str]:
        return nx.ancestors(self.g, node_id) - {DATA_NODE}

    def downstream(self, node_id: str) -> set[str]:
        return nx.descendants(self.g, node_id)

    def find_cycle(self) -> list[str] | None:
        """A cycle as a path of node ids that returns to its start, or None."""
        try:
            edges = nx.find_cycle(self.g)
        except nx.NetworkXNoCycle:
            return None
        return [u for u, _ in edges] + [edges[0][0]]

    def stages(self) -> list[list[CallNode]]:
        """Calls grouped so each stage's inputs are all produced by earlier stages."""
        if self.find_cycle():
            return []
        return [[self.call(n) for n in generation if n != DATA_NODE]
                for generation in nx.topological_generations(self.g)
                if any(n != DATA_NODE for n in generation)]
