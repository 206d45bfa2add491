"""A tiny, safe evaluator for playbook predicates such as
``"ir.ptr_loads > 0 and not ir.persistent_loop"``.

The expression is parsed with ``ast`` and walked by hand (no ``eval``): only boolean
operators, comparisons, arithmetic, literals, dotted fact names and a few functions are
allowed.  Logic is three-valued (Kleene): a fact the evidence does not have is UNKNOWN, and
UNKNOWN propagates unless the result is decided anyway (``False and UNKNOWN`` is False).
The result says which facts were used and which were missing, so the engine can cite the
first and name the second.

Functions: ``known(x)`` (True/False, never unknown), ``len(x)``, ``min(a, b, …)``,
``max(a, b, …)``, ``abs(x)``, ``any_in(list, "text")`` (some item contains the text).
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import CutileDiagError


class PredicateError(CutileDiagError):
    """A predicate that does not parse or uses something outside the small language."""


class _Unknown:
    _inst = None

    def __new__(cls):
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:  # guard against accidental truth tests
        raise TypeError("UNKNOWN has no truth value; compare with `is UNKNOWN`")


UNKNOWN = _Unknown()

_LITERAL_NAMES = {"true": True, "false": False, "True": True, "False": False,
                  "none": None, "None": None}

_CMP: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_BIN: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}


@dataclass
class Result:
    """A predicate's value with the known facts it read and the unknown ones."""
    value: Any                                   # True | False | UNKNOWN (or a value for non-boolean exprs)
    used: list[str] = field(default_factory=list)     # facts read that were known
    missing: list[str] = field(default_factory=list)  # facts read that were unknown

    @property
    def true(self) -> bool:
        """Known and true (UNKNOWN is not true)."""
        return self.value is not UNKNOWN and bool(self.value) is True

    @property
    def unknown(self) -> bool:
        """Whether a missing fact left the value undecided."""
        return self.value is UNKNOWN


