"""The cubin side of a diff of two capture folders.

Many knobs change nothing in the TileIR but everything in the cubin (occupancy clamps,
``opt_level``, the arch, TMA selection), so the facts recorded per target in the capture
manifest are compared metric by metric: resources (registers, shared memory, stack,
spills), launch shape (threads/CTA, cluster), tileiras remarks (TMA / tensor-core
selection) and the SASS instruction mix.
"""
from __future__ import annotations

from typing import Any

from .model import Change

# manifest facts key -> (change kind, label)
_SCALARS = [
    ("registers", "registers", "registers/thread"),
    ("max_registers", "registers", "register ceiling (maxreg)"),
    ("shared", "shared_memory", "shared memory bytes"),
    ("stack", "stack", "stack bytes"),
    ("local", "spills", "local memory bytes"),
    ("spill_stores", "spills", "spill store bytes"),
    ("spill_loads", "spills", "spill load bytes"),
    ("stack_frame", "stack", "stack frame bytes"),
    ("threads_per_cta", "threads_per_cta", "threads/CTA"),
    ("cluster_shape", "cluster_shape", "cluster shape"),
    ("reg_reconfig", "registers", "register reconfiguration (setmaxnreg)"),
    ("ptxas_advisories", "ptxas_advisory", "ptxas advisories"),
]
_REMARKS = [
    ("tma_loads", "remarks_tma", "TMA loads"),
    ("tma_stores", "remarks_tma", "TMA stores"),
    ("global_loads", "remarks_tma", "plain global loads"),
    ("ldgsts_loads", "remarks_tma", "cp.async loads"),
    ("tma_failures", "remarks_tma", "TMA failures"),
    ("tensor_core_mma", "remarks_mma", "tensor-core MMAs"),
    ("tensor_core_kinds", "remarks_mma", "tensor-core paths"),
    ("mma_shapes", "remarks_mma", "MMA instruction shapes"),
    ("fma_fallbacks", "remarks_mma", "MMA FMA fallbacks"),
]
_TARGET = [("opt_level", "opt_level", "tileiras -O level"), ("ptx_target", "ptx_target", "PTX target")]


def _num_delta(a: Any, b: Any) -> Any:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return b - a
    return None


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        if v and all(isinstance(x, int) for x in v):
            return "x".join(str(x) for x in v)
        return "[" + ", ".join(_fmt(x) for x in v) + "]" if v else "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _delta_counts(a: dict, b: dict) -> dict[str, dict]:
    out = {}
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k, 0), b.get(k, 0)
        if x != y:
            out[k] = {"before": x, "after": y, "delta": y - x}
    return out


def diff_facts(fa: dict, fb: dict, ta: dict | None = None, tb: dict | None = None) -> dict:
    """Metric deltas between two targets' facts (manifest ``targets.<arch>.facts``)."""
    metrics: dict[str, dict] = {}

    def put(key, x, y):
        if x != y:
            d = {"before": x, "after": y}
            nd = _num_delta(x, y)
            if nd is not None:
                d["delta"] = nd
            metrics[key] = d

    for key, _k, _l in _SCALARS:
        if key in fa or key in fb:
            put(key, fa.get(key), fb.get(key))
    ra, rb = fa.get("remarks") or {}, fb.get("remarks") or {}
    for key, _k, _l in _REMARKS:
        if key in ra or key in rb:
            put(f"remarks.{key}", ra.get(key), rb.get(key))
    for key, _k, _l in _TARGET:
        x, y = (ta or {}).get(key), (tb or {}).get(key)
        if x is not None or y is not None:
            put(key, x, y)
    sa, sb = fa.get("sass") or {}, fb.get("sass") or {}
    sass = {}
    if sa or sb:
        if sa.get("instructions") != sb.get("instructions"):
            sass["instructions"] = {"before": sa.get("instructions"), "after": sb.get("instructions"),
                                    "delta": (sb.get("instructions") or 0) - (sa.get("instructions") or 0)}
        for part in ("classes", "mma_forms", "mufu"):
            d = _delta_counts(sa.get(part) or {}, sb.get(part) or {})
            if d:
                sass[part] = d
        # the same mix can be different code (another schedule, other registers): the digest says
        if sa.get("digest") and sb.get("digest") and sa["digest"] != sb["digest"]:
            sass["code"] = {"before": sa["digest"], "after": sb["digest"]}
    return {"metrics": metrics, "sass": sass, "same_code": same_code(fa, fb)}


