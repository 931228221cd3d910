"""The user's modules are imported once in a child process, with a deadline, before the driver imports them.

A reward module, a transform's or loss's module, or an environment's module is arbitrary code, and importing
it runs that code: one that calls `os._exit(0)` at its top level would end `rlgraph run` with status 0 and not
a word, and one that blocks (on a lock, a server, stdin) would hang pre-flight for ever. So pre-flight first
imports all of the plan's user modules in ONE child (`python -c ...`, which imports neither torch nor Ray
unless a user module does) and treats the child's end before it is through (any exit status, a signal, or
the deadline) as a PreflightError naming the declaration, the module's file and what happened. An exception
at import is left to the driver's own import, which reports it as it always has.

RLGRAPH_IMPORT_TIMEOUT_S sets the deadline of each module's import (60 s by default: sympy, a tokenizer
library or a large data table can take a while).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlgraph.runtime.errors import PreflightError

if TYPE_CHECKING:
    from rlgraph.plan.model import Plan

DEADLINE_ENV = "RLGRAPH_IMPORT_TIMEOUT_S"
DEFAULT_DEADLINE_S = 60.0
_CHILD_CODE = "from rlgraph.runtime.import_probe import child_main; child_main()"
_START_S = 60.0  # for the child to start (on a loaded machine, seconds) before its first module
_STDERR_LINES = 5  # of the child's stderr, shown when it ended early


@dataclass(frozen=True)
class UserModule:
    what: str  # the declaration, as messages name it: "reward `exact`"
    ref: str  # `module:name` or `path/to/file.py:name`, as the spec writes it
    base_dir: str | None  # the spec's folder: a relative file is read, and a module looked for, there


def probe_user_code(plan: Plan) -> None:
    """PreflightError when importing one of the plan's user modules ends its process or does not finish in time."""
    probe_imports(user_modules(plan))


def user_modules(plan: Plan) -> list[UserModule]:
    """Every module of user code the plan names, in the order pre-flight loads them: rewards, the transforms
    and losses, the environment classes, the judges' parsers."""
    # the spec's folder, as rlgraph/runtime/preflight.py `_load_rewards` finds it for a reward
    spec_dir = os.path.dirname(os.path.abspath(plan.spec)) if plan.spec and os.path.isfile(plan.spec) else None
    from rlgraph.contract.judge import builtin_parser
    from rlgraph.contract.settings import JudgeSettings, UserFunctionSettings

    modules = []
    for name, fn in plan.rewards.items():
        guards = plan.reward_settings.get(name)
        if isinstance(fn, str) and guards is not None and guards.url is None:  # a service imports nothing
            modules.append(UserModule(f"reward `{name}`", fn, spec_dir))
    for call in plan.calls:
        for kind, settings in (("transform", call.settings), ("loss", getattr(call.settings, "user_loss", None))):
            if isinstance(settings, UserFunctionSettings):
                modules.append(UserModule(f"{kind} `{settings.name}` ({settings.declared_at})", settings.fn,
                                          settings.base_dir))
        env = getattr(call.settings, "env", None)
        if env is not None:
            modules.append(UserModule(f"environment `{env.name}` ({env.declared_at})", env.cls, env.base_dir))
    for role in plan.roles:  # a judge's parser, unless a built-in one
        if isinstance(role.settings, JudgeSettings) and builtin_parser(role.settings.parser) is None:
            modules.append(UserModule(f"the parser of judge `{role.name}`", role.settings.parser,
                                      role.settings.base_dir))
    unique = {(m.ref, m.base_dir): m for m in reversed(modules)}  # the first declaration that names a module
    return [m for m in modules if unique[(m.ref, m.base_dir)] is m]


def deadline_s() -> float:
    text = os.environ.get(DEADLINE_ENV)
    if not text:
        return DEFAULT_DEADLINE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise PreflightError(f"{DEADLINE_ENV}={text!r}: give the seconds a user module's import may take, "
                             f"a number above 0 (default {DEFAULT_DEADLINE_S:g})")
    return value