def dotted_name(node: ast.AST) -> str | None:
    """'ir.ptr_loads' from Attribute(Name('ir'), 'ptr_loads'); None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _parse(expr: str) -> ast.Expression:
    if not isinstance(expr, str) or not expr.strip():
        raise PredicateError("empty predicate")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise PredicateError(f"predicate does not parse: {expr!r} ({e.msg} at column {e.offset})") from None
    _check(tree.body, expr)
    return tree


_FUNCS = ("known", "len", "min", "max", "abs", "any_in")


def _check(node: ast.AST, expr: str) -> None:
    """Reject every construct outside the language before anything is evaluated."""
    ok = (ast.BoolOp, ast.UnaryOp, ast.Compare, ast.BinOp, ast.Constant, ast.List, ast.Tuple,
          ast.Call, ast.Attribute, ast.Name)
    if not isinstance(node, ok):
        raise PredicateError(f"{type(node).__name__} is not allowed in a predicate: {expr!r}")
    if isinstance(node, ast.UnaryOp) and not isinstance(node.op, (ast.Not, ast.USub)):
        raise PredicateError(f"operator not allowed in {expr!r}")
    if isinstance(node, ast.BinOp) and type(node.op) not in _BIN:
        raise PredicateError(f"operator not allowed in {expr!r}")
    if isinstance(node, ast.Compare) and any(type(o) not in _CMP for o in node.ops):
        raise PredicateError(f"comparison not allowed in {expr!r}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
            raise PredicateError(f"only {', '.join(_FUNCS)} may be called in a predicate: {expr!r}")
        for a in node.args:
            _check(a, expr)
        return
    if isinstance(node, (ast.Attribute, ast.Name)):
        if dotted_name(node) is None:
            raise PredicateError(f"bad name in {expr!r}")
        return
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool, type(None))):
        raise PredicateError(f"literal not allowed in {expr!r}")
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.operator, ast.boolop, ast.cmpop, ast.unaryop, ast.expr_context)):
            continue
        _check(child, expr)


def names(expr: str) -> set[str]:
    """Fact keys an expression reads (for vocabulary checks)."""
    tree = _parse(expr)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)):
            n = dotted_name(node)
            if n and n not in _LITERAL_NAMES and n not in _FUNCS:
                # only the outermost dotted chain counts: skip prefixes like 'ir' of 'ir.x'
                out.add(n)
    # drop prefixes of longer names ('ir' when 'ir.loads' is present)
    return {n for n in out if not any(o != n and o.startswith(n + ".") for o in out)}


class _Eval:
    def __init__(self, facts: Mapping[str, Any]):
        self.facts = facts
        self.used: list[str] = []
        self.missing: list[str] = []

    def _note(self, lst: list[str], key: str) -> None:
        if key not in lst:
            lst.append(key)

    def fact(self, key: str) -> Any:
        if key in _LITERAL_NAMES:
            return _LITERAL_NAMES[key]
        if key in self.facts:
            self._note(self.used, key)
            return self.facts[key]
        self._note(self.missing, key)
        return UNKNOWN

    def ev(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Attribute, ast.Name)):
            return self.fact(dotted_name(node))  # type: ignore[arg-type]
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.ev(e) for e in node.elts]
            return UNKNOWN if any(i is UNKNOWN for i in items) else items
        if isinstance(node, ast.BoolOp):
            vals = [self.ev(v) for v in node.values]   # evaluate all: every fact read is reported
            if isinstance(node.op, ast.And):
                if any(v is not UNKNOWN and not v for v in vals):
                    return False
                return UNKNOWN if any(v is UNKNOWN for v in vals) else True
            if any(v is not UNKNOWN and v for v in vals):
                return True
            return UNKNOWN if any(v is UNKNOWN for v in vals) else False
        if isinstance(node, ast.UnaryOp):
            v = self.ev(node.operand)
            if v is UNKNOWN:
                return UNKNOWN
            if isinstance(node.op, ast.Not):
                return not v
            return -v
        if isinstance(node, ast.Compare):
            left = self.ev(node.left)
            result: Any = True
            for op, comp in zip(node.ops, node.comparators):
                right = self.ev(comp)
                if left is UNKNOWN or right is UNKNOWN or left is None or right is None:
                    # None means "fact present but not applicable": only == / != decide it
                    if left is not UNKNOWN and right is not UNKNOWN and isinstance(op, (ast.Eq, ast.NotEq)):
                        r = _CMP[type(op)](left, right)
                    else:
                        r = UNKNOWN
                else:
                    try:
                        r = _CMP[type(op)](left, right)
                    except TypeError:
                        raise PredicateError(f"cannot compare {left!r} with {right!r}") from None
                if r is UNKNOWN:
                    result = UNKNOWN if result is not False else False
                elif not r:
                    result = False
                left = right
            return result
        if isinstance(node, ast.BinOp):
            a, b = self.ev(node.left), self.ev(node.right)
            if a is UNKNOWN or b is UNKNOWN or a is None or b is None:
                return UNKNOWN
            try:
                return _BIN[type(node.op)](a, b)
            except ZeroDivisionError:
                return UNKNOWN
            except TypeError:
                raise PredicateError(f"cannot combine {a!r} and {b!r}") from None
        if isinstance(node, ast.Call):
            fn = node.func.id  # type: ignore[attr-defined]
            if fn == "known":
                if len(node.args) != 1:
                    raise PredicateError("known() takes one fact")
                v = self.ev(node.args[0])
                return v is not UNKNOWN
            args = [self.ev(a) for a in node.args]
            if any(a is UNKNOWN for a in args):
                return UNKNOWN
            try:
                if fn == "len":
                    return len(args[0])
                if fn == "min":
                    return min(args)
                if fn == "max":
                    return max(args)
                if fn == "abs":
                    return abs(args[0])
                if fn == "any_in":
                    seq, text = args
                    return any(str(text) in str(item) for item in (seq or []))
            except (TypeError, ValueError, IndexError):
                raise PredicateError(f"bad arguments to {fn}()") from None
        raise PredicateError(f"cannot evaluate {ast.dump(node)}")  # pragma: no cover


class Predicate:
    """A parsed, reusable predicate."""

    def __init__(self, expr: str):
        self.expr = expr.strip()
        self._tree = _parse(self.expr)
        self.names = names(self.expr)

    def evaluate(self, facts: Mapping[str, Any]) -> Result:
        """Evaluate against ``facts`` (three-valued: a missing fact gives UNKNOWN where it matters)."""
        e = _Eval(facts)
        v = e.ev(self._tree.body)
        return Result(v, e.used, e.missing)

    def __repr__(self) -> str:
        return f"Predicate({self.expr!r})"


def evaluate(expr: str, facts: Mapping[str, Any]) -> Result:
    """Compile ``expr`` and evaluate it against ``facts`` in one call."""
    return Predicate(expr).evaluate(facts)
