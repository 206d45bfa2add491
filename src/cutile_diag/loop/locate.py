"""Find a kernel's parts in its source file: the recipe's "locate the kernel" step.

From one Python file (static analysis with ``ast``; nothing is imported):

* the ``@ct.kernel`` functions (with their decorator hints) and which one is the target
  (a module-level alias such as ``matmul_f32 = matmul`` resolves to its def);
* the launch wrapper(s): host functions that launch the target through ``ct.launch``,
  ``exhaustive_search`` (``cuda.tile.tune``) or the deprecated ``autotune_launch``;
* ``@register_impl("<op>", backend="cutile")`` registrations (TileGym's dispatcher);
* the autotune search spaces passed to those calls, with their source text;
* the target's loads/stores/gathers/scatters (what ``loop next`` names in a recipe);
* whether the module declares ``CAPTURE_SPECS`` for the target (AOT capture).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import KernelLoadError, UsageError

_MEMORY = {"load": "load", "store": "store", "gather": "gather", "scatter": "scatter",
           "load_advanced_indexing": "load", "store_advanced_indexing": "store",
           "atomic_add": "atomic", "atomic_max": "atomic", "atomic_min": "atomic", "atomic_cas": "atomic",
           "atomic_xchg": "atomic"}
_AUTOTUNE = {"exhaustive_search": 3, "autotune_launch": 2}     # call name -> index of the kernel argument


@dataclass
class KernelFunction:
    name: str
    line: int
    decorator: str
    hints: dict[str, str] = field(default_factory=dict)
    params: list[str] = field(default_factory=list)
    constants: list[str] = field(default_factory=list)


@dataclass
class LaunchSite:
    function: str            # the top-level host function containing the call
    line: int
    kind: str                # ct.launch | exhaustive_search | autotune_launch
    grid: str
    kernel: str
    args: str


@dataclass
class Registration:
    op: str
    backend: str | None
    function: str
    line: int


@dataclass
class AutotuneSpace:
    function: str
    line: int
    text: str                 # the search-space expression (and its definition, if a name)
    size: int | None          # number of configs, when the source fixes it
    sizes: list = field(default_factory=list)   # possible sizes when it depends on a branch (None: unknown)


@dataclass
class MemoryOp:
    kind: str                 # load | store | gather | scatter | atomic
    call: str                 # ct.load, ct.gather, ...
    line: int
    array: str
    text: str
    in_loop: bool
    latency: str | None = None
    allow_tma: str | None = None


@dataclass
class KernelLocation:
    path: Path
    name: str                         # as asked for
    function: str                     # the def it resolves to
    line: int
    kernels: list[KernelFunction]
    launches: list[LaunchSite]
    registrations: list[Registration]
    autotune: list[AutotuneSpace]
    memory_ops: list[MemoryOp]
    capture_specs: bool
    notes: list[str] = field(default_factory=list)

    @property
    def kernel(self) -> KernelFunction:
        return next(k for k in self.kernels if k.name == self.function)

    @property
    def wrappers(self) -> list[str]:
        return list(dict.fromkeys(s.function for s in self.launches))

    @property
    def op_names(self) -> list[str]:
        return list(dict.fromkeys(r.op for r in self.registrations))

    @property
    def autotuned(self) -> bool:
        return any(s.kind != "ct.launch" for s in self.launches)

    def to_json(self) -> dict:
        from ..output import to_jsonable
        d = {k: to_jsonable(getattr(self, k)) for k in
             ("path", "name", "function", "line", "kernels", "launches", "registrations", "autotune",
              "memory_ops", "capture_specs", "notes")}
        d["wrappers"] = self.wrappers
        d["op_names"] = self.op_names
        return d


def _src(source: str, node: ast.AST, limit: int = 240) -> str:
    text = ast.get_source_segment(source, node) or ast.unparse(node)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _CtNames:
    """How the file spells cuda.tile (``ct``) and its imported members."""

    def __init__(self, tree: ast.Module):
        self.aliases: set[str] = set()
        self.members: dict[str, str] = {}
        self.tune_members: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "cuda.tile":
                        self.aliases.add(a.asname or "cuda.tile")
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    local = a.asname or a.name
                    if node.module == "cuda" and a.name == "tile":
                        self.aliases.add(local)
                    elif node.module == "cuda.tile":
                        self.members[local] = a.name
                    elif node.module in ("cuda.tile.tune", "cuda.tile_experimental"):
                        self.tune_members[local] = a.name

    def member(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.members.get(node.id) or self.tune_members.get(node.id)
        if isinstance(node, ast.Attribute):
            base = _dotted(node.value)
            if base in self.aliases:
                return node.attr
            if base and any(base == f"{a}.tune" for a in self.aliases):
                return node.attr
            if base in ("cuda.tile_experimental", "ct_experimental"):
                return node.attr
        return None


def _kernel_decorator(ct: _CtNames, dec: ast.expr) -> tuple[bool, dict[str, str]]:
    target = dec.func if isinstance(dec, ast.Call) else dec
    if ct.member(target) != "kernel":
        return False, {}
    hints = {}
    if isinstance(dec, ast.Call):
        for kw in dec.keywords:
            if kw.arg:
                hints[kw.arg] = ast.unparse(kw.value)
    return True, hints


def module_aliases(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level names bound exactly once to an expression (``ConstInt = ct.Constant[int]``,
    ``ConstInt: TypeAlias = ...``, ``type ConstInt = ...``)."""
    seen: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    seen.setdefault(t.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            seen.setdefault(node.target.id, []).append(node.value)
        elif type(node).__name__ == "TypeAlias" and isinstance(getattr(node, "name", None), ast.Name):
            seen.setdefault(node.name.id, []).append(node.value)
    return {n: v[0] for n, v in seen.items() if len(v) == 1}


def _resolve(node: ast.expr | None, aliases: dict[str, ast.expr]) -> ast.expr | None:
    """Follow module-level aliases: ``ConstInt`` -> ``ct.Constant[int]``; ``C[int]`` with
    ``C = ct.Constant`` -> a subscript of ``ct.Constant``."""
    for _ in range(8):                       # alias chains are short; a cycle must not hang
        if isinstance(node, ast.Name) and node.id in aliases:
            node = aliases[node.id]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            node = ast.Subscript(value=aliases[node.value.id], slice=node.slice, ctx=ast.Load())
        else:
            break
    return node


def _constant_params(ct: _CtNames, fn: ast.FunctionDef, aliases: dict[str, ast.expr] | None = None) -> list[str]:
    out = []
    for a in fn.args.args:
        ann = _resolve(a.annotation, aliases or {})
        if isinstance(ann, ast.Subscript) and ct.member(ann.value) == "Constant":
            out.append(a.arg)
        elif ann is not None and ct.member(ann) == "Constant":
            out.append(a.arg)
    return out


def _register_impl(fn: ast.FunctionDef) -> list[Registration]:
    out = []
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call) and (_dotted(dec.func) or "").split(".")[-1] == "register_impl":
            op = dec.args[0].value if dec.args and isinstance(dec.args[0], ast.Constant) else None
            backend = None
            for kw in dec.keywords:
                if kw.arg == "backend" and isinstance(kw.value, ast.Constant):
                    backend = kw.value.value
            if len(dec.args) > 1 and isinstance(dec.args[1], ast.Constant):
                backend = dec.args[1].value
            if isinstance(op, str):
                out.append(Registration(op, backend, fn.name, fn.lineno))
    return out


