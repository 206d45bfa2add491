"""The kernel's source as a libcst model: how a file spells cuda.tile, the ``@ct.kernel``
function inside it, module-level bindings, and the small libcst helpers to read and rewrite it.

The bottom of the source stack: ``source.analysis`` (dtype inference, launch sites, affine
gathers), ``source.locate`` (the recipe's "locate the kernel") and the loop's transforms all
read a file through ``parsed`` / ``load`` here, once per process.  Refusals (``refuse``,
``TransformNotApplicable``) are the model's and the transforms' one vocabulary: a question
about the source that has no single answer is refused, never guessed.
"""
from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from ..errors import CutileDiagError

# ---------------------------------------------------------------------------------------
# errors


class TransformError(CutileDiagError):
    """A transform could not run: unparsable source, bad parameters."""


class TransformNotApplicable(TransformError):
    """The transform does not apply to this kernel; ``reason`` says why in one line."""

    def __init__(self, reason: str, *, transform: str | None = None):
        self.reason = reason
        self.transform = transform
        super().__init__(f"{transform}: {reason}" if transform else reason)


class TransformParamError(TransformError):
    """A transform parameter is unknown or out of range."""


def refuse(reason: str):
    """Raise TransformNotApplicable with ``reason``."""
    raise TransformNotApplicable(reason)


def changed_lines(old: str, new: str) -> tuple[int, ...]:
    """1-based line numbers of ``new`` that were inserted or replaced."""
    a, b = old.splitlines(), new.splitlines()
    out: list[int] = []
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            out.extend(range(j1 + 1, j2 + 1))
    return tuple(out)


# ---------------------------------------------------------------------------------------
# names


