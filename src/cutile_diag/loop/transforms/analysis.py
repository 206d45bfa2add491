"""Static facts about a kernel file that several transforms need.

* ``DtypeInference`` — a small flow-sensitive dtype inference over the kernel body, so
  that float32-only knobs (flush_to_zero, APPROX rounding) are only added where the
  operand is provably float32 (cuTile rejects FTZ on f16 at compile time).
* ``assignments`` / ``single_value`` — which names are bound where, for tracing a value
  back to its definition (``a = ct.load(A, ...)``).
* ``find_launches`` — the host-side ``ct.launch(stream, grid, kernel, args)`` calls of a
  kernel (and autotune calls, which transforms refuse to edit), with grid and argument
  expressions resolved through one local assignment.
* ``capture_spec_entries`` — the ``CAPTURE_SPECS = {"kernel": {...}}`` dicts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from .base import (Kernel, all_names, code, dotted, find_all, int_value, kwarg, literal_value, names_in,
                   positional, refuse)

FLOATS = ("float16", "bfloat16", "float32", "float64", "tfloat32")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
DTYPE_NAMES = FLOATS + INTS + ("bool_",)

_UNARY_SAME = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tan", "sinh",
               "cosh", "tanh", "abs", "negative", "floor", "ceil", "sum", "prod", "max", "min",
               "cumsum", "cumprod", "reshape", "permute", "transpose", "broadcast_to",
               "expand_dims", "extract", "astile"}
_BINARY_PROMOTE = {"add", "sub", "mul", "truediv", "maximum", "minimum", "pow", "atan2"}
_INT_RESULTS = {"bid", "num_blocks", "num_tiles", "cdiv"}

_BOTTOM = object()   # "not bound yet" in the flow analysis (optimistic start of loops)


def dtype_literal(k: Kernel, node: cst.CSTNode | None) -> str | None:
    """``ct.float32`` -> "float32"; anything else (a variable, ``A.dtype``) -> None."""
    m = k.ct.member(node)
    return m if m in DTYPE_NAMES else None


def _promote(a, b):
    if a is _BOTTOM:
        return b
    if b is _BOTTOM:
        return a
    if a == b:
        return a
    weak = ("pyint", "pyfloat")
    if a in weak and b in weak:
        return "pyfloat"
    if a in FLOATS and b in weak:
        return a
    if b in FLOATS and a in weak:
        return b
    if a in INTS and b == "pyint":
        return a
    if b in INTS and a == "pyint":
        return b
    return None


def _join(a, b):
    if a is _BOTTOM:
        return b
    if b is _BOTTOM:
        return a
    return a if a == b else None


def _join_env(x: dict, y: dict) -> dict:
    out = dict(x)
    for n, t in y.items():
        out[n] = _join(out.get(n, _BOTTOM), t)
    return out


class DtypeInference:
    """Dtype of each expression node in the kernel body, where it can be told.

    Values: a cuTile dtype name ("float32", "float16", "int32", ...), "pyint"/"pyfloat"
    for Python literals (weakly typed: they take the tile's dtype), "bool", or None when
    unknown (array loads: the kernel may be compiled for several dtypes)."""

    def __init__(self, k: Kernel):
        self.k = k
        self.types: dict[cst.CSTNode, object] = {}
        env: dict = {}
        # module-level numeric constants (LOG2E = 1.44...) are weakly typed scalars
        for name, binds in module_bindings(k.module).items():
            if len(binds) == 1 and binds[0].value is not None:
                v = literal_value(binds[0].value)
                if isinstance(v, float):
                    env[name] = "pyfloat"
                elif isinstance(v, int) and not isinstance(v, bool):
                    env[name] = "pyint"
        env.update({n: None for n in k.param_names})
        consts = k.constant_params()
        for n, t in consts.items():
            if t == "int":
                env[n] = "pyint"
            elif t == "float":
                env[n] = "pyfloat"
        self._block(k.func.body.body, env)

    def dtype(self, node: cst.CSTNode) -> str | None:
        t = self.types.get(node)
        return None if t is _BOTTOM else t

    def is_f32(self, node: cst.CSTNode) -> bool:
        return self.dtype(node) == "float32"

    # -- statements
    def _block(self, stmts, env: dict) -> dict:
        for s in stmts:
            env = self._stmt(s, env)
        return env

    def _bind(self, target: cst.BaseExpression, t, env: dict):
        if isinstance(target, cst.Name):
            env[target.value] = t
        else:
            for n in find_all(target, lambda x: isinstance(x, cst.Name)):
                env[n.value] = None

    def _loop(self, body, orelse, env: dict, pre) -> dict:
        start = dict(env)
        cur = dict(env)
        for _ in range(4):   # a few passes reach the fixpoint of the joins
            pre(cur)
            out = self._block(body, dict(cur))
            nxt = _join_env(start, out)
            if nxt == cur:
                break
            cur = nxt
        env = cur
        if orelse is not None:
            env = self._block(orelse.body.body, env)
        return env

    def _stmt(self, s: cst.BaseStatement, env: dict) -> dict:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, cst.Assign):
                    t = self._expr(small.value, env)
                    for tgt in small.targets:
                        self._bind(tgt.target, t, env)
                elif isinstance(small, cst.AnnAssign):
                    t = self._expr(small.value, env) if small.value else None
                    self._bind(small.target, t, env)
                elif isinstance(small, cst.AugAssign):
                    t = self._expr(small.value, env)
                    if isinstance(small.target, cst.Name):
                        env[small.target.value] = _promote(env.get(small.target.value), t)
                    else:
                        self._bind(small.target, None, env)
                elif isinstance(small, (cst.Expr, cst.Return)) and small.value is not None:
                    self._expr(small.value, env)
            return env
        if isinstance(s, cst.If):
            self._expr(s.test, env)
            a = self._block(s.body.body, dict(env))
            if isinstance(s.orelse, cst.If):
                b = self._stmt(s.orelse, dict(env))
            elif isinstance(s.orelse, cst.Else):
                b = self._block(s.orelse.body.body, dict(env))
            else:
                b = dict(env)
            return _join_env(a, b)
        if isinstance(s, cst.For):
            self._expr(s.iter, env)

            def pre(e, s=s):
                self._bind(s.target, "int32", e)
            return self._loop(s.body.body, s.orelse, env, pre)
        if isinstance(s, cst.While):
            return self._loop(s.body.body, s.orelse, env, lambda e, s=s: self._expr(s.test, e))
        if isinstance(s, cst.With):
            return self._block(s.body.body, env)
        if isinstance(s, cst.Try):
            return self._block(s.body.body, env)
        return env   # nested defs and classes: not part of the kernel's data flow

    # -- expressions
    def _expr(self, node: cst.BaseExpression, env: dict):
        t = self._expr_inner(node, env)
        prev = self.types.get(node, _BOTTOM)
        # a node visited on several loop passes keeps the join of what it saw
        self.types[node] = t if prev is _BOTTOM else _join(prev, t)
        return t

    def _expr_inner(self, node, env):
        if isinstance(node, cst.Integer):
            return "pyint"
        if isinstance(node, cst.Float):
            return "pyfloat"
        if isinstance(node, cst.Name):
            if node.value in ("True", "False"):
                return "bool"
            return env.get(node.value, None)
        if isinstance(node, cst.BinaryOperation):
            a = self._expr(node.left, env)
            b = self._expr(node.right, env)
            r = _promote(a, b)
            if isinstance(node.operator, cst.Divide) and r not in FLOATS:
                return "pyfloat" if r in ("pyint", "pyfloat") else None
            return r
        if isinstance(node, cst.UnaryOperation):
            t = self._expr(node.expression, env)
            return "bool" if isinstance(node.operator, cst.Not) else t
        if isinstance(node, cst.Comparison):
            self._expr(node.left, env)
            for c in node.comparisons:
                self._expr(c.comparator, env)
            return "bool"
        if isinstance(node, cst.BooleanOperation):
            self._expr(node.left, env)
            self._expr(node.right, env)
            return "bool"
        if isinstance(node, cst.IfExp):
            self._expr(node.test, env)
            return _join(self._expr(node.body, env), self._expr(node.orelse, env))
        if isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self._expr(el.value, env)
            return None
        if isinstance(node, cst.Attribute):
            self._expr(node.value, env)
            return None
        if isinstance(node, cst.Subscript):
            self._expr(node.value, env)
            return None
        if isinstance(node, cst.Call):
            return self._call(node, env)
        return None

    def _call(self, node: cst.Call, env):
        k = self.k
        args = [self._expr(a.value, env) for a in node.args]
        pos = positional(node)
        ptypes = [self.types.get(a.value) for a in pos]
        func = node.func
        if isinstance(func, cst.Attribute) and k.ct.member(func) is None:
            self._expr(func.value, env)
            if func.attr.value == "astype" and pos:
                return dtype_literal(k, pos[0].value)
            return None
        m = k.ct.member(func)
        if m is None:
            if isinstance(func, cst.Name) and func.value in ("min", "max") and args:
                r = args[0]
                for t in args[1:]:
                    r = _promote(r, t)
                return r
            return None
        if m == "astype":
            return dtype_literal(k, pos[1].value) if len(pos) > 1 else None
        if m in ("full", "zeros", "ones", "arange"):
            kw = kwarg(node, "dtype")
            idx = {"full": 2, "zeros": 1, "ones": 1, "arange": 1}[m]
            d = kw.value if kw else (pos[idx].value if len(pos) > idx else None)
            return dtype_literal(k, d)
        if m == "mma":
            acc = kwarg(node, "acc")
            if acc is not None:
                return self.types.get(acc.value)
            return ptypes[2] if len(ptypes) > 2 else None
        if m in _UNARY_SAME:
            return ptypes[0] if ptypes else None
        if m in _BINARY_PROMOTE:
            return _promote(ptypes[0], ptypes[1]) if len(ptypes) > 1 else None
        if m == "where":
            return _join(ptypes[1], ptypes[2]) if len(ptypes) > 2 else None
        if m in _INT_RESULTS:
            return "int32"
        return None


# ---------------------------------------------------------------------------------------
# bindings


@dataclass
class Binding:
    name: str
    node: cst.CSTNode                    # the Assign / For / Param / ... that binds it
    value: cst.BaseExpression | None     # the bound expression for plain `name = value`


def assignments(root: cst.CSTNode) -> dict[str, list[Binding]]:
    """Every binding of every name under ``root`` (a function: its params included)."""
    out: dict[str, list[Binding]] = {}

    def add(name, node, value=None):
        out.setdefault(name, []).append(Binding(name, node, value))

    def targets(t, node):
        if isinstance(t, cst.Name):
            add(t.value, node)
        else:
            for n in find_all(t, lambda x: isinstance(x, cst.Name)):
                add(n.value, node)

    if isinstance(root, cst.FunctionDef):
        for p in (*root.params.posonly_params, *root.params.params, *root.params.kwonly_params):
            add(p.name.value, p)
        body = root.body
    else:
        body = root
    for n in find_all(body, lambda x: isinstance(x, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For,
                                                      cst.With, cst.NamedExpr, cst.CompFor,
                                                      cst.Import, cst.ImportFrom, cst.FunctionDef))):
        if isinstance(n, cst.Assign):
            for t in n.targets:
                if isinstance(t.target, cst.Name):
                    add(t.target.value, n, n.value)
                else:
                    targets(t.target, n)
        elif isinstance(n, cst.AnnAssign):
            if isinstance(n.target, cst.Name):
                add(n.target.value, n, n.value)
        elif isinstance(n, cst.AugAssign):
            targets(n.target, n)
        elif isinstance(n, (cst.For, cst.CompFor)):
            targets(n.target, n)
        elif isinstance(n, cst.NamedExpr):
            targets(n.target, n)
        elif isinstance(n, cst.With):
            for item in n.items:
                if item.asname:
                    targets(item.asname.name, n)
        elif isinstance(n, (cst.Import, cst.ImportFrom)):
            if not isinstance(n.names, cst.ImportStar):
                for a in n.names:
                    local = a.asname.name if a.asname else a.name
                    d = dotted(local)
                    if d:
                        add(d.split(".")[0], n)
        elif isinstance(n, cst.FunctionDef) and n is not root:
            add(n.name.value, n)
    return out


def single_value(binds: dict[str, list[Binding]], name: str) -> cst.BaseExpression | None:
    """The expression ``name`` is bound to when it is bound exactly once by ``name = expr``."""
    b = binds.get(name, [])
    if len(b) == 1 and b[0].value is not None:
        return b[0].value
    return None


def module_bindings(module: cst.Module) -> dict[str, list[Binding]]:
    """Module-level bindings only (not inside functions or classes)."""
    out: dict[str, list[Binding]] = {}
    for s in module.body:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        if isinstance(t.target, cst.Name):
                            out.setdefault(t.target.value, []).append(
                                Binding(t.target.value, small, small.value))
                elif isinstance(small, (cst.Import, cst.ImportFrom)) and \
                        not isinstance(small.names, cst.ImportStar):
                    for a in small.names:
                        d = dotted(a.asname.name if a.asname else a.name)
                        if d:
                            out.setdefault(d.split(".")[0], []).append(Binding(d, small, None))
        elif isinstance(s, (cst.FunctionDef, cst.ClassDef)):
            out.setdefault(s.name.value, []).append(Binding(s.name.value, s, None))
    return out


# ---------------------------------------------------------------------------------------
# launch sites


@dataclass
class LaunchSite:
    """One ``ct.launch(stream, grid, kernel, args)`` of the kernel."""
    call: cst.Call
    statement: cst.BaseStatement          # the statement holding the call
    func: cst.FunctionDef | None          # the enclosing host function (the wrapper)
    grid: cst.BaseExpression              # grid as written, or its single local definition
    grid_binding: cst.Assign | None       # set when grid came from `grid = (...)`
    args: list[cst.BaseExpression] | None  # argument tuple elements, if a literal tuple
    args_node: cst.BaseExpression | None  # the tuple node (possibly behind a local name)
    line: int
    binds: dict[str, list[Binding]] = field(default_factory=dict, repr=False)


@dataclass
class Launches:
    sites: list[LaunchSite]
    tuned: list[tuple[int, str]]          # (line, what) of autotune calls taking the kernel


_TUNE_CALLEES = ("exhaustive_search", "autotune_launch", "autotune")


def _refers_to_kernel(k: Kernel, node: cst.BaseExpression, binds) -> bool:
    """``node`` is the kernel, a hinted copy of it, or a local bound to one of those."""
    names = names_in(node)
    if names & set(k.aliases):
        return True
    if isinstance(node, cst.Name):
        v = single_value(binds, node.value)
        if v is not None and names_in(v) & set(k.aliases):
            return True
    return False


def find_launches(k: Kernel) -> Launches:
    sites: list[LaunchSite] = []
    tuned: list[tuple[int, str]] = []
    calls = find_all(k.module, lambda n: isinstance(n, cst.Call))
    bind_cache: dict[int, dict] = {}
    for call in calls:
        func = k.enclosing_function(call)
        if func is k.func:
            continue
        key = id(func)
        if key not in bind_cache:
            bind_cache[key] = assignments(func) if func is not None else module_bindings(k.module)
        binds = bind_cache[key]
        callee = dotted(call.func) or ""
        if k.ct.called(call) == "launch":
            pos = positional(call)
            if len(pos) < 4 or not _refers_to_kernel(k, pos[2].value, binds):
                continue
            grid, grid_b = pos[1].value, None
            if isinstance(grid, cst.Name):
                b = binds.get(grid.value, [])
                if len(b) == 1 and isinstance(b[0].node, cst.Assign):
                    grid, grid_b = b[0].value, b[0].node
            args_node = pos[3].value
            if isinstance(args_node, cst.Name):
                v = single_value(binds, args_node.value)
                if v is not None:
                    args_node = v
            args = [e.value for e in args_node.elements] \
                if isinstance(args_node, (cst.Tuple, cst.List)) \
                and not any(isinstance(e, cst.StarredElement) for e in args_node.elements) else None
            sites.append(LaunchSite(call=call, statement=k.statement_of(call), func=func, grid=grid,
                                    grid_binding=grid_b, args=args, args_node=args_node,
                                    line=k.line(call), binds=binds))
        elif callee.split(".")[-1] in _TUNE_CALLEES and any(
                _refers_to_kernel(k, a.value, binds) for a in call.args):
            tuned.append((k.line(call), callee))
    return Launches(sites, tuned)


_HINTS_ARG = {"exhaustive_search": 5, "autotune_launch": 4}     # positional index of hints_fn
ALL_HINTS = "*"          # a key of ``hint_overrides``: the wrapper may set any hint


def _dict_keys(node: cst.BaseExpression | None) -> set[str] | None:
    """Keys of ``{"occupancy": ...}`` / ``dict(occupancy=...)``; None when not literal."""
    if isinstance(node, cst.Dict):
        keys = set()
        for el in node.elements:
            if not isinstance(el, cst.DictElement) or not isinstance(el.key, cst.SimpleString):
                return None
            keys.add(el.key.evaluated_value)
        return keys
    if isinstance(node, cst.Call) and dotted(node.func) == "dict" and all(a.keyword for a in node.args):
        return {a.keyword.value for a in node.args}
    return None


def _hints_fn_keys(k: Kernel, fn: cst.BaseExpression, binds) -> set[str]:
    """The hint names a ``hints_fn`` returns (a lambda or a def returning a literal dict)."""
    if isinstance(fn, cst.Lambda):
        keys = _dict_keys(fn.body)
        return keys if keys is not None else {ALL_HINTS}
    if isinstance(fn, cst.Name):
        defs = [b.node for b in binds.get(fn.value, []) + module_bindings(k.module).get(fn.value, [])
                if isinstance(b.node, cst.FunctionDef)]
        if len(defs) == 1:
            rets = find_all(defs[0].body, lambda n: isinstance(n, cst.Return))
            found = [_dict_keys(r.value) for r in rets]
            if found and all(x is not None for x in found):
                return set().union(*found)
    if isinstance(fn, cst.Name) and fn.value == "None":
        return set()
    return {ALL_HINTS}


def hint_overrides(k: Kernel) -> dict[str, tuple[int, str]]:
    """Kernel hints the host code sets over the decorator's: hint name (or ``ALL_HINTS``) ->
    (line, what).  ``kernel.replace_hints(occupancy=...)``, a helper such as TileGym's
    ``cached_replace_hints(kernel, occupancy=...)``, and an autotune call's ``hints_fn``
    all win over ``@ct.kernel(occupancy=...)``: a decorator edit of those is a no-op."""
    out: dict[str, tuple[int, str]] = {}

    def note(keys, call, what):
        for key in keys:
            out.setdefault(key, (k.line(call), what))

    bind_cache: dict[int, dict] = {}
    for call in find_all(k.module, lambda n: isinstance(n, cst.Call)):
        func = k.enclosing_function(call)
        if func is k.func:
            continue
        if id(func) not in bind_cache:
            bind_cache[id(func)] = assignments(func) if func is not None else module_bindings(k.module)
        binds = bind_cache[id(func)]
        callee = (dotted(call.func) or "").split(".")[-1]
        if "replace_hints" in callee:
            target = call.func.value if isinstance(call.func, cst.Attribute) and callee == "replace_hints" \
                else (positional(call)[0].value if positional(call) else None)
            if target is not None and _refers_to_kernel(k, target, binds):
                keys = {a.keyword.value for a in call.args if a.keyword} | (
                    {ALL_HINTS} if any(a.star == "**" for a in call.args) else set())
                note(keys, call, f"{code(call.func)}(...)")
        elif callee in _TUNE_CALLEES and any(_refers_to_kernel(k, a.value, binds) for a in call.args):
            kw = kwarg(call, "hints_fn")
            pos = positional(call)
            idx = _HINTS_ARG.get(callee)
            fn = kw.value if kw else (pos[idx].value if idx is not None and len(pos) > idx else None)
            if fn is not None:
                note(_hints_fn_keys(k, fn, binds), call, f"{callee}(..., hints_fn)")
    return out


def require_launches(k: Kernel, what: str) -> list[LaunchSite]:
    """The kernel's plain launches, refusing when there are none or it is autotuned."""
    found = find_launches(k)
    if found.tuned:
        line, callee = found.tuned[0]
        refuse(f"{k.name} is launched through {callee} (line {line}); {what} would have to edit "
               f"the autotune search space, which this transform does not do")
    if not found.sites:
        refuse(f"no ct.launch(...) of {k.name} in this file, so {what} cannot update the launch")
    return found.sites


# ---------------------------------------------------------------------------------------
# CAPTURE_SPECS


@dataclass
class SpecEntry:
    kernel: str               # the key (a kernel alias)
    dict_node: cst.Dict       # the kernel's spec dict
    items: dict[str, cst.DictElement]


def capture_spec_entries(k: Kernel, var: str = "CAPTURE_SPECS") -> list[SpecEntry]:
    """The spec dicts of this kernel's aliases in a module-level ``CAPTURE_SPECS``."""
    out = []
    for b in module_bindings(k.module).get(var, []):
        if not isinstance(b.value, cst.Dict):
            continue
        for el in b.value.elements:
            if not isinstance(el, cst.DictElement) or not isinstance(el.key, cst.SimpleString):
                continue
            key = el.key.evaluated_value
            if key in k.aliases and isinstance(el.value, cst.Dict):
                items = {e.key.evaluated_value: e for e in el.value.elements
                         if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)}
                out.append(SpecEntry(key, el.value, items))
    return out