def locate(path: str | Path, kernel_name: str, *, source: str | None = None) -> KernelLocation:
    path = Path(path).resolve()
    if source is None:
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
        source = path.read_text()
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise KernelLoadError(f"{path}:{e.lineno}: cannot parse: {e.msg}") from None
    ct = _CtNames(tree)
    if not ct.aliases and not ct.members:
        raise KernelLoadError(f"{path} does not import cuda.tile", hint="is this a cuTile kernel file?")

    type_aliases = module_aliases(tree)
    kernels: list[KernelFunction] = []
    defs: dict[str, ast.FunctionDef] = {}
    aliases: dict[str, str] = {}
    registrations: list[Registration] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            defs[node.name] = node
            registrations += _register_impl(node)
            for dec in node.decorator_list:
                ok, hints = _kernel_decorator(ct, dec)
                if ok:
                    kernels.append(KernelFunction(node.name, node.lineno, "@" + _src(source, dec), hints,
                                                  [a.arg for a in node.args.args],
                                                  _constant_params(ct, node, type_aliases)))
                    break
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    aliases[t.id] = node.value.id
    kernel_names = {k.name for k in kernels}
    target = kernel_name
    seen = set()
    while target in aliases and target not in kernel_names and target not in seen:
        seen.add(target)
        target = aliases[target]
    if target not in kernel_names:
        known = ", ".join(sorted(kernel_names)) or "none"
        raise KernelLoadError(f"{path}: no @ct.kernel named '{kernel_name}'", hint=f"kernels in this file: {known}")
    names_for_target = {target} | {a for a, t in aliases.items() if t == target}

    launches: list[LaunchSite] = []
    autotune: list[AutotuneSpace] = []
    top_level = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name not in kernel_names]

    def refers(node: ast.AST) -> bool:
        d = _dotted(node)
        if d and d.split(".")[-1] in names_for_target:
            return True
        return any(isinstance(n, ast.Name) and n.id in names_for_target for n in ast.walk(node))

    other_kernels = (kernel_names | set(aliases)) - names_for_target

    def mentions_target(fn: ast.FunctionDef, kern: ast.AST) -> bool:
        # a launch of a variable (a hinted or cached copy) counts when the function names the target;
        # a launch that names another kernel of the file never does
        d = _dotted(kern)
        if d and d.split(".")[-1] in other_kernels:
            return False
        return any(isinstance(n, ast.Name) and n.id in names_for_target for n in ast.walk(fn))

    for fn in top_level:
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            m = ct.member(call.func) or (_dotted(call.func) or "").split(".")[-1]
            if m == "launch" and ct.member(call.func) == "launch" and len(call.args) >= 3:
                kern = call.args[2]
                # the kernel may be a hinted copy held in a variable; accept it when the function names the kernel
                if refers(kern) or mentions_target(fn, kern):
                    launches.append(LaunchSite(fn.name, call.lineno, "ct.launch", _src(source, call.args[1]),
                                               _src(source, kern),
                                               _src(source, call.args[3]) if len(call.args) > 3 else ""))
            elif m in _AUTOTUNE:
                idx = _AUTOTUNE[m]
                kern = call.args[idx] if len(call.args) > idx else next(
                    (k.value for k in call.keywords if k.arg == "kernel"), None)
                if kern is None or not (refers(kern) or mentions_target(fn, kern)):
                    continue
                grid_i = 2 if m == "exhaustive_search" else 1
                launches.append(LaunchSite(fn.name, call.lineno, m,
                                           _src(source, call.args[grid_i]) if len(call.args) > grid_i else "",
                                           _src(source, kern), ""))
                space_node = call.args[0] if (m == "exhaustive_search" and call.args) else next(
                    (k.value for k in call.keywords if k.arg == "search_space"),
                    call.args[5] if m == "autotune_launch" and len(call.args) > 5 else None)
                if space_node is not None:
                    autotune.append(_space(source, tree, fn, space_node, type_aliases))

    launches.sort(key=lambda s: s.line)
    autotune.sort(key=lambda a: a.line)
    memory_ops = _memory_ops(source, ct, defs[target])
    capture_specs = _has_capture_specs(tree, kernel_name) or _has_capture_specs(tree, target)
    notes = []
    if not launches:
        notes.append(f"no host function in {path.name} launches {target}: give the launch wrapper with --wrapper")
    kfn = defs[target]
    return KernelLocation(path=path, name=kernel_name, function=target, line=kfn.lineno, kernels=kernels,
                          launches=launches, registrations=registrations, autotune=autotune,
                          memory_ops=memory_ops, capture_specs=capture_specs, notes=notes)


