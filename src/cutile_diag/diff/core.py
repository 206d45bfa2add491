"""The differ's front door: ``diff_modules`` / ``diff_paths`` -> ``DiffResult``.

Inputs are TileIR text files (``tileirdisasm`` output, with or without ``-g``; files
written by ``CUDA_TILE_DUMP_TILEIR``), TileIR bytecode (disassembled with ``tileirdisasm
-g``), or capture folders (``cutile-diag capture``).  Two capture folders also get the
cubin side compared (see ``cubin.py``).
"""
from __future__ import annotations

import contextlib
import gc
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from ..errors import ParseError, UsageError
from ..ir_parsers.tileir import Entry, Module, parse_tileir
from .delta import compute_deltas
from .graph import build_graph
from .impact import impact_slices
from .match import MatchOptions, match_graphs
from .model import Change, DiffResult, EntryDetail, EntryPairing, InputInfo
from .semantic import classify
from ..capture.manifest import load_capture
from ..toolchain import run_tool
from .cubin import diff_captures

BYTECODE_MAGIC = b"\x7fTileIR\x00"


@dataclass
class DiffInput:
    """One side of a diff: the parsed module, what it was read from, and its capture folder if any."""
    path: str
    module: Module
    kind: str                       # tileir | bytecode | capture
    capture: object | None = None   # CaptureFolder

    def info(self) -> InputInfo:
        """The side's summary for the result (path, kind, entries, op count, capture name)."""
        return _module_info(self.module, path=self.path, kind=self.kind,
                            capture_name=getattr(self.capture, "name", None))


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic GC: parsing and graph building allocate ~15 objects per op, which
    triggers collections over an ever larger heap (half the run time at 10k ops).
    Reference counting still frees everything; cycles are collected afterwards.

    On exit, what the pause allocated is moved straight to the oldest generation
    (``freeze`` + ``unfreeze``): left in the youngest, the first collection after
    re-enabling would scan all of it at once (~0.15 s at 10k ops).  It is scanned at the
    next full collection, like any long-lived data.  Skipped when the host program froze
    objects itself (``unfreeze`` would release them too)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if was:
            gc.enable()


