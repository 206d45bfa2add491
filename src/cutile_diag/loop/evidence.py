"""What the loop knows about each version beyond its latency: where its capture comes from,
and what its IR diff against the kept version says.

* ``capture_sources`` — without specs, a version is captured from the code that runs it: the
  workload (run mode on a GPU, intercepted launches on a CPU) or the user's ``--test-cmd``
  (run mode, GPU); ``--capture-workload`` adds a workload to a command or simulated loop.
* ``diff_line`` — the IR diff in one line, shown beside the latency change.
* ``no_op`` — a candidate whose IR and cubin (or whose machine code: SASS and resources) equal
  the kept version's and whose launch did not change changed nothing the GPU runs: it is not
  measured, and a measured "gain" is noise, never credited.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from ..errors import CutileDiagError
from . import decide as decide_mod


def capture_sources(backend: Mapping[str, Any] | None, capture_workload: str | None = None,
                    capture_workload_args: Mapping[str, Any] | None = None, *,
                    kernel_file: Path | None = None) -> dict:
    """Where the capture child takes the kernel's arguments from (``--workload``/``--from-command``)."""
    b = dict(backend or {})
    out: dict[str, Any] = {}
    if capture_workload:
        out["workload"] = capture_workload
        out["kwargs"] = dict(capture_workload_args or {})
        # a shipped example's workload launches the file being optimised (its wrapper may change)
        if capture_workload.startswith("examples:") and "source" not in out["kwargs"] and kernel_file:
            out["kwargs"]["source"] = str(kernel_file)
    elif b.get("backend") == "workload":
        out["workload"] = b.get("workload")
        out["kwargs"] = dict(b.get("kwargs") or {})
        if b.get("configs"):
            out["config"] = b["configs"][0]
    if b.get("backend") in ("command", "replay") and b.get("test_cmd"):
        out["command"] = b["test_cmd"]
    return out


