"""Playbook P: make a tile load TMA-eligible by padding with zeros and masking instead.

TMA pads out-of-bounds lanes with zeros only; a ``ct.load`` with any other padding
(``NEG_INF`` for a row max/softmax, ``POS_INF``, ``NAN``, ``NEG_ZERO``) is compiled to
plain global loads (tileiras remark "TMA only supports zero padding" / "software-
implemented TMA padding is not profitable").  The same values come from a ZERO-padded
load whose padded lanes are replaced afterwards::

    x = ct.load(X, index=(row, 0), shape=(1, T), padding_mode=ct.PaddingMode.NEG_INF)
      -> x = ct.where((ct.arange(T, dtype=ct.int32) < X.shape[1])[None, :],
                      ct.load(X, index=(row, 0), shape=(1, T), padding_mode=ct.PaddingMode.ZERO),
                      -math.inf)

Only axes whose tile can overhang get a mask term (a literal size-1 axis indexes one
row; an axis whose tile size is passed as ``A.shape[d]`` at every launch never overhangs),
so a tile that equals the extent everywhere needs no mask at all.  ``import math`` is
added when the file lacks it.  ``tma="off"`` also sets ``allow_tma=False`` on the rewritten
load (see ``TMA_OFF_NOTE``); ``candidates`` offers both.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import libcst as cst

from ..source.analysis import launch_extent
from ..source.model import (Kernel, TransformParamError, code, dotted, expr, int_value, kwarg, lines_text,
                             positional, refuse, rewrite, set_kwargs, stmt)
from .base import Plan, Transform
from ..source.model import load

# padding mode -> the Python value the masked lanes get
FILL = {"NEG_INF": "-math.inf", "POS_INF": "math.inf", "NAN": "math.nan", "NEG_ZERO": "-0.0"}


def valid_mask(k: Kernel, array: str, axes: Sequence[tuple[int, str, str, int | None]], rank: int,
               extent_of=None) -> str | None:
    """Text of a boolean tile that is true on in-bounds lanes, or None when no lane can be
    out of bounds.  ``axes``: (array dim, tile index, tile size, result axis or None)."""
    terms = []
    for dim, index, tile, pos in axes:
        if pos is None or int_value(expr(tile)) == 1:
            continue
        t = expr(tile)
        if isinstance(t, cst.Name) and extent_of is not None and extent_of(t.value, array, dim, len(axes)):
            continue
        ar = f"{k.ct.ref('arange')}({tile}, dtype={k.ct.ref('int32')})"
        lanes = ar if int_value(expr(index)) == 0 else f"{_operand(index)} * {_operand(tile)} + {ar}"
        term = f"({lanes} < {array}.shape[{dim}])"
        if rank == 2:
            term += "[:, None]" if pos == 0 else "[None, :]"
        elif rank > 2:
            refuse(f"a rank-{rank} tile: masks are built for 1-D and 2-D tiles only")
        terms.append(term)
    return " & ".join(terms) if terms else None


def _operand(text: str) -> str:
    e = expr(text)
    return text if isinstance(e, (cst.Name, cst.Attribute, cst.Call, cst.Integer, cst.Subscript)) else f"({text})"


def ensure_import_math(module: cst.Module) -> cst.Module:
    """``module`` with ``import math`` at the top of its imports unless ``math`` is imported."""
    for s in module.body:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, cst.Import) and any(dotted(a.name) == "math" and a.asname is None
                                                        for a in small.names):
                    return module
    body = list(module.body)
    at = next((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
               and isinstance(s.body[0], (cst.Import, cst.ImportFrom))), 0)
    new = stmt("import math\n")
    if at < len(body):
        new = new.with_changes(leading_lines=body[at].leading_lines)
        body[at] = body[at].with_changes(leading_lines=())
    body.insert(at, new)
    return module.with_changes(body=body)


TMA_OFF_NOTE = ("; allow_tma=False (plain vector loads/stores: on sm_90 TMA warp-specialises a "
                "one-row-per-block kernel to 255 registers and one resident block per SM)")


def tma_setting(params) -> bool:
    """True for ``tma="off"``; the parameter takes "auto" (TMA where tileiras can) or "off"."""
    v = params.get("tma", "auto")
    if v not in ("auto", "off"):
        raise TransformParamError(f"tma must be 'auto' or 'off', not {v!r}")
    return v == "off"


class TmaChoice:
    """A transform whose rewritten loads/stores may use TMA or not: both forms are candidates."""

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """The rewrite with TMA where tileiras can use it, and with ``tma="off"``; [] when it does not apply."""
        ok, _ = self.applicable(source, kernel_name)
        return [{}, {"tma": "off"}] if ok else []


@dataclass(frozen=True)
class TmaZeroPadding(TmaChoice, Transform):
    """A load padded with a non-zero value (NEG_INF, ...) made ZERO-padded, TMA-eligible, with ``ct.where`` restoring
    the value on padded lanes."""
    name: str = "tma_zero_padding"
    playbook_id: str = "P"
    summary: str = "non-zero-padded ct.load (NEG_INF, ...) -> ZERO-padded (TMA) load + ct.where on padded lanes"
    PARAMS: ClassVar[dict[str, Any]] = {"tma": "auto"}

    def _plan(self, k: Kernel, params) -> Plan:
        tma_off = tma_setting(params)
        loads = k.calls("load")
        if not loads:
            refuse(f"{k.name} has no ct.load")
        extent_of = launch_extent(k)
        edits, done, problems, needs_math = {}, [], [], False
        for c in loads:
            where = f"ct.load at line {k.line(c)}"
            pm = kwarg(c, "padding_mode")
            mode = k.ct.member(pm.value) if pm is not None else None
            mode = (dotted(pm.value) or "").split(".")[-1] if pm is not None else None
            if mode in (None, "ZERO", "UNDETERMINED"):
                continue
            if mode not in FILL:
                problems.append(f"{where}: padding `{code(pm.value)}` is not a literal PaddingMode")
                continue
            pos = positional(c)
            arr = pos[0].value if pos else None
            idx = kwarg(c, "index") or (pos[1] if len(pos) > 1 else None)
            shape = kwarg(c, "shape") or (pos[2] if len(pos) > 2 else None)
            if arr is None or idx is None or shape is None or not isinstance(idx.value, cst.Tuple) \
                    or not isinstance(shape.value, cst.Tuple) or kwarg(c, "order") is not None:
                problems.append(f"{where}: index/shape are not literal tuples (or an order is set)")
                continue
            iv = [code(e.value) for e in idx.value.elements]
            sv = [code(e.value) for e in shape.value.elements]
            if len(iv) != len(sv):
                problems.append(f"{where}: index and shape ranks differ")
                continue
            mask = valid_mask(k, code(arr), [(d, iv[d], sv[d], d) for d in range(len(sv))], len(sv), extent_of)
            zero = expr(k.ct.ref("PaddingMode.ZERO"))
            fill = FILL[mode]
            needs_math |= "math." in fill and mask is not None

            def edit(node, mask=mask, zero=zero, fill=fill):
                args = [a.with_changes(value=zero) if a.keyword is not None and a.keyword.value == "padding_mode"
                        else a for a in node.args]
                new = node.with_changes(args=args)
                if tma_off:
                    new = set_kwargs(new, [("allow_tma", expr("False"))])
                if mask is None:
                    return new
                return expr(f"{k.ct.ref('where')}({mask}, __LOAD__, {fill})").with_changes(
                    lpar=node.lpar, rpar=node.rpar).visit(_Swap(new))
            edits[c] = edit
            done.append((k.line(c), mode, mask is not None))
        if not done:
            refuse("; ".join(problems) if problems else
                   f"every ct.load of {k.name} already pads with ZERO (or leaves padding undetermined)")
        module = rewrite(k.module, edits)
        if needs_math:
            module = ensure_import_math(module)
        masked = [ln for ln, _m, has in done if has]
        desc = (f"{', '.join(sorted({m for _l, m, _h in done}))} padding -> ZERO on the ct.load at "
                f"{lines_text(ln for ln, _m, _h in done)}" +
                (f"; padded lanes masked with ct.where ({lines_text(masked)})" if masked else
                 "; no mask needed (the tile equals the extent at every launch)")) + (TMA_OFF_NOTE if tma_off else "")
        return Plan(description=desc, params={"tma": "off"} if tma_off else {}, module=module, notes=problems)


class _Swap(cst.CSTTransformer):
    """Replace the placeholder name ``__LOAD__`` with a node."""

    def __init__(self, node: cst.BaseExpression):
        super().__init__()
        self.node = node

    def leave_Name(self, original, updated):
        return self.node if updated.value == "__LOAD__" else updated


# ---------------------------------------------------------------------------------------
# tileiras TMA-failure remarks -> messages naming the array and the fix

_ADVICE = {
    "TMA only supports zero padding":
        "pad with ZERO and mask the padded lanes (transform tma_zero_padding)",
    "software-implemented TMA padding is not profitable for this tile":
        "pad with ZERO and mask the padded lanes (transform tma_zero_padding)",
    "stride not 16-byte aligned":
        "every stride of {a} but the last must be a multiple of 16 bytes (pad {a}'s rows, "
        "or keep this access off TMA)",
    "base pointer not 16-byte aligned":
        "{a}'s data pointer must be 16-byte aligned (an offset view or a slice breaks it)",
    "leading tile dimension not 16-byte aligned":
        "the tile's last dimension (shape={shape}) must span a multiple of 16 bytes of {a}",
}


def tma_remark_messages(source: str, kernel_name: str, remarks) -> list[str]:
    """One line per (access, reason) of tileiras' ``RemarkMemoryTma{Load,Store}Failed``
    remarks: which ct.load/ct.store, on which array, why, and what would fix it."""
    k = load(source, kernel_name)
    by_line: dict[int, list[cst.Call]] = {}
    for c in k.calls("load", "store"):
        by_line.setdefault(k.line(c), []).append(c)
    out: list[str] = []
    for r in remarks:
        if r.name not in ("RemarkMemoryTmaLoadFailed", "RemarkMemoryTmaStoreFailed"):
            continue
        want = "load" if "Load" in r.name else "store"
        calls = [c for c in by_line.get(r.line or -1, []) if k.ct.called(c) == want]
        for reason in r.reasons or ["no reason given"]:
            if calls:
                c = calls[0]
                arr = code(positional(c)[0].value)
                shape = kwarg(c, "shape")
                what = f"ct.{want} {'of' if want == 'load' else 'to'} {arr} at line {r.line}"
                advice = _ADVICE.get(reason, "").format(a=arr, shape=code(shape.value) if shape else "?")
            else:
                what = f"a {want} at line {r.line}" if r.line else f"a {want}"
                advice = ""
            msg = f"{what}: no TMA ({reason})" + (f": {advice}" if advice else "")
            if msg not in out:
                out.append(msg)
    return out
