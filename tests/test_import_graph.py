"""One door per framework, and no import cycle between the package's parts.

Every module's source is parsed with ``ast`` (nothing is imported): ``import`` /
``from`` statements (module level or inside functions), ``importlib.import_module("...")``
/ ``__import__("...")`` and ``sys.modules`` lookups by a literal name. Only the adapter
modules may name TensorPlay or torch; a few torch-only integrations are allowed by name,
each with the reason. A lookup in ``sys.modules`` by a computed name reaches whatever
the caller computed (a framework, typically), so it counts as naming a framework too.
"""

from __future__ import annotations

import ast
import functools
import os
from typing import Dict, List, Set, Tuple

import networkx as nx

import tensorplay_graph

PACKAGE = "tensorplay_graph"
ROOT = os.path.dirname(tensorplay_graph.__file__)
FRAMEWORKS = ("tensorplay", "torch")

#: The doors (every module under them): the framework adapters with their registry, and
#: the capture hooks that patch a framework while tracing.
ADAPTERS = ("tensorplay_graph.frameworks", "tensorplay_graph.capture.hooks")

#: Torch-only integrations that are about torch internals, not about tensors in general.
ALLOWED = {
    "tensorplay_graph.capture.dynamo_graph": "imports Dynamo's torch.fx graphs (torch.fx, HigherOrderOperator)",
    "tensorplay_graph.capture.aten_targets": "maps aten OpOverloads of Dynamo/AOT graphs to public torch callables",
    "tensorplay_graph.training.aot": "AOTAutograd (torch._dynamo.backends.common.aot_autograd)",
    "tensorplay_graph.training.decompositions": "AOTAutograd decomposition tables (torch._decomp)",
    "tensorplay_graph.training.torch_bridge": "runs our backward kernels as torch.autograd.Function nodes of AOT graphs",
    "tensorplay_graph.training.opcheck_aot": "opcheck's test_aot_dispatch_dynamic is AOTAutograd by definition",
    "tensorplay_graph.training.functional": "rewrites torch's own cross_entropy / embedding calls (aten.embedding_dense_backward)",
    "tensorplay_graph.training.attention": "torch SDPA as its fused aten forward / backward ops (torch._fused_sdp_choice)",
    "tensorplay_graph.backends.source_files": "registers generated kernel modules in sys.modules by computed name",
}


#: The bottom layers and the only parts each may import, at import time or inside a
#: function: a call-time import reaching up (prims -> training) is a layering inversion the
#: import-time cycle check cannot see.
LAYERS = {
    "ir": {"errors", "drawing"},  # drawing: GraphModule.draw renders lazily
    "prims": {"errors", "frameworks", "ir"},
}


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


@functools.lru_cache(maxsize=1)
def _modules() -> Tuple[Tuple[str, str, ast.AST], ...]:
    found = []
    for folder, _, files in os.walk(ROOT):
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                with open(path, encoding="utf-8") as handle:
                    found.append((_module_name(path), path, ast.parse(handle.read(), path)))
    return tuple(found)


