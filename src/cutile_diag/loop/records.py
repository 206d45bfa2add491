"""Parse benchmark records printed by TileGym-style perf tests (``--print-record``).

Accepted shapes, one record per line:

* ``<Framework>: {'forward': {'mean': 3.79, 'median': 3.7899, ...}} ms`` — the perf skill's
  printed form (a Python dict repr, optional ``'backward'`` key), possibly preceded on the
  same line by the pytest node id (``tests/ops/test_x.py::Test_X::test_perf[...] Cutile: {...} ms``);
* ``<Framework>: {'mean': ..., 'median': ...} ms`` — a record without a direction;
* ``CUTILE_DIAG_RECORD {"nodeid": ..., "benchmark": {"cutile": {...}}}`` — JSON, as the
  cutile-diag pytest plugin may print it.

A record without a node id on its line belongs to the most recent node id seen on an
earlier line (pytest ``-v`` prints it when the test starts), else it is numbered
``record-<k>``.  The latency of a configuration is its ``median`` (forward, unless asked
for backward or both).
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from .errors import BackendError

_NODEID = re.compile(r"(?P<id>[\w./\\-]+\.py::[^\s]+?)(?=\s|$)")
_RECORD = re.compile(r"(?P<fw>[A-Za-z][\w.+-]*):\s*(?P<dict>\{.*\})\s*ms\b")
_JSON = re.compile(r"CUTILE_DIAG_RECORD\s+(?P<json>\{.*\})\s*$")
# the cutile-diag pytest plugin's header, on a line of its own: "Performance Test Results: <nodeid>[ (failed)]"
# (a node id may hold spaces: TileGym's geglu ids print a shape tuple, "test_perf[cutile-(256, 64, 16, 128)-...]")
_HEADER = re.compile(r"Performance Test Results:\s*(?P<id>\S.*?)(?:\s+\((?P<outcome>\w+)\))?\s*$")
_TIME_KEYS = ("mean", "std", "median", "min", "max", "iqr", "q25", "q75")


@dataclass
class BenchRecord:
    """One printed benchmark record: test id, framework, direction and its latency statistics in ms."""
    test_id: str
    framework: str
    direction: str                # forward | backward | total | -
    median: float
    mean: float | None = None
    std: float | None = None
    rel_std: float | None = None  # percent
    min: float | None = None
    max: float | None = None
    nrep: int | None = None
    peak_mem_mb: float | None = None
    extra: dict = field(default_factory=dict)
    line: int = 0

    def to_json(self) -> dict:
        """Every field."""
        return dict(self.__dict__)


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _mk(test_id, fw, direction, d: dict, line: int) -> BenchRecord | None:
    med = _num(d.get("median"))
    if med is None:
        return None
    nrep = d.get("nrep")
    extra = {k: v for k, v in d.items() if k not in ("mean", "std", "rel_std", "median", "min", "max", "nrep",
                                                       "peak_mem_mb") and isinstance(v, (int, float, str))}
    return BenchRecord(test_id=test_id, framework=fw, direction=direction, median=med, mean=_num(d.get("mean")),
                       std=_num(d.get("std")), rel_std=_num(d.get("rel_std")), min=_num(d.get("min")),
                       max=_num(d.get("max")), nrep=int(nrep) if isinstance(nrep, (int, float)) else None,
                       peak_mem_mb=_num(d.get("peak_mem_mb")), extra=extra, line=line)


def _expand(test_id: str, fw: str, payload, line: int) -> list[BenchRecord]:
    if not isinstance(payload, dict):
        return []
    if "median" in payload:
        r = _mk(test_id, fw, "-", payload, line)
        return [r] if r else []
    out = []
    for direction, d in payload.items():
        if isinstance(d, dict):
            r = _mk(test_id, fw, str(direction), d, line)
            if r:
                out.append(r)
    return out


def parse_records(text: str, *, framework: str | None = "cutile") -> list[BenchRecord]:
    """Every record in ``text``; ``framework`` filters by name (case-insensitive), None keeps all."""
    out: list[BenchRecord] = []
    current: str | None = None
    skipping = False                    # records of a test that did not pass are not latencies
    anon = 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        h = _HEADER.search(line)
        if h:
            current = h.group("id")
            skipping = h.group("outcome") not in (None, "passed")
            continue
        m = _JSON.search(line)
        if m:
            try:
                obj = json.loads(m.group("json"))
            except json.JSONDecodeError:
                continue
            tid = obj.get("nodeid") or obj.get("test_id") or current
            bench = obj.get("benchmark") or obj.get("record") or {}
            if tid is None:
                anon += 1
                tid = f"record-{anon}"
            for fw, payload in bench.items():
                out += _expand(str(tid), str(fw), payload, i)
            continue
        m = _RECORD.search(line)
        if m:
            try:
                payload = ast.literal_eval(m.group("dict"))
            except (ValueError, SyntaxError):
                continue
            before = line[: m.start()]
            nid = _NODEID.search(before)
            tid = nid.group("id") if nid else current
            if nid is None and skipping:
                continue
            if tid is None:
                anon += 1
                tid = f"record-{anon}"
            out += _expand(tid, m.group("fw"), payload, i)
            continue
        nid = _NODEID.search(line)
        if nid:
            current = nid.group("id")
            skipping = False
    if framework:
        want = framework.lower()
        out = [r for r in out if r.framework.lower() == want]
    return out


def latencies(records: list[BenchRecord], *, direction: str = "forward") -> dict[str, BenchRecord]:
    """One record per test id: the requested direction (forward by default; records without a
    direction count as forward; ``both`` sums forward and backward medians)."""
    by_id: dict[str, dict[str, BenchRecord]] = {}
    for r in records:
        d = "forward" if r.direction in ("-", "fwd") else ("backward" if r.direction == "bwd" else r.direction)
        by_id.setdefault(r.test_id, {})[d] = r
    out: dict[str, BenchRecord] = {}
    for tid, ds in by_id.items():
        if direction == "both":
            if "forward" in ds and "backward" in ds:
                f, b = ds["forward"], ds["backward"]
                out[tid] = BenchRecord(tid, f.framework, "total", f.median + b.median,
                                       nrep=min(f.nrep or 0, b.nrep or 0) or None,
                                       rel_std=max(f.rel_std or 0.0, b.rel_std or 0.0) or None, line=f.line)
            elif ds:
                out[tid] = next(iter(ds.values()))
        elif direction in ds:
            out[tid] = ds[direction]
        elif direction == "forward" and len(ds) == 1:
            out[tid] = next(iter(ds.values()))
    return out


def require_records(text: str, *, framework: str = "cutile", direction: str = "forward",
                    what: str = "the benchmark command") -> dict[str, BenchRecord]:
    """The latencies of ``framework`` / ``direction`` the text prints, per test id; a ``BackendError`` naming what was
    printed instead when there are none."""
    recs = latencies(parse_records(text, framework=framework), direction=direction)
    if not recs:
        anyfw = parse_records(text, framework=None)
        found = sorted({r.framework for r in anyfw})
        hint = (f"records were printed for {', '.join(found)}; pass --framework" if found else
                "run the perf tests with --print-record (and -s), e.g. pytest tests/ops/test_x.py -k "
                "'test_perf and cutile' --print-record -s; the cutile-diag pytest plugin prints them")
        raise BackendError(f"{what} printed no {framework} benchmark record", hint=hint)
    return recs
