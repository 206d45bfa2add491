"""Typed model of TileIR text as ``tileirdisasm`` prints it (with or without ``-g``).

The printer's grammar is line-oriented (cutile-facts §5): one op per line, a trailing ``{``
opens a region, ``}`` / ``} else {`` close one, ``reduce``/``scan`` put their block
arguments on the following line, and ``-g`` appends ``loc(#locN)`` to op lines and region
closers, with an alias table after the last entry.  The parser is tolerant where that is
safe (unknown ops and types are parsed generically and reported as warnings) and strict
where it is not (unbalanced braces, truncated files, binary input) — those raise
``ParseError`` with file:line:column.

Public API::

    mod = parse_tileir(text, path=None)      # -> Module
    for entry in mod.entries:
        for op in entry.walk(): op.name, op.results, op.operands, op.attrs, op.hints, ...
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..errors import ParseError
from .tileir_ops import KNOWN_OPS, REGION_OPS, op_class
from .tileir_types import IRType, TypeSyntaxError, parse_type, split_top


@dataclass(frozen=True)
class SourceLoc:
    """A Python source location of an op (file, line, column), with the call site of an inlined helper."""
    file: str
    line: int
    column: int = 0
    # where an inlined helper (or cuTile's own _stub.py) was called from, if anywhere
    call_site: "SourceLoc | None" = None

    @property
    def short(self) -> str:
        """``file.py:line``."""
        return f"{Path(self.file).name}:{self.line}"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Arg:
    """An entry or block argument: SSA name and type."""
    name: str
    type: IRType


@dataclass
class Region:
    """A region of an op (loop body, then/else) or an entry body: block arguments and ops."""
    args: list[Arg] = field(default_factory=list)
    ops: list["Op"] = field(default_factory=list)
    label: str = "body"          # body | then | else

    def walk(self) -> Iterator["Op"]:
        """Every op, pre-order (iterative: nested generators cost a frame per level per op)."""
        stack = [iter(self.ops)]
        while stack:
            op = next(stack[-1], None)
            if op is None:
                stack.pop()
                continue
            yield op
            if op.regions:
                stack.extend(iter(r.ops) for r in reversed(op.regions))


@dataclass
class Op:
    """One TileIR operation as parsed: names, operands with their roles, attributes, hints,
    types, nested regions and its line and Python source."""
    name: str
    results: list[str]                       # '%x:2' is expanded to ['%x#0', '%x#1']
    operands: list[str]                      # SSA uses in textual order
    operand_roles: list[str]                 # '' | index | token | init | lower | upper | step | shape | strides | cond
    keywords: list[str]                      # bare words: weak, signed, less_than, flush_to_zero ...
    attrs: dict[str, str]                    # div_by='16', rounding='approx', value='i32: 1', dim='1' ...
    hints: dict[str, dict]                   # optimization_hints=<default = {...}> parsed
    operand_types: list[IRType]
    result_types: list[IRType]
    line: int                                # 1-based line in the text
    text: str                                # the op line as printed (without loc)
    regions: list[Region] = field(default_factory=list)
    loc_ref: str | None = None               # '#loc12'
    source: SourceLoc | None = None
    parent: "Op | None" = field(default=None, repr=False)
    region_index: int = 0
    result_group: str | None = None          # '%x' for '%x:2'
    # ``text`` with every SSA name replaced by '%' (shared by all lines of one shape; None
    # when the line was parsed on its own): the differ's op label, computed once per shape
    erased: str | None = field(default=None, repr=False, compare=False)

    @property
    def op_class(self) -> str:
        """The op's class from ``tileir_ops.OP_CLASS`` (memory, mma, control, ...)."""
        return op_class(self.name)

    @property
    def region_path(self) -> tuple[str, ...]:
        """The enclosing ops outermost first, each as ``name[region index]``."""
        path = []
        p = self.parent
        child = self
        while p is not None:
            path.append(f"{p.name}[{child.region_index}]")
            child, p = p, p.parent
        return tuple(reversed(path))

    @property
    def loop_depth(self) -> int:
        """How many ``for``/``loop`` ops enclose this op."""
        return sum(1 for p in self.region_path if p.startswith(("for[", "loop[")))

    def hint(self, key: str, arch: str | None = None):
        """A hint value: arch-specific dict first, then 'default'."""
        if arch and arch in self.hints and key in self.hints[arch]:
            return self.hints[arch][key]
        return self.hints.get("default", {}).get(key)

    @property
    def defined_names(self) -> list[str]:
        """Results plus the block arguments of this op's regions."""
        names = list(self.results)
        for r in self.regions:
            names.extend(a.name for a in r.args)
        return names


