"""The layer contract of ``src/airplay`` (docs/architecture.md), checked on the import graph.

Every ``import`` and ``from ... import`` in every module (at module level, inside functions,
under ``if TYPE_CHECKING``; relative imports resolved) is an edge from the importing module's
component to the imported module's component. A component is a package (``airplay.scene``,
``airplay.render``, ...) or a top-level module; the command modules (``cli.py``, ``graph.py``,
``launcher.py``, ``ros2_launch.py``, ``demo.py`` and the package ``commands/``) form the component
``commands``: a folder is one layer. The tests assert:

- every edge points to the same layer or a lower one (:data:`LAYERS`, bottom first);
- the components form no cycle (within a layer either, e.g. policies <-> vln);
- no module uses a private name (leading underscore) of another package, by ``from`` import
  or as an attribute of an imported module;
- the core (everything outside ``nodes/``) imports with rclpy and the ROS message packages
  made unimportable;
- the tests import no test module (they share through ``test/helpers/`` and ``conftest.py``), and
  ``bench/`` puts ``test/`` on ``sys.path`` only for ``test/sitl_harness.py``.

A failure lists the offending edges as ``file:line``.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "airplay"

LAYERS: tuple[frozenset[str], ...] = (
    # the package itself (its version) and modules that import nothing of airplay
    frozenset({"airplay", "config", "episode_status", "frames", "node_params", "node_schemas", "parent_watch",
               "policy_names", "threads", "yaml_config"}),
    # files, geometry, camera models
    frozenset({"scene"}),
    # rendering, flight physics, tasks and planning; capture import (scene files + the renderer)
    frozenset({"render", "sim", "tasks", "capture_import"}),
    # the composition root: World, the environment, lockstep rules, warm-up
    frozenset({"world", "gym"}),
    # what runs in a world: policies and their training (sb3: Stable-Baselines3 on the vector environment),
    # data, evaluation, VLN, the vehicle bridge, the results page, the rerun view
    frozenset({"policies", "rl", "data", "eval", "vln", "bridge",
               "report", "view", "aeroground"}),
    # the entry points: the CLI with the graph description and launcher, and the ROS nodes
    frozenset({"commands", "nodes"}),
)
"""Components by layer, bottom first. A component imports its own layer or lower ones."""

COMMAND_MODULES = frozenset({"cli", "cli_flags", "graph", "launcher", "ros2_launch", "demo"})
"""Top-level modules that belong to the component ``commands``."""

ROS_PREFIXES = ("rclpy", "rosidl", "rcl_interfaces", "rosgraph_msgs", "builtin_interfaces", "ament_index_python")
"""Modules made unimportable for the core import test (with every ``*_msgs`` package)."""


@dataclass(frozen=True)
class Edge:
    """``source`` (a module) imports ``target`` (a module) at ``path:line``; ``name`` is the
    imported or accessed name, when there is one."""

    source: str
    target: str
    name: str | None
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def module_name(path: Path) -> str:
    """``airplay.x.y`` of a file under src/ (a package's ``__init__.py`` is the package)."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    """Every module of src/airplay, by dotted name."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def component(module: str) -> str:
    """The component a module belongs to (the module docstring's rule)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "airplay"
    if len(parts) == 2 and parts[1] in COMMAND_MODULES:
        return "commands"
    if parts[1] == "commands":
        return "commands"
    return parts[1]


def package(module: str) -> str:
    """``airplay.<first part>``: the unit a private name must not leave."""
    return ".".join(module.split(".")[:2])


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_edges(modules: dict[str, Path]) -> list[Edge]:
    """Every import of an airplay module by an airplay module, and every private attribute
    read off a module imported from another package."""
    edges: list[Edge] = []
    for source, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        aliases: dict[str, str] = {}  # local name -> airplay module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "airplay" or a.name.startswith("airplay."):
                        edges.append(Edge(source, a.name, None, path, node.lineno))
                        if a.asname:
                            aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(source, is_package, node)
                if not (target == "airplay" or target.startswith("airplay.")):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in modules:  # from airplay.x import module
                        edges.append(Edge(source, sub, None, path, node.lineno))
                        aliases[a.asname or a.name] = sub
                    else:
                        edges.append(Edge(source, target, a.name, path, node.lineno))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_") and not node.attr.startswith("__")):
                edges.append(Edge(source, aliases[node.value.id], node.attr, path, node.lineno))
    return edges


def layer_of(comp: str) -> int:
    for i, layer in enumerate(LAYERS):
        if comp in layer:
            return i
    raise KeyError(comp)


def _report(title: str, edges: list[Edge]) -> str:
    lines = [title]
    for e in sorted(edges, key=lambda e: (str(e.path), e.line)):
        what = f"{e.target}.{e.name}" if e.name else e.target
        lines.append(f"  {e.where()}: {e.source} -> {what} ({component(e.source)} -> {component(e.target)})")
    return "\n".join(lines)


def test_every_component_has_a_layer():
    comps = {component(m) for m in all_modules()}
    missing = sorted(c for c in comps if not any(c in layer for layer in LAYERS))
    assert not missing, (f"components without a layer: {missing}; add each to LAYERS in {Path(__file__).name} "
                         "and to docs/architecture.md")


def test_the_architecture_page_names_every_component_and_top_level_module():
    """docs/architecture.md's table names every package (``name/``) and top-level module
    (``name.py``), and LAYERS names no component that does not exist."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    top_modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    unnamed = [f"{n}/" for n in packages if f"`{n}/`" not in page] + [n for n in top_modules if f"`{n}`" not in page]
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"
    comps = {component(m) for m in all_modules()}
    stale = sorted(c for layer in LAYERS for c in layer if c not in comps)
    assert not stale, f"LAYERS names components that do not exist: {stale}"


def test_no_import_goes_up_a_layer():
    modules = all_modules()
    up = [e for e in import_edges(modules)
          if e.target in modules and layer_of(component(e.target)) > layer_of(component(e.source))]
    assert not up, _report("imports of a higher layer (LAYERS, bottom first):", up)


def strongly_connected(graph: dict[str, set[str]], nodes: set[str]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan): the import loops of
    ``graph`` (node -> the nodes it imports) over ``nodes``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.add(w)
                if w == v:
                    break
            if len(scc) > 1:
                loops.append(scc)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return loops


def test_components_form_no_cycle():
    modules = all_modules()
    edges = [e for e in import_edges(modules) if component(e.source) != component(e.target)]
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        graph[component(e.source)].add(component(e.target))
    cycles = strongly_connected(graph, {component(m) for m in modules})
    messages = [_report(f"cycle among {sorted(scc)}:",
                        [e for e in edges if component(e.source) in scc and component(e.target) in scc])
                for scc in cycles]
    assert not cycles, "\n".join(messages)


def test_modules_import_each_other_in_no_loop():
    """No two modules of src/airplay import each other, directly or through others, counting
    every import (module level, inside functions, under TYPE_CHECKING): a function-level import
    must not hide a cycle. A package's own ``__init__`` importing its modules is not a loop."""
    modules = all_modules()
    graph: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], str] = {}
    for e in import_edges(modules):
        if e.target in modules and e.target != e.source and not e.target.startswith(e.source + "."):
            graph[e.source].add(e.target)
            where.setdefault((e.source, e.target), e.where())
    loops = [sorted(scc) for scc in strongly_connected(graph, set(modules))]
    report = [f"{' <-> '.join(loop)}: " + ", ".join(f"{a} -> {b} ({where[(a, b)]})" for a in loop
                                                     for b in sorted(graph[a] & set(loop))) for loop in loops]
    assert not loops, "modules that import each other:\n" + "\n".join(report)