# what decides how a kernel runs besides its instructions: residency and launch shape (a register
# *ceiling*, an advisory or a remark differs with the same code and changes nothing at run time)
_RUNTIME = ("registers", "shared", "stack", "local", "threads_per_cta", "cluster_shape", "reg_reconfig")


def same_code(fa: dict, fb: dict) -> bool | None:
    """Do two targets run the same machine code with the same resources?  None when a SASS digest
    is missing (older captures, no disassembler): it cannot be told."""
    da, db = (fa.get("sass") or {}).get("digest"), (fb.get("sass") or {}).get("digest")
    if not da or not db:
        return None
    return da == db and all(fa.get(k) == fb.get(k) for k in _RUNTIME)


def diff_captures(ca, cb, start_id: int = 0) -> tuple[dict, list[Change], list[str]]:
    """Compare the common targets of two capture folders."""
    warnings: list[str] = []
    archs_a, archs_b = set(ca.targets), set(cb.targets)
    common = sorted(archs_a & archs_b)
    out: dict = {"archs": {}, "only_before": sorted(archs_a - archs_b), "only_after": sorted(archs_b - archs_a)}
    if not common:
        warnings.append("cubin side not compared: the captures share no target arch "
                        f"({', '.join(sorted(archs_a)) or 'none'} vs {', '.join(sorted(archs_b)) or 'none'})")
    changes: list[Change] = []
    labels = {k: (kind, label) for k, kind, label in _SCALARS}
    labels.update({f"remarks.{k}": (kind, label) for k, kind, label in _REMARKS})
    labels.update({k: (kind, label) for k, kind, label in _TARGET})
    for arch in common:
        ta, tb = ca.target(arch), cb.target(arch)
        fa, fb = ta.get("facts", {}), tb.get("facts", {})
        for t, c in ((ta, ca), (tb, cb)):
            for e in t.get("errors", []) or []:
                warnings.append(f"{c.path.name}/{arch}: {e}")
        d = diff_facts(fa, fb, ta, tb)
        out["archs"][arch] = {"before": _snapshot(fa, ta), "after": _snapshot(fb, tb), **d}
        for key, v in d["metrics"].items():
            kind, label = labels[key]
            delta = v.get("delta")
            extra = f" ({delta:+d})" if isinstance(delta, int) else ""
            changes.append(Change(id=start_id + len(changes), kind=kind, level="cubin", arch=arch,
                                  detail=f"{arch} {label}: {_fmt(v['before'])} → {_fmt(v['after'])}{extra}",
                                  before=v["before"], after=v["after"], op=key))
        s = d["sass"]
        if s:
            parts = []
            if "instructions" in s:
                parts.append(f"{s['instructions']['before']} → {s['instructions']['after']} instructions")
            elif "code" in s and not any(s.get(p) for p in ("classes", "mma_forms", "mufu")):
                parts.append("the same instruction mix, different code")
            for part in ("classes", "mma_forms", "mufu"):
                for k, v in (s.get(part) or {}).items():
                    parts.append(f"{k} {v['before']}→{v['after']}")
            changes.append(Change(id=start_id + len(changes), kind="sass_mix", level="cubin", arch=arch,
                                  detail=f"{arch} SASS: " + ", ".join(parts[:12]) + (" …" if len(parts) > 12 else ""),
                                  before={k: v["before"] for k, v in (s.get("classes") or {}).items()},
                                  after={k: v["after"] for k, v in (s.get("classes") or {}).items()},
                                  op="sass"))
    return out, changes, warnings


def _snapshot(f: dict, t: dict) -> dict:
    """The headline facts of one target, for side-by-side display."""
    r = f.get("remarks") or {}
    s = f.get("sass") or {}
    return {"registers": f.get("registers"), "shared": f.get("shared"), "stack": f.get("stack"),
            "spill_stores": f.get("spill_stores"), "spill_loads": f.get("spill_loads"),
            "threads_per_cta": f.get("threads_per_cta"), "cluster_shape": f.get("cluster_shape"),
            "tma_loads": r.get("tma_loads"), "tma_stores": r.get("tma_stores"),
            "tensor_core_mma": r.get("tensor_core_mma"), "fma_fallbacks": r.get("fma_fallbacks"),
            "sass_instructions": s.get("instructions"), "opt_level": t.get("opt_level")}