def dotted(node: cst.CSTNode | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


@dataclass
class CtNames:
    """How the file spells ``cuda.tile``: module aliases (``ct``) and imported members."""
    module_aliases: list[str] = field(default_factory=list)   # "ct", "cuda.tile", ...
    members: dict[str, str] = field(default_factory=dict)     # local name -> cuda.tile attr

    @classmethod
    def scan(cls, module: cst.Module) -> "CtNames":
        """Read the module's top-level imports of ``cuda.tile`` (aliases and ``from`` members)."""
        out = cls()
        for stmt in module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        full = dotted(alias.name)
                        asname = dotted(alias.asname.name) if alias.asname else None
                        if full == "cuda.tile":
                            out.module_aliases.append(asname or "cuda.tile")
                elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                    mod = dotted(small.module) if small.module else None
                    for alias in small.names:
                        name = dotted(alias.name)
                        local = dotted(alias.asname.name) if alias.asname else name
                        if mod == "cuda" and name == "tile":
                            out.module_aliases.append(local)
                        elif mod == "cuda.tile" and name and local:
                            out.members[local] = name
        return out

    def member(self, node: cst.CSTNode | None) -> str | None:
        """``"load"`` for ``ct.load`` / ``cuda.tile.load`` / an imported ``load``."""
        if isinstance(node, cst.Name):
            return self.members.get(node.value)
        if isinstance(node, cst.Attribute):
            base = dotted(node.value)
            if base in self.module_aliases:
                return node.attr.value
        return None

    def called(self, node: cst.CSTNode) -> str | None:
        """The cuda.tile member a Call node calls, or None."""
        return self.member(node.func) if isinstance(node, cst.Call) else None

    @property
    def prefix(self) -> str:
        """The alias to spell new cuTile references with (``ct``)."""
        if not self.module_aliases:
            refuse("the file does not import cuda.tile as a module (e.g. `import cuda.tile as ct`), "
                   "so new cuTile calls cannot be named")
        return self.module_aliases[0]

    def ref(self, attr: str) -> str:
        """``<prefix>.<attr>``: how new code in this file names ``cuda.tile.<attr>``."""
        return f"{self.prefix}.{attr}"


# ---------------------------------------------------------------------------------------
# launches

# cuda.tile's calls that launch a kernel, by member name -> their parameters in order (cuda-tile 1.7):
# ``ct.launch(stream, grid, kernel, args, /)``; ``cuda.tile.tune.exhaustive_search(search_space,
# stream, grid_fn, kernel, args_fn, hints_fn=None, ...)``; the deprecated
# ``cuda.tile_experimental.autotune_launch(stream, grid_fn, kernel, args_fn, hints_fn, search_space)``
LAUNCH_SIGNATURES = {
    "launch": ("stream", "grid", "kernel", "args"),
    "exhaustive_search": ("search_space", "stream", "grid_fn", "kernel", "args_fn", "hints_fn"),
    "autotune_launch": ("stream", "grid_fn", "kernel", "args_fn", "hints_fn", "search_space"),
}
TUNE_CALLS = ("exhaustive_search", "autotune_launch")


def launch_arguments(call: cst.Call, member: str | None) -> dict[str, cst.BaseExpression] | None:
    """A launch call's arguments by parameter name (positional, or keyword for the tune calls);
    None when ``member`` launches nothing, or for a ``ct.launch`` without its four positional-only
    arguments (which cuda.tile would reject)."""
    params = LAUNCH_SIGNATURES.get(member or "")
    if params is None:
        return None
    pos = [a.value for a in call.args if a.keyword is None and not a.star]
    if member == "launch":
        return dict(zip(params, pos)) if len(pos) >= len(params) else None
    out = dict(zip(params, pos))
    out.update({a.keyword.value: a.value for a in call.args if a.keyword is not None and a.keyword.value in params})
    return out


@dataclass
class LaunchSite:
    """One launch of a kernel, the one model of it: the call's libcst nodes, which the transforms
    rewrite, and its text view for people (``function``, ``kernel``, ``grid_text``, ``args_text``;
    ``to_json``), which ``locate`` derives from the nodes (``with_text``)."""
    call: cst.Call
    line: int
    kind: str = "ct.launch"                 # ct.launch | exhaustive_search | autotune_launch
    func: cst.FunctionDef | None = None     # the host function holding the call (the wrapper)
    kernel_node: cst.BaseExpression | None = None   # the kernel argument as written
    grid: cst.BaseExpression | None = None  # grid (a tune call's grid_fn) as written, or its single local definition
    grid_binding: cst.Assign | None = None  # set when grid came from `grid = (...)`
    args: list[cst.BaseExpression] | None = None   # argument tuple elements, if a literal tuple
    args_node: cst.BaseExpression | None = None     # ct.launch's argument tuple (possibly behind a local name)
    statement: cst.BaseStatement | None = None      # the statement holding the call
    binds: dict[str, list[Binding]] = field(default_factory=dict, repr=False)
    kernel: str = ""                        # the text view: the kernel, grid and arguments as written
    grid_text: str = ""
    args_text: str = ""
    owner: str = ""                         # the class whose method holds the launch (an autograd.Function)

    @property
    def function(self) -> str:
        """The name of the host function holding the launch, ``Class.method`` for a method ("" at module level)."""
        if self.func is None:
            return ""
        return f"{self.owner}.{self.func.name.value}" if self.owner else self.func.name.value

    def with_text(self, text: Callable[[cst.CSTNode], str]) -> LaunchSite:
        """The site with its text view filled in from the nodes as written (``text``: node -> text)."""
        self.kernel = text(self.kernel_node) if self.kernel_node is not None else ""
        self.grid_text = text(self.grid) if self.grid is not None else ""
        self.args_text = text(self.args_node) if self.args_node is not None else ""
        return self

    def to_json(self) -> dict:
        """The site as JSON: function, line, kind and the launch as written."""
        return {"function": self.function, "line": self.line, "kind": self.kind, "grid": self.grid_text,
                "kernel": self.kernel, "args": self.args_text}


def launch_calls(root: cst.CSTNode, member: Callable[[cst.Call], str | None],
                 line: Callable[[cst.CSTNode], int]) -> list[LaunchSite]:
    """The one launch finder: every call under ``root`` (source order) that ``member`` names
    ``launch`` or a tune call (``TUNE_CALLS``) and whose arguments bind (``launch_arguments``),
    as a ``LaunchSite`` of its nodes as written.  The callers keep the ones that launch their
    kernel (``analysis.find_launches``, ``locate.locate``)."""
    out = []
    for call in find_all(root, lambda n: isinstance(n, cst.Call)):
        m = member(call)
        a = launch_arguments(call, m) if m == "launch" or m in TUNE_CALLS else None
        if a is None:
            continue
        out.append(LaunchSite(call, line(call), "ct.launch" if m == "launch" else m, kernel_node=a.get("kernel"),
                              grid=a.get("grid", a.get("grid_fn")), args_node=a.get("args")))
    return out


# ---------------------------------------------------------------------------------------
# the kernel inside a file


class _Collect(cst.CSTVisitor):
    def __init__(self, pred: Callable[[cst.CSTNode], bool]):
        self.pred, self.found = pred, []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.pred(node):
            self.found.append(node)
        return True


def find_all(root: cst.CSTNode, pred: Callable[[cst.CSTNode], bool]) -> list[cst.CSTNode]:
    """Every node under ``root`` (itself included) matching ``pred``, in source order."""
    return [n for n in _nodes(root) if pred(n)]


@functools.lru_cache(maxsize=4096)
def _nodes(root: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """Every node under ``root``, itself included, in source order; memoised by node identity (libcst trees are
    immutable).  A libcst walk rebuilds every node it passes, and the transforms' and analyses' questions walked
    the same kernel thousands of times a step: a beam step's diagnosis of a row norm took 3-17 s."""
    v = _Collect(lambda n: True)
    root.visit(v)
    return tuple(v.found)


@dataclass
class Binding:
    """One binding of a local name: the node that binds it and, for ``name = value``, the value."""
    name: str
    node: cst.CSTNode                    # the Assign / For / Param / ... that binds it
    value: cst.BaseExpression | None     # the bound expression for plain `name = value`


def module_bindings(module: cst.Module) -> dict[str, list[Binding]]:
    """Module-level bindings only (not inside functions or classes): ``x = ...``, ``x: T = ...``,
    ``type x = ...`` (with their value), imports, defs and classes (without)."""
    out: dict[str, list[Binding]] = {}
    for s in module.body:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        if isinstance(t.target, cst.Name):
                            out.setdefault(t.target.value, []).append(
                                Binding(t.target.value, small, small.value))
                elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) \
                        and small.value is not None:
                    out.setdefault(small.target.value, []).append(Binding(small.target.value, small, small.value))
                elif isinstance(small, getattr(cst, "TypeAlias", ())):     # `type ConstInt = ct.Constant[int]`
                    out.setdefault(small.name.value, []).append(Binding(small.name.value, small, small.value))
                elif isinstance(small, (cst.Import, cst.ImportFrom)) and \
                        not isinstance(small.names, cst.ImportStar):
                    for a in small.names:
                        d = dotted(a.asname.name if a.asname else a.name)
                        if d:
                            out.setdefault(d.split(".")[0], []).append(Binding(d, small, None))
        elif isinstance(s, (cst.FunctionDef, cst.ClassDef)):
            out.setdefault(s.name.value, []).append(Binding(s.name.value, s, None))
    return out


def module_assignments(module: cst.Module) -> dict[str, list[cst.BaseExpression]]:
    """Every value bound to a plain name at module level (``module_bindings`` with a value): the
    one alias rule of the transforms and ``source.locate`` is "bound once"."""
    out = {n: [b.value for b in bs if b.value is not None] for n, bs in module_bindings(module).items()}
    return {n: vs for n, vs in out.items() if vs}


@dataclass
class Kernel:
    """A parsed kernel file with the ``@ct.kernel`` function a transform works on."""
    source: str
    module: cst.Module
    ct: CtNames
    name: str                        # the module attribute asked for (may be an alias)
    func: cst.FunctionDef            # the decorated function
    decorator: cst.Decorator
    aliases: tuple[str, ...]         # every module-level name bound to this kernel
    _pos: Any = field(repr=False)
    _parents: Any = field(repr=False)

    # -- positions and structure
    def line(self, node: cst.CSTNode) -> int:
        """The first line of ``node`` in the file."""
        return self._pos[node].start.line

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The parent of ``node``, or None at the module."""
        return self._parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterable[cst.CSTNode]:
        """The ancestors of ``node``, innermost first."""
        p = self.parent(node)
        while p is not None:
            yield p
            p = self.parent(p)

    def statement_of(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The statement (simple line or compound) that contains ``node``."""
        cur = node
        while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            cur = self.parent(cur)
        if cur is None:
            raise TransformError("internal: node outside any statement")
        return cur

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The innermost def around ``node``, or None."""
        for a in self.ancestors(node):
            if isinstance(a, cst.FunctionDef):
                return a
        return None

    def in_loop(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Whether a for/while encloses ``node`` (below ``stop``, when given)."""
        for a in self.ancestors(node):
            if a is stop:
                return False
            if isinstance(a, (cst.For, cst.While)):
                return True
        return False

    # -- kernel signature
    @property
    def params(self) -> list[cst.Param]:
        """The kernel's parameters."""
        return list(self.func.params.params)

    @property
    def param_names(self) -> list[str]:
        """The kernel's parameter names, in order."""
        return [p.name.value for p in self.params]

    @functools.cached_property
    def module_aliases(self) -> dict[str, cst.BaseExpression]:
        """Module-level names bound once (``ConstInt = ct.Constant[int]``, or annotated); once
        per parsed file (``load`` caches the Kernel, its tree is immutable)."""
        return {n: v[0] for n, v in module_assignments(self.module).items() if len(v) == 1}

    def resolve_alias(self, node: cst.BaseExpression | None) -> cst.BaseExpression | None:
        """Follow module-level aliases (TileGym's ``ConstInt = ct.Constant[int]``); a
        subscripted alias (``C[int]`` with ``C = ct.Constant``) keeps its subscript."""
        aliases = self.module_aliases
        for _ in range(8):                   # short chains; a cycle must not hang
            if isinstance(node, cst.Name) and node.value in aliases:
                node = aliases[node.value]
            elif isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) \
                    and node.value.value in aliases:
                node = node.with_changes(value=aliases[node.value.value])
            else:
                break
        return node

    def constant_params(self) -> dict[str, str]:
        """``ct.Constant[T]`` parameters -> ``T`` as written (``int``, ``bool``, ...), also
        when spelled through a module-level alias."""
        out = {}
        for p in self.params:
            ann = self.resolve_alias(p.annotation.annotation if p.annotation else None)
            if isinstance(ann, cst.Subscript) and self.ct.member(ann.value) == "Constant":
                inner = ann.slice[0].slice if ann.slice else None
                inner_v = inner.value if isinstance(inner, cst.Index) else None
                out[p.name.value] = dotted(inner_v) or cst.Module([]).code_for_node(inner_v)
            elif isinstance(ann, (cst.Name, cst.Attribute)) and self.ct.member(ann) == "Constant":
                out[p.name.value] = ""
        return out

    # -- calls
    def calls(self, *members: str, root: cst.CSTNode | None = None) -> list[cst.Call]:
        """cuTile calls (``ct.<member>(...)``) inside the kernel, in source order."""
        want = set(members)
        return find_all(root or self.func.body,
                        lambda n: isinstance(n, cst.Call) and self.ct.called(n) in want)

    def helpers(self) -> list[cst.FunctionDef]:
        """The module-level functions the kernel calls by name, directly or through one another (cuTile inlines
        them into the kernel), in the order first reached."""
        defs = {s.name.value: s for s in self.module.body if isinstance(s, cst.FunctionDef)}
        out: list[cst.FunctionDef] = []
        todo, seen = [self.func], {self.func.name.value}
        while todo:
            f = todo.pop(0)
            for c in find_all(f.body, lambda n: isinstance(n, cst.Call) and isinstance(n.func, cst.Name)):
                name = c.func.value
                if name in defs and name not in seen:
                    seen.add(name)
                    out.append(defs[name])
                    todo.append(defs[name])
        return out

    def body_statements(self) -> tuple[list[cst.BaseStatement], int]:
        """The kernel body's statements and how many leading ones are the docstring."""
        body = list(self.func.body.body) if isinstance(self.func.body, cst.IndentedBlock) else []
        skip = 0
        if body and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1 \
                and isinstance(body[0].body[0], cst.Expr) \
                and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            skip = 1
        return body, skip

    def loc(self, node: cst.CSTNode) -> str:
        """``line N`` of ``node``, for refusal messages."""
        return f"line {self.line(node)}"


