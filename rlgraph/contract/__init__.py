"""The typed contract from the Plan to the workers: resolved settings and the table of role methods.

Pure Python with no rlgraph imports above it, so that the compiler (call signatures), the plan (typed
settings in plan.json), the runtime (dispatch) and the workers (method arguments) all read one source.
"""