def _is_adapter(module: str) -> bool:
    return any(module == door or module.startswith(door + ".") for door in ADAPTERS)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_sys_modules(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "modules"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def _literal(node: ast.AST) -> object:
    """The string a node spells, or ``None`` when it is computed at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        prefix = node.values[0].value
        if prefix.startswith(PACKAGE + "."):
            return prefix  # f"tensorplay_graph.{name}": one of ours
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.FormattedValue):
        head = node.values[0].value
        if isinstance(head, ast.Name) and head.id == "__name__":
            return PACKAGE + "."  # f"{__name__}.{name}": a submodule of the module itself
    return None


def names(module: str, path: str, tree: ast.AST) -> List[Tuple[int, str]]:
    """``(line, module name)`` for every module this module imports or looks up.

    A ``sys.modules`` lookup by a computed name is reported as ``"<computed>"``.
    """
    found: List[Tuple[int, str]] = []
    is_package = path.endswith("__init__.py")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            found.append((node.lineno, base))
            # ``from . import x`` may import the submodule x.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            is_import = ((isinstance(func, ast.Attribute) and func.attr == "import_module")
                         or (isinstance(func, ast.Name) and func.id == "__import__"))
            is_lookup = isinstance(func, ast.Attribute) and func.attr == "get" and _is_sys_modules(func.value)
            if is_lookup and node.args:
                found.append((node.lineno, _literal(node.args[0]) or "<computed>"))
            elif is_import and node.args and _literal(node.args[0]):
                # Imports by a computed name come from our own tables (lazy exports,
                # backend modules); what they may reach is checked where the names are.
                found.append((node.lineno, _literal(node.args[0])))
        elif isinstance(node, ast.Subscript) and _is_sys_modules(node.value):
            if not isinstance(node.ctx, ast.Store):
                found.append((node.lineno, _literal(node.slice) or "<computed>"))
        elif isinstance(node, ast.Compare) and any(_is_sys_modules(c) for c in node.comparators):
            found.append((node.lineno, _literal(node.left) or "<computed>"))
    return found


def _names_framework(name: str) -> bool:
    return name == "<computed>" or any(name == fw or name.startswith(fw + ".") for fw in FRAMEWORKS)


def framework_doors() -> Dict[str, List[str]]:
    """Modules outside the adapters (and the allow-list) that name a framework, with where."""
    offenders: Dict[str, List[str]] = {}
    for module, path, tree in _modules():
        if _is_adapter(module) or module in ALLOWED:
            continue
        hits = [f"line {line}: {name}" for line, name in names(module, path, tree)
                if _names_framework(name)]
        if hits:
            offenders[module] = hits
    return offenders


def _part(name: str) -> str:
    """The package part a module belongs to: ``tensorplay_graph.passes.lower`` -> ``passes``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def _import_time(tree: ast.AST) -> ast.Module:
    """The statements of a module that run when it is imported (not those inside functions)."""
    kept: List[ast.stmt] = []

    def visit(body: List[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            kept.append(stmt)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list):
                    visit([s for s in inner if isinstance(s, ast.stmt)]
                          + [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body])

    visit(tree.body)
    return ast.Module(body=[s for s in kept if isinstance(s, (ast.Import, ast.ImportFrom, ast.Expr,
                                                             ast.Assign))], type_ignores=[])


def part_graph() -> "nx.DiGraph":
    """Part -> part edges, one per import that runs at import time, between different parts.

    Imports inside functions are left out: they run after every module has loaded, which
    is how a part calls back into one that imports it (``passes`` asks ``backends`` for the
    backend list; ``backends`` reuses a pass).
    """
    graph = nx.DiGraph()
    for module, path, tree in _modules():
        source = _part(module)
        if not source:
            continue
        graph.add_node(source)
        for _, name in names(module, path, _import_time(tree)):
            if not name.startswith(PACKAGE + "."):
                continue
            target = _part(name)
            if target and target != source and os.path.exists(_part_path(target)):
                graph.add_edge(source, target)
    return graph


def _part_path(part: str) -> str:
    folder = os.path.join(ROOT, part)
    return folder if os.path.isdir(folder) else folder + ".py"


def layer_violations(modules) -> List[str]:
    """``module line N: name`` for each import (at any time) of a bottom layer's module
    that reaches a part outside what :data:`LAYERS` allows it."""
    found = []
    for module, path, tree in modules:
        allowed = LAYERS.get(_part(module))
        if allowed is None:
            continue
        for line, name in names(module, path, tree):
            target = _part(name) if name.startswith(PACKAGE + ".") else ""
            if target and target != _part(module) and target not in allowed:
                found.append(f"{module} line {line}: {name}")
    return found


def _subpackages() -> Set[str]:
    return {entry for entry in os.listdir(ROOT)
            if os.path.isfile(os.path.join(ROOT, entry, "__init__.py"))}


def test_only_adapters_name_a_framework():
    offenders = framework_doors()
    report = "\n".join(f"{module}: {', '.join(hits)}" for module, hits in sorted(offenders.items()))
    assert not offenders, (
        "these modules reach TensorPlay / torch directly; call the framework adapter "
        "(tensorplay_graph.frameworks.adapter_for) instead:\n" + report)


def test_allow_list_is_current():
    """Every allowed module exists and still needs its exemption (no stale entries)."""
    by_name = {module: (path, tree) for module, path, tree in _modules()}
    for module in ALLOWED:
        assert module in by_name, f"{module} is allow-listed but no longer exists"
        path, tree = by_name[module]
        assert any(_names_framework(name) for _, name in names(module, path, tree)), (
            f"{module} no longer names a framework: remove it from ALLOWED")


def test_no_import_cycle_between_subpackages():
    graph = part_graph().subgraph(_subpackages())
    cycles = list(nx.simple_cycles(graph))
    assert nx.is_directed_acyclic_graph(graph), (
        "import cycles between subpackages: "
        + "; ".join(" -> ".join(cycle + cycle[:1]) for cycle in cycles))


def test_bottom_layers_never_import_upward():
    """prims and ir import nothing above them, not even inside a function (prims never
    imports training, passes or backends)."""
    found = layer_violations(_modules())
    assert not found, ("these imports reach from a bottom layer up; move the shared helper "
                       "down into prims / ir instead:\n" + "\n".join(found))


def test_layer_check_sees_call_time_imports():
    source = ("from .record import Prim\n"
              "def rule(e):\n"
              "    from ..training.slices import full_index\n"
              "    from ..ir.meta import TensorMeta\n")
    found = layer_violations([("tensorplay_graph.prims.x", "x.py", ast.parse(source))])
    assert [hit.split(": ")[0] for hit in found] == ["tensorplay_graph.prims.x line 3"] * 2
    assert {hit.split(": ")[1] for hit in found} == {"tensorplay_graph.training.slices",
                                                     "tensorplay_graph.training.slices.full_index"}


def test_checker_sees_every_way_of_naming_a_framework():
    """The parser catches each spelling; a plain string that is no lookup is not a hit."""
    source = (
        "import sys, importlib\n"
        "import torch.nn\n"
        "from tensorplay import graph\n"
        "def f(name):\n"
        "    import tensorplay\n"
        "    importlib.import_module('torch._dynamo')\n"
        "    sys.modules.get('tensorplay.graph._utils')\n"
        "    sys.modules['torch']\n"
        "    'tensorplay' in sys.modules\n"
        "    sys.modules.get(name)\n"
        "    return 'torch'\n"
    )
    found = names("tensorplay_graph.x", "x.py", ast.parse(source))
    lines = sorted({line for line, name in found if _names_framework(name)})
    assert lines == [2, 3, 5, 6, 7, 8, 9, 10]
    assert ("<computed>" in {name for line, name in found if line == 10})
    assert not [name for line, name in found if line == 11]  # a string, no lookup