@dataclass
class Entry:
    """One ``entry`` (a compiled kernel): symbol, arguments, per-arch hints and body."""
    symbol: str
    args: list[Arg]
    hints: dict[str, dict]
    body: Region
    line: int
    loc_ref: str | None = None
    source: SourceLoc | None = None

    @property
    def function_name(self) -> str:
        """The Python function's name, read from the mangled symbol."""
        # symbols are '<fn>_K<callconv>_...'; the Python name precedes the first '_K'
        m = re.match(r"^(.*?)_K[a-z]\d", self.symbol)
        return m.group(1) if m else self.symbol

    def walk(self) -> Iterator[Op]:
        """Every op of the body, pre-order."""
        return self.body.walk()

    def ops_named(self, *names: str) -> list[Op]:
        """The ops whose name is one of ``names``, pre-order."""
        return [op for op in self.walk() if op.name in names]

    def hint(self, key: str, arch: str | None = None):
        """The entry hint ``key`` for ``arch``, else its default value, else None."""
        if arch and arch in self.hints and key in self.hints[arch]:
            return self.hints[arch][key]
        return self.hints.get("default", {}).get(key)


@dataclass
class Module:
    """A parsed TileIR module: its entries, location aliases and parse warnings."""
    entries: list[Entry]
    locations: dict[str, SourceLoc | None] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    path: str | None = None
    has_locations: bool = False

    def entry(self, name: str | None = None) -> Entry:
        """The entry by symbol or Python name (the first when None); KeyError when absent."""
        if name is None:
            return self.entries[0]
        for e in self.entries:
            if e.symbol == name or e.function_name == name:
                return e
        raise KeyError(name)

    def walk(self) -> Iterator[Op]:
        """Every op of every entry, pre-order."""
        for e in self.entries:
            yield from e.walk()


# ---------------------------------------------------------------------------------------
# lexical helpers

_SSA = r"%[A-Za-z0-9_$.\-]+(?:#\d+)?"
_SSA_RE = re.compile(_SSA)
_RESULTS_RE = re.compile(r"^((?:%[A-Za-z0-9_$.\-]+(?::\d+)?)(?:\s*,\s*%[A-Za-z0-9_$.\-]+(?::\d+)?)*)\s*=\s*(?=[A-Za-z_])")
_OPNAME_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)")
_ENTRY_RE = re.compile(r"^entry\s+@([A-Za-z0-9_$.\-]+)\s*\(")
_BLOCKARGS_RE = re.compile(r"^\((%[^)]*)\)\s*\{$")
_LOC_TAIL_RE = re.compile(r"\s+loc\((.*)\)\s*$")


class _LineError(Exception):
    def __init__(self, message: str, column: int = 1):
        super().__init__(message)
        self.column = column


_BAL_SPECIAL = re.compile(r'[()\[\]{}<>"]')
_BAL_PAIRS = {")": "(", "]": "[", "}": "{", ">": "<"}
_STR_REST_BAL = re.compile(r'(?:[^"\\]|\\.)*"', re.S)


def _check_balanced(text: str, base: int = 0) -> None:
    """Raise _LineError at the first unbalanced bracket (strings and '->' respected)."""
    # regex-driven: only brackets and quotes are visited (this runs on every line)
    stack: list[tuple[str, int]] = []
    pos = 0
    search = _BAL_SPECIAL.search
    while True:
        m = search(text, pos)
        if m is None:
            break
        c, i = m.group(), m.start()
        if c == '"':
            e = _STR_REST_BAL.match(text, i + 1)
            if e is None:
                raise _LineError("unterminated string", base + i + 1)
            pos = e.end()
            continue
        pos = i + 1
        if c in "([{<":
            stack.append((c, i))
        else:
            if c == ">" and i > 0 and text[i - 1] == "-":
                continue
            if not stack:
                raise _LineError(f"unbalanced '{c}'", base + i + 1)
            if stack[-1][0] != _BAL_PAIRS[c]:
                o, p = stack[-1]
                raise _LineError(f"unclosed '{o}' (found '{c}' at column {base + i + 1})", base + p + 1)
            stack.pop()
    if stack:
        c, p = stack[-1]
        raise _LineError(f"unclosed '{c}'", base + p + 1)


def _strip_loc(line: str) -> tuple[str, str | None]:
    """Split a trailing ' loc(...)' off a line."""
    idx = line.rfind(" loc(")
    if idx < 0:
        return line, None
    inner = line[idx + 5:].rstrip()
    if inner.endswith(")") and "(" not in inner and inner.count(")") == 1:
        return line[:idx].rstrip(), inner[:-1]          # 'loc(#loc12)': the common case
    tail = line[idx + 1:].strip()
    # the tail must be exactly one balanced loc(...) group
    depth = 0
    for j, c in enumerate(tail):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                if tail[j + 1:].strip():
                    return line, None
                break
    inner = tail[4:-1]
    return line[:idx].rstrip(), inner


def _parse_scalar(v: str):
    v = v.strip()
    if v in ("true", "false"):
        return v == "true"
    if re.fullmatch(r"[-+]?\d+", v):
        return int(v)
    if re.fullmatch(r"[-+]?\d*\.\d+(?:[eE][-+]?\d+)?", v):
        return float(v)
    return v.strip('"')