def probe_imports(modules: list[UserModule], deadline: float | None = None) -> None:
    """Import `modules` in one child, each within `deadline` seconds (default: deadline_s()); PreflightError
    naming the module being imported when the child ends or runs past its deadline."""
    if not modules:
        return
    deadline = deadline_s() if deadline is None else deadline
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: a chatty module cannot fill it and block
        try:
            proc = subprocess.Popen([sys.executable, "-c", _CHILD_CODE, str(write_fd)], stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=stderr, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        with os.fdopen(read_fd, "rb") as progress:
            try:
                proc.stdin.write(json.dumps({"path": sys.path, "modules": [[m.ref, m.base_dir] for m in modules]})
                                 .encode())
                proc.stdin.close()
            except OSError:  # the child is gone already: its exit says why
                pass
            outcome, index, file = _follow(proc, progress, deadline)
        if outcome == "done":
            return
        if index is None and outcome == "timeout":
            raise PreflightError(f"the process that imports the user's modules first ({sys.executable}) did not start "
                                 f"within {_START_S + deadline:g} s; is the machine overloaded?")
        module = modules[index] if index is not None else modules[0]
        where = f"{module.what} (fn = {module.ref!r}): importing {file or module.ref}"
        if outcome == "timeout":
            raise PreflightError(
                f"{where} did not finish within {deadline:g} s. A module that waits at import (on a lock, a "
                "server, input) would hang the run; do that work inside the function, or, if the import is only "
                f"slow, set {DEADLINE_ENV} to the seconds it needs.")
        from rlgraph.workers.reward_process import describe_exit

        stderr.seek(0)
        tail = stderr.read().decode(errors="replace").strip().splitlines()[-_STDERR_LINES:]
        said = ("; it wrote: " + " | ".join(tail)) if tail else ""
        raise PreflightError(
            f"{where}: the process importing it {describe_exit(proc.returncode)} while importing{said}. A module "
            "that calls os._exit or sys.exit at import (or crashes the interpreter) would end the run without a "
            "word; take that call out of the module's top level.")


def _follow(proc: subprocess.Popen, progress, deadline: float) -> tuple[str, int | None, str | None]:
    """("done" | "exited" | "timeout", the index of the module being imported, its file) from the child's
    progress lines: one before each module, and "done" after the last."""
    index, file, buffer = None, None, b""
    until = time.monotonic() + _START_S + deadline  # the child's own start-up (Python, rlgraph) is not the module's
    while True:
        left = until - time.monotonic()
        if left <= 0 or not select.select([progress], [], [], left)[0]:
            proc.kill()
            proc.wait()
            return "timeout", index, file
        chunk = os.read(progress.fileno(), 65536)
        if not chunk:  # the child closed its end: it exited
            proc.wait()
            return "exited", index, file
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if message == "done":
                proc.wait()
                return "done", index, file
            index, file = message
            until = time.monotonic() + deadline  # each module has the whole deadline


def child_main() -> None:
    """The child: import each module named on stdin, saying which before each, then "done"."""
    from rlgraph.workers.reward_process import become_child, load_reward_fn

    become_child()  # exits when the driver dies; Ctrl-C is the driver's
    progress = os.fdopen(int(sys.argv[1]), "wb", buffering=0)
    request = json.loads(sys.stdin.read())
    sys.path[:] = request["path"]  # the driver's: a module next to the spec, or put there by a test
    for index, (ref, base_dir) in enumerate(request["modules"]):
        progress.write(json.dumps([index, None]).encode() + b"\n")  # finding the file may import packages
        progress.write(json.dumps([index, _file_of(ref, base_dir)]).encode() + b"\n")
        try:
            load_reward_fn(ref, base_dir)
        except Exception:  # RewardFunctionError and the like: the driver's own import reports it, as always
            pass
    progress.write(b'"done"\n')


def _file_of(ref: str, base_dir: str | None) -> str | None:
    """The file a `module:name` or `file.py:name` reference imports, when it can be found without importing it."""
    where = ref.rpartition(":")[0]
    if where.endswith(".py") or "/" in where or os.sep in where:
        return os.path.abspath(os.path.join(base_dir or os.getcwd(), os.path.expanduser(where)))
    import importlib.util

    if base_dir is not None and base_dir not in sys.path:
        sys.path.append(base_dir)  # as load_reward_fn looks for it: after the installed packages
    try:
        spec = importlib.util.find_spec(where)  # imports the parent packages of a dotted name, not the module
    except Exception:
        return None
    return spec.origin if spec is not None else None