def test_no_private_name_crosses_a_package():
    modules = all_modules()
    private = [e for e in import_edges(modules) if package(e.source) != package(e.target)
               and (any(p.startswith("_") for p in e.target.split(".")[1:])
                    or (e.name is not None and e.name.startswith("_") and not e.name.startswith("__")))]
    assert not private, _report("private names used from another package (make them public where they belong):",
                                private)


def test_the_contract_sees_the_known_edges():
    """The graph builder finds imports inside functions, relative imports and module imports."""
    modules = all_modules()
    edges = {(e.source, e.target) for e in import_edges(modules)}
    assert ("airplay.world.world", "airplay.render.api") in edges  # module level
    assert ("airplay.cli", "airplay.eval.runner") in edges  # inside a function
    assert component("airplay.commands.collect") == component("airplay.cli") == "commands"
    assert component("airplay.world.lockstep") == "world" and layer_of("world") < layer_of("policies")


BLOCK_ROS = """
import importlib, importlib.abc, sys

class BlockROS(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top.startswith(PREFIXES) or top.endswith("_msgs"):
            raise ImportError(f"{name} is blocked: the core must import without ROS")
        return None

sys.meta_path.insert(0, BlockROS())
for blocked in ("rclpy", "std_msgs.msg"):
    try:
        importlib.import_module(blocked)
    except ImportError:
        pass
    else:
        raise AssertionError(f"{blocked} was not blocked")
for name in MODULES:
    importlib.import_module(name)
assert not [m for m in sys.modules if m.partition(".")[0].startswith(PREFIXES) or m.endswith("_msgs")]
print(len(MODULES), "modules imported without ROS")
"""


def core_modules() -> list[str]:
    """Every module outside ``nodes/`` (the only package that may import rclpy at module level)."""
    return sorted(m for m in all_modules() if component(m) != "nodes")


def test_core_imports_without_ros():
    """Every core module imports in a fresh interpreter where rclpy, rosidl, rcl_interfaces,
    ament_index_python and every ``*_msgs`` package raise ImportError."""
    modules = core_modules()
    code = f"PREFIXES = {ROS_PREFIXES!r}\nMODULES = {modules!r}\n" + BLOCK_ROS
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, f"importing the core without ROS failed:\n{run.stderr[-4000:]}"
    assert f"{len(modules)} modules imported without ROS" in run.stdout


def _imported_names(tree: ast.AST):
    """(line, absolute module name) of every import in ``tree`` (relative imports left out)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def test_no_test_module_imports_another():
    """The tests share what they build through test/helpers/ and conftest.py: no module under test/
    imports a ``test_*`` module, and bench/ puts test/ on sys.path only for test/sitl_harness.py."""
    offenders = []
    for path in sorted((ROOT / "test").rglob("*.py")):
        for line, name in _imported_names(ast.parse(path.read_text(encoding="utf-8"))):
            if name.partition(".")[0].startswith("test_"):
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not offenders, "test modules importing test modules:\n" + "\n".join(offenders)
    on_path = sorted(path.name for path in (ROOT / "bench").glob("*.py")
                     if re.search(r"sys\.path\.(insert|append)\([^\n]*test", path.read_text(encoding="utf-8")))
    assert on_path == ["hil.py", "sitl_failures.py"], on_path  # both for test/sitl_harness.py