def parse_hints(text: str) -> dict[str, dict]:
    """``<default = {occupancy = 2}, sm_100 = {num_cta_in_cga = 2}>`` -> nested dict."""
    t = text.strip()
    if t.startswith("<") and t.endswith(">"):
        t = t[1:-1]
    out: dict[str, dict] = {}
    for part in split_top(t):
        if not part:
            continue
        if "=" not in part:
            raise _LineError(f"bad optimization_hints entry '{part}'")
        key, val = part.split("=", 1)
        val = val.strip()
        if not (val.startswith("{") and val.endswith("}")):
            raise _LineError(f"bad optimization_hints value '{val}'")
        d: dict = {}
        for kv in split_top(val[1:-1]):
            if not kv:
                continue
            if "=" not in kv:
                raise _LineError(f"bad hint '{kv}'")
            k, v = kv.split("=", 1)
            d[k.strip()] = _parse_scalar(v)
        out[key.strip()] = d
    return out


# tokens of an op's operand section
@dataclass
class _Tok:
    kind: str        # ssa | word | angle | wangle | bracket | paren | string | eq | comma | lit
    text: str
    word: str = ""
    pos: int = 0


def _match_close(text: str, i: int) -> int:
    """Index just past the bracket group starting at text[i]."""
    open_c = text[i]
    close_c = {"(": ")", "[": "]", "<": ">", "{": "}"}[open_c]
    depth, in_str, j = 0, False, i
    while j < len(text):
        c = text[j]
        if in_str:
            if c == "\\":
                j += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == open_c:
            depth += 1
        elif c == close_c:
            if not (c == ">" and j > 0 and text[j - 1] == "-"):
                depth -= 1
                if depth == 0:
                    return j + 1
        j += 1
    raise _LineError(f"unclosed '{open_c}'", i + 1)


_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_LIT_RE = re.compile(r"[-+]?(?:0x[0-9A-Fa-f]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\?)")


def _tokenize(text: str, base: int = 0) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c == "%":
            m = _SSA_RE.match(text, i)
            if not m:
                raise _LineError("bad SSA name", base + i + 1)
            toks.append(_Tok("ssa", m.group(0), pos=base + i))
            i = m.end()
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            toks.append(_Tok("string", text[i:j + 1], pos=base + i))
            i = j + 1
            continue
        if c in "([<{":
            j = _match_close(text, i)
            kind = {"(": "paren", "[": "bracket", "<": "angle", "{": "brace"}[c]
            toks.append(_Tok(kind, text[i + 1:j - 1], pos=base + i))
            i = j
            continue
        if c == "=":
            toks.append(_Tok("eq", "=", pos=base + i))
            i += 1
            continue
        if c == ",":
            toks.append(_Tok("comma", ",", pos=base + i))
            i += 1
            continue
        m = _WORD_RE.match(text, i)
        if m:
            word = m.group(0)
            j = i + len(word)
            if j < n and text[j] == "<":
                k = _match_close(text, j)
                toks.append(_Tok("wangle", text[j + 1:k - 1], word=word, pos=base + i))
                i = k
            else:
                toks.append(_Tok("word", word, pos=base + i))
                i = j
            continue
        m = _LIT_RE.match(text, i)
        if m and m.group(0):
            toks.append(_Tok("lit", m.group(0), pos=base + i))
            i += len(m.group(0))
            continue
        raise _LineError(f"unexpected character '{c}'", base + i + 1)
    return toks


def _refs(text: str) -> list[str]:
    return _SSA_RE.findall(text)


@dataclass
class _OpParts:
    operands: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    attrs: dict[str, str] = field(default_factory=dict)
    hints: dict[str, dict] = field(default_factory=dict)

    def use(self, ref: str, role: str = "") -> None:
        self.operands.append(ref)
        self.roles.append(role)


def _interpret(toks: list[_Tok], parts: _OpParts) -> None:
    i = 0
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.kind == "word" and nxt is not None and nxt.kind == "eq":
            key = t.text
            val = toks[i + 2] if i + 2 < len(toks) else None
            if val is None:
                raise _LineError(f"'{key} =' without a value", t.pos + 1)
            if key == "optimization_hints":
                if val.kind != "angle":
                    raise _LineError("optimization_hints must be <...>", val.pos + 1)
                parts.hints = parse_hints(val.text)
            elif val.kind == "ssa":
                parts.use(val.text, key)
            else:
                for r in _refs(val.text):
                    parts.use(r, key)
                parts.attrs[key] = _canon_text(val)
            i += 3
            continue
        if t.kind == "ssa":
            parts.use(t.text)
            if nxt is not None and nxt.kind == "bracket":   # %pview[%i, %j]
                for r in _refs(nxt.text):
                    parts.use(r, "index")
                lits = [x.strip() for x in nxt.text.split(",") if x.strip() and not x.strip().startswith("%")]
                if lits:
                    parts.attrs["index_literals"] = ",".join(lits)
                i += 2
                continue
        elif t.kind == "word":
            parts.keywords.append(t.text)
        elif t.kind == "wangle":
            parts.attrs[t.word] = " ".join(t.text.split())
        elif t.kind == "angle":
            parts.attrs["value"] = " ".join(t.text.split())
        elif t.kind == "string":
            parts.attrs["string"] = t.text
        elif t.kind == "bracket":
            parts.attrs["list"] = "[" + " ".join(t.text.split()) + "]"
            for r in _refs(t.text):
                parts.use(r, "list")
        elif t.kind == "paren":
            parts.attrs["paren"] = "(" + " ".join(t.text.split()) + ")"
            for r in _refs(t.text):
                parts.use(r)
        elif t.kind == "lit":
            parts.attrs.setdefault("literals", "")
            parts.attrs["literals"] = (parts.attrs["literals"] + " " + t.text).strip()
        i += 1