def taken_names(k: Kernel) -> set[str]:
    """Names a new local in the kernel must avoid: its own names and module globals."""
    return all_names(k.func) | set(module_bindings(k.module))


# ---------------------------------------------------------------------------------------
# block ids and grid extents


def bid_calls(k: Kernel, member: str = "bid") -> dict[int, list[cst.Call]]:
    out: dict[int, list[cst.Call]] = {}
    for c in k.calls(member):
        pos = positional(c)
        axis = int_value(pos[0].value) if pos else None
        if axis is None:
            refuse(f"ct.{member} at line {k.line(c)} has a non-literal axis")
        out.setdefault(axis, []).append(c)
    return out


def bid_variables(k: Kernel, calls: dict[int, list[cst.Call]], axes) -> dict[int, tuple[str, cst.BaseStatement | None]]:
    """For each axis: the variable holding ``ct.bid(axis)`` and its top-level ``v = ct.bid(axis)``
    statement (None when the id is only used inline)."""
    body, _ = k.body_statements()
    binds = assignments(k.func)
    out = {}
    for axis in axes:
        for s in body:
            if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Assign):
                a = s.body[0]
                if len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name) \
                        and any(a.value is c for c in calls.get(axis, [])):
                    name = a.targets[0].target.value
                    if len(binds.get(name, [])) == 1:
                        out[axis] = (name, s)
                        break
        else:
            out[axis] = (None, None)
    return out


