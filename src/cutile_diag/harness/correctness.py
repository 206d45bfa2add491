"""Correctness check: fresh random inputs, poisoned outputs, higher-precision reference.

Public API::

    compare(actual, expected, tol, name="out") -> Comparison     # one tensor pair
    check_workload(wl, cfg, seed=None, device="cuda") -> CheckResult   # seed None: a fresh one, recorded
    fresh_seed() -> int
    check_outputs(wl, cfg, actual, expected) -> CheckResult        # e.g. after a timed loop
    reference_outputs(wl, inputs) / run_outputs(wl, inputs, result) -> {name: tensor}
    poison_(tensor) -> bool

Each check draws fresh random inputs: with no seed given, a new seed from the OS's entropy
pool, recorded in the result (``CheckResult.seed``, and in a failure's summary) so that a
failure can be replayed with that seed.

Rules: |actual - expected| <= atol + rtol * |expected| element-wise (torch.allclose's
rule), computed in float64.  NaN never passes — not in the output, not in the reference
(a NaN reference is a broken reference).  Infinities pass only where the reference has
the same infinity.  Outputs the workload names are filled with NaN (integers with their
maximum) before the run, so elements the kernel never writes fail; ops that allocate
their outputs get the allocator's free blocks poisoned instead (best effort: PyTorch's
caching allocator usually hands the same block back).  A failure reports the number of
bad elements, max abs / max rel error and the index of the worst element.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..capture.launches import LaunchArgumentsError, intercept_launches
from ..workload import Tolerance, Workload, WorkloadConfig, WorkloadError, dtype_name


@dataclass
class Comparison:
    """One output against its reference: pass/fail under (rtol, atol), the bad and NaN counts
    and the worst element."""
    name: str
    passed: bool
    shape: tuple[int, ...]
    dtype: str
    rtol: float
    atol: float
    n_total: int
    n_bad: int = 0
    n_nan: int = 0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    worst_index: tuple[int, ...] | None = None
    worst_actual: float | None = None
    worst_expected: float | None = None
    message: str = ""

    def to_json(self) -> dict:
        """The comparison as JSON; non-finite errors and values become strings."""
        d = dict(self.__dict__)
        d["shape"] = list(self.shape)
        d["worst_index"] = list(self.worst_index) if self.worst_index is not None else None
        for k in ("max_abs_err", "max_rel_err", "worst_actual", "worst_expected"):
            v = d[k]
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = str(v)          # JSON has no inf/nan
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Comparison":
        """The comparison ``to_json`` wrote (tuples and non-finite floats restored)."""
        d = dict(d)
        d["shape"] = tuple(d.get("shape") or ())
        if d.get("worst_index") is not None:
            d["worst_index"] = tuple(d["worst_index"])
        for k in ("max_abs_err", "max_rel_err", "worst_actual", "worst_expected"):
            if isinstance(d.get(k), str):
                d[k] = float(d[k])
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class CheckResult:
    """A correctness check: passed, the seed of its inputs, one comparison per output, or the error."""
    passed: bool
    seed: int | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    error: str | None = None        # the run or the reference raised

    @property
    def summary(self) -> str:
        """One line: the error, ``PASS`` with the largest absolute error, or the failing outputs."""
        if self.error:
            return f"error: {self.error}"
        bad = [c for c in self.comparisons if not c.passed]
        if not bad:
            worst = max((c.max_abs_err or 0.0) for c in self.comparisons) if self.comparisons else 0.0
            return f"PASS (max abs err {worst:.3g})"
        head = f"FAIL (seed {self.seed}): " if self.seed is not None else "FAIL: "
        return head + "; ".join(f"{c.name}: {c.message}" for c in bad)

    def to_json(self) -> dict:
        """The result as JSON, summary included."""
        return {"passed": self.passed, "seed": self.seed, "error": self.error, "summary": self.summary,
                "comparisons": [c.to_json() for c in self.comparisons]}

    @classmethod
    def from_json(cls, d: dict | None) -> "CheckResult | None":
        """The result ``to_json`` wrote (None stays None)."""
        if d is None:
            return None
        return cls(bool(d["passed"]), d.get("seed"), [Comparison.from_json(c) for c in d.get("comparisons", [])],
                   d.get("error"))


def _fmt_index(idx: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, idx)) + "]"


def compare(actual, expected, tol: Tolerance, name: str = "out") -> Comparison:
    """Compare ``actual`` with ``expected`` elementwise: |a - e| <= atol + rtol·|e|, a NaN only
    matching a NaN; a non-tensor output or a shape mismatch fails with the reason."""
    import torch
    if not isinstance(actual, torch.Tensor):
        return Comparison(name, False, (), type(actual).__name__, tol.rtol, tol.atol, 0,
                          message=f"output is {type(actual).__name__}, not a tensor")
    if not isinstance(expected, torch.Tensor):
        expected = torch.as_tensor(expected)
    shape = tuple(actual.shape)
    base = dict(name=name, shape=shape, dtype=dtype_name(actual.dtype), rtol=tol.rtol, atol=tol.atol,
                n_total=actual.numel())
    if tuple(expected.shape) != shape:
        return Comparison(passed=False, message=f"shape {list(shape)} differs from the reference's "
                                                f"{list(expected.shape)}", **base)
    if actual.numel() == 0:
        return Comparison(passed=True, message="empty", **base)
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(device=a.device, dtype=torch.float64)
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    same = a == e                                   # also true for equal infinities
    diff = torch.where(same, torch.zeros_like(a), (a - e).abs())
    diff = torch.nan_to_num(diff, nan=math.inf, posinf=math.inf)   # inf vs finite, NaN
    bound = tol.atol + tol.rtol * e.abs()
    bound = torch.nan_to_num(bound, nan=0.0, posinf=0.0)          # no slack at a NaN/inf reference
    bad = (diff > bound) | nan_a | nan_e
    excess = torch.where(bad, diff - bound, torch.full_like(diff, -math.inf))
    excess = torch.where(nan_a | nan_e, torch.full_like(diff, math.inf), excess)
    n_bad = int(bad.sum().item())
    n_nan = int(nan_a.sum().item())
    absd = torch.where(nan_a | nan_e, torch.zeros_like(diff), diff)
    max_abs = float(absd.max().item()) if n_nan == 0 and not bool(nan_e.any()) else math.nan
    ea = e.abs()
    rel = torch.where(ea > 0, absd / ea, torch.where(absd > 0, torch.full_like(absd, math.inf), torch.zeros_like(absd)))
    max_rel = float(rel.max().item()) if not math.isnan(max_abs) else math.nan
    flat = int(torch.argmax(excess if n_bad else absd).item())
    idx = tuple(int(i) for i in _unravel(flat, shape))
    wa, we = float(a.reshape(-1)[flat].item()), float(e.reshape(-1)[flat].item())
    cmp = Comparison(passed=n_bad == 0, n_bad=n_bad, n_nan=n_nan, max_abs_err=max_abs, max_rel_err=max_rel,
                     worst_index=idx, worst_actual=wa, worst_expected=we, **base)
    if n_bad == 0:
        cmp.message = f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}"
    else:
        parts = [f"{n_bad} of {actual.numel()} elements outside rtol={tol.rtol:g} atol={tol.atol:g}"]
        if n_nan:
            parts.append(f"{n_nan} NaN in the output")
        if bool(nan_e.any()):
            parts.append(f"{int(nan_e.sum().item())} NaN in the reference")
        parts.append(f"worst at {_fmt_index(idx)}: got {wa:.6g}, expected {we:.6g}")
        if not math.isnan(max_abs):
            parts.append(f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}")
        cmp.message = "; ".join(parts)
    return cmp


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for d in reversed(shape):
        out.append(flat % d if d else 0)
        flat //= d if d else 1
    return list(reversed(out))


def poison_(t) -> bool:
    """Fill a tensor the kernel must overwrite with values no correct kernel leaves."""
    import torch
    if not isinstance(t, torch.Tensor):
        return False
    if t.dtype.is_floating_point or t.dtype.is_complex:
        t.fill_(math.nan)
        return True
    if t.dtype == torch.bool:
        return False
    t.fill_(torch.iinfo(t.dtype).max)
    return True


def poison_allocator(nbytes: list[int], device, copies: int = 2) -> None:
    """Leave NaN-patterned free blocks of these sizes in PyTorch's caching allocator."""
    import torch
    if not nbytes or str(device).startswith("cpu"):
        return
    bufs = []
    for n in nbytes:
        for _ in range(copies):
            b = torch.empty(max(1, int(n)), dtype=torch.uint8, device=device)
            b.fill_(0xFF)          # all-ones bits: NaN in f16, bf16, f32 and f64
            bufs.append(b)
    del bufs