def _canon_text(t: _Tok) -> str:
    wrap = {"bracket": "[{}]", "paren": "({})", "angle": "<{}>", "brace": "{{{}}}"}.get(t.kind)
    body = " ".join(t.text.split())
    body = _SSA_RE.sub("%", body)
    return wrap.format(body) if wrap else (f"{t.word}<{body}>" if t.kind == "wangle" else body)


def _types(text: str) -> list[IRType]:
    # type lists repeat on many lines; IRType is immutable, the list is copied
    hit = _TYPES_CACHE.get(text)
    if hit is not None:
        return list(hit)
    out = _types_uncached(text)
    if len(_TYPES_CACHE) < 65536:
        _TYPES_CACHE[text] = tuple(out)
    return out


_TYPES_CACHE: dict[str, tuple[IRType, ...]] = {}


def _types_uncached(text: str) -> list[IRType]:
    t = text.strip()
    if t.startswith("(") and t.endswith(")") and _match_close(t, 0) == len(t):
        t = t[1:-1]
    if not t:
        return []
    return [parse_type(x) for x in split_top(t)]


def _split_types(rest: str) -> tuple[str, str | None]:
    """Split 'operands : types' at the first top-level ' : '."""
    parts = split_top(rest, " : ")
    if len(parts) == 1:
        # ops without attributes print two spaces before ':'; split_top strips them
        parts = split_top(rest, ": ") if rest.lstrip().startswith(":") else parts
    if len(parts) == 1:
        if rest.strip().startswith(":"):
            return "", rest.strip()[1:]
        return rest, None
    return parts[0], " : ".join(parts[1:])


# ---------------------------------------------------------------------------------------
# op lines

def _expand_results(spec: str) -> tuple[list[str], str | None]:
    out: list[str] = []
    group = None
    for r in (x.strip() for x in spec.split(",")):
        if ":" in r:
            name, n = r.split(":")
            out.extend(f"{name}#{i}" for i in range(int(n)))
            group = name
        else:
            out.append(r)
    return out, group