def axis_extent(k: Kernel, axis: int, var: str | None, calls: list[cst.Call]) -> tuple[str, int]:
    """``ct.num_tiles(...)`` text for the number of valid block ids along ``axis``, found
    from a load/store indexed by that id; and the line it was read from."""
    params = set(k.param_names)
    binds = assignments(k.func)
    stable = {p for p in params if len(binds.get(p, [])) == 1}
    for c in k.calls("load", "store"):
        pos = positional(c)
        idx = kwarg(c, "index")
        idx = idx.value if idx else (pos[1].value if len(pos) > 1 else None)
        if not isinstance(idx, cst.Tuple) or not pos or not isinstance(pos[0].value, cst.Name):
            continue
        arr = pos[0].value.value
        if arr not in stable:
            continue
        shape = kwarg(c, "shape")
        shape = shape.value if shape else (pos[2].value if k.ct.called(c) == "load" and len(pos) > 2 else None)
        if shape is None:
            continue
        shape_names = {n.value for n in find_all(shape, lambda x: isinstance(x, cst.Name))}
        if not shape_names <= stable:
            continue
        order = kwarg(c, "order")
        for p, el in enumerate(idx.elements):
            v = el.value
            if (var is not None and isinstance(v, cst.Name) and v.value == var) or any(v is x for x in calls):
                extra = f", order={code(order.value)}" if order is not None else ""
                return f"{k.ct.ref('num_tiles')}({arr}, axis={p}, shape={code(shape)}{extra})", k.line(c)
    refuse(f"cannot tell the extent of grid axis {axis} inside the kernel: no ct.load/ct.store "
           f"indexes an array parameter with the block id and a shape made of parameters")