def _clone_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    import torch
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _as_named(obj, names: tuple[str, ...], what: str) -> dict[str, Any]:
    import torch
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, torch.Tensor):
        return {(names[0] if names else "out"): obj}
    if isinstance(obj, (list, tuple)):
        keys = list(names) if names and len(names) == len(obj) else [f"out{i}" for i in range(len(obj))]
        return dict(zip(keys, obj))
    raise WorkloadError(f"{what} returned {type(obj).__name__}; expected a tensor, a tuple of tensors or a dict")


def reference_outputs(wl: Workload, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The workload's reference on a clone of the inputs (no grad), named by its outputs."""
    import torch
    with torch.no_grad():
        ref = wl.reference(_clone_inputs(inputs))
    return _as_named(ref, tuple(wl.outputs), f"{wl.name}.reference()")


def run_outputs(wl: Workload, inputs: Mapping[str, Any], result: Any) -> dict[str, Any]:
    """The outputs of a run: the named ``outputs`` from the inputs dict, else what ``run`` returned."""
    names = tuple(wl.outputs)
    if names:
        missing = [n for n in names if n not in inputs]
        if missing:
            raise WorkloadError(f"{wl.name}: outputs {', '.join(missing)} are not in make_inputs()'s dict")
        return {n: inputs[n] for n in names}
    if result is None:
        raise WorkloadError(f"{wl.name}.run() returned nothing and the workload names no outputs",
                            hint="set outputs = ('name', ...) or return the output tensor(s)")
    return _as_named(result, (), f"{wl.name}.run()")


def check_outputs(wl: Workload, cfg: WorkloadConfig, actual: Mapping[str, Any], expected: Mapping[str, Any],
                  seed: int | None = None) -> CheckResult:
    """Compare every output with the reference at the workload's tolerance for its dtype."""
    if set(actual) != set(expected):
        return CheckResult(False, seed, error=f"outputs {sorted(actual)} do not match the reference's "
                                                f"{sorted(expected)}")
    comps = []
    for name in expected:
        a = actual[name]
        tol = wl.tolerance(cfg, getattr(a, "dtype", "f32"))
        comps.append(compare(a, expected[name], tol, name=name))
    return CheckResult(all(c.passed for c in comps), seed, comps)


def _sync(device) -> None:
    import torch
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def fresh_seed() -> int:
    """A random 31-bit seed for one check's inputs."""
    import secrets
    return secrets.randbits(31)        # torch.manual_seed and numpy both take it


def check_workload(wl: Workload, cfg: WorkloadConfig, *, seed: int | None = None,
                   device: str = "cuda") -> CheckResult:
    """Run once on fresh inputs from ``seed`` (None: a fresh seed, recorded) and compare with the reference."""
    import torch
    seed = fresh_seed() if seed is None else int(seed)
    try:
        inputs = wl.make_inputs(cfg, seed, device)
    except WorkloadError:
        raise
    except Exception as e:
        return CheckResult(False, seed, error=f"make_inputs raised {type(e).__name__}: {e}")
    try:
        expected = reference_outputs(wl, inputs)
    except WorkloadError:
        raise
    except Exception as e:
        return CheckResult(False, seed, error=f"reference raised {type(e).__name__}: {e}")
    if wl.outputs:
        for n in wl.outputs:
            if n in inputs:
                poison_(inputs[n])
    else:
        sizes = sorted({int(t.numel()) * s for t in expected.values() if isinstance(t, torch.Tensor) for s in (2, 4)})
        poison_allocator(sizes, device)
    try:
        # launches pass through, each checked against its kernel's parameters: a mismatch is one line
        with torch.no_grad(), intercept_launches(execute=True):
            result = wl.run(inputs)
        _sync(device)
        actual = run_outputs(wl, inputs, result)
    except WorkloadError:
        raise
    except LaunchArgumentsError as e:
        return CheckResult(False, seed, error=e.one_line())
    except Exception as e:
        return CheckResult(False, seed, error=f"run raised {type(e).__name__}: {' '.join(str(e).split())[:300]}")
    return check_outputs(wl, cfg, actual, expected, seed)