def _parse_op_line(body: str, line_no: int) -> tuple[Op, bool, list[Arg]]:
    """Parse one op line; returns (op, opens_region, block_args_of_first_region)."""
    opens = False
    s = body.strip()
    ind = len(body) - len(body.lstrip())      # error columns count from the raw line
    if s.endswith("{"):
        s = s[:-1].rstrip()
        opens = True
    _check_balanced(s, ind)
    results: list[str] = []
    group = None
    m = _RESULTS_RE.match(s)
    if m:
        results, group = _expand_results(m.group(1))
        s_rest = s[m.end():]
    else:
        s_rest = s
    mm = _OPNAME_RE.match(s_rest)
    if not mm:
        if not m and s.startswith("%"):
            raise _LineError("expected '%name = op ...' (a result without its op: truncated line?)",
                             ind + len(s) + 1)
        raise _LineError("expected an op name", ind + len(s) - len(s_rest) + 1)
    name = mm.group(1)
    rest = s_rest[mm.end():]
    col0 = len(body) - len(body.lstrip()) + (len(s) - len(rest)) + 1
    parts = _OpParts()
    block_args: list[Arg] = []
    operand_types: list[IRType] = []
    result_types: list[IRType] = []

    if name == "for":
        fm = re.match(r"^\s*(" + _SSA + r")\s+in\s+", rest)
        if not fm or fm.end() >= len(rest) or rest[fm.end()] != "(":
            raise _LineError("cannot read 'for' header", col0)
        iv = fm.group(1)
        b_end = _match_close(rest, fm.end())
        bounds = rest[fm.end() + 1:b_end - 1]
        after = rest[b_end:].strip()
        tm = re.match(r"^:\s*(\S+?)(?=\s|$)", after)
        if not tm:
            raise _LineError("'for' without an induction type", col0)
        ivtype = tm.group(1)
        after = after[tm.end():].strip()
        itervals = None
        if after.startswith("iter_values("):
            k = _match_close(after, len("iter_values"))
            itervals = after[len("iter_values") + 1:k - 1]
            after = after[k:].strip()
        outs = after[2:].strip() if after.startswith("->") else None
        bm = re.match(r"^\s*(\S+)\s+to\s+(\S+?)\s*,\s*step\s+(\S+)\s*$", bounds)
        if not bm:
            raise _LineError("cannot read 'for' bounds", col0)
        for ref, role in zip(bm.groups(), ("lower", "upper", "step")):
            if ref.startswith("%"):
                parts.use(ref, role)
            else:
                parts.attrs[role] = ref
        it = parse_type(ivtype)
        block_args.append(Arg(iv, it))
        operand_types = [it, it, it]
        out_types = _types(outs) if outs else []
        if itervals:
            for k, pair in enumerate(split_top(itervals)):
                a, _, init = pair.partition("=")
                parts.use(init.strip(), "init")
                block_args.append(Arg(a.strip(), out_types[k] if k < len(out_types) else parse_type("token")))
        result_types = out_types
    elif name == "loop":
        after = rest.strip()
        itervals = None
        if after.startswith("iter_values("):
            k = _match_close(after, len("iter_values"))
            itervals = after[len("iter_values") + 1:k - 1]
            after = after[k:].strip()
        in_t = out_t = None
        if after.startswith(":"):
            arrow = split_top(after[1:], "->")
            in_t = arrow[0]
            out_t = arrow[1] if len(arrow) > 1 else None
        in_types = _types(in_t) if in_t else []
        if itervals:
            for k, pair in enumerate(split_top(itervals)):
                a, _, init = pair.partition("=")
                parts.use(init.strip(), "init")
                block_args.append(Arg(a.strip(), in_types[k] if k < len(in_types) else parse_type("token")))
        operand_types = in_types
        result_types = _types(out_t) if out_t else []
    else:
        ops_part, types_part = _split_types(rest)
        if name == "if":
            # 'if %c -> (T) {' has no ' : '
            im = re.match(r"^\s*(" + _SSA + r")\s*(?:->\s*(.*))?$", rest)
            if not im:
                raise _LineError("cannot read 'if' header", col0)
            parts.use(im.group(1), "cond")
            result_types = _types(im.group(2)) if im.group(2) else []
        else:
            _interpret(_tokenize(ops_part, col0), parts)
            if types_part is not None:
                arrow = split_top(types_part, "->")
                operand_types = _types(arrow[0])
                result_types = _types(arrow[1]) if len(arrow) > 1 else []
                if len(arrow) == 1 and results and operand_types:
                    # no '->': the last type is the result type ('mmaf a, b, acc : A, B, C',
                    # 'select c, x, y : tile<i1>, T', 'addf a, b : T')
                    result_types = [operand_types[-1]]
    # broadcast a single result type over several results ('%a, %b, %c = get_tile_block_id : tile<i32>')
    if results and len(result_types) == 1 and len(results) > 1:
        result_types = result_types * len(results)
    if results and not result_types and name == "make_token":
        result_types = [parse_type("token")]
    op = Op(name=name, results=results, operands=parts.operands, operand_roles=parts.roles,
            keywords=parts.keywords, attrs=parts.attrs, hints=parts.hints,
            operand_types=operand_types, result_types=result_types, line=line_no,
            text=" ".join(body.split()), result_group=group)
    return op, opens, block_args


# Op lines repeat up to their SSA names (half the lines of a typical dump, nearly all of an
# unrolled one): each distinct line shape is parsed once, with the names replaced by numbered
# placeholders, and then instantiated.  Lines with strings (whose text may contain '%') are
# always parsed directly, and so is any line whose template fails, so error columns refer to
# the real text.  TEMPLATE_CACHE = False restores plain parsing (used by tests and the benchmark).
TEMPLATE_CACHE = True
_TEMPLATES: dict[str, tuple] = {}
_PH = "%$$"
_PH_RE = re.compile(r"%\$\$(\d+)((?:#\d+)?)")
SSA_NAME = r"%[A-Za-z0-9_$.\-]+"        # an SSA name
SSA_USE = SSA_NAME + r"(?:#\d+)?"        # a use of one: the name and its '#k' projection


def _slots(xs: list[str]) -> list[tuple[int, str]] | None:
    """'%$$3#1' -> (3, '#1'); None when a value is not a single placeholder."""
    out = []
    for x in xs:
        m = _PH_RE.fullmatch(x)
        if m is None:
            return None
        out.append((int(m.group(1)), m.group(2)))
    return out


_ERASE_RE = re.compile(SSA_USE)
_NAME_SPLIT = re.compile(f"({SSA_NAME})")   # split keeps the names: text, name, text, ...


def _plan(slots: list[tuple[int, str]]) -> tuple:
    """('idx', indices) when no slot has a '#k' suffix (the common case), else ('sfx', slots)."""
    if all(not sfx for _i, sfx in slots):
        return ("idx", tuple(i for i, _sfx in slots))
    return ("sfx", tuple(slots))


def _fill(plan: tuple, n: list[str]) -> list[str]:
    if plan[0] == "idx":
        return [n[i] for i in plan[1]]
    return [n[i] + sfx for i, sfx in plan[1]]


