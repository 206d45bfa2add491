"""TileIR types: ``tile<128x64xf16>``, ``token``, ``tensor_view<…>``, ``partition_view<…>`` …

Types are parsed into ``IRType`` trees; anything unrecognised becomes kind ``other`` with its
text kept, so a newer compiler's syntax degrades instead of failing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

ELEM_BITS = {
    "i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "tf32": 32,
    "f8E4M3FN": 8, "f8E5M2": 8, "f8E8M0FNU": 8, "f8E5M3FNU": 8, "f4E2M1FN": 4,
}
VIEW_KINDS = ("tensor_view", "partition_view", "gather_scatter_view", "strided_view", "tiled_view")


class TypeSyntaxError(ValueError):
    """A type spelling the parser cannot read, with the column where it failed."""
    def __init__(self, message: str, column: int = 0):
        super().__init__(message)
        self.column = column


@dataclass(frozen=True)
class IRType:
    """A parsed TileIR type (tile, token, a view...) with its shape, element type and view parameters."""
    kind: str                                   # tile | token | tensor_view | partition_view | ... | other
    text: str                                   # normalised spelling
    shape: tuple[int | None, ...] = ()          # tile/view dims; None = dynamic ('?')
    elem: str | None = None                     # element type: f16, i32, ptr<f16>, ...
    params: tuple[tuple[str, str], ...] = ()    # view parameters (tile, padding_value, strides, dim_map…)
    inner: "IRType | None" = None               # the tensor_view inside a partition/gather view

    @property
    def param(self) -> dict[str, str]:
        """The view parameters as a dict."""
        return dict(self.params)

    @property
    def is_scalar(self) -> bool:
        """A 0-d tile."""
        return self.kind == "tile" and self.shape == ()

    @property
    def is_pointer(self) -> bool:
        """Whether the element type is ``ptr<...>``."""
        return bool(self.elem and self.elem.startswith("ptr<"))

    @property
    def pointee(self) -> str | None:
        """The element type a pointer points to, or None."""
        if self.is_pointer:
            return self.elem[4:-1]  # type: ignore[index]
        return None

    @property
    def numel(self) -> int | None:
        """The element count, or None when a dimension is dynamic."""
        if any(d is None for d in self.shape):
            return None
        n = 1
        for d in self.shape:
            n *= d  # type: ignore[operator]
        return n

    @property
    def elem_bits(self) -> int | None:
        """Bits per element (64 for pointers), or None when unknown."""
        if self.elem is None:
            return None
        if self.is_pointer:
            return 64
        return ELEM_BITS.get(self.elem)

    def nbytes(self) -> int | None:
        """Bytes of a tile value (None when dynamic or not a tile)."""
        if self.kind != "tile":
            return None
        n, bits = self.numel, self.elem_bits
        if n is None or bits is None:
            return None
        return n * bits // 8

    @property
    def tile_shape(self) -> tuple[int, ...] | None:
        """For partition/gather views: the ``tile=(AxB)`` shape."""
        t = self.param.get("tile")
        if not t:
            return None
        try:
            return tuple(int(x) for x in t.strip("()").split("x"))
        except ValueError:
            return None

    @property
    def padding(self) -> str | None:
        """The view's ``padding_value`` (e.g. ``neg_inf``), or None."""
        return self.param.get("padding_value")

    @property
    def view_elem(self) -> str | None:
        """Element type of a view (from the innermost tensor_view)."""
        t: IRType | None = self
        while t is not None:
            if t.kind == "tensor_view":
                return t.elem
            t = t.inner
        return None

    def __str__(self) -> str:
        return self.text