def _is_kernel_decorator(ct: CtNames, dec: cst.Decorator) -> bool:
    d = dec.decorator
    if isinstance(d, cst.Call):
        d = d.func
    return ct.member(d) == "kernel"


def parse_module(source: str) -> cst.Module:
    """Parse a kernel file with libcst; a syntax error is a TransformError naming line and column."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        raise TransformError(f"cannot parse the kernel file: line {e.raw_line}:{e.raw_column}: "
                             f"{e.message}") from None


@dataclass(frozen=True)
class Parsed:
    """A kernel file parsed once per process: the libcst module with positions and parents
    (shared by every transform and by ``source.locate``; libcst trees are immutable)."""
    module: cst.Module
    pos: Any
    parents: Any


@functools.lru_cache(maxsize=16)
def parsed(source: str) -> Parsed:
    """The module with its position and parent metadata (resolved without a copy)."""
    module = parse_module(source)
    meta = MetadataWrapper(module, unsafe_skip_copy=True).resolve_many([PositionProvider, ParentNodeProvider])
    return Parsed(module, meta[PositionProvider], meta[ParentNodeProvider])


def load(source: str, kernel_name: str) -> Kernel:
    """Find ``kernel_name`` (a ``@ct.kernel`` def or a module-level alias of one).

    Cached: parsing plus position/parent metadata costs ~50 ms and ``candidates`` asks the
    same question many times.  Safe because libcst trees are immutable."""
    return _load(source, kernel_name)


@functools.lru_cache(maxsize=64)
def _load(source: str, kernel_name: str) -> Kernel:
    p = parsed(source)
    module = p.module
    ct = CtNames.scan(module)
    if not ct.module_aliases and not ct.members:
        refuse("the file does not import cuda.tile")
    defs: dict[str, cst.FunctionDef] = {}
    assigns = module_assignments(module)
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef):
            defs[stmt.name.value] = stmt

    def resolve(name: str, seen: tuple[str, ...] = ()) -> str | None:
        if name in seen:
            return None
        if name in defs:
            return name
        vals = assigns.get(name, [])
        if len(vals) == 1 and isinstance(vals[0], cst.Name):
            return resolve(vals[0].value, seen + (name,))
        return None

    target = resolve(kernel_name)
    if target is None:
        if len(assigns.get(kernel_name, [])) > 1:
            refuse(f"'{kernel_name}' is assigned more than once at module level; ambiguous")
        if kernel_name in assigns:
            refuse(f"'{kernel_name}' is not a def or a plain alias of one (it is built by an "
                   f"expression); transforms need the decorated def")
        refuse(f"no kernel named '{kernel_name}' in this file")
    func = defs[target]
    decs = [d for d in func.decorators if _is_kernel_decorator(ct, d)]
    if not decs:
        refuse(f"'{target}' is not decorated with @{ct.module_aliases[0] if ct.module_aliases else 'ct'}.kernel")
    aliases = tuple(sorted({target, kernel_name} | {n for n in assigns if resolve(n) == target}))
    return Kernel(source=source, module=module, ct=ct, name=kernel_name, func=func,
                  decorator=decs[0], aliases=aliases, _pos=p.pos, _parents=p.parents)


# ---------------------------------------------------------------------------------------
# rewriting


Edit = Callable[[cst.CSTNode], Any]   # updated node -> replacement / FlattenSentinel / Removal


class _Rewriter(cst.CSTTransformer):
    def __init__(self, edits: dict[cst.CSTNode, Edit]):
        super().__init__()
        self.edits = edits
        self.done: set[int] = set()

    def on_leave(self, original_node, updated_node):
        fn = self.edits.get(original_node)
        if fn is None:
            return updated_node
        self.done.add(id(original_node))
        return fn(updated_node)


def rewrite(module: cst.Module, edits: dict[cst.CSTNode, Edit]) -> cst.Module:
    """Apply ``{original node: edit(updated node)}``; edits see their children's edits."""
    r = _Rewriter(edits)
    out = module.visit(r)
    missed = [n for n in edits if id(n) not in r.done]
    if missed:
        raise TransformError(f"internal: {len(missed)} edit(s) did not find their node")
    return out