def _launch(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        m = json.loads((Path(path) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    launch = m.get("launch")
    if not launch:
        return None
    return {"grid": launch.get("grid"), "args": [(a.get("name"), a.get("spec")) for a in launch.get("args") or []]}


def diff_line(ir_diff: Mapping[str, Any] | None) -> str:
    """``IR: 3 semantic, 2 cubin change(s)`` / ``IR: no change`` / ``IR diff skipped: why``."""
    d = dict(ir_diff or {})
    if "skipped" in d:
        return f"IR diff skipped: {d['skipped']}"
    s = d.get("summary") or {}
    if d.get("equivalent"):
        return "IR: no change (TileIR and cubin equal the kept version's)"
    parts = []
    for key, word in (("semantic_changes", "semantic"), ("unclassified_changes", "structural"),
                      ("cubin_changes", "cubin")):
        if s.get(key):
            parts.append(f"{s[key]} {word}")
    first = next((c.get("detail") for c in d.get("changes") or [] if c.get("detail")), None)
    text = "IR: " + (", ".join(parts) + " change(s)" if parts else f"{d.get('n_changes', 0)} change(s)")
    occ = d.get("resident_ctas")
    if occ:       # first: it explains a slowdown before any other change does
        text += f"; resident blocks/SM {occ['before']} -> {occ['after']} ({occ['after_why']})"
    return text + (f" — {first}" if first else "")


def _code_without(text: str, function: str | None) -> str:
    """The module's code without ``function``'s definition, as its AST: comments and layout
    are not code (the text when it does not parse)."""
    import ast
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    if function:
        tree.body = [n for n in tree.body
                     if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function)]
    return ast.dump(tree)


def changed_outside_kernel(a_files: Mapping[str, str] | None, b_files: Mapping[str, str] | None,
                           kernel_file: str | None, function: str | None) -> bool:
    """Did the candidate change anything but the kernel function (its launch wrapper, say)?"""
    if a_files is None or b_files is None:
        return True
    for path in set(a_files) | set(b_files):
        old, new = a_files.get(path, ""), b_files.get(path, "")
        if old != new and path.endswith(".py"):
            old, new = (_code_without(t, function if path == kernel_file else None) for t in (old, new))
        if old != new:
            return True
    return False


def _launch_host(text: str, kernel: str) -> dict[str, str] | None:
    """The host code ``kernel``'s launch runs, as source text (``source.locate``): every function or method that
    launches it, and the module-level values, imports and host functions those read (the file's kernels are not host
    code); None when the text does not parse or lost the kernel."""
    import libcst as cst
    from ..source.locate import locate
    from ..source.model import code, find_all, module_bindings, parsed
    try:
        loc = locate("kernel.py", kernel, source=text)
    except CutileDiagError:
        return None
    hosts = {s.function: s.func for s in loc.launches if s.func is not None}
    out = {f"def {name}": code(fn) for name, fn in hosts.items()}
    read = {n.value for fn in hosts.values() for n in find_all(fn, lambda n: isinstance(n, cst.Name))}
    kernels = {k.name for k in loc.kernels}
    for name, binds in module_bindings(parsed(text).module).items():
        if name in read and name not in kernels:
            out[f"{name} ="] = "\n".join(code(b.node) for b in binds)
    return out


def changed_launch_host(a_files: Mapping[str, str], b_files: Mapping[str, str], kernel_file: str,
                        kernel: str) -> bool:
    """Did the candidate change host code ``kernel``'s launch runs (a function or method that launches it, or a
    module-level value one of them reads), or a file other than the kernel's?  A bare replay times none of that; a
    change inside the kernel, a helper it calls or a constant only the kernel reads (exp2's ``LOG2E``) it does."""
    for path in set(a_files) | set(b_files):
        old, new = a_files.get(path, ""), b_files.get(path, "")
        if old == new:
            continue
        if path != kernel_file:
            return True
        a, b = _launch_host(old, kernel), _launch_host(new, kernel)
        if a is None or b is None or a != b:
            return True
    return False


def same_machine_code(ir_diff: Mapping[str, Any] | None) -> bool:
    """Every compared target compiles to the kept version's SASS with its resources (a hint the
    compiler had no use for: ``occupancy=1`` on a 24-register kernel, the H200 measured +0.06 %)."""
    archs = ((dict(ir_diff or {}).get("cubin") or {}).get("archs") or {})
    return bool(archs) and all(t.get("same_code") is True for t in archs.values())


def no_op(ir_diff: Mapping[str, Any] | None, *, outside_changed: bool = True) -> str | None:
    """Why the candidate is a no-op (None when it changed something, or when we cannot tell).
    ``outside_changed``: the candidate changed code outside the kernel (e.g. its launch wrapper)."""
    d = dict(ir_diff or {})
    if "skipped" in d:
        return None
    if d.get("equivalent") is True:
        what, with_launch = "TileIR and cubin equal", "TileIR, cubin and launch equal"
    elif same_machine_code(d):
        what = "machine code (SASS and resources) equals"
        with_launch = "machine code (SASS and resources) and launch equal"
    else:
        return None
    la, lb = _launch(d.get("a")), _launch(d.get("b"))
    if la is not None and lb is not None:
        if la != lb:
            return None           # same kernel, different launch (grid, tile constants): a real change
        return f"the candidate's {with_launch} the kept version's"
    if outside_changed:
        return None               # a wrapper change we cannot see without the launches: give it the benefit
    return f"the candidate's {what} the kept version's, and nothing outside the kernel changed"


def uncredit(decision: decide_mod.Decision, ir_diff: Mapping[str, Any] | None, *,
             outside_changed: bool = True) -> decide_mod.Decision:
    """A keep whose IR diff is empty becomes a revert: the measured gain is not the change's."""
    why = no_op(ir_diff, outside_changed=outside_changed)
    if why is None or decision.status != "keep":
        return decision
    return decide_mod.reject("no-op", f"no-op: {why}; the measured difference ({decision.reason}) is noise, "
                                      "not credited")


def iteration_evidence(iterations) -> list[dict]:
    """Per iteration: the latency change, the IR diff in one line, where the capture came from
    (``loop status`` prints it beside the table; perf_results.md keeps only its 5 columns)."""
    out = []
    for r in iterations:
        cmp = r.get("comparison") or {}
        cap = r.get("capture") or {}
        pct = cmp.get("improvement_pct")
        out.append({"iteration": r.get("iteration"), "status": r.get("status"),
                    "change_pct": pct, "rule": (r.get("decision") or {}).get("rule"),
                    "ir_diff": "baseline" if r.get("iteration") == 0 else diff_line(r.get("ir_diff")),
                    "capture": cap.get("source") or ("off: " + str(cap.get("error") or cap.get("skipped"))
                                                     if (cap.get("ok") is False or "skipped" in cap) else "")})
    return out