def _parse_op_line_cached(body: str, line_no: int, stripped: str | None = None) -> tuple[Op, bool, list[Arg]]:
    if not TEMPLATE_CACHE or '"' in body or "$$" in body:
        return _parse_op_line(body, line_no)
    if stripped is None:
        stripped = body.strip()
    parts = _NAME_SPLIT.split(stripped)
    n = parts[1::2]
    if stripped.count("%") != len(n):
        # a '%' that starts no name would make the key ambiguous (malformed input)
        return _parse_op_line(body, line_no)
    key = "%".join(parts[::2])
    hit = _TEMPLATES.get(key)
    if hit is None:
        numbered = "".join(p if k % 2 == 0 else f"{_PH}{k // 2}" for k, p in enumerate(parts))
        try:
            t, opens, bargs = _parse_op_line(numbered, line_no)
        except (_LineError, TypeSyntaxError):
            return _parse_op_line(body, line_no)
        slots = (_slots(t.results), _slots(t.operands), _slots([a.name for a in bargs]),
                 _slots([t.result_group]) if t.result_group else [])
        if any(x is None for x in slots):
            return _parse_op_line(body, line_no)
        ph_attrs = tuple(k for k, v in t.attrs.items() if _PH in v)
        t.erased = _ERASE_RE.sub("%", t.text)
        hit = (t, opens, bargs, _plan(slots[0]), _plan(slots[1]), slots[2], slots[3], ph_attrs)
        if len(_TEMPLATES) < 65536:
            _TEMPLATES[key] = hit
    t, opens, bargs, rplan, oplan, bs, gs, ph_attrs = hit
    attrs = t.attrs.copy()
    for k in ph_attrs:
        attrs[k] = _PH_RE.sub(lambda m: n[int(m.group(1))] + m.group(2), attrs[k])
    hints = {k: v.copy() for k, v in t.hints.items()} if t.hints else {}
    # positional: Op's field order (a hot path: ~20,000 calls for two 10k-op files)
    op = Op(t.name, _fill(rplan, n), _fill(oplan, n), t.operand_roles.copy(), t.keywords.copy(), attrs,
            hints, t.operand_types.copy(), t.result_types.copy(), line_no, " ".join(stripped.split()),
            [], None, None, None, 0, (n[gs[0][0]] + gs[0][1]) if gs else None, t.erased)
    if not bs:
        return op, opens, []
    return op, opens, [Arg(n[i] + sfx, a.type) for (i, sfx), a in zip(bs, bargs)]


# ---------------------------------------------------------------------------------------
# location table

_LOC_FILE_RE = re.compile(r'^"(.*)":(\d+):(\d+)$')


def _resolve_locations(table: dict[str, str]) -> dict[str, SourceLoc | None]:
    cache: dict[str, SourceLoc | None] = {}

    def resolve(expr: str, depth: int = 0) -> SourceLoc | None:
        expr = expr.strip()
        if depth > 50:
            return None
        if re.fullmatch(r"#[A-Za-z0-9_.]+", expr):
            key = expr
            if key in cache:
                return cache[key]
            cache[key] = None   # cycle guard
            val = table.get(key)
            res = resolve(val, depth + 1) if val is not None else None
            cache[key] = res
            return res
        if expr.startswith("loc(") and expr.endswith(")"):
            inner = expr[4:-1].strip()
            m = _LOC_FILE_RE.match(inner)
            if m:
                return SourceLoc(m.group(1), int(m.group(2)), int(m.group(3)))
            if inner == "unknown":
                return None
            cm = re.match(r"^callsite\((.*)\s+at\s+(.*)\)$", inner)
            if cm:
                callee, caller = resolve(cm.group(1), depth + 1), resolve(cm.group(2), depth + 1)
                if callee is None:
                    return caller
                # an op inside cuTile's own stubs is best shown at the user's call site
                if caller is not None and ("/cuda/tile/" in callee.file or callee.file.endswith("_stub.py")):
                    return SourceLoc(caller.file, caller.line, caller.column, call_site=None)
                return SourceLoc(callee.file, callee.line, callee.column, call_site=caller)
            fm = re.match(r"^fused(?:<.*?>)?\[(.*)\]$", inner)
            if fm:
                for part in split_top(fm.group(1)):
                    r = resolve(part if part.startswith(("#", "loc(")) else f"loc({part})", depth + 1)
                    if r is not None:
                        return r
                return None
            m2 = re.match(r'^"(.*)"(?:\((.*)\))?$', inner)   # named loc: "name"(#loc)
            if m2 and m2.group(2):
                return resolve(m2.group(2), depth + 1)
            return None
        dm = re.match(r"^#cuda_tile\.di_loc<\s*(#\S+|loc\(.*\))\s+in\s+.*>$", expr)
        if dm:
            return resolve(dm.group(1), depth + 1)
        return None

    return {k: resolve(k) for k in table if k.startswith("#loc")}


# ---------------------------------------------------------------------------------------
# module