def _space(source: str, tree: ast.Module, fn: ast.FunctionDef, node: ast.expr,
           bound: dict[str, ast.expr]) -> AutotuneSpace:
    text = _src(source, node)
    # a name: show where the list is built (in the function, else at module level)
    if isinstance(node, ast.Name):
        for scope in (fn, tree):
            for n in ast.walk(scope):
                if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets):
                    text = f"{node.id} = {_src(source, n.value)}"
                    break
            else:
                continue
            break
    sizes = sorted(_SpaceSize(tree, fn, bound).sizes(node), key=lambda x: (x is None, x or 0))
    size = sizes[0] if len(sizes) == 1 else None
    return AutotuneSpace(fn.name, node.lineno, text, size, sizes if len(sizes) > 1 else [])


class _SpaceSize:
    """How many configurations a search-space expression holds, where the source says so
    statically: literal lists, comprehensions over literals, ``list(gen())`` of a module-level
    generator (one size per branch it can take).  ``None`` in a result = not knowable."""

    MAX_PATHS = 64

    def __init__(self, tree: ast.Module, fn: ast.FunctionDef, bound: dict[str, ast.expr]):
        self.module = bound          # module_aliases(tree): names bound once at module level
        self.local = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                self.local.setdefault(n.targets[0].id, n.value)       # the first binding: the full space
        self.defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.depth = 0

    def sizes(self, node: ast.expr | None) -> set[int | None]:
        self.depth += 1
        try:
            return {None} if self.depth > 12 else self._sizes(node)
        finally:
            self.depth -= 1

    def _sizes(self, node) -> set[int | None]:
        if isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            return {len(node.elts)}
        if isinstance(node, ast.Name):
            v = self.local.get(node.id, self.module.get(node.id))
            return self.sizes(v) if v is not None else {None}
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("list", "tuple") and len(node.args) == 1:
                return self.sizes(node.args[0])
            if node.func.id == "range" and node.args and all(isinstance(a, ast.Constant) and type(a.value) is int
                                                             for a in node.args):
                return {len(range(*[a.value for a in node.args]))}
            fdef = self.defs.get(node.func.id)
            if fdef is not None and any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(fdef)):
                return {c for c, _ in self._block(fdef.body)}
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            total: set[int | None] = {1}
            for g in node.generators:
                if g.ifs:
                    return {None}
                n = self.sizes(g.iter)
                total = {None if (a is None or b is None) else a * b for a in total for b in n}
            return total
        return {None}

    # generator bodies: the set of (configs yielded, returned) over the paths through them
    def _block(self, stmts) -> set[tuple[int | None, bool]]:
        paths = {(0, False)}
        for st in stmts:
            nxt = set()
            for c, done in paths:
                if done:
                    nxt.add((c, done))
                    continue
                for d, ret in self._stmt(st):
                    nxt.add((None if c is None or d is None else c + d, ret))
            paths = nxt if len(nxt) <= self.MAX_PATHS else {(None, False)}
        return paths

    def _stmt(self, st) -> set[tuple[int | None, bool]]:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Yield):
            return {(1, False)}
        if isinstance(st, ast.Return):
            return {(0, True)}
        if isinstance(st, ast.If):
            return self._block(st.body) | self._block(st.orelse)
        yields = any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(st))
        if not yields:
            return {(0, False)}
        if isinstance(st, ast.For) and not st.orelse:
            body = self._block(st.body)
            if len(body) == 1 and not next(iter(body))[1]:
                per = next(iter(body))[0]
                return {(None if n is None or per is None else n * per, False) for n in self.sizes(st.iter)}
        return {(None, False)}


