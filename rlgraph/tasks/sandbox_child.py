"""The first code a sandboxed program runs (rlgraph/tasks/sandbox.py starts it): limits, the Python guard,
then the program. Standard library only, started with `python -I`, so it imports nothing of rlgraph.

    python -I sandbox_child.py CONFIG_FILE

CONFIG_FILE, JSON: {"workdir", "limits": {resource name: value}, "guard": bool, "mode": "script" | "call" | "assert",
"result_fd", and for "call" `fn_name` and `args`, for "assert" `test`}. Once the limits are set it writes
STARTED to `result_fd`, before anything of the program runs. The program is `workdir/solution.py`.
A "script" is run as `__main__` on its stdin; "call" runs it as a module, calls `fn_name(*args)` (a top-level
function, or a method of a `Solution` class as LeetCode writes them) and writes the JSON of what it returned
to `result_fd`; "assert" runs it as a module, then the test code in its namespace, and writes "passed" to
`result_fd` when the test code ends without raising.
"""

import json
import os
import resource
import signal
import sys

# what the guard refuses outright: new processes, signals to other processes, sockets, loading native code
_REFUSED = frozenset({"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                      "subprocess.Popen", "os.kill", "os.killpg", "socket.__new__", "ctypes.dlopen",
                      "ctypes.dlsym"})
_REFUSED_IMPORTS = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "_xxsubinterpreters"})
# events whose path arguments (by position) must lie inside the work directory
_PATH_ARGS = {"os.remove": (0,), "os.rename": (0, 1), "os.mkdir": (0,), "os.rmdir": (0,), "os.chmod": (0,),
              "os.chown": (0,), "os.link": (0, 1), "os.truncate": (0,), "os.utime": (0,), "os.chdir": (0,),
              "os.chflags": (0,), "os.lchmod": (0,), "os.lchown": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
              "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (1,),
              "shutil.move": (1,)}
CPU_LIMIT_EXIT = 152  # the exit code past the CPU limit (a shell's 128 + SIGXCPU)
STARTED = b"started\n"  # first on the result channel: the sandbox itself works (rlgraph/tasks/sandbox.py)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def set_limits(limits: dict) -> None:
    for name, value in limits.items():
        # CPU: SIGXCPU at the limit ends the program with CPU_LIMIT_EXIT; the kernel's SIGKILL a second later
        # ends one that ignores it, or that is inside one long C call
        hard = value + 1 if name == "RLIMIT_CPU" else value
        resource.setrlimit(getattr(resource, name), (value, hard))
    signal.signal(signal.SIGXCPU, lambda signum, frame: os._exit(CPU_LIMIT_EXIT))


def install_guard(workdir: str) -> None:
    """An audit hook (PEP 578) that stops the ordinary Python ways out of the sandbox. It is a guard against
    accidents and against code that does not set out to defeat it, not a boundary: the kernel's limits are."""
    root = os.path.realpath(workdir)

    def inside(path, base=None) -> bool:
        if path is None or isinstance(path, int):  # a file descriptor: already open
            return True
        full = os.path.realpath(os.path.join(base or root, os.fsdecode(path)))
        return full == root or full.startswith(root + os.sep)

    def hook(event, args):
        if event in _REFUSED:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
            if writing and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} outside the work directory is not allowed")
        elif event == "import" and args[0] in _REFUSED_IMPORTS:
            raise ImportError(f"sandbox: module {args[0]} is not available")
        elif event == "os.symlink":  # the target is relative to the link's folder
            source, link = args[0], args[1]
            if not inside(link) or not inside(source, os.path.dirname(os.path.join(root, os.fsdecode(link)))):
                raise PermissionError("sandbox: a link out of the work directory is not allowed")
        elif event in _PATH_ARGS:
            for position in _PATH_ARGS[event]:
                if position < len(args) and isinstance(args[position], (str, bytes, os.PathLike)) \
                        and not inside(args[position]):
                    raise PermissionError(f"sandbox: {event} on {args[position]!r} outside the work directory "
                                          "is not allowed")

    sys.addaudithook(hook)


def solution_function(namespace: dict, fn_name: str):
    if callable(namespace.get(fn_name)):
        return namespace[fn_name]
    solution = namespace.get("Solution")
    if isinstance(solution, type) and callable(getattr(solution, fn_name, None)):
        return getattr(solution(), fn_name)
    raise NameError(f"the program defines no function {fn_name!r} (nor a Solution class with that method)")


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as file:
        config = json.load(file)
    result_fd = config["result_fd"]
    os.set_inheritable(result_fd, False)
    set_limits(config["limits"])
    os.write(result_fd, STARTED)
    del sys.argv[1:]
    with open(os.path.join(config["workdir"], "solution.py"), encoding="utf-8") as file:
        code = compile(file.read(), "solution.py", "exec")
    if config["guard"]:
        install_guard(config["workdir"])
    mode = config["mode"]
    namespace = {"__name__": "__main__" if mode == "script" else "solution", "__builtins__": __builtins__}
    exec(code, namespace)
    if mode == "call":
        returned = solution_function(namespace, config["fn_name"])(*config["args"])
        sys.stdout.flush()
        os.write(result_fd, json.dumps(returned, default=repr).encode())
    elif mode == "assert":
        exec(compile(config["test"], "test", "exec"), namespace)
        sys.stdout.flush()
        os.write(result_fd, b"passed")


if __name__ == "__main__":
    main()
