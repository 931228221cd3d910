"""docs/architecture.md's layers hold: a package imports only the packages its row there names, and no module
imports itself through others. Every `import` in rlgraph/ counts: at module top, inside functions, and under
TYPE_CHECKING. Pure `ast`: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the face may import any package below it, and of itself only down its own order: the CLI, one module per
# command, the Python API they share (rlgraph/__init__.py names the API's functions)
FACE = {"cli": {"commands", "api"}, "commands": {"api"}, "rlgraph": {"api"}, "api": set()}
MAY_IMPORT = {
    "importers": {"lang", "contract"},
    "runtime": {"plan", "workers", "models", "data", "algos", "contract"},
    "plan": {"compiler", "lang", "contract", "diagnostics"},
    "compiler": {"lang", "contract", "diagnostics", "tasks"},
    "lang": {"contract", "diagnostics"},
    "workers": {"models", "data", "tasks", "algos", "contract"},
    "models": {"data", "tasks", "contract"},
    "data": {"tasks", "contract"},
    "tasks": set(),
    "algos": set(), "contract": set(), "diagnostics": set(),
}
RUNTIME_PLAN_MODULES = {"rlgraph.plan.model", "rlgraph.plan.diff", "rlgraph.plan.migrate"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[str]:
    """The rlgraph modules `path` imports (a `from m import x` names m.x where that is a module, else m)."""
    me, package = _module(path), path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = me.split(".") if package else me.split(".")[:-1]
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            out += [f"{base}.{a.name}" if _exists(f"{base}.{a.name}") else base for a in node.names]
    return [name for name in out if name == "rlgraph" or name.startswith("rlgraph.")]


def _exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "rlgraph"


FILES = sorted((ROOT / "rlgraph").rglob("*.py"))


def test_the_rows_go_one_way():
    """No package may import, through the rows, a package that may import it: then no two import each other."""
    rows = {**MAY_IMPORT, **{face: below | set(MAY_IMPORT) for face, below in FACE.items()}}
    loops = [group for group in _strongly_connected(rows) if len(group) > 1]
    assert not loops, "\n".join(" <-> ".join(sorted(group)) for group in loops)


def test_each_package_imports_only_what_its_row_allows():
    wrong = []
    for path in FILES:
        source = _package(_module(path))
        allowed = FACE[source] | set(MAY_IMPORT) if source in FACE else MAY_IMPORT[source]
        for target in _imports(path):
            rel = str(path.relative_to(ROOT))
            if _package(target) in (source, *allowed):
                if source == "runtime" and _package(target) == "plan" and target not in RUNTIME_PLAN_MODULES:
                    wrong.append(f"{rel} imports {target} (the runtime reads only {sorted(RUNTIME_PLAN_MODULES)})")
                continue
            wrong.append(f"{rel} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_through_others():
    modules = {_module(p): p for p in FILES}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for target in _imports(path):
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                targets.add(target)
        graph[name] = targets
    loops = [group for group in _strongly_connected(graph) if len(group) > 1]
    assert not loops, "\n".join(" <-> ".join(sorted(group)) for group in loops)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components: modules that import one another through any chain are in one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in graph[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = set()
            while not group or member != name:
                member = stack.pop()
                group.add(member)
            groups.append(group)

    for name in graph:
        if name not in index:
            visit(name)
    return groups
