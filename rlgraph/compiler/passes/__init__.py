"""The static checks, in the order they run. Adding a check = a module and a line here.

Each pass is `check(program, graph) -> list[Diagnostic]`; all run, and the
diagnostics are reported together. Passes never raise on a partial program:
what an earlier stage reported, a later pass skips.
"""

from rlgraph.compiler.passes.algorithm import algorithm
from rlgraph.compiler.passes.asynchrony import asynchrony
from rlgraph.compiler.passes.batch import batch
from rlgraph.compiler.passes.dataflow import dataflow
from rlgraph.compiler.passes.environments import environments
from rlgraph.compiler.passes.judges import judges
from rlgraph.compiler.passes.offload import offload
from rlgraph.compiler.passes.paths import paths
from rlgraph.compiler.passes.resolve import resolve
from rlgraph.compiler.passes.rewards import rewards
from rlgraph.compiler.passes.roles import roles
from rlgraph.compiler.passes.runtime_support import runtime_support
from rlgraph.compiler.passes.sampling import sampling
from rlgraph.compiler.passes.training import training
from rlgraph.compiler.passes.user_functions import user_functions

PASSES = (
    paths,      # model folders and data files exist (marks a missing one invalid for the passes after it)
    resolve,    # names: models, pools, roles, places
    rewards,    # each reward a function (`fn`) or a service (`url`), with its own kind's keys
    judges,     # each judge's template compiles over a sample's fields, its parser exists
    dataflow,   # fields: produced once, used, acyclic, of the right kind
    roles,      # trained roles updated once from the right inputs; every role called
    algorithm,  # estimators, KL, weight syncs
    user_functions,  # declared transforms and losses: own names and arguments, each used
    batch,      # prompts × n split evenly over replicas, mini- and micro-batches
    offload,    # a trained role's param_offload on sharded parameters
    asynchrony,  # train.staleness > 0: a rollout on devices of its own, synced from the policy
    sampling,   # several generate calls (one trained rollout), filter_groups, overlong_penalty
    training,   # steps or epochs, warm-up steps or ratio, validation samples: each said once
    environments,  # declared envs: a class name, each used, a reply that fits the response budget
    runtime_support,  # only what rlgraph's runtime implements (warnings; `run` refuses some)
)