def _memory_ops(source: str, ct: _CtNames, fn: ast.FunctionDef) -> list[MemoryOp]:
    loops: list[ast.AST] = [n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While))]
    in_loop_ids = {id(c) for lp in loops for c in ast.walk(lp) if isinstance(c, ast.Call) and lp is not c}
    out = []
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        m = ct.member(call.func)
        if m not in _MEMORY:
            continue
        kw = {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}
        out.append(MemoryOp(_MEMORY[m], _dotted(call.func) or m, call.lineno,
                            ast.unparse(call.args[0]) if call.args else "", _src(source, call),
                            id(call) in in_loop_ids, kw.get("latency"), kw.get("allow_tma")))
    out.sort(key=lambda o: o.line)
    return out


def _has_capture_specs(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CAPTURE_SPECS"
                                                for t in node.targets):
            if isinstance(node.value, ast.Dict):
                return any(isinstance(k, ast.Constant) and k.value == name for k in node.value.keys)
            return True       # built dynamically: let capture decide
    return False


def parse_ref(ref: str) -> tuple[Path, str]:
    """``path/file.py::kernel`` -> (absolute path, kernel name)."""
    if "::" not in ref:
        raise UsageError(f"'{ref}' does not name a kernel", hint="give FILE.py::KERNEL, e.g. ops/softmax.py::softmax")
    path, name = ref.rsplit("::", 1)
    if not name:
        raise UsageError(f"'{ref}' has no kernel name after '::'")
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise UsageError(f"{p}: no such file")
    return p, name