def parse_tileir(text: str, path: str | None = None) -> Module:
    """Parse TileIR text; raises ParseError (with file:line:column) on malformed input."""
    _BIN_HINT = "pass the tileirdisasm output, or a capture folder"
    if isinstance(text, bytes):
        if text.startswith((b"\x7fELF", b"\x7fTileIR")):
            what = "a cubin (ELF)" if text.startswith(b"\x7fELF") else "TileIR bytecode"
            raise ParseError(f"not TileIR text: {what}", path=path, line=1, column=1, hint=_BIN_HINT)
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            head = text[:e.start]
            line = head.count(b"\n") + 1
            col = e.start - (head.rfind(b"\n") + 1) + 1
            raise ParseError("not TileIR text (binary data: not UTF-8)", path=path, line=line,
                             column=col, hint=_BIN_HINT) from None
    if text.startswith(("\x7fELF", "\x7fTileIR")):
        raise ParseError("not TileIR text (binary data: a cubin or bytecode?)", path=path, line=1,
                         column=1, hint=_BIN_HINT)
    nul = text.find("\0", 0, 4096)
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise ParseError("not TileIR text (binary data: NUL byte)", path=path, line=line,
                         column=nul - (text.rfind("\n", 0, nul) + 1) + 1, hint=_BIN_HINT)
    if not text.strip():
        raise ParseError("empty file (no TileIR text)", path=path, line=1, column=1)
    lines = text.split("\n")
    entries: list[Entry] = []
    warnings: list[str] = []
    loc_table: dict[str, str] = {}
    # region stack items: (region, owner op or None for entry body)
    stack: list[tuple[Region, Op | None]] = []
    entry: Entry | None = None
    pending_region_op: Op | None = None   # reduce/scan awaiting its block-args line
    defined: set[str] = set()
    seen_entry = False
    wrappers: list[int] = []              # lines of open 'module {' wrappers

    def err(msg: str, line_no: int, col: int = 1):
        return ParseError(msg, path=path, line=line_no, column=col)

    for idx, raw in enumerate(lines):
        line_no = idx + 1
        stripped = raw.strip()
        if not stripped:
            continue
        if stripped.startswith("//"):
            continue
        if entry is None:
            if stripped.startswith("#"):
                key, eq, val = stripped.partition(" = ")
                if not eq:
                    raise err("malformed alias line (expected '#name = ...')", line_no)
                loc_table[key.strip()] = val.strip()
                continue
            m = _ENTRY_RE.match(stripped)
            if m:
                body_line, loc = _strip_loc(stripped)
                try:
                    _check_balanced(body_line[:-1] if body_line.endswith("{") else body_line,
                                    len(raw) - len(raw.lstrip()))
                except _LineError as e:
                    raise err(str(e), line_no, e.column) from None
                if not body_line.endswith("{"):
                    raise err("entry line does not open a body '{'", line_no, len(raw))
                j = _match_close(body_line, m.end() - 1)
                arg_txt = body_line[m.end():j - 1]
                args = []
                for a in split_top(arg_txt):
                    if not a:
                        continue
                    nm, _, ty = a.partition(":")
                    try:
                        args.append(Arg(nm.strip(), parse_type(ty)))
                    except TypeSyntaxError as e:
                        raise err(f"bad argument type: {e}", line_no) from None
                tail = body_line[j:-1].strip()
                hints: dict[str, dict] = {}
                if tail:
                    hm = re.match(r"^optimization_hints\s*=\s*(?=<)", tail)
                    if hm:
                        k = _match_close(tail, hm.end())
                        try:
                            hints = parse_hints(tail[hm.end():k])
                        except _LineError as e:
                            raise err(str(e), line_no, body_line.find("optimization_hints") + 1) from None
                        tail = tail[k:].strip()
                    if tail:
                        warnings.append(f"{path or '<text>'}:{line_no}: unrecognised entry attributes "
                                        f"'{tail}' ignored")
                odd = _unknown_types(a.type for a in args)
                if odd:
                    warnings.append(f"{path or '<text>'}:{line_no}: unknown type syntax '{odd}' parsed generically")
                entry = Entry(m.group(1), args, hints, Region(), line_no, loc_ref=loc)
                stack = [(entry.body, None)]
                defined = {a.name for a in args}
                seen_entry = True
                continue
            if stripped.startswith(("module", "cuda_tile.module")) and stripped.endswith("{"):
                wrappers.append(line_no)   # a wrapper some tools print around the entries
                continue
            if _strip_loc(stripped)[0] == "}" and wrappers:
                wrappers.pop()
                continue
            if _strip_loc(stripped)[0] == "}":
                raise err("unbalanced '}': no region or entry is open", line_no, raw.find("}") + 1)
            raise err("expected 'entry @...' (is this TileIR text?)" if not seen_entry
                      else "text after the last entry is neither an entry nor a location alias",
                      line_no, raw.find(stripped[0]) + 1)

        body, loc = _strip_loc(raw)
        s = body.strip()
        col = raw.find(s[:1]) + 1 if s else 1     # the first non-blank column, for errors
        # region closers
        if s == "}" or s == "} else {":
            if pending_region_op is not None:
                raise err("region block arguments expected before '}'", line_no, col)
            region, owner = stack.pop()
            if owner is None:          # end of entry
                if s != "}":
                    raise err("'} else {' closes an entry", line_no, col)
                if loc:
                    entry.loc_ref = loc
                entries.append(entry)
                entry = None
                continue
            if loc:
                owner.loc_ref = loc
            if s == "} else {":
                if owner.name != "if":
                    raise err(f"'else' after a '{owner.name}' region", line_no, col)
                r = Region(label="else")
                owner.regions.append(r)
                stack.append((r, owner))
            continue
        if pending_region_op is not None:
            bm = _BLOCKARGS_RE.match(s)
            if not bm:
                raise err(f"expected block arguments '(...) {{' for '{pending_region_op.name}'", line_no, col)
            args = []
            for a in split_top(bm.group(1)):
                nm, _, ty = a.partition(":")
                try:
                    args.append(Arg(nm.strip(), parse_type(ty)))
                except TypeSyntaxError as e:
                    raise err(f"bad block argument type: {e}", line_no, col) from None
            odd = _unknown_types(a.type for a in args)
            if odd:
                warnings.append(f"{path or '<text>'}:{line_no}: unknown type syntax '{odd}' parsed generically")
            r = Region(args=args)
            pending_region_op.regions.append(r)
            defined.update(a.name for a in args)
            stack.append((r, pending_region_op))
            pending_region_op = None
            continue
        try:
            op, opens, bargs = _parse_op_line_cached(body, line_no, s)
        except _LineError as e:
            raise err(str(e), line_no, e.column) from None
        except TypeSyntaxError as e:
            raise err(f"bad type: {e}", line_no, col) from None
        op.loc_ref = loc
        region, owner = stack[-1]
        op.parent = owner
        op.region_index = (len(owner.regions) - 1) if owner is not None else 0
        region.ops.append(op)
        if op.name not in KNOWN_OPS:
            warnings.append(f"{path or '<text>'}:{line_no}: unknown op '{op.name}' parsed generically")
        odd = _unknown_types(op.operand_types) or _unknown_types(op.result_types) \
            or (_unknown_types(a.type for a in bargs) if bargs else None)
        if odd:
            warnings.append(f"{path or '<text>'}:{line_no}: unknown type syntax '{odd}' parsed generically")
        for u in op.operands:
            if u not in defined and u.split("#")[0] not in defined:
                warnings.append(f"{path or '<text>'}:{line_no}: use of undefined value {u}")
        defined.update(op.results)
        if op.result_group:
            defined.add(op.result_group)
        if opens:
            r = Region(args=bargs, label="then" if op.name == "if" else "body")
            op.regions.append(r)
            defined.update(a.name for a in bargs)
            stack.append((r, op))
        elif op.name in ("reduce", "scan"):
            pending_region_op = op
        elif op.name in REGION_OPS and op.name not in ("reduce", "scan"):
            raise err(f"'{op.name}' without a region '{{'", line_no, col)

    if entry is not None:
        open_regions = len(stack)
        raise ParseError(f"unexpected end of text: {open_regions} region(s) still open "
                         f"(entry @{entry.symbol} from line {entry.line} is truncated)",
                         path=path, line=len(lines), column=len(lines[-1]) + 1)
    if not entries:
        raise ParseError("no 'entry @...' found: not TileIR text", path=path, line=1, column=1)
    if wrappers:
        raise ParseError("unexpected end of text: the 'module {' opened here is never closed",
                         path=path, line=wrappers[-1], column=1)

    mod = Module(entries=entries, warnings=warnings, path=path)
    if loc_table:
        mod.locations = _resolve_locations(loc_table)
        mod.has_locations = True
        for e in entries:
            if e.loc_ref:
                e.source = mod.locations.get(e.loc_ref)
            for op in e.walk():
                if op.loc_ref:
                    op.source = _loc_of(op.loc_ref, mod.locations)
    return mod


def _unknown_types(types) -> str | None:
    """The first type spelled in a syntax this parser does not know (kind 'other')."""
    for t in types:
        if t.kind == "other":
            return t.text
        inner = t.inner
        while inner is not None:
            if inner.kind == "other":
                return inner.text
            inner = inner.inner
    return None


def _loc_of(ref: str, table: dict[str, SourceLoc | None]) -> SourceLoc | None:
    ref = ref.strip()
    if ref.startswith("#"):
        return table.get(ref)
    m = _LOC_FILE_RE.match(ref)
    if m:
        return SourceLoc(m.group(1), int(m.group(2)), int(m.group(3)))
    return None


def parse_tileir_file(path: str | Path) -> Module:
    """Parse a TileIR file; a missing path or a folder raises ParseError."""
    p = Path(path)
    if not p.exists():
        raise ParseError("no such file", path=str(p))
    if p.is_dir():
        raise ParseError("is a directory (use a capture folder command)", path=str(p))
    data = p.read_bytes()
    return parse_tileir(data, path=str(p))
