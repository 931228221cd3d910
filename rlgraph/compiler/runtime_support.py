"""What rlgraph's own runtime implements, as plain data the compiler can read.

The language describes more than this runtime runs (`engine = sglang`, `tp = 2`), because a spec may be
planned here for a cluster whose runtime has those. The `runtime_support` pass compares a spec with this
table, so that `check` warns and `run` refuses before anything starts.

The engines' facts are the contract's (rlgraph/contract/engines.py), which the engine classes carry as their
`capabilities`; `ROLE_KINDS` restates the role kinds the runtime builds a worker for
(rlgraph.contract.methods.WORKERS), and tests/compiler/test_runtime_support.py proves they agree.
"""

from __future__ import annotations

from rlgraph.contract.engines import ENGINES, EngineFacts

__all__ = ["ENGINES", "ROLE_KINDS", "EngineFacts"]

ROLE_KINDS = ("actor", "ref", "critic", "rollout", "reward_model", "judge")
