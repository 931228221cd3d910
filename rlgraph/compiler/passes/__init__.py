"""The static checks, in the order they run. Adding a check = a module and a line here.

Each pass is `check(program, graph) -> list[Diagnostic]`; all run, and the
diagnostics are reported together.
"""

from rlgraph.compiler.passes.resolve import resolve

PASSES = (
    resolve,
)
