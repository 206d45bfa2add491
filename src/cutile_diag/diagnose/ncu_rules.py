"""Nsight Compute's guided analysis (its rule engine) as evidence.

Two steps, so CI never needs Nsight Compute:

1. extraction (``cutile_diag.roofline.ncu.export_report``, needs the ``ncu_report`` module that
   ships with Nsight Compute) turns a ``.ncu-rep`` into a plain JSON *export*::

       {"schema": "cutile-diag.ncu-export/1", "report": "...", "kernels": [
          {"name", "duration_ns", "grid": [x, y, z], "block": [x, y, z], "metrics": {name: value},
           "rules": [<IAction.rule_results_as_dicts() items, as returned>],
           "source_markers": [<IAction.source_markers() items>],
           "hotspots": {"metric": name, "lines": [{"file", "line", "value", "share"}]}}]}

2. this module, pure: ``findings(export)`` normalises the rule dicts (their payloads are
   nested dicts, or their ``str()`` on some Nsight Compute releases) into ``Finding`` records
   mapped to playbook entries through ``references/ncu-rules.toml``; ``collect_ncu_rules``
   adds them (and the metrics and launch grid behind them) to the evidence.
"""
from __future__ import annotations

import ast
import math
import re
import tomllib
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..errors import CutileDiagError
from .evidence import Evidence, Site
from ..output import prog
from .playbook import references_dir
from .collect_gpu import collect_ncu

RULES_FILE = "ncu-rules.toml"
# message types that report something to act on (ncu_report.MsgType names)
FINDING_TYPES = ("OPTIMIZATION", "WARNING", "ERROR")


class NcuRulesError(CutileDiagError):
    """An ncu export or the rule map is malformed."""


@dataclass(frozen=True)
class RuleMap:
    """What an Nsight Compute rule maps to: playbook entries, a bottleneck class, a note."""
    entries: tuple[str, ...]
    cls: str | None
    note: str


@dataclass
class Finding:
    """One Nsight Compute rule result, normalised."""
    rule: str                         # rule_identifier, e.g. 'UncoalescedGlobalAccess'
    title: str
    message: str
    type: str                         # OPTIMIZATION | WARNING | ERROR | OK | ...
    section: str = ""
    speedup_pct: float | None = None  # Nsight Compute's estimate (percent)
    speedup_type: str = ""            # global (whole-kernel runtime) | local (one unit's efficiency)
    focus_metrics: list[dict] = field(default_factory=list)   # {name, value, severity, info}
    markers: list[str] = field(default_factory=list)          # 'file.py:12' source hot spots
    entries: list[str] = field(default_factory=list)          # playbook ids it supports
    cls: str | None = None
    kernel: str = ""

    @property
    def is_finding(self) -> bool:
        """Whether the rule reports a problem (a finding type, or an estimated speedup)."""
        return self.type.upper() in FINDING_TYPES or (self.speedup_pct or 0.0) > 0.0

    def to_json(self) -> dict:
        """The finding's fields as a dict."""
        return asdict(self)


@lru_cache(maxsize=4)
def _load_map(path: str) -> dict[str, RuleMap]:
    try:
        d = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise NcuRulesError(f"{path}: cannot read the ncu rule map: {e}") from None
    out = {}
    for rid, spec in (d.get("rules") or {}).items():
        if not isinstance(spec, dict) or not isinstance(spec.get("entries", []), list):
            raise NcuRulesError(f"{path}: rules.{rid} needs an 'entries' list")
        out[rid] = RuleMap(tuple(str(e) for e in spec.get("entries", [])), spec.get("class"), str(spec.get("note", "")))
    return out


def rule_map(root: str | Path | None = None) -> dict[str, RuleMap]:
    """Rule id -> RuleMap from ``ncu-rules.toml`` under ``root`` (default: the shipped references)."""
    base = Path(root) if root is not None else references_dir()
    return _load_map(str(base / RULES_FILE))


