"""The static checks, in the order they run. Adding a check = a module and a line here.

Each pass is `check(program, graph) -> list[Diagnostic]`; all run, and the
diagnostics are reported together. Passes never raise on a partial program:
what an earlier stage reported, a later pass skips.
"""

from rlgraph.compiler.passes.algorithm import algorithm
from rlgraph.compiler.passes.batch import batch
from rlgraph.compiler.passes.dataflow import dataflow
from rlgraph.compiler.passes.resolve import resolve
from rlgraph.compiler.passes.roles import roles
from rlgraph.compiler.passes.runtime_support import runtime_support

PASSES = (
    resolve,    # names: models, pools, roles, places
    dataflow,   # fields: produced once, used, acyclic, of the right kind
    roles,      # trained roles updated once from the right inputs; every role called
    algorithm,  # estimators, KL, weight syncs
    batch,      # prompts × n split evenly over replicas, mini- and micro-batches
    runtime_support,  # only what rlgraph's runtime implements (warnings; `run` refuses some)
)
