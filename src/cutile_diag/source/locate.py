"""Find a kernel's parts in its source file: the recipe's "locate the kernel" step.

From one Python file, on the same libcst model the transforms use (``source/model.py``:
``parse_module``, ``CtNames`` for how the file spells cuda.tile, and the one alias rule
``module_assignments`` — a module-level name bound once); nothing is imported:

* the ``@ct.kernel`` functions (with their decorator hints) and which one is the target
  (a module-level alias such as ``matmul_f32 = matmul`` resolves to its def);
* the launch wrapper(s): host functions that launch the target through ``ct.launch``,
  ``exhaustive_search`` (``cuda.tile.tune``) or the deprecated ``autotune_launch`` (the sites of
  ``model.launch_calls`` as ``model.LaunchSite``, with their text view for people);
* ``@register_impl("<op>", backend="cutile")`` registrations (TileGym's dispatcher);
* the autotune search spaces passed to those calls, with their source text;
* the target's loads/stores/gathers/scatters (what ``loop next`` names in a recipe);
* whether the module declares ``CAPTURE_SPECS`` for the target (AOT capture).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ..errors import KernelLoadError, UsageError
from .model import (TUNE_CALLS, CtNames, LaunchSite, TransformError, dotted, launch_arguments, launch_calls,
                    module_assignments, parsed)
from ..output import to_jsonable

_MEMORY = {"load": "load", "store": "store", "gather": "gather", "scatter": "scatter",
           "load_advanced_indexing": "load", "store_advanced_indexing": "store",
           "atomic_add": "atomic", "atomic_max": "atomic", "atomic_min": "atomic", "atomic_cas": "atomic",
           "atomic_xchg": "atomic", "atomic_and": "atomic", "atomic_or": "atomic", "atomic_xor": "atomic"}


@dataclass
class KernelFunction:
    """A ``@ct.kernel`` def of the file: decorator, hints, parameters and constant parameters."""
    name: str
    line: int
    decorator: str
    hints: dict[str, str] = field(default_factory=dict)
    params: list[str] = field(default_factory=list)
    constants: list[str] = field(default_factory=list)


@dataclass
class Registration:
    """A ``@register_impl(op, backend=...)`` decorator (TileGym's dispatcher) on a function."""
    op: str
    backend: str | None
    function: str
    line: int


@dataclass
class AutotuneSpace:
    """An autotune search space over a kernel, with its size when the source fixes it."""
    function: str
    line: int
    text: str                 # the search-space expression (and its definition, if a name)
    size: int | None          # number of configs, when the source fixes it
    sizes: list = field(default_factory=list)   # possible sizes when it depends on a branch (None: unknown)


@dataclass
class MemoryOp:
    """A memory call in the kernel (ct.load, ct.gather...), its array and whether it is in a loop."""
    kind: str                 # load | store | gather | scatter | atomic
    call: str                 # ct.load, ct.gather, ...
    line: int
    array: str
    text: str
    in_loop: bool
    latency: str | None = None
    allow_tma: str | None = None
    index_rank: int | None = None      # components of the index tuple (a gather's bare index: 1)


@dataclass
class KernelLocation:
    """Where a kernel's parts are in its file: the def, launches, registrations, autotune spaces,
    memory ops and CAPTURE_SPECS."""
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
    shape_reads: list[str] = field(default_factory=list)   # names whose .shape / .dtype the kernel reads

    @property
    def kernel(self) -> KernelFunction:
        """The kernel def the name resolves to."""
        return next(k for k in self.kernels if k.name == self.function)

    @property
    def wrappers(self) -> list[str]:
        """The host functions that launch the kernel, in order, each once."""
        return list(dict.fromkeys(s.function for s in self.launches))

    @property
    def op_names(self) -> list[str]:
        """The ops the file registers, each once."""
        return list(dict.fromkeys(r.op for r in self.registrations))

    @property
    def autotuned(self) -> bool:
        """Whether a launch goes through an autotuner rather than ``ct.launch``."""
        return any(s.kind != "ct.launch" for s in self.launches)

    def to_json(self) -> dict:
        """The location as JSON, wrappers and op names included."""
        d = {k: to_jsonable(getattr(self, k)) for k in
             ("path", "name", "function", "line", "kernels", "launches", "registrations", "autotune",
              "memory_ops", "capture_specs", "notes")}
        d["wrappers"] = self.wrappers
        d["op_names"] = self.op_names
        return d


class _File:
    """The parsed file with positions and parents, and how it spells cuda.tile: the transforms'
    ``CtNames`` (one model of the names), plus the tune module's members imported anywhere.
    (libcst's QualifiedNameProvider would answer the same question at about twice the cost of
    the parse on TileGym's larger files, on every ``loop next``.)"""

    def __init__(self, source: str, path: Path):
        try:
            p = parsed(source)            # the transforms' parse of the same text, once per process
        except TransformError as e:
            raise KernelLoadError(f"{path}: {e.one_line()}") from None
        self.source = source
        self.module = module = p.module
        self.pos, self.parents = p.pos, p.parents
        self.ct = CtNames.scan(module)
        self.tune: dict[str, str] = {}
        for n in _walk(module):
            if isinstance(n, cst.ImportFrom) and n.module is not None and not isinstance(n.names, cst.ImportStar) \
                    and dotted(n.module) in ("cuda.tile.tune", "cuda.tile_experimental"):
                self.tune.update({dotted(a.asname.name) if a.asname else dotted(a.name): dotted(a.name)
                                  for a in n.names})
        self.bound = {n: v[0] for n, v in module_assignments(module).items() if len(v) == 1}

    def line(self, node: cst.CSTNode) -> int:
        return self.pos[node].start.line

    def col(self, node: cst.CSTNode) -> int:
        return self.pos[node].start.column

    def text(self, node: cst.CSTNode, limit: int = 240) -> str:
        t = " ".join(self.module.code_for_node(node).split())
        return t if len(t) <= limit else t[: limit - 1] + "…"

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node).strip()

    def member(self, node: cst.CSTNode) -> str | None:
        """``load`` for any spelling of ``cuda.tile.load``; ``exhaustive_search`` for the tune
        module's (or ``cuda.tile_experimental``'s) members."""
        m = self.ct.member(node)
        if m is not None:
            return m
        if isinstance(node, cst.Name):
            return self.tune.get(node.value)
        if isinstance(node, cst.Attribute):
            base = dotted(node.value)
            if base and (base in ("cuda.tile_experimental", "ct_experimental")
                         or any(base == f"{a}.tune" for a in self.ct.module_aliases)):
                return node.attr.value
        return None

    def imports_cuda_tile(self) -> bool:
        return bool(self.ct.module_aliases or self.ct.members)

    def in_loop(self, node: cst.CSTNode, stop: cst.CSTNode) -> bool:
        p = self.parents.get(node)
        while p is not None and p is not stop:
            if isinstance(p, (cst.For, cst.While)):
                return True
            p = self.parents.get(p)
        return False