_ENUM_REPR = re.compile(r"<\w+\.(\w+): -?\d+>")


def _payload(v: Any) -> Any:
    """A nested payload: a dict, or its str() (some Nsight Compute releases), where enum
    members print as ``<MsgType.OPTIMIZATION: 2>``."""
    if isinstance(v, str) and v[:1] in "{[":
        try:
            return ast.literal_eval(_ENUM_REPR.sub(r"'\1'", v))
        except (ValueError, SyntaxError):
            return v
    return v


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _type_name(v: Any) -> str:
    """MsgType as text: 'OPTIMIZATION', 'MsgType.WARNING', 2 ... -> upper-case name."""
    names = {0: "NONE", 1: "OK", 2: "OPTIMIZATION", 3: "WARNING", 4: "ERROR"}
    if isinstance(v, int):
        return names.get(v, str(v))
    s = str(v or "").rsplit(".", 1)[-1].upper()
    return s.removeprefix("MSG_")


def normalize_rule(raw: Mapping[str, Any], markers: list[dict] | None = None) -> Finding | None:
    """One item of ``rule_results_as_dicts()`` -> a Finding (None when it carries no message)."""
    if not isinstance(raw, Mapping):
        return None
    rid = str(raw.get("rule_identifier") or raw.get("name") or "").strip()
    if not rid:
        return None
    msg = _payload(raw.get("rule_message"))
    title = text = ""
    mtype = ""
    if isinstance(msg, Mapping):
        title, text, mtype = str(msg.get("title") or ""), str(msg.get("message") or ""), _type_name(msg.get("type"))
    elif isinstance(msg, list):      # several messages: the first actionable one speaks for the rule
        parts = [m for m in (_payload(x) for x in msg) if isinstance(m, Mapping)]
        best = next((m for m in parts if _type_name(m.get("type")) in FINDING_TYPES), parts[0] if parts else {})
        title, text, mtype = str(best.get("title") or ""), str(best.get("message") or ""), _type_name(best.get("type"))
    if not (title or text):
        return None
    sp = _payload(raw.get("speedup_estimation"))
    speed, stype = None, ""
    if isinstance(sp, Mapping):
        speed = _num(sp.get("speedup"))
        raw_type = sp.get("type")
        # ncu_report 2025.3 gives the bare enum value: 1 local, 2 global (the UI's "Est. Local Speedup"
        # for IssueSlotUtilization, "Est. Speedup" for CPIStall in the same H200 report)
        stype = {1: "local", 2: "global"}.get(raw_type, "") if isinstance(raw_type, int) else \
            str(raw_type or "").rsplit(".", 1)[-1].lower()
        stype = "global" if "global" in stype else "local" if "local" in stype else stype
    focus = []
    for fm in _payload(raw.get("focus_metrics")) or []:
        fm = _payload(fm)
        if isinstance(fm, Mapping) and fm.get("name"):
            focus.append({"name": str(fm["name"]), "value": _num(fm.get("value")),
                          "severity": str(fm.get("severity") or ""), "info": str(fm.get("info") or "")})
    locs = []
    for m in markers or []:
        if not isinstance(m, Mapping) or str(m.get("rule_identifier") or "") != rid:
            continue
        loc = _payload(m.get("source_location")) or {}
        if isinstance(loc, Mapping) and loc.get("file_name"):
            where = f"{Path(str(loc['file_name'])).name}:{loc.get('line')}"
            if where not in locs:
                locs.append(where)
    return Finding(rule=rid, title=" ".join(title.split()), message=" ".join(text.split()), type=mtype,
                   section=str(raw.get("section_identifier") or ""), speedup_pct=speed, speedup_type=stype,
                   focus_metrics=focus, markers=locs)


