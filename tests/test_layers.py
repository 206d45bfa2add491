"""The package's layers (docs/ARCHITECTURE.md, "Layers"), read from src/ with ``ast``.

Every import between modules of ``cutile_diag`` points down (or stays in its layer), imports
between modules of one layer form no loop, and an import inside a function is either of an
optional or heavy dependency, or listed in ``DEFERRED`` with its reason.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

SRC = Path(__file__).resolve().parents[1] / "src" / "cutile_diag"
_PACKAGES = {"cutile_diag." + ".".join(p.parent.relative_to(SRC).parts) for p in SRC.rglob("__init__.py")}

# lowest first; a module may import from its own layer and the layers below it.  Each package sits
# in one layer: what runs a workload (measures it, captures its launch, observes a command) is in
# ``measure``, above ``workloads``.
LAYERS = [
    ("errors", "output", "procs", "toolchain", "nvml", "examples", "workload", "pytest_plugin"),
    ("ir_parsers", "source", "ledger"),
    ("capture", "transforms"),
    ("harness", "replay"),
    ("diff", "roofline"),
    ("workloads",),
    ("measure",),
    ("diagnose",),
    ("loop",),
    ("campaign",),
    ("commands",),
    ("cli", "__main__"),
]
LAYER = {part: i for i, names in enumerate(LAYERS) for part in names}

# imports of cutile_diag modules left inside functions on purpose: importer (a module, or a package
# with its modules) -> (the imported modules it may defer, as prefixes; why)
_ALL = ("cutile_diag",)
DEFERRED = {
    "cutile_diag.loop.recipe": (("cutile_diag.loop.backends",), "the simulated backend imports recipe"),
    "cutile_diag.cli": (("cutile_diag.commands",), "commands are discovered when the parser is built"),
    "cutile_diag.commands": (_ALL, "cli imports every command to build its parser; a command loads its stage "
                                   "(libcst, networkx, the GPU stack) only when it runs"),
    "cutile_diag.loop.api": (_ALL, "the loop's entry point: `loop --help` and `optimize --help` stay light; "
                                   "each request loads the parts it uses"),
    "cutile_diag.loop.backends": (_ALL, "a backend loads the measuring stack (roofline, harness, workloads) in the "
                                        "process that measures"),
    "cutile_diag.loop.compile_pool": (("cutile_diag.capture", "cutile_diag.measure.capture"),
                                      "the capture stack loads in the compile child; the runner, costs and the "
                                      "measuring worker import this module and stay light"),
    "cutile_diag.loop": (("cutile_diag.transforms", "cutile_diag.roofline", "cutile_diag.diagnose", "cutile_diag.measure",
                          "cutile_diag.diff", "cutile_diag.source.model", "cutile_diag.source.locate",
                          "cutile_diag.source.analysis"),
                         "the loop's session and runner load without yaml, libcst or networkx: the rewriting, "
                         "diagnosis, diff and roofline stacks load when a step uses them"),
    "cutile_diag.workloads": (("cutile_diag.workloads",), "built-in workloads load when one is named"),
    "cutile_diag.harness": (("cutile_diag.errors", "cutile_diag.nvml"), "NVML loads in the measuring subprocess"),
    "cutile_diag.measure": (("cutile_diag.measure", "cutile_diag.workloads"),
                            "the child's runner and the workload load in the child that measures"),
}

def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    """(imported module, line, inside a function) for each import of cutile_diag in ``path``."""
    mod = _module(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if inner and isinstance(node, ast.Try) and child in node.body:
                inner = "optional"             # guarded: the caller degrades when it fails
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.startswith("cutile_diag"):
                    if target == "cutile_diag" or not child.module:     # `from . import x`
                        for a in child.names:
                            yield f"{target}.{a.name}", child.lineno, inner
                    else:
                        yield target, child.lineno, inner
            elif isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.startswith("cutile_diag"):
                        yield a.name, child.lineno, inner
            yield from visit(child, inner)

    yield from visit(tree, False)


def _layer(module: str) -> int | None:
    parts = module.split(".")[1:]
    if module in _PACKAGES:
        parts.append("__init__")
    for n in (2, 1):
        if ".".join(parts[:n]) in LAYER:
            return LAYER[".".join(parts[:n])]
    return None


def _sources():
    return [p for p in sorted(SRC.rglob("*.py"))
            if "_observer_site" not in p.parts and "audit" not in p.parts]    # run in other processes


def test_every_package_has_a_layer():
    tops = {p.relative_to(SRC).parts[0].removesuffix(".py") for p in _sources()} - {"__init__"}
    assert sorted(t for t in tops if t not in LAYER) == []


def test_imports_point_down():
    up = []
    for path in _sources():
        mod = _module(path)
        for target, line, _ in _imports(path):
            a, b = _layer(mod), _layer(target)
            if a is not None and b is not None and b > a:
                up.append(f"{path.relative_to(SRC)}:{line} imports {target} (layer {b} above {a})")
    assert up == []


def test_no_import_loops():
    g = nx.DiGraph()
    for path in _sources():
        mod = _module(path)
        for target, _, _ in _imports(path):
            if target != mod:
                g.add_edge(mod, target)
    # a package's __init__ re-exporting its modules is not a loop of the modules themselves
    g.remove_edges_from([(a, b) for a, b in list(g.edges) if b.startswith(a + ".")])
    assert [sorted(c) for c in nx.simple_cycles(g)] == []


def _deferred(importer: str, target: str) -> bool:
    for who, (targets, _why) in DEFERRED.items():
        if importer == who or importer.startswith(who + "."):
            return any(target == x or target.startswith(x + ".") for x in targets)
    return False


def test_imports_inside_functions_are_deferred_on_purpose():
    inner = []
    for path in _sources():
        mod = _module(path)
        for target, line, in_function in _imports(path):
            if in_function is True and not _deferred(mod, target):
                inner.append(f"{path.relative_to(SRC)}:{line} imports {target} inside a function")
    assert inner == []
