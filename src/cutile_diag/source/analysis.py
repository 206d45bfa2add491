"""Static facts about a kernel file that several transforms need.

* ``DtypeInference`` — a small flow-sensitive dtype inference over the kernel body, so
  that float32-only knobs (flush_to_zero, APPROX rounding) are only added where the
  operand is provably float32 (cuTile rejects FTZ on f16 at compile time).
* ``assignments`` / ``single_value`` — which names are bound where, for tracing a value
  back to its definition (``a = ct.load(A, ...)``).
* ``find_launches`` — the host-side ``ct.launch(stream, grid, kernel, args)`` calls of a
  kernel (and autotune calls, which transforms refuse to edit), with grid and argument
  expressions resolved through one local assignment (the sites of ``model.launch_calls``, the
  one launch finder, as ``model.LaunchSite``, the one launch model).
* ``capture_spec_entries`` — the ``CAPTURE_SPECS = {"kernel": {...}}`` dicts.
* ``param_access`` — which parameters the body only loads, only stores, or both (a write-only
  output moves its bytes once: the replayed roofline's byte count).
"""
from __future__ import annotations

import functools

from dataclasses import dataclass

import libcst as cst

from .model import (TUNE_CALLS, Binding, Kernel, LaunchSite, all_names, code, dotted, expr, find_all, int_value,
                    kwarg, launch_arguments, launch_calls, literal_value, module_bindings, names_in, positional,
                    refuse, rewrite)

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
        """The inferred dtype of ``node``, or None when unknown (or not bound yet in the flow)."""
        t = self.types.get(node)
        return None if t is _BOTTOM else t

    def is_f32(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is known to be float32."""
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


@functools.lru_cache(maxsize=2048)
def assignments(root: cst.CSTNode) -> dict[str, list[Binding]]:
    """Every binding of every name under ``root`` (a function: its params included).  Memoised by node identity
    (libcst trees are immutable; the answer is shared: read it, never change it): the gather analyses ask for the
    same function's bindings thousands of times, and a walk of the tree each time made a beam step's diagnosis of
    a row norm take 3-17 s."""
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


# ---------------------------------------------------------------------------------------
# launch sites


@dataclass
class Launches:
    """The file's launch sites of a kernel and the autotune calls that take it."""
    sites: list[LaunchSite]
    tuned: list[tuple[int, str]]          # (line, what) of autotune calls taking the kernel


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
    """The kernel's ``ct.launch`` sites outside the kernel (grid and arguments resolved through
    one local assignment), and the tune calls that take it (which transforms refuse to edit)."""
    sites: list[LaunchSite] = []
    tuned: list[tuple[int, str]] = []
    bind_cache: dict[int, dict] = {}

    def member(call: cst.Call) -> str | None:
        if k.ct.called(call) == "launch":
            return "launch"
        last = (dotted(call.func) or "").split(".")[-1]
        return last if last in TUNE_CALLS else None

    for site in launch_calls(k.module, member, k.line):
        call = site.call
        func = k.enclosing_function(call)
        if func is k.func:
            continue
        key = id(func)
        if key not in bind_cache:
            bind_cache[key] = assignments(func) if func is not None else module_bindings(k.module)
        binds = bind_cache[key]
        if site.kind == "ct.launch":
            kern = site.kernel_node
            if not (_refers_to_kernel(k, kern, binds) or (
                    func is not None and isinstance(kern, cst.Name)
                    and names_in(reaching_value(k, kern.value, call, func) or cst.Name("_"))
                    & set(k.aliases))):
                continue
            grid, grid_b = site.grid, None
            if isinstance(grid, cst.Name):
                b = binds.get(grid.value, [])
                if len(b) == 1 and isinstance(b[0].node, cst.Assign):
                    grid, grid_b = b[0].value, b[0].node
                elif func is not None:
                    # a wrapper that picks one of several kernels assigns `grid` per branch
                    a = reaching_assign(k, grid.value, call, func)
                    if a is not None:
                        grid, grid_b = a.value, a
            args_node = site.args_node
            if isinstance(args_node, cst.Name):
                v = single_value(binds, args_node.value)
                if v is not None:
                    args_node = v
            args = [e.value for e in args_node.elements] \
                if isinstance(args_node, (cst.Tuple, cst.List)) \
                and not any(isinstance(e, cst.StarredElement) for e in args_node.elements) else None
            site.func, site.statement, site.grid, site.grid_binding = func, k.statement_of(call), grid, grid_b
            site.args, site.args_node, site.binds = args, args_node, binds
            sites.append(site)
        elif any(_refers_to_kernel(k, a.value, binds) for a in call.args):
            tuned.append((site.line, dotted(call.func) or ""))
    return Launches(sites, tuned)


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
        elif callee in TUNE_CALLS and any(_refers_to_kernel(k, a.value, binds) for a in call.args):
            fn = launch_arguments(call, callee).get("hints_fn")
            if fn is not None:
                note(_hints_fn_keys(k, fn, binds), call, f"{callee}(..., hints_fn)")
    return out


def matrix_products(k: Kernel) -> int:
    """How many matrix products (``ct.mma``, ``ct.mma_scaled``, ``ct.matmul``, ``@``) the kernel and the helpers
    it calls contain: the source's reading of the IR's MMA count, for this kernel only (a file may hold others)."""
    n = 0
    for f in [k.func, *k.helpers()]:
        n += len(k.calls("mma", "mma_scaled", "matmul", root=f.body))
        n += len(find_all(f.body, lambda x: isinstance(x, (cst.BinaryOperation, cst.AugAssign))
                          and isinstance(x.operator, (cst.MatrixMultiply, cst.MatrixMultiplyAssign))))
    return n


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
    """A kernel's entry in the module's CAPTURE_SPECS dict, with its items by parameter name."""
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
    """Axis -> the ``ct.bid`` (or ``member``) calls on it; a non-literal axis refuses the transform."""
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
    # gathers/scatters in the row-kernel style: `(row, offs)` with row the block id
    for c in k.calls("gather", "scatter"):
        form = affine_gather_form(k, c)
        if isinstance(form, str) or not isinstance(form.array, cst.Name) or form.array.value not in stable:
            continue
        arr = form.array.value
        for p, ax in enumerate(form.axes):
            b = ax.block
            if not ((var is not None and isinstance(b, cst.Name) and b.value == var) or any(b is x for x in calls)):
                continue
            if ax.tile is None:
                return f"{arr}.shape[{p}]", k.line(c)
            if names_in(ax.tile) <= stable:
                return f"{k.ct.ref('cdiv')}({arr}.shape[{p}], {code(ax.tile)})", k.line(c)
    refuse(f"cannot tell the extent of grid axis {axis} inside the kernel: no ct.load/ct.store/ct.gather "
           f"indexes an array parameter with the block id and a shape made of parameters")


# ---------------------------------------------------------------------------------------
# affine gather / scatter indices (playbook A)
#
# Real code spells a tile-shaped access through ct.gather in many ways: a broadcast row
# index (``(row, offs)``, ``ct.full((T,), row)``, ``rows[:, None]``), ``off + offsets``
# with ``off = j * T`` and ``offsets = ct.arange(T)`` bound elsewhere, bounds masks.  The
# analysis below reduces each index component to "scalar s" or "tile b of size T" and
# says why when it cannot (data-dependent, strided, unaligned, ambiguous names).

_PURE_INDEX_CALLS = {"bid", "num_blocks", "cdiv", "arange", "full"}
_MEMORY_CALLS = {"load", "gather", "atomic_add", "atomic_cas", "atomic_xchg", "load_advanced_indexing"}


@dataclass(frozen=True)
class IndexAxis:
    """One component of a gather index: a scalar element index (``tile is None``) or the
    contiguous tile ``block`` of size ``tile`` (``block * tile + arange(tile)``)."""
    block: cst.BaseExpression
    tile: cst.BaseExpression | None
    expand: str | None = None          # "row" for ``v[:, None]``, "col" for ``v[None, :]``


@dataclass(frozen=True)
class AffineGather:
    """A ``ct.gather``/``ct.scatter`` whose index is tile-shaped: ``axes`` per array dim."""
    call: cst.Call
    kind: str                          # "gather" / "scatter"
    array: cst.BaseExpression
    axes: tuple[IndexAxis, ...]
    value: cst.BaseExpression | None   # the scatter's value

    @property
    def load_shape(self) -> list[str]:
        """The tile shape a ``ct.load`` of the same elements takes (``1`` for a broadcast axis)."""
        return [code(a.tile) if a.tile is not None else "1" for a in self.axes]

    @property
    def result_shape(self) -> list[str]:
        """The gather's own result shape (scalar components add no dimension; one tiled
        component broadcast as ``v[None, :]`` / ``v[:, None]`` gives a 1 x T / T x 1 tile)."""
        vec = [a for a in self.axes if a.tile is not None]
        if len(vec) == 1 and vec[0].expand == "col":
            return ["1", code(vec[0].tile)]
        if len(vec) == 1 and vec[0].expand == "row":
            return [code(vec[0].tile), "1"]
        return [code(a.tile) for a in vec]

    def result_axis(self, dim: int) -> int | None:
        """Where array dimension ``dim`` lands in the result (None: a scalar component)."""
        vec = [d for d, a in enumerate(self.axes) if a.tile is not None]
        if dim not in vec:
            return None
        if len(vec) == 1 and self.axes[dim].expand == "col":
            return 1
        return vec.index(dim)


class _NotAffine(Exception):
    pass


def _stmt_and_block(k: Kernel, node: cst.CSTNode):
    """(statement, list of sibling statements, index) for the statement holding ``node``."""
    st = k.statement_of(node)
    parent = k.parent(st)
    sibs = list(parent.body) if isinstance(parent, (cst.IndentedBlock, cst.Module)) else [st]
    return st, sibs, next(i for i, s in enumerate(sibs) if s is st)


def reaching_value(k: Kernel, name: str, at: cst.CSTNode,
                   scope: cst.FunctionDef | None = None) -> cst.BaseExpression | None:
    """The expression ``name`` holds at ``at`` when one plain ``name = expr`` reaches it
    unambiguously (the latest such statement before ``at`` in an enclosing block, with no
    rebinding in between or later in a loop around ``at``); None when not provable.
    ``scope``: the function to look in (default the kernel; a host wrapper for launches)."""
    a = reaching_assign(k, name, at, scope)
    return a.value if a is not None else None


def reaching_assign(k: Kernel, name: str, at: cst.CSTNode,
                    scope: cst.FunctionDef | None = None) -> cst.Assign | None:
    """The ``name = expr`` statement of ``reaching_value`` (None for parameters, loop
    variables and anything not provable)."""
    scope = scope or k.func
    binds = assignments(scope).get(name, [])
    if len(binds) == 1:
        return binds[0].node if isinstance(binds[0].node, cst.Assign) else None
    cur = at
    while True:
        try:
            st, sibs, i = _stmt_and_block(k, cur)
        except Exception:
            return None
        for s in reversed(sibs[:i]):
            if isinstance(s, cst.SimpleStatementLine):
                for small in reversed(s.body):
                    if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                            and isinstance(small.targets[0].target, cst.Name) \
                            and small.targets[0].target.value == name:
                        loop = next((a for a in k.ancestors(at) if isinstance(a, (cst.For, cst.While))), None)
                        # a later rebinding inside the loop around `at` would reach it on the next trip
                        if loop is not None and not any(x is loop for x in k.ancestors(s)):
                            if name in assignments(loop.body):
                                return None
                        elif loop is not None and len(assignments(loop.body).get(name, [])) > 1:
                            return None
                        return small
            if name in assignments(s):
                return None
        parent = k.parent(st)
        owner = k.parent(parent) if parent is not None else None
        if owner is None or owner is scope or isinstance(owner, (cst.Module, cst.FunctionDef, cst.ClassDef)):
            return None
        if isinstance(owner, cst.For) and name in names_in(owner.target):
            return None
        if isinstance(owner, (cst.Else, cst.If)) and isinstance(k.parent(owner), cst.If):
            owner = k.parent(owner)       # an elif/else block: keep walking from the whole if
        cur = owner


def _resolve(k: Kernel, node: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> cst.BaseExpression:
    if isinstance(node, cst.Name) and depth < 8:
        v = reaching_value(k, node.value, at)
        if v is not None and not isinstance(v, (cst.Tuple, cst.List)):
            return _resolve(k, v, at, depth + 1)
    return node


def _data_dependent(k: Kernel, node: cst.BaseExpression, at: cst.CSTNode, seen=()) -> str | None:
    """A description of the memory read feeding ``node``, or None."""
    for c in find_all(node, lambda x: isinstance(x, cst.Call)):
        if k.ct.called(c) in _MEMORY_CALLS or (isinstance(c.func, cst.Subscript)):
            return f"`{code(c)}`"
    for s in find_all(node, lambda x: isinstance(x, cst.Subscript)):
        shape = isinstance(s.value, cst.Attribute) and s.value.attr.value == "shape"    # A.shape[d]: no read
        if not _is_expand(s) and not shape:
            return f"`{code(s)}`"
    for n in names_in(node):
        if n in seen or n == k.ct.prefix.split(".")[0]:
            continue
        for b in assignments(k.func).get(n, []):
            if b.value is not None:
                found = _data_dependent(k, b.value, at, seen + (n,))
                if found:
                    return found
    return None


def _is_expand(s: cst.Subscript) -> str | None:
    """"row" for ``v[:, None]``, "col" for ``v[None, :]``."""
    parts = [e.slice for e in s.slice]
    if len(parts) != 2:
        return None
    kinds = []
    for p in parts:
        if isinstance(p, cst.Slice) and p.lower is None and p.upper is None and p.step is None:
            kinds.append(":")
        elif isinstance(p, cst.Index) and isinstance(p.value, cst.Name) and p.value.value == "None":
            kinds.append("None")
        else:
            return None
    return {(":", "None"): "row", ("None", ":"): "col"}.get(tuple(kinds))


def _arange_size(k: Kernel, node: cst.BaseExpression) -> cst.BaseExpression:
    pos = positional(node)
    start, step = kwarg(node, "start"), kwarg(node, "step")
    if step is not None and int_value(step.value) != 1:
        raise _NotAffine(f"`{code(node)}` has stride {code(step.value)}, not a contiguous tile")
    if start is not None and int_value(start.value) != 0:
        raise _NotAffine(f"`{code(node)}` starts at {code(start.value)}, not on a tile boundary")
    if len(pos) != 1:
        raise _NotAffine(f"`{code(node)}`: unexpected arguments")
    return pos[0].value


def _full_value(k: Kernel, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The fill value ``s`` of ``ct.full(shape, s, ...)`` (a broadcast scalar), else None;
    raises for a fill over more than one dimension (the gather's result would be N-D)."""
    if not (isinstance(node, cst.Call) and k.ct.called(node) == "full"):
        return None
    pos = positional(node)
    shape = kwarg(node, "shape") or (pos[0] if pos else None)
    v = shape.value if shape is not None else None
    one_dim = (isinstance(v, (cst.Tuple, cst.List)) and len(v.elements) == 1) or isinstance(v, cst.Integer) \
        or (isinstance(v, cst.Name) and k.constant_params().get(v.value) == "int")
    if not one_dim:
        raise _NotAffine(f"`{code(node)}` is not a 1-D broadcast of a scalar")
    fill = kwarg(node, "fill_value")
    return fill.value if fill else (pos[1].value if len(pos) > 1 else None)


def _same(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    return "".join(code(a).split()) == "".join(code(b).split())


def _strided(k: Kernel, node: cst.BinaryOperation, at) -> None:
    """Raise for ``arange(T) * s``: a strided index is not one tile."""
    if any(isinstance(_resolve(k, x, at), cst.Call) and k.ct.called(_resolve(k, x, at)) == "arange"
           for x in (node.left, node.right)):
        raise _NotAffine(f"`{code(node)}` is strided (non-affine in the tile), not a contiguous tile")


def _tile_vector(k: Kernel, node: cst.BaseExpression, at) -> tuple[cst.BaseExpression, cst.BaseExpression]:
    """(block, T) for ``block * T + arange(T)`` in any spelling; raises _NotAffine."""
    node = _resolve(k, node, at)
    if isinstance(node, cst.Call) and k.ct.called(node) == "arange":
        return cst.Integer("0"), _arange_size(k, node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        for ar, base in ((node.right, node.left), (node.left, node.right)):
            ar_r = _resolve(k, ar, at)
            if isinstance(ar_r, cst.BinaryOperation) and isinstance(ar_r.operator, cst.Multiply):
                _strided(k, ar_r, at)
            if isinstance(ar_r, cst.Call) and k.ct.called(ar_r) == "arange":
                size = _arange_size(k, ar_r)
                base_r = _resolve(k, base, at)
                fill = _full_value(k, base_r)
                if fill is not None:      # ct.full((T,), s) + arange(T): the broadcast scalar s is the offset
                    base_r = _resolve(k, fill, at)
                if isinstance(base_r, cst.BinaryOperation) and isinstance(base_r.operator, cst.Multiply):
                    for b, t in ((base_r.left, base_r.right), (base_r.right, base_r.left)):
                        if _same(t, size) or _same(_resolve(k, t, at), _resolve(k, size, at)):
                            return b, size
                if int_value(base_r) == 0:
                    return cst.Integer("0"), size
                if isinstance(base_r, cst.Name) and _steps_by_tile(k, base_r.value, size, at):
                    return expr(f"{base_r.value} // {code(size)}"), size
                raise _NotAffine(f"offset `{code(base)}` is not a multiple of the tile size "
                                 f"`{code(size)}`, so it is not a tile index")
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        _strided(k, node, at)
    raise _NotAffine(f"`{code(node)}` is not `b * T + ct.arange(T)`")


def _steps_by_tile(k: Kernel, name: str, size: cst.BaseExpression, at) -> bool:
    """``name`` is the variable of a loop around ``at`` over ``range(0, n, T)`` with T the
    tile size (``for off in range(0, N, T): cols = off + ct.arange(T)``): always a multiple of T."""
    loop = next((a for a in k.ancestors(at) if isinstance(a, cst.For) and name in names_in(a.target)), None)
    if loop is None or not isinstance(loop.target, cst.Name) or name in assignments(loop.body):
        return False
    it = loop.iter
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range"
            and len(it.args) == 3 and all(a.keyword is None for a in it.args)):
        return False
    start, step = it.args[0].value, it.args[2].value
    return int_value(start) == 0 and (_same(step, size) or _same(_resolve(k, step, at), _resolve(k, size, at)))


def _axis(k: Kernel, node: cst.BaseExpression, at) -> IndexAxis:
    expand = None
    raw = node
    node = _resolve(k, node, at)
    if isinstance(node, cst.Subscript):
        expand = _is_expand(node)
        if expand is None:
            raise _NotAffine(f"`{code(raw)}` indexes a tile (data-dependent or not a broadcast)")
        node = node.value
    elif isinstance(node, cst.Call) and k.ct.called(node) == "expand_dims":
        ax = kwarg(node, "axis") or (positional(node)[1] if len(positional(node)) > 1 else None)
        expand = {1: "row", 0: "col"}.get(int_value(ax.value) if ax else None)
        if expand is None:
            raise _NotAffine(f"`{code(raw)}`: unsupported expand_dims")
        node = positional(node)[0].value
    node = _resolve(k, node, at)
    if isinstance(node, cst.Call) and k.ct.called(node) == "full":
        val = _full_value(k, node)
        if val is None:
            raise _NotAffine(f"`{code(node)}`: unexpected arguments")
        return IndexAxis(block=_scalar(k, val, at), tile=None)
    has_arange = any(k.ct.called(c) == "arange" for c in find_all(_expand_names(k, node, at),
                                                                    lambda x: isinstance(x, cst.Call)))
    if has_arange:
        b, t = _tile_vector(k, node, at)
        return IndexAxis(block=b, tile=t, expand=expand)
    return IndexAxis(block=_scalar(k, raw if expand is None else node, at), tile=None)


def _expand_names(k: Kernel, node: cst.BaseExpression, at, depth=0) -> cst.BaseExpression:
    """``node`` with single-reaching names substituted (for inspection only)."""
    if depth > 6:
        return node
    subs = {}
    # `x.offsets` / `f(shape=...)`: an attribute or keyword name is not the variable
    not_vars = {id(a.attr) for a in find_all(node, lambda x: isinstance(x, cst.Attribute))} | \
        {id(a.keyword) for a in find_all(node, lambda x: isinstance(x, cst.Arg) and x.keyword is not None)}
    for n in find_all(node, lambda x: isinstance(x, cst.Name) and id(x) not in not_vars):
        v = reaching_value(k, n.value, at)
        if v is not None:
            subs[n] = _expand_names(k, v, at, depth + 1)
    if not subs:
        return node
    if isinstance(node, cst.Name):
        return subs.get(node, node)
    wrapped = cst.Module(body=[cst.SimpleStatementLine([cst.Expr(node)])])
    try:
        out = rewrite(wrapped, {n: (lambda _u, v=v: v) for n, v in subs.items()})
    except Exception:
        return node
    return out.body[0].body[0].value


def _scalar(k: Kernel, node: cst.BaseExpression, at) -> cst.BaseExpression:
    dd = _data_dependent(k, node, at)
    if dd:
        raise _NotAffine(f"index `{code(node)}` is data-dependent (loaded from memory by {dd})")
    return node


def affine_gather_form(k: Kernel, call: cst.Call) -> AffineGather | str:
    """The tile form of a ``ct.gather``/``ct.scatter``, or a one-line reason why it has none.

    Index components may be scalars (a row id, ``ct.full((T,), row)``) or contiguous tiles
    ``b * T + ct.arange(T)`` (names resolved through their reaching assignment; a 2-D
    index as ``rows[:, None]``, ``cols[None, :]``).  Masks and padding are the caller's
    business (see ``bounds_mask_axes``)."""
    kind = k.ct.called(call)
    pos = positional(call)
    need = 2 if kind == "gather" else 3
    if kind not in ("gather", "scatter") or len(pos) != need:
        return "unexpected arguments"
    idx = _resolve(k, pos[1].value, call)
    comps = list(idx.elements) if isinstance(idx, cst.Tuple) else None
    try:
        if comps is None:
            axes = (_axis(k, pos[1].value, call),)
        else:
            axes = tuple(_axis(k, el.value, call) for el in comps)
    except _NotAffine as e:
        return str(e)
    vec = [a for a in axes if a.tile is not None]
    if not vec:
        return "every index component is a scalar (one element): nothing to tile"
    if len(vec) == 2:
        if [a.expand for a in vec] not in (["row", "col"], ["row", None]):
            return "a 2-D index that is not rows[:, None] by cols[None, :] (transposed or unbroadcast)"
    elif len(vec) > 2:
        return "more than two tiled index components"
    for a in axes:
        for part in (a.block, a.tile):
            if part is not None:
                dd = _data_dependent(k, part, call)
                if dd:
                    return f"index `{code(part)}` is data-dependent (loaded from memory by {dd})"
    return AffineGather(call=call, kind=kind, array=pos[0].value, axes=axes,
                        value=pos[2].value if kind == "scatter" else None)


def bounds_mask_axes(k: Kernel, form: AffineGather, mask: cst.BaseExpression,
                     extent_of: "LaunchExtent | None" = None) -> str | None:
    """None when ``mask`` only drops out-of-bounds lanes of ``form`` (``v < A.shape[d]``, or
    ``v < N`` with ``extent_of(N, d)`` true; ``&`` of such terms), else why not."""
    at = form.call
    terms = []

    def split(e):
        e = _resolve(k, e, at)
        if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, cst.BitAnd):
            split(e.left)
            split(e.right)
        else:
            terms.append(e)
    split(mask)
    for t in terms:
        if isinstance(t, cst.Subscript) and _is_expand(t):
            t = _resolve(k, t.value, at)
        if not (isinstance(t, cst.Comparison) and len(t.comparisons) == 1
                and isinstance(t.comparisons[0].operator, cst.LessThan)):
            return f"mask term `{code(t)}` is not `index < extent`"
        lhs, rhs = t.left, t.comparisons[0].comparator
        lhs_r = _resolve(k, lhs, at)
        if isinstance(lhs_r, cst.Subscript) and _is_expand(lhs_r):
            lhs = lhs_r.value
        try:
            b, tile = _tile_vector(k, lhs, at)
        except _NotAffine:
            return f"mask term `{code(t)}` does not compare a tile index"
        dims = [d for d, a in enumerate(form.axes)
                if a.tile is not None and _same(a.tile, tile) and _same(a.block, b)]
        if not dims:
            return f"mask term `{code(t)}` is not on an index component"
        d = dims[0]
        rhs_r = _resolve(k, rhs, at)
        ok, why = False, ""
        if isinstance(rhs_r, cst.Subscript) and isinstance(rhs_r.value, cst.Attribute) \
                and rhs_r.value.attr.value == "shape" and _same(rhs_r.value.value, form.array):
            ok = int_value(rhs_r.slice[0].slice.value) == d if isinstance(rhs_r.slice[0].slice, cst.Index) else False
        elif isinstance(rhs_r, cst.Name) and extent_of is not None:
            failed = extent_of.why_not(rhs_r.value, code(form.array), d, len(form.axes))
            ok, why = failed is None, f": {failed}" if failed else ""
        if not ok:
            return (f"mask term `{code(t)}`: cannot prove `{code(rhs)}` is "
                    f"{code(form.array)}.shape[{d}] (the array's extent){why}")
    return None


class LaunchExtent:
    """``extent_of(param, array, dim)``: true when every launch of the kernel in its file
    passes ``<the argument for array>.shape[dim]`` as ``param`` — inline, or through a name
    bound in the wrapper (``m, n = x.shape``, ``n = x.shape[1]``, ``x.shape[-1]``,
    ``x.size(1)``).  ``why_not`` names the first launch that does not prove it."""

    def __init__(self, k: Kernel):
        self.k = k
        self.sites = find_launches(k).sites

    def __call__(self, param: str, array: str, dim: int, rank: int | None = None) -> bool:
        return self.why_not(param, array, dim, rank) is None

    def why_not(self, param: str, array: str, dim: int, rank: int | None = None) -> str | None:
        """Why ``param`` is not provably ``array.shape[dim]`` at every launch, or None when it is."""
        k, names = self.k, self.k.param_names
        missing = [n for n in (param, array) if n not in names]
        if missing:
            return f"`{missing[0]}` is not a parameter of {k.name}"
        if not self.sites:
            return f"no ct.launch of {k.name} in this file"
        pi, ai = names.index(param), names.index(array)
        for s in self.sites:
            if s.args is None or len(s.args) <= max(pi, ai):
                return f"the launch at line {s.line} has no literal argument tuple"
            got = _shape_read(k, s, s.args[pi], rank)
            if got is None or got[1] != dim or got[0] not in same_shape_args(k, s, s.args[ai]):
                return (f"the launch at line {s.line} passes `{code(s.args[pi])}` for {param}, "
                        f"not provably {code(s.args[ai])}.shape[{dim}]")
        return None


def launch_extent(k: Kernel) -> LaunchExtent:
    """The launch-extent check of ``k`` (its launches found once)."""
    return LaunchExtent(k)


_SHAPE_KEEPING = ("contiguous", "to", "float", "half", "bfloat16", "detach", "clone", "cuda")


def _dim(node: cst.BaseExpression | None, rank: int | None) -> int | None:
    d = int_value(node)
    if d is not None and d < 0:
        return rank + d if rank is not None and rank + d >= 0 else None
    return d


def _shape_read(k: Kernel, site: LaunchSite, v: cst.BaseExpression, rank: int | None,
                depth: int = 0) -> tuple[str, int] | None:
    """(array name, dim) when ``v`` at the launch is ``array.shape[dim]``, else None."""
    if isinstance(v, cst.Subscript) and isinstance(v.value, cst.Attribute) and v.value.attr.value == "shape" \
            and len(v.slice) == 1 and isinstance(v.slice[0].slice, cst.Index):
        d = _dim(v.slice[0].slice.value, rank)
        return (code(v.value.value), d) if d is not None else None
    if isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute) and v.func.attr.value == "size" \
            and len(v.args) == 1:
        d = _dim(v.args[0].value, rank)
        return (code(v.func.value), d) if d is not None else None
    if not isinstance(v, cst.Name) or depth > 4:
        return None
    if site.func is not None:
        a = reaching_assign(k, v.value, site.call, site.func)
    else:
        b = site.binds.get(v.value, [])
        a = b[0].node if len(b) == 1 and isinstance(b[0].node, cst.Assign) else None
    if a is None or len(a.targets) != 1:
        return None
    t = a.targets[0].target
    if isinstance(t, cst.Name):
        got = _shape_read(k, site, a.value, rank, depth + 1)
    elif isinstance(t, (cst.Tuple, cst.List)) and all(isinstance(e.value, cst.Name) for e in t.elements):
        # `m, n = x.shape` (or `x.size()`): the position is the dim, the length the rank
        src = a.value
        if isinstance(src, cst.Call) and isinstance(src.func, cst.Attribute) and src.func.attr.value == "size" \
                and not src.args:
            src = src.func
        if not (isinstance(src, cst.Attribute) and src.attr.value in ("shape", "size")):
            return None
        pos = [e.value.value for e in t.elements].index(v.value)
        got = (code(src.value), pos)
    else:
        return None
    if got is None or site.func is None:
        return got
    # the array the shape was read from must be the one passed: not rebound in between
    arr = got[0]
    binds = [b for b in site.binds.get(arr, []) if isinstance(b.node, cst.Assign)]
    if binds and not all(_keeps_shape(b.value, arr) for b in binds) \
            and reaching_assign(k, arr, a, site.func) is not reaching_assign(k, arr, site.call, site.func):
        return None
    return got


def _keeps_shape(value: cst.BaseExpression | None, of: str) -> bool:
    """``x.contiguous()`` / ``x.to(...)``-style rebinding of ``of``: the shape is unchanged."""
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
        and value.func.attr.value in _SHAPE_KEEPING and code(value.func.value) == of


def same_shape_args(k: Kernel, site: LaunchSite, arr: cst.BaseExpression) -> set[str]:
    """Wrapper names provably of ``arr``'s shape: itself, what it was made ``*_like`` (or
    the other way round), and names the wrapper asserts equal (``assert y.shape == x.shape``)."""
    edges: list[tuple[str, str]] = []
    for name, binds in site.binds.items():
        if len(binds) == 1:
            v = binds[0].value
        else:      # `y = torch.empty_like(x)` over a parameter `y`: the binding that reaches the launch
            a = reaching_assign(k, name, site.call, site.func) if site.func is not None else None
            v = a.value if a is not None else None
        if not isinstance(v, cst.Call):
            continue
        if code(v.func).split(".")[-1] in ("empty_like", "zeros_like", "ones_like", "full_like") \
                and v.args and isinstance(v.args[0].value, cst.Name):
            edges.append((name, v.args[0].value.value))
        elif isinstance(v.func, cst.Attribute) and v.func.attr.value in _SHAPE_KEEPING \
                and isinstance(v.func.value, cst.Name):
            edges.append((name, v.func.value.value))
    if site.func is not None:
        for a in find_all(site.func.body, lambda x: isinstance(x, cst.Assert)):
            t = a.test
            if isinstance(t, cst.Comparison) and len(t.comparisons) == 1 \
                    and isinstance(t.comparisons[0].operator, cst.Equal):
                sides = [t.left, t.comparisons[0].comparator]
                if all(isinstance(x, cst.Attribute) and x.attr.value == "shape" and isinstance(x.value, cst.Name)
                       for x in sides):
                    edges.append((sides[0].value.value, sides[1].value.value))
    out = {code(arr)}
    grew = True
    while grew:
        grew = False
        for a, b in edges:
            if (a in out) != (b in out):
                out |= {a, b}
                grew = True
    return out


_READS = {"load", "gather"}
_WRITES = {"store", "scatter"}
_SHAPE_ONLY = {"num_tiles"}          # an array passed for its shape: no memory moved


def param_access(k: Kernel) -> dict[str, str]:
    """How the body uses each parameter it names: "read" (only as the array of ``ct.load`` / ``ct.gather``),
    "write" (only as the array of ``ct.store`` / ``ct.scatter``), or "readwrite" (both, an atomic, a rebinding, or
    any use this scan cannot follow: passed to a helper, arithmetic on a scalar).  ``A.shape`` and ``ct.num_tiles(A,
    ...)`` move no memory and are not uses; a parameter the body never uses is absent."""
    params = set(k.param_names)
    rebound = params & set(assignments(k.func.body))
    uses: dict[str, set[str]] = {}
    for name in find_all(k.func.body, lambda n: isinstance(n, cst.Name) and n.value in params):
        parent = k.parent(name)
        if isinstance(parent, cst.Attribute) and parent.value is name:
            continue
        use = "readwrite"
        call = k.parent(parent) if isinstance(parent, cst.Arg) else None
        if isinstance(call, cst.Call) and name.value not in rebound:
            member = k.ct.member(call.func)
            first = positional(call)[:1]
            as_array = (first and first[0] is parent) or (parent.keyword is not None and parent.keyword.value == "array")
            if member in _SHAPE_ONLY:
                continue
            if as_array and member in _READS:
                use = "read"
            elif as_array and member in _WRITES:
                use = "write"
        uses.setdefault(name.value, set()).add(use)
    return {n: u.pop() if len(u) == 1 else "readwrite" for n, u in uses.items()}