def main_kernel(export: Mapping[str, Any], kernel_name: str | None = None) -> dict | None:
    """The kernel the diagnosis is about: the longest whose name contains ``kernel_name`` (a
    workload's kernel name is often a stem: ``rms_norm_kernel`` for ``_rms_norm_kernel_gather``),
    else the longest."""
    kernels = [k for k in export.get("kernels") or [] if isinstance(k, Mapping)]
    if not kernels:
        return None
    named = [k for k in kernels if kernel_name and kernel_name in str(k.get("name", ""))]
    return dict(max(named or kernels, key=lambda k: _num(k.get("duration_ns")) or 0.0))


def findings(export: Mapping[str, Any], *, kernel_name: str | None = None,
             mapping: Mapping[str, RuleMap] | None = None) -> list[Finding]:
    """Rule findings of the main kernel, mapped to playbook entries, largest estimate first."""
    if not isinstance(export, Mapping):
        raise NcuRulesError("an ncu export must be a JSON object with 'kernels'")
    k = main_kernel(export, kernel_name)
    if k is None:
        return []
    mp = mapping if mapping is not None else rule_map()
    out = []
    for raw in k.get("rules") or []:
        f = normalize_rule(_payload(raw), k.get("source_markers"))
        if f is None or not f.is_finding:
            continue
        m = mp.get(f.rule)
        if m is not None:
            f.entries, f.cls = list(m.entries), m.cls
        f.kernel = str(k.get("name", ""))
        out.append(f)
    out.sort(key=lambda f: -(f.speedup_pct or 0.0))
    return out


def collect_ncu_rules(ev: Evidence, export: Mapping[str, Any], *, kernel_name: str | None = None,
                      origin: str = "") -> list[Finding]:
    """Rule findings, the metrics they rest on and the observed launch grid, into the evidence.
    The findings themselves go to ``ev.context['ncu_findings']`` for the engine to place beside
    the entries they support."""
    k = main_kernel(export, kernel_name)
    if k is None:
        ev.missing("Nsight Compute rules", "the ncu export holds no kernels")
        return []
    src = f"ncu: {origin or export.get('report') or 'report'} ({k.get('name', '?')})"
    metrics = dict(k.get("metrics") or {})
    if metrics:
        collect_ncu(ev, metrics, origin=str(k.get("name", "")))
    grid = [int(x) for x in (k.get("grid") or []) if _num(x) is not None]
    if grid and "launch.grid_blocks" not in ev:
        ev.add("launch.grid", grid, src, f"grid {grid}, block {k.get('block')}")
        ev.add("launch.grid_blocks", int(math.prod(grid)), src, "launch__grid_size of the profiled launch")
    found = findings(export, kernel_name=kernel_name)
    if not any(isinstance(r, (Mapping, str)) for r in k.get("rules") or []):
        ev.missing("Nsight Compute rules", "the report has no rule results (collected with --metrics only?)",
                   f"collect with `ncu --set full` ({prog()} diagnose WORKLOAD --ncu)")
    ev.add("ncu.rules", [f.rule for f in found], src,
           f"{len(found)} rule(s) with a finding" if found else "no rule reported a finding",
           [Site(f"ncu rule {f.rule}", f.title + (f" — est. {f.speedup_pct:.1f}%" if f.speedup_pct else ""))
            for f in found])
    speeds = [f.speedup_pct for f in found if f.speedup_pct]
    if speeds:
        top = max(found, key=lambda f: f.speedup_pct or 0.0)
        ev.add("ncu.rule_speedup_pct", float(max(speeds)), src, f"{top.rule}: {top.title}")
    ev.context["ncu_findings"] = [f.to_json() for f in found]
    hot = k.get("hotspots") or {}
    lines = [x for x in hot.get("lines") or [] if isinstance(x, Mapping) and x.get("file")]
    if lines:
        ev.notes.append(f"Nsight Compute hot source lines ({hot.get('metric')}): " + ", ".join(
            f"{Path(str(x['file'])).name}:{x.get('line')} {float(x.get('share') or 0):.0%}" for x in lines[:5]))
    ev.collected.append(f"ncu: {len(found)} rule finding(s) for {k.get('name', '?')}")
    return found