def expr(text: str) -> cst.BaseExpression:
    """A libcst expression from its text."""
    return cst.parse_expression(text)


def stmt(text: str) -> cst.BaseStatement:
    """A libcst statement from its text."""
    return cst.parse_statement(text)


def code(node: cst.CSTNode) -> str:
    """The source text of ``node``."""
    return cst.Module([]).code_for_node(node)


def kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    """The keyword argument ``name`` of ``call``, or None."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    """The positional arguments of ``call`` (no ``*args``)."""
    return [a for a in call.args if a.keyword is None and not a.star]


def _equal_style(call: cst.Call) -> cst.AssignEqual:
    for a in call.args:
        if a.keyword is not None and isinstance(a.equal, cst.AssignEqual):
            return a.equal
    return cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                           whitespace_after=cst.SimpleWhitespace(""))


def set_kwargs(call: cst.Call, items: Sequence[tuple[str, cst.BaseExpression]]) -> cst.Call:
    """Set keyword arguments: replace the value of existing ones, append the others.

    Appending keeps the call's layout: on a multi-line call with a trailing comma the new
    argument goes on its own line with the same indentation as the previous one."""
    args = list(call.args)
    for name, value in items:
        for i, a in enumerate(args):
            if a.keyword is not None and a.keyword.value == name:
                args[i] = a.with_changes(value=value)
                break
        else:
            new = cst.Arg(value=value, keyword=cst.Name(name), equal=_equal_style(call))
            if args:
                last = args[-1]
                if isinstance(last.comma, cst.Comma):
                    # A trailing comma: the new argument inherits it (with the newline before
                    # the closing paren); the old last argument gets the separator used
                    # between arguments — or, for a lone argument, the whitespace after "(".
                    if len(args) > 1 and isinstance(args[-2].comma, cst.Comma):
                        sep = args[-2].comma
                    elif isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
                        sep = cst.Comma(whitespace_after=call.whitespace_before_args)
                    else:
                        sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                    new = new.with_changes(comma=last.comma)
                    args[-1] = last.with_changes(comma=sep)
            args.append(new)
    return call.with_changes(args=args)


def _append_with_layout(items: list, new, comma_of, lead_ws) -> list:
    """Append ``new`` to a comma-separated sequence, keeping a trailing-comma layout."""
    items = list(items)
    if items and isinstance(items[-1].comma, cst.Comma):
        last = items[-1]
        if len(items) > 1 and isinstance(items[-2].comma, cst.Comma):
            sep = items[-2].comma
        elif isinstance(lead_ws, cst.ParenthesizedWhitespace):
            sep = cst.Comma(whitespace_after=lead_ws)
        else:
            sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        new = new.with_changes(comma=last.comma)
        items[-1] = last.with_changes(comma=sep)
    elif not items and comma_of is not None:
        new = new.with_changes(comma=comma_of)
    items.append(new)
    return items


def append_element(node: cst.BaseExpression, value: cst.BaseExpression):
    """``(a, b)`` -> ``(a, b, value)``; a 1-tuple keeps its comma; lists too."""
    if isinstance(node, cst.Tuple):
        new = cst.Element(value)
        els = list(node.elements)
        if len(els) == 1 and not isinstance(els[0].comma, cst.Comma):
            els[0] = els[0].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        lead = node.lpar[0].whitespace_after if node.lpar else None
        return node.with_changes(elements=_append_with_layout(els, new, None, lead))
    if isinstance(node, cst.List):
        return node.with_changes(elements=_append_with_layout(node.elements, cst.Element(value), None,
                                                              node.lbracket.whitespace_after))
    raise TransformError(f"internal: cannot append to {type(node).__name__}")


def append_dict_item(node: cst.Dict, key: str, value: cst.BaseExpression) -> cst.Dict:
    """``node`` with ``"key": value`` appended, keeping its layout (trailing comma, line breaks)."""
    new = cst.DictElement(key=cst.SimpleString(repr(key).replace("'", '"')) if '"' not in key
                          else cst.SimpleString(repr(key)), value=value)
    return node.with_changes(elements=_append_with_layout(node.elements, new, None,
                                                          node.lbrace.whitespace_after))


_TIGHT_OPS = (cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.MatrixMultiply, cst.Power)


def needs_parens(e: cst.BaseExpression) -> bool:
    """Whether ``e`` must be parenthesised as an operand of ``*``."""
    if e.lpar:
        return False
    if isinstance(e, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float,
                      cst.SimpleString, cst.Tuple, cst.List)):
        return False
    if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, _TIGHT_OPS):
        return False
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, (cst.Minus, cst.Plus, cst.BitInvert)):
        return False
    return True


def paren(e: cst.BaseExpression) -> cst.BaseExpression:
    """``e`` parenthesised when an operand position needs it (see ``needs_parens``)."""
    return e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if needs_parens(e) else e


def times(a: cst.BaseExpression, b: cst.BaseExpression) -> cst.BinaryOperation:
    """``a * b`` with the parentheses precedence needs."""
    return cst.BinaryOperation(left=paren(a), operator=cst.Multiply(
        whitespace_before=cst.SimpleWhitespace(" "), whitespace_after=cst.SimpleWhitespace(" ")),
        right=paren(b) if not isinstance(b, cst.BinaryOperation) or b.lpar
        else b.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]))


def int_value(node: cst.CSTNode | None) -> int | None:
    """The value of an integer literal (``-3`` included), else None."""
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) \
            and isinstance(node.expression, cst.Integer):
        return -int(node.expression.value, 0)
    return None


def literal_value(node: cst.CSTNode | None):
    """Python value of a simple literal (int, float, True/False/None), or a sentinel."""
    iv = int_value(node)
    if iv is not None:
        return iv
    if isinstance(node, cst.Float):
        return float(node.value)
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) \
            and isinstance(node.expression, cst.Float):
        return -float(node.expression.value)
    return _NOT_LITERAL


_NOT_LITERAL = object()


def names_in(node: cst.CSTNode) -> set[str]:
    """Names read by an expression (attribute bases included, attribute names not)."""
    out: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name):
            out.add(n.value)

        def visit_Attribute(self, n: cst.Attribute):
            n.value.visit(self)
            return False

        def visit_Arg(self, n: cst.Arg):
            n.value.visit(self)
            return False

    node.visit(V())
    return out


def fresh_name(taken: set[str], base: str) -> str:
    """``base``, or ``base_1``, ``base_2``... the first not in ``taken``."""
    if base not in taken:
        return base
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"


def all_names(node: cst.CSTNode) -> set[str]:
    """Every identifier used or bound under ``node`` (attribute names like ``ct.bid``'s
    ``bid`` excluded: they cannot collide with a local)."""
    return names_in(node)


def insert_in_body(func: cst.FunctionDef, new: Sequence[cst.BaseStatement], *, after: int) -> cst.FunctionDef:
    """``func`` with statements inserted after its first ``after`` body statements."""
    body = list(func.body.body)
    return func.with_changes(body=func.body.with_changes(body=body[:after] + list(new) + body[after:]))


def lines_text(lines: Iterable[int]) -> str:
    """``line 3`` or ``lines 3, 7`` (sorted, each once)."""
    ls = sorted(set(lines))
    return ("line " if len(ls) == 1 else "lines ") + ", ".join(map(str, ls))
