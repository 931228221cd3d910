"""Run an untrusted Python program (a model's answer to a code task) in a child process with limits.

Each run gets a fresh temporary directory (its cwd, HOME and TMPDIR; removed afterwards), an environment
with nothing of the parent's but PATH, stdin from a file, its output capped, and a wall-clock deadline,
after which its whole process group is killed. What holds it, from the kernel up (docs/your_task.md,
"Code run in a sandbox", says what each level guarantees):

- resource limits set before the program starts (rlgraph/tasks/sandbox_child.py): CPU seconds, address
  space, file size, open files, processes (RLIMIT_NPROC binds a non-root user only), no core files;
- namespaces, where `unshare` can make them for this user (`namespaces()`): a network namespace with no
  interface up (no network, whatever the code does) and a PID namespace, so every process the program
  starts dies with it; with `setpriv` the sandbox also dies with the process that started it;
- a Python audit hook (`Limits.python_guard`): no new processes, no sockets, no writes or renames outside
  the directory, no ctypes. It stops ordinary code; code written to defeat it can.

After a run that had to be killed, or without a PID namespace, processes still working in the directory
are found through /proc and killed before the directory is removed.

Standard library only: this runs in a reward's process (rlgraph/workers/reward_process.py).
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

_STARTED = b"started\n"  # sandbox_child.STARTED
_CPU_LIMIT_EXIT = 152  # sandbox_child.CPU_LIMIT_EXIT
_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")
_STDERR_KEPT = 4096  # bytes of stderr kept for a run's detail
_GONE_WAIT_S = 5.0  # how long to wait for a killed program's processes to go


class SandboxError(Exception):
    """The sandbox could not run a program at all (not the program's fault): a namespace that cannot be made,
    limits too small for Python itself to start."""


@dataclass(frozen=True)
class Limits:
    """What one run of a program may use. The defaults suit a test case of a competitive-programming task."""

    cpu_s: int = 5  # CPU seconds (RLIMIT_CPU); the kernel kills the program past them
    wall_s: float = 10.0  # seconds from start to end, sleeping included; then its process group is killed
    memory_mb: int = 1024  # address space (RLIMIT_AS): past it an allocation fails (MemoryError)
    output_bytes: int = 1 << 20  # of stdout; past it the program is killed and its run is "output_limit"
    file_mb: int = 16  # largest file it may write (RLIMIT_FSIZE)
    open_files: int = 64  # RLIMIT_NOFILE
    processes: int = 16  # RLIMIT_NPROC (counts all of the user's processes; root is not bound by it)
    python_guard: bool = True  # the audit hook (see the module doc); off only to test the levels below it

    def rlimits(self) -> dict[str, int]:
        return {"RLIMIT_CPU": self.cpu_s, "RLIMIT_AS": self.memory_mb << 20, "RLIMIT_FSIZE": self.file_mb << 20,
                "RLIMIT_NOFILE": self.open_files, "RLIMIT_NPROC": self.processes, "RLIMIT_CORE": 0}


@dataclass(frozen=True)
class Run:
    """How one run ended. `status`: "exited" (by itself; see `returncode`), "timeout" (past `wall_s`),
    "cpu_limit" (ended past `cpu_s`), "killed" (by another signal: a crash), "output_limit"."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str  # its last _STDERR_KEPT bytes
    result: str | None  # what the harness answered (mode "call": JSON; "assert": "passed"), None if nothing
    workdir: str  # removed by now; processes are found by it in tests

    @property
    def ok(self) -> bool:
        return self.status == "exited" and self.returncode == 0


@functools.cache
def namespaces() -> tuple[str, ...]:
    """The command that puts a program in new user, network and PID namespaces, or () where this user
    cannot make them (no `unshare`, unprivileged user namespaces off, seccomp in a container)."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return ()
    command = (unshare, "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child")
    try:
        probe = subprocess.run((*command, "true"), capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return command if probe.returncode == 0 else ()


@functools.cache
def parent_death_signal() -> tuple[str, ...]:
    """The command that makes a program die with the process that started it, or () without `setpriv`."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return ()
    probe = subprocess.run((setpriv, "--pdeathsig", "KILL", "true"), capture_output=True)
    return (setpriv, "--pdeathsig", "KILL") if probe.returncode == 0 else ()


def run_python(source: str, *, stdin: str = "", mode: str = "script", fn_name: str | None = None,
               args: list | None = None, test: str | None = None, limits: Limits = Limits()) -> Run:
    """Run `source` as solution.py in a fresh directory (modes as in rlgraph/tasks/sandbox_child.py)."""
    with tempfile.TemporaryDirectory(prefix="rlgraph-sandbox-") as workdir:
        workdir = os.path.realpath(workdir)
        # files, not arguments: argv caps one at 128 KiB, and a test's input may be larger
        _write(workdir, "solution.py", source)
        _write(workdir, "stdin.txt", stdin)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": workdir, "TMPDIR": workdir,
               "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        command = (*parent_death_signal(), *namespaces(), sys.executable, "-I", _CHILD,
                   os.path.join(workdir, "config.json"))
        result_read, result_write = os.pipe()  # the harness's answer, apart from what the program prints
        try:
            _write(workdir, "config.json", json.dumps(
                {"workdir": workdir, "limits": limits.rlimits(), "guard": limits.python_guard, "mode": mode,
                 "result_fd": result_write, "fn_name": fn_name, "args": args or [], "test": test}))
            with open(os.path.join(workdir, "stdin.txt"), "rb") as stdin_file:
                proc = subprocess.Popen(command, stdin=stdin_file, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        cwd=workdir, env=env, start_new_session=True, pass_fds=(result_write,))
        except BaseException:
            os.close(result_read)
            raise
        finally:
            os.close(result_write)
        try:
            status, stdout, stderr, result = _collect(proc, os.fdopen(result_read, "rb"), limits)
        finally:
            cpu_s = _kill_group(proc)
        if status in ("exited", "killed") and (proc.returncode == _CPU_LIMIT_EXIT or
                                               proc.returncode != 0 and cpu_s >= limits.cpu_s):
            status = "cpu_limit"  # the harness's exit at SIGXCPU, or the kernel's SIGKILL a second later
        if status != "exited" or not namespaces():
            _kill_leftovers(workdir)
        if status == "exited" and not result.startswith(_STARTED):
            raise SandboxError(f"the sandbox could not start a program (exit code {proc.returncode}): "
                               f"{stderr[-_STDERR_KEPT:].decode('utf-8', 'replace').strip() or 'no message'}")
        result = result.removeprefix(_STARTED)
        return Run(status, proc.returncode, stdout.decode("utf-8", "replace"),
                   stderr[-_STDERR_KEPT:].decode("utf-8", "replace"),
                   result.decode("utf-8", "replace") if result else None, workdir)