def _disassemble(data: bytes, path: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        bc = Path(tmp) / "input.tileirbc"
        bc.write_bytes(data)
        return run_tool("tileirdisasm", ["-g", str(bc)], timeout=120).stdout


def load_input(path: str | Path) -> DiffInput:
    """A TileIR text/bytecode file or a capture folder, parsed."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{p}: no such file or directory")
    if p.is_dir() or p.name == "manifest.json":
        cap = load_capture(p)
        return DiffInput(str(cap.path), cap.module, "capture", cap)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UsageError(f"{p}: cannot read: {e.strerror}") from None
    if data.startswith(BYTECODE_MAGIC):
        return DiffInput(str(p), parse_tileir(_disassemble(data, str(p)), path=str(p)), "bytecode")
    return DiffInput(str(p), parse_tileir(data, path=str(p)), "tileir")


def load_graph(source, entry: str | None = None) -> nx.MultiDiGraph:
    """The networkx graph of one TileIR entry (see ``graph.py`` for nodes and edges).

    ``source``: a TileIR text or bytecode file, a capture folder (path or the
    ``CaptureFolder`` of ``capture.manifest.load_capture``) or a parsed ``Module``.
    ``entry``: the Python function name or symbol; needed when there are several.
    ``cutile_diag.diff.impact.value_flow(G)`` gives the value flow for ``nx.descendants``.
    """
    if isinstance(source, Module):
        module = source
    elif hasattr(source, "module") and not isinstance(source, (str, Path)):
        module = source.module
    else:
        module = load_input(source).module
    entries = list(module.entries)
    if entry is not None:
        entries = [e for e in entries if entry in (e.symbol, e.function_name)]
        if not entries:
            names = sorted({e.function_name for e in module.entries})
            raise UsageError(f"no entry named {entry}", hint="entries: " + ", ".join(names[:12]))
    if len(entries) != 1:
        names = sorted({e.function_name for e in entries})
        raise UsageError(f"{len(entries)} entries; name one with entry=", hint="entries: " + ", ".join(names[:12]))
    return build_graph(entries[0]).nx


def pair_entries(a: Module, b: Module, only: str | None = None) -> list[tuple[Entry | None, Entry | None]]:
    """Pair entries by symbol, then by Python function name, then a lone leftover pair."""
    ea, eb = list(a.entries), list(b.entries)
    if only is not None:
        def pick(es: list[Entry]) -> list[Entry]:
            return [e for e in es if e.symbol == only or e.function_name == only]
        fa, fb = pick(ea), pick(eb)
        if not fa and not fb:
            names = sorted({e.function_name for e in ea + eb})
            raise UsageError(f"no entry named {only}", hint="entries: " + ", ".join(names[:12]))
        # a knob variant usually is a differently named kernel: pair with the lone entry
        ea = fa or (ea if len(ea) == 1 else [])
        eb = fb or (eb if len(eb) == 1 else [])
        if not ea or not eb:
            raise UsageError(f"entry {only} exists on one side only and the other side has several entries")
    pairs: list[tuple[Entry | None, Entry | None]] = []
    left_b = list(eb)
    rest_a = []
    for e in ea:
        hit = next((x for x in left_b if x.symbol == e.symbol), None)
        if hit is not None:
            pairs.append((e, hit))
            left_b.remove(hit)
        else:
            rest_a.append(e)
    rest_a2 = []
    for e in rest_a:
        same = [x for x in left_b if x.function_name == e.function_name]
        if len(same) == 1 and sum(1 for y in rest_a if y.function_name == e.function_name) == 1:
            pairs.append((e, same[0]))
            left_b.remove(same[0])
        else:
            rest_a2.append(e)
    if len(rest_a2) == 1 and len(left_b) == 1:
        pairs.append((rest_a2[0], left_b[0]))
        rest_a2, left_b = [], []
    pairs.extend((e, None) for e in rest_a2)
    pairs.extend((None, e) for e in left_b)
    return pairs


def diff_modules(a: Module, b: Module, *, entry: str | None = None,
                 options: MatchOptions | None = None,
                 info_a: InputInfo | None = None, info_b: InputInfo | None = None) -> DiffResult:
    """Structural + semantic diff of two parsed TileIR modules."""
    t0 = time.perf_counter()
    timings = {"graph": 0.0, "match": 0.0, "deltas": 0.0, "classify": 0.0, "impact": 0.0}
    pairings: list[EntryPairing] = []
    structural = []
    regions = []
    per_entry = []
    details: list[EntryDetail] = []
    for ea, eb in pair_entries(a, b, entry):
        p = EntryPairing(before=ea.symbol if ea else None, after=eb.symbol if eb else None,
                         function_before=ea.function_name if ea else None,
                         function_after=eb.function_name if eb else None,
                         ops_before=sum(1 for _ in ea.walk()) if ea else 0,
                         ops_after=sum(1 for _ in eb.walk()) if eb else 0)
        pairings.append(p)
        if ea is None or eb is None:
            continue
        t = time.perf_counter()
        ga, gb = build_graph(ea), build_graph(eb)
        timings["graph"] += time.perf_counter() - t
        t = time.perf_counter()
        m = match_graphs(ga, gb, options)
        timings["match"] += time.perf_counter() - t
        p.matched = sum(1 for v in ga.op_nodes if m.a2b[v] >= 0)
        p.match_stats = m.stats
        t = time.perf_counter()
        name = p.name
        ds, rs, na, nb = compute_deltas(m, name, start_id=len(structural))
        structural.extend(ds)
        regions.extend(rs)
        per_entry.append((name, m, ds, na, nb))
        details.append(EntryDetail(name, m, na, nb, ds))
        timings["deltas"] += time.perf_counter() - t
    t = time.perf_counter()
    changes = classify(per_entry)
    for pr in pairings:
        if pr.status in ("added", "removed"):
            changes.append(Change(id=len(changes), kind=f"entry_{pr.status}", level="semantic",
                                  detail=f"kernel entry {pr.status}: {pr.after or pr.before}",
                                  entry=pr.name, before=pr.before, after=pr.after))
    timings["classify"] += time.perf_counter() - t
    t = time.perf_counter()
    impact_slices(changes, details, {d.id: d for d in structural})
    timings["impact"] = time.perf_counter() - t
    timings["diff_total"] = time.perf_counter() - t0
    warnings = list(a.warnings) + list(b.warnings)
    return DiffResult(before=info_a or _module_info(a), after=info_b or _module_info(b),
                      entries=pairings, changes=changes, structural=structural, regions=regions,
                      warnings=warnings, timings=timings, details=details)


def _module_info(m: Module, path: str | None = None, kind: str = "tileir",
                 capture_name: str | None = None) -> InputInfo:
    return InputInfo(path=path or m.path or "<text>", kind=kind, has_locations=m.has_locations,
                     entries=[e.symbol for e in m.entries], ops=sum(1 for _ in m.walk()),
                     capture_name=capture_name)


def diff_texts(a: str, b: str, **kw) -> DiffResult:
    """Diff two TileIR texts (``diff_modules``' keywords apply)."""
    return diff_modules(parse_tileir(a, path="<before>"), parse_tileir(b, path="<after>"), **kw)


def diff_paths(a: str | Path, b: str | Path, *, entry: str | None = None, cubin: bool = True,
               options: MatchOptions | None = None) -> DiffResult:
    """Diff two files or capture folders (see the module docstring)."""
    with gc_paused():
        t = time.perf_counter()
        ia = load_input(a)
        ib = load_input(b)
        parse_s = time.perf_counter() - t
        res = diff_modules(ia.module, ib.module, entry=entry, options=options, info_a=ia.info(),
                           info_b=ib.info())
    res.timings["parse"] = parse_s
    if cubin and ia.capture is not None and ib.capture is not None:
        t = time.perf_counter()
        cub, cchanges, warns = diff_captures(ia.capture, ib.capture, start_id=len(res.changes))
        res.cubin = cub
        res.changes.extend(cchanges)
        res.warnings.extend(warns)
        res.timings["cubin"] = time.perf_counter() - t
    elif cubin and (ia.capture is not None) != (ib.capture is not None):
        res.warnings.append("cubin side not compared: only one input is a capture folder")
    for w in getattr(ia.capture, "problems", []) + getattr(ib.capture, "problems", []):
        res.warnings.append(w)
    return res


__all__ = ["diff_modules", "diff_paths", "diff_texts", "load_graph", "load_input", "pair_entries", "DiffInput",
           "ParseError"]