def _walk(root: cst.CSTNode):
    """Every node under ``root``, depth first in source order."""
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _calls(root: cst.CSTNode) -> list[cst.Call]:
    return [n for n in _walk(root) if isinstance(n, cst.Call)]


def _positional(call: cst.Call) -> list[cst.BaseExpression]:
    return [a.value for a in call.args if a.keyword is None and not a.star]


def _keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _names(root: cst.CSTNode) -> set[str]:
    return {n.value for n in _walk(root) if isinstance(n, cst.Name)}


def _kernel_decorator(f: _File, dec: cst.Decorator) -> tuple[bool, dict[str, str]]:
    d = dec.decorator
    target = d.func if isinstance(d, cst.Call) else d
    if f.member(target) != "kernel":
        return False, {}
    hints = {}
    if isinstance(d, cst.Call):
        for a in d.args:
            if a.keyword is not None:
                hints[a.keyword.value] = f.code(a.value)
    return True, hints


def _resolve(f: _File, node: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """Follow module-level aliases (the transforms' rule): ``ConstInt`` -> ``ct.Constant[int]``;
    ``C[int]`` with ``C = ct.Constant`` keeps its subscript."""
    for _ in range(8):                       # alias chains are short; a cycle must not hang
        if isinstance(node, cst.Name) and node.value in f.bound:
            node = f.bound[node.value]
        elif isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and node.value.value in f.bound:
            node = node.with_changes(value=f.bound[node.value.value])
        else:
            break
    return node


def _constant_params(f: _File, fn: cst.FunctionDef) -> list[str]:
    out = []
    for p in fn.params.params:
        ann = _resolve(f, p.annotation.annotation if p.annotation else None)
        base = ann.value if isinstance(ann, cst.Subscript) else ann
        if base is not None and f.member(base) == "Constant":
            out.append(p.name.value)
    return out


def _register_impl(f: _File, fn: cst.FunctionDef) -> list[Registration]:
    out = []
    for dec in fn.decorators:
        d = dec.decorator
        if isinstance(d, cst.Call) and (dotted(d.func) or "").split(".")[-1] == "register_impl":
            pos = _positional(d)
            op = pos[0].evaluated_value if pos and isinstance(pos[0], cst.SimpleString) else None
            backend = None
            kw = _keyword(d, "backend")
            if isinstance(kw, cst.SimpleString):
                backend = kw.evaluated_value
            if len(pos) > 1 and isinstance(pos[1], cst.SimpleString):
                backend = pos[1].evaluated_value
            if isinstance(op, str):
                out.append(Registration(op, backend, fn.name.value, f.line(fn.name)))
    return out


def locate(path: str | Path, kernel_name: str, *, source: str | None = None) -> KernelLocation:
    """Locate ``kernel_name`` in the file at ``path`` (or in ``source``): a missing file, or one
    that does not import cuda.tile, is one line."""
    path = Path(path).resolve()
    if source is None:
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
        source = path.read_text()
    f = _File(source, path)
    if not f.imports_cuda_tile():
        raise KernelLoadError(f"{path} does not import cuda.tile", hint="is this a cuTile kernel file?")

    kernels: list[KernelFunction] = []
    defs: dict[str, cst.FunctionDef] = {}
    registrations: list[Registration] = []
    for node in f.module.body:
        if isinstance(node, cst.FunctionDef):
            defs[node.name.value] = node
            registrations += _register_impl(f, node)
            for dec in node.decorators:
                ok, hints = _kernel_decorator(f, dec)
                if ok:
                    kernels.append(KernelFunction(node.name.value, f.line(node.name), "@" + f.text(dec.decorator),
                                                  hints, [p.name.value for p in node.params.params],
                                                  _constant_params(f, node)))
                    break
    kernel_names = {k.name for k in kernels}
    # a kernel alias (``matmul_f32 = matmul``): the one alias rule, a name bound once to a name
    aliases = {n: v.value for n, v in f.bound.items() if isinstance(v, cst.Name)}
    target, seen = kernel_name, set()
    while target in aliases and target not in kernel_names and target not in seen:
        seen.add(target)
        target = aliases[target]
    if target not in kernel_names:
        known = ", ".join(sorted(kernel_names)) or "none"
        raise KernelLoadError(f"{path}: no @ct.kernel named '{kernel_name}'", hint=f"kernels in this file: {known}")
    names_for_target = {target} | {a for a, t in aliases.items() if t == target}
    other_kernels = (kernel_names | set(aliases)) - names_for_target

    def refers(node: cst.CSTNode) -> bool:
        d = dotted(node)
        if d and d.split(".")[-1] in names_for_target:
            return True
        return bool(_names(node) & names_for_target)

    def mentions_target(fn: cst.FunctionDef, kern: cst.CSTNode) -> bool:
        # a launch of a variable (a hinted or cached copy) counts when the function names the target;
        # a launch that names another kernel of the file never does
        d = dotted(kern)
        if d and d.split(".")[-1] in other_kernels:
            return False
        return bool(_names(fn) & names_for_target)

    launches: list[LaunchSite] = []
    autotune: list[AutotuneSpace] = []

    def member(call: cst.Call) -> str | None:
        m = f.member(call.func)
        if m:
            return m
        last = (dotted(call.func) or "").split(".")[-1]
        return last if last in TUNE_CALLS else None

    # host functions: the module's, and the methods of its classes (the library style launches in an
    # autograd.Function's forward/backward, called through apply by the op's module-level function)
    hosts = [(n, "") for n in f.module.body if isinstance(n, cst.FunctionDef) and n.name.value not in kernel_names]
    hosts += [(m, c.name.value) for c in f.module.body if isinstance(c, cst.ClassDef)
              for m in c.body.body if isinstance(m, cst.FunctionDef)]
    for fn, owner in hosts:
        for site in launch_calls(fn, member, f.line):
            kern = site.kernel_node
            # the kernel may be a hinted copy held in a variable; accept it when the function names the kernel
            if kern is None or not (refers(kern) or mentions_target(fn, kern)):
                continue
            site.func, site.owner = fn, owner
            launches.append(site.with_text(f.text))
            space = (launch_arguments(site.call, site.kind) or {}).get("search_space")
            if space is not None:
                autotune.append(_space(f, fn, space))

    launches.sort(key=lambda s: s.line)
    autotune.sort(key=lambda a: a.line)
    kfn = defs[target]
    capture_specs = _has_capture_specs(f, kernel_name) or _has_capture_specs(f, target)
    notes = []
    if not launches:
        notes.append(f"no host function in {path.name} launches {target}: give the launch wrapper with --wrapper")
    return KernelLocation(path=path, name=kernel_name, function=target, line=f.line(kfn.name), kernels=kernels,
                          launches=launches, registrations=registrations, autotune=autotune,
                          memory_ops=_memory_ops(f, kfn), capture_specs=capture_specs, notes=notes,
                          shape_reads=_shape_reads(kfn))


def _space(f: _File, fn: cst.FunctionDef, node: cst.BaseExpression) -> AutotuneSpace:
    text = f.text(node)
    # a name: show where the list is built (in the function, else at module level)
    if isinstance(node, cst.Name):
        for scope in (fn, f.module):
            for n in _walk(scope):
                if isinstance(n, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == node.value
                                                     for t in n.targets):
                    text = f"{node.value} = {f.text(n.value)}"
                    break
            else:
                continue
            break
    sizes = sorted(_SpaceSize(f, fn).sizes(node), key=lambda x: (x is None, x or 0))
    size = sizes[0] if len(sizes) == 1 else None
    return AutotuneSpace(fn.name.value, f.line(node), text, size, sizes if len(sizes) > 1 else [])


def _yields(node: cst.CSTNode) -> bool:
    return any(isinstance(n, cst.Yield) for n in _walk(node))


class _SpaceSize:
    """How many configurations a search-space expression holds, where the source says so
    statically: literal lists, comprehensions over literals, ``list(gen())`` of a module-level
    generator (one size per branch it can take).  ``None`` in a result = not knowable."""

    MAX_PATHS = 64

    def __init__(self, f: _File, fn: cst.FunctionDef):
        self.module = f.bound        # names bound once at module level
        self.local: dict[str, cst.BaseExpression] = {}
        for n in _walk(fn):
            if isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
                self.local.setdefault(n.targets[0].target.value, n.value)    # the first binding: the full space
        self.defs = {n.name.value: n for n in f.module.body if isinstance(n, cst.FunctionDef)}
        self.depth = 0

    def sizes(self, node) -> set[int | None]:
        self.depth += 1
        try:
            return {None} if self.depth > 12 else self._sizes(node)
        finally:
            self.depth -= 1

    def _sizes(self, node) -> set[int | None]:
        if isinstance(node, (cst.List, cst.Tuple)) and not any(isinstance(e, cst.StarredElement)
                                                               for e in node.elements):
            return {len(node.elements)}
        if isinstance(node, cst.Name):
            v = self.local.get(node.value, self.module.get(node.value))
            return self.sizes(v) if v is not None else {None}
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            args = _positional(node)
            name = node.func.value
            if name in ("list", "tuple") and len(node.args) == 1 and args:
                return self.sizes(args[0])
            if name == "range" and args and len(args) == len(node.args) \
                    and all(isinstance(a, cst.Integer) for a in args):
                return {len(range(*[int(a.evaluated_value) for a in args]))}
            fdef = self.defs.get(name)
            if fdef is not None and _yields(fdef):
                return {c for c, _ in self._block(_statements(fdef.body))}
        if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
            total: set[int | None] = {1}
            comp = node.for_in
            while comp is not None:
                if comp.ifs:
                    return {None}
                n = self.sizes(comp.iter)
                total = {None if (a is None or b is None) else a * b for a in total for b in n}
                comp = comp.inner_for_in
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
        if isinstance(st, cst.Expr) and isinstance(st.value, cst.Yield) and not isinstance(st.value.value, cst.From):
            return {(1, False)}                     # `yield x`; a `yield from` adds an unknown number
        if isinstance(st, cst.Return):
            return {(0, True)}
        if isinstance(st, cst.If):
            orelse = st.orelse
            other = [orelse] if isinstance(orelse, cst.If) else _statements(orelse.body) if orelse else []
            return self._block(_statements(st.body)) | self._block(other)
        if not _yields(st):
            return {(0, False)}
        if isinstance(st, cst.For) and st.orelse is None:
            body = self._block(_statements(st.body))
            if len(body) == 1 and not next(iter(body))[1]:
                per = next(iter(body))[0]
                return {(None if n is None or per is None else n * per, False) for n in self.sizes(st.iter)}
        return {(None, False)}


def _statements(block) -> list:
    """A block's statements, simple statement lines split into their small statements."""
    out = []
    for s in getattr(block, "body", ()):
        out += list(s.body) if isinstance(s, cst.SimpleStatementLine) else [s]
    return out


def _memory_ops(f: _File, fn: cst.FunctionDef) -> list[MemoryOp]:
    out = []
    for call in _calls(fn.body):
        m = f.member(call.func)
        if m not in _MEMORY:
            continue
        kw = {a.keyword.value: f.code(a.value) for a in call.args if a.keyword is not None}
        args = _positional(call)
        idx = args[1] if len(args) > 1 else (_keyword(call, "index") or _keyword(call, "indices"))
        rank = len(idx.elements) if isinstance(idx, cst.Tuple) else \
            1 if idx is not None and _MEMORY[m] in ("gather", "scatter") else None
        op = MemoryOp(_MEMORY[m], dotted(call.func) or m, f.line(call), f.code(args[0]) if args else "",
                      f.text(call), f.in_loop(call, fn), kw.get("latency"), kw.get("allow_tma"), rank)
        out.append((f.line(call), f.col(call), op))
    return [op for *_, op in sorted(out, key=lambda x: (x[0], x[1]))]


def _shape_reads(fn: cst.FunctionDef) -> list[str]:
    return list(dict.fromkeys(n.value.value for n in _walk(fn.body) if isinstance(n, cst.Attribute)
                              and isinstance(n.value, cst.Name) and n.attr.value in ("shape", "dtype")))


def _has_capture_specs(f: _File, name: str) -> bool:
    for stmt in f.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for node in stmt.body:
            if isinstance(node, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == "CAPTURE_SPECS"
                                                    for t in node.targets):
                if isinstance(node.value, cst.Dict):
                    return any(isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)
                               and e.key.evaluated_value == name for e in node.value.elements)
                return True       # built dynamically: let capture decide
    return False