def _write(folder: str, name: str, text: str) -> None:
    with open(os.path.join(folder, name), "w", encoding="utf-8", errors="surrogateescape") as file:
        file.write(text)


def _collect(proc: subprocess.Popen, result_pipe, limits: Limits) -> tuple[str, bytes, bytes, bytes]:
    """Read the program's stdout, stderr and result channel until it exits, runs out of time or prints too much."""
    deadline = time.monotonic() + limits.wall_s
    buffers = {proc.stdout: bytearray(), proc.stderr: bytearray(), result_pipe: bytearray()}
    selector = selectors.DefaultSelector()
    for pipe in buffers:
        selector.register(pipe, selectors.EVENT_READ)
    status = None
    try:
        while status is None and selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = "timeout"
                break
            for key, _ in selector.select(min(remaining, 0.5)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer = buffers[key.fileobj]
                buffer += chunk
                if key.fileobj is proc.stderr and len(buffer) > 2 * _STDERR_KEPT:
                    del buffer[:-_STDERR_KEPT]
                elif key.fileobj is proc.stdout and len(buffer) > limits.output_bytes:
                    status = "output_limit"
                elif key.fileobj is result_pipe and len(buffer) > limits.output_bytes:
                    status = "output_limit"
            if status is None and _exited(proc) and not selector.select(0):
                break  # a pipe a leftover process still holds open is not waited for
        while status is None and not _exited(proc):
            if time.monotonic() > deadline:
                status = "timeout"
            time.sleep(0.01)
    finally:
        selector.close()
        for pipe in buffers:
            pipe.close()
    if status is None:
        status = "exited" if proc.returncode >= 0 else "killed"
    stdout = bytes(buffers[proc.stdout][:limits.output_bytes])
    return status, stdout, bytes(buffers[proc.stderr]), bytes(buffers[result_pipe])


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the program has exited; reaped here with os.wait4 (not Popen's wait) to keep its CPU time."""
    if proc.returncode is not None:
        return True
    pid, wait_status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid == 0:
        return False
    proc.returncode = os.waitstatus_to_exitcode(wait_status)
    proc.cpu_s = usage.ru_utime + usage.ru_stime  # with the children it waited for: the program under unshare
    return True


def _kill_group(proc: subprocess.Popen) -> float:
    """Kill the program's process group; the CPU seconds it used."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the session it leads: the program and what it started
    except (ProcessLookupError, PermissionError):
        pass
    while not _exited(proc):
        time.sleep(0.005)
    return getattr(proc, "cpu_s", 0.0)


def _kill_leftovers(workdir: str) -> None:
    """Kill the processes still working in `workdir` (one that left the process group, outside a PID
    namespace), and wait until they are gone; the guard keeps a program's processes from leaving it."""
    deadline = time.monotonic() + _GONE_WAIT_S
    while True:
        pids = processes_in(workdir)
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def processes_in(workdir: str) -> list[int]:
    """The processes whose current directory is `workdir` or below it (Linux /proc; [] elsewhere)."""
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd").removesuffix(" (deleted)")
        except OSError:
            continue
        if cwd == workdir or cwd.startswith(workdir + os.sep):
            pids.append(int(entry))
    return pids