_SPLIT_SPECIAL = re.compile(r'[()\[\]{}<>"]')
_SPLIT_PATTERNS: dict[str, re.Pattern] = {}
# the rest of a string literal after its opening quote: up to the closing quote (backslash
# escapes skip one character), or to the end of the text when unterminated
_STR_REST = re.compile(r'(?:[^"\\]|\\.?)*"?', re.S)
_OPENERS = frozenset("([{<")
_CLOSERS = frozenset(")]}>")


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside (), [], {}, <> and strings."""
    # Regex-driven scan (the parser's hot spot): only brackets, quotes and separators are
    # visited; the pieces are exact substrings, as in a character-by-character scan.
    if _SPLIT_SPECIAL.search(text) is None:
        out = text.split(sep)
    elif sep not in text:
        out = [text]
    elif '"' not in text and _SPLIT_SPECIAL.search(sep) is None:
        # no strings: the depth at a separator is the bracket balance before it, which
        # str.count computes in C ('->' is not a bracket: its '>' is added back)
        out, depth, start, last, pos, k = [], 0, 0, 0, 0, len(sep)
        while True:
            i = text.find(sep, pos)
            if i < 0:
                break
            seg = text[last:i]
            depth += (seg.count("(") + seg.count("[") + seg.count("{") + seg.count("<")
                      - seg.count(")") - seg.count("]") - seg.count("}") - seg.count(">")
                      + seg.count("->"))
            last = i
            if depth == 0:
                out.append(text[start:i])
                start = last = pos = i + k
            else:
                pos = i + 1
        out.append(text[start:])
    else:
        pat = _SPLIT_PATTERNS.get(sep)
        if pat is None:
            pat = _SPLIT_PATTERNS[sep] = re.compile(r'["()\[\]{}<>]|' + re.escape(sep))
        out, depth, start, pos, n = [], 0, 0, 0, len(text)
        while pos < n:
            m = pat.search(text, pos)
            if m is None:
                break
            tok, i = m.group(), m.start()
            if tok == '"' and len(tok) == 1:
                pos = _STR_REST.match(text, i + 1).end()
            elif len(tok) == 1 and tok in _OPENERS:
                depth += 1
                pos = i + 1
            elif len(tok) == 1 and tok in _CLOSERS:
                if not (tok == ">" and i > 0 and text[i - 1] == "-"):   # '->' is not a bracket
                    depth -= 1
                pos = i + 1
            elif depth == 0:
                out.append(text[start:i])
                start = pos = i + len(sep)
            else:
                pos = i + 1
        out.append(text[start:])
    return [s.strip() for s in out if s.strip() != "" or len(out) == 1]


_DIMS_RE = re.compile(r"^((?:(?:\d+|\?)x)*)(.+)$")
_WS = re.compile(r"\s+")


def _norm(text: str) -> str:
    t = _WS.sub(" ", text.strip())
    t = re.sub(r"\s*=\s*", " = ", t)
    t = re.sub(r"\s*,\s*", ", ", t)
    return t


def _dims(spec: str) -> tuple[tuple[int | None, ...], str]:
    m = _DIMS_RE.match(spec.strip())
    if not m:
        raise TypeSyntaxError(f"bad shaped type '{spec}'")
    dims_txt, elem = m.group(1), m.group(2).strip()
    dims = tuple(None if d == "?" else int(d) for d in dims_txt.split("x") if d)
    return dims, elem


def parse_type(text: str) -> IRType:
    """The IRType of a type spelling (cached); TypeSyntaxError when it cannot be read."""
    # IRType is immutable and the same few type spellings repeat on every line
    try:
        return _TYPE_CACHE[text]
    except KeyError:
        pass
    t = _parse_type(text)
    if len(_TYPE_CACHE) < 65536:
        _TYPE_CACHE[text] = t
    return t


_TYPE_CACHE: dict[str, IRType] = {}


def _parse_type(text: str) -> IRType:
    t = text.strip()
    if not t:
        raise TypeSyntaxError("empty type")
    if t.count("<") != t.count(">") - t.count("->"):
        raise TypeSyntaxError(f"unbalanced '<>' in type '{t}'")
    if t == "token":
        return IRType("token", "token")
    m = re.match(r"^([A-Za-z_][\w.]*)<(.*)>$", t, re.S)
    if not m:
        # bare element types (e.g. inside identities lists) and future syntax
        return IRType("other", _norm(t), elem=t if t in ELEM_BITS else None)
    head, inner = m.group(1), m.group(2)
    if head == "tile":
        dims, elem = _dims(inner)
        return IRType("tile", f"tile<{inner.strip()}>", shape=dims, elem=elem)
    if head == "tensor_view":
        parts = split_top(inner)
        dims, elem = _dims(parts[0])
        params = tuple(_kv(p) for p in parts[1:])
        return IRType("tensor_view", _norm(f"tensor_view<{inner}>"), shape=dims, elem=elem, params=params)
    if head in VIEW_KINDS:
        params, sub = [], None
        for p in split_top(inner):
            if re.match(r"^[A-Za-z_]+\s*=", p):
                params.append(_kv(p))
            elif re.match(r"^[A-Za-z_]+<", p):
                sub = parse_type(p)
            else:
                params.append(("_", p.strip()))
        return IRType(head, _norm(f"{head}<{inner}>"), params=tuple(params), inner=sub,
                      elem=sub.elem if sub else None, shape=sub.shape if sub else ())
    return IRType("other", _norm(t))


def _kv(p: str) -> tuple[str, str]:
    k, eq, v = p.partition("=")
    if not eq or not k.strip():
        raise TypeSyntaxError(f"expected 'name = value' in type parameters, got '{p.strip()}'")
    return k.strip(), _WS.sub(" ", v.strip())
