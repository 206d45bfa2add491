"""Record a launch for replay, inside the observed process (``measure.observe`` calls it).

The first launch of each signature (kernel + grid + argument specs) is recorded; later ones of
the same signature are not (a suite launches a kernel thousands of times at a few shapes).
``before`` runs just ahead of the launch: it finds the wrapper (the first frame up the stack that
runs a module-level function of the kernel's own module) and copies every storage the launch's and the
wrapper's tensors view; ``after`` runs once the launch returned: it synchronises, marks the
storages the kernel wrote (bytes before != after), keeps their after-bytes (the baseline's
answer) and writes the folder (``store``'s format) under a temporary name, then renames it, so
a process killed mid-write leaves no half recording.

A kernel object launched with hints its module's kernel lacks (``kernel.replace_hints(num_worker_warps=8)`` in the
wrapper, TileGym's ``cached_replace_hints``) is recorded with those hints (``kernel.hints``), and a replay of the
module's kernel replaces them again: without them an H100 replay of TileGym's persistent layer norm ran the
decorator's defaults, 30 % slower than the suite's own launch.

A written storage whose bytes before the launch were all one value (a fresh ``torch.empty`` /
``zeros``) is a *pure output*: replays poison it; any other written storage is restored from its
recorded bytes before each replay (an in-place kernel).  Recording never breaks the user's
program: any failure is written as the folder's ``error`` and the launch goes on.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .store import DEFAULT_CAP_MB, ENV_CAP, ENV_DIR, Unrecordable, source_sha256, write_manifest

_SAMPLE = 1 << 22                # bytes compared for a storage too large to keep whole (written?)
_INT_DTYPES = ("int", "uint", "bool")


def signature(rec) -> str:
    """A launch's signature as text: kernel, grid, argument specs (``LaunchRecord.shape_key``)."""
    return " ".join(str(x) for x in rec.shape_key())


def folder_name(rec) -> str:
    """The recording folder of a launch's signature (its kernel's file included: two kernels of one name)."""
    key = f"{rec.file}\0{signature(rec)}"
    return f"{rec.kernel}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def _dtype_name(dt) -> str:
    return str(dt).rsplit(".", 1)[-1]


def _is_int(dtype_name: str) -> bool:
    return dtype_name.startswith(_INT_DTYPES)


@dataclass
class _Storage:
    id: int
    storage: Any
    device: Any
    nbytes: int
    lo: int
    hi: int
    dtypes: list[str] = field(default_factory=list)
    views: list[Any] = field(default_factory=list)
    before: Any = None           # CPU uint8 copy (whole) or a sample
    whole: bool = True
    stats: dict | None = None


class _Encoder:
    """Values -> the JSON of ``store``; tensors become views of the storages they share."""

    def __init__(self):
        import torch
        self.torch = torch
        self.storages: dict[int, _Storage] = {}

    def tensor(self, t) -> dict:
        st = t.untyped_storage()
        key = st.data_ptr()
        e = t.element_size()
        lo = t.storage_offset() * e
        extent = sum((d - 1) * s for d, s in zip(t.shape, t.stride())) + 1 if t.numel() else 0
        hi = lo + extent * e
        s = self.storages.get(key)
        if s is None:
            s = self.storages[key] = _Storage(len(self.storages), st, t.device, st.nbytes(), lo, hi)
        s.lo, s.hi = min(s.lo, lo), max(s.hi, hi)
        s.dtypes.append(_dtype_name(t.dtype))
        s.views.append(t)
        return {"tensor": {"storage": s.id, "dtype": _dtype_name(t.dtype), "shape": list(t.shape),
                           "stride": list(t.stride()), "offset": int(t.storage_offset())}}

    def value(self, v) -> dict:
        torch = self.torch
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if v is None or isinstance(v, (bool, int, float, str)):
            return {"value": v}
        if isinstance(v, torch.dtype):
            return {"dtype": _dtype_name(v)}
        if hasattr(v, "cuda_stream"):             # a stream: the replay's current one
            return {"stream": True}
        if isinstance(v, tuple):
            return {"tuple": [self.value(x) for x in v]}
        if isinstance(v, list):
            return {"list": [self.value(x) for x in v]}
        if isinstance(v, dict) and all(isinstance(k, str) for k in v):
            return {"dict": {k: self.value(x) for k, x in v.items()}}
        if isinstance(v, torch.autograd.function.FunctionCtx):
            # an autograd.Function's ctx, as its backward reads it: what forward set on it and saved for backward
            try:
                saved = list(v.saved_tensors)
            except RuntimeError:          # forward's ctx: nothing saved yet
                saved = []
            return {"ctx": {"attrs": {k: self.value(x) for k, x in vars(v).items()},
                            "saved": [self.value(t) for t in saved],
                            "needs_input_grad": [bool(b) for b in getattr(v, "needs_input_grad", None) or ()]}}
        raise Unrecordable(type(v).__name__)


def _region(s: _Storage):
    torch = sys.modules["torch"]
    return torch.empty(0, dtype=torch.uint8, device=s.device).set_(s.storage, s.lo, (s.hi - s.lo,), (1,))


def _stats(s: _Storage) -> dict:
    torch = sys.modules["torch"]
    t = next(v for v in s.views if v.dtype.is_floating_point)
    flat = t.reshape(-1)
    x = flat[:: max(1, flat.numel() // _SAMPLE)].float()
    x = x[torch.isfinite(x)]
    if not x.numel():
        return {"dtype": _dtype_name(t.dtype), "mean": 0.0, "std": 1.0, "min": -1.0, "max": 1.0}
    return {"dtype": _dtype_name(t.dtype), "mean": float(x.mean()), "std": float(x.std()) if x.numel() > 1 else 0.0,
            "min": float(x.min()), "max": float(x.max())}


def _sample(region):
    return region[:: max(1, region.numel() // _SAMPLE)].cpu()


def _capturing() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:
        return False


def _module_function(frame) -> bool:
    """The frame runs a function bound at its module's top level (what a replay can call again)."""
    fn = frame.f_globals.get(frame.f_code.co_name)
    return inspect.isfunction(fn) and fn.__code__ is frame.f_code


def _static_method(frame) -> Any:
    """The function when the frame runs a static method of a class bound at its module's top level (an
    ``autograd.Function``'s ``forward``/``backward``), which a replay can call again as ``Class.method(...)``."""
    cls_name, _, meth = frame.f_code.co_qualname.partition(".")
    cls = frame.f_globals.get(cls_name)
    raw = cls.__dict__.get(meth) if inspect.isclass(cls) else None
    fn = raw.__func__ if isinstance(raw, staticmethod) else None
    return fn if getattr(fn, "__code__", None) is frame.f_code else None


def _frame_function(frame) -> Any:
    """The module-level function or module-level class's static method the frame runs (None: neither)."""
    return frame.f_globals.get(frame.f_code.co_name) if _module_function(frame) else _static_method(frame)


def find_wrapper(kernel, frame) -> tuple[Any, str | None]:
    """(the wrapper's frame, None) or (None, why not): the first frame up from ``frame`` that runs a module-level
    function of the kernel's file.  A launch made in a method (``torch.autograd.Function.forward``, called through
    ``apply`` by the module's ``geglu()``) or a nested function is replayed through the module-level function above
    it, so a changed grid or tile size in the method is what gets timed.  Without one (a ``backward`` the autograd
    engine calls), the innermost static method of a module-level class is the wrapper, called again with its ctx as
    recorded (what forward set on it and saved)."""
    pyfunc = getattr(kernel, "_pyfunc", None)
    code = getattr(pyfunc, "__code__", None)
    if code is None:
        return None, "the kernel's source file is not known"
    f, inner, method = frame, None, None
    while f is not None:
        if f.f_code.co_filename == code.co_filename and f.f_code is not code:
            if _module_function(f):
                return f, None
            inner = inner or f.f_code.co_qualname
            method = method or (f if _static_method(f) is not None else None)
        f = f.f_back
    if method is not None:
        return method, None
    if inner is not None:
        return None, (f"the launch is made by {inner}, and neither a module-level function of the kernel's module nor "
                      "a static method of one of its classes is on the stack")
    return None, "no function of the kernel's module is on the stack of the launch (launched from elsewhere)"


def rebound(code) -> set[str]:
    """Parameters the function's body assigns to (``tile = tile or 1024``): at the launch their value
    is no longer the caller's."""
    import dis
    n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) \
        + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    params = set(code.co_varnames[:n])
    return {i.argval for i in dis.get_instructions(code)
            if i.opname in ("STORE_FAST", "STORE_DEREF") and i.argval in params}


def _engine_args(frame, fn) -> dict:
    """For a ``backward`` the autograd engine called: its arguments as passed (torch's ``BackwardCFunction.apply``
    above it holds them), which the body may have rebound since (``dy = dy.contiguous()``); else {}."""
    up = frame.f_back
    if up is None or up.f_code.co_name != "apply" or "autograd" not in up.f_code.co_filename:
        return {}
    loc = up.f_locals
    if "self" not in loc or not isinstance(loc.get("args"), tuple):
        return {}
    return dict(zip(inspect.signature(fn).parameters, (loc["self"], *loc["args"])))


def wrapper_call(frame, enc: _Encoder) -> tuple[dict | None, str | None]:
    """The wrapper's call as recorded values, or (None, why it cannot be replayed).  The values are the
    frame's at the launch; a parameter the body rebinds gets the value the autograd engine passed (a backward), else
    its default (what a caller that left it out passed), else — a required one, ``x = x.contiguous()`` — its value at
    the launch, listed in ``rebound``: the replay keeps the wrapper only where the recorded version's wrapper, called
    with those values, makes the recorded launch and computes the recorded outputs."""
    fn = _frame_function(frame)             # ``find_wrapper`` returns no other frame
    name = frame.f_code.co_qualname         # ``f`` for a module-level function, ``Class.method`` for a static method
    loc = frame.f_locals
    moved = rebound(frame.f_code)
    passed = _engine_args(frame, fn) if moved else {}
    args, kwargs, at_launch = [], {}, []
    try:
        for p in inspect.signature(fn).parameters.values():
            if p.name not in loc:
                continue
            v = loc[p.name]
            if p.name in passed:
                v = passed[p.name]
            elif p.name in moved:
                if p.default is p.empty:
                    at_launch.append(p.name)
                else:
                    v = p.default
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                args.append(enc.value(v))
            elif p.kind == p.VAR_POSITIONAL:
                args += [enc.value(x) for x in v]
            elif p.kind == p.KEYWORD_ONLY:
                kwargs[p.name] = enc.value(v)
            else:
                kwargs.update({k: enc.value(x) for k, x in v.items()})
    except Unrecordable as e:
        return None, f"an argument of {name} is a {e}, which a recording cannot hold"
    return {"name": name, "args": args, "kwargs": kwargs, **({"rebound": at_launch} if at_launch else {})}, None


def _kernel_attr(kernel) -> str | None:
    pyfunc = getattr(kernel, "_pyfunc", None)
    mod = sys.modules.get(getattr(pyfunc, "__module__", None) or "")
    for k, v in vars(mod).items() if mod is not None else ():
        if v is kernel:
            return k
    return getattr(pyfunc, "__name__", None)


def launch_hints(kernel, attr: str | None) -> tuple[dict, str | None]:
    """The compiler hints of the launched kernel object that differ from those of its module's kernel ``attr`` (the
    one a replay imports, ``_kernel_attr``): what the wrapper replaced at the launch; with why they cannot be
    recorded."""
    mod = sys.modules.get(getattr(getattr(kernel, "_pyfunc", None), "__module__", None) or "")
    base = getattr(mod, attr or "", None) if mod is not None else None
    opts, base_opts = getattr(kernel, "_compiler_options", None), getattr(base, "_compiler_options", None)
    if base is kernel or opts is None or base_opts is None or not dataclasses.is_dataclass(opts):
        return {}, None
    out = {}
    for f in dataclasses.fields(opts):
        v = getattr(opts, f.name)
        if v != getattr(base_opts, f.name, v):
            if v is not None and not isinstance(v, int):
                return {}, f"its {f.name} hint is a {type(v).__name__}, which a recording cannot hold"
            out[f.name] = v
    return out, None


@dataclass
class Pending:
    """A launch being recorded: what ``before`` copied, handed to ``after`` to write (``error``: why it cannot be
    recorded)."""
    folder: Path
    manifest: dict
    enc: _Encoder | None
    error: str | None = None


class LaunchRecorder:
    """Records the first launch of each signature under ``out_dir`` (``$CUTILE_DIAG_REPLAY_DIR``)."""

    def __init__(self, out_dir: str | Path, cap_bytes: float):
        self.out = Path(out_dir)
        self.cap = cap_bytes
        self.seen: set[str] = set()

    @classmethod
    def from_env(cls) -> "LaunchRecorder | None":
        """The recorder ``$CUTILE_DIAG_REPLAY_DIR`` asks for (None when unset), capped at
        ``$CUTILE_DIAG_REPLAY_CAP_MB``."""
        d = os.environ.get(ENV_DIR)
        if not d:
            return None
        try:
            cap_mb = float(os.environ.get(ENV_CAP, DEFAULT_CAP_MB))
        except ValueError:
            cap_mb = DEFAULT_CAP_MB
        return cls(d, cap_mb * 1024 * 1024)

    def before(self, kernel, grid, args, rec, frame=None) -> Pending | None:
        """Copy what the launch reads, when its signature has no recording yet (else None)."""
        name = folder_name(rec)
        if _capturing():
            return None                  # inside CUDA-graph capture nothing may be copied: a later launch records
        if name in self.seen or (self.out / name).exists():
            self.seen.add(name)
            return None
        self.seen.add(name)
        pyfunc = getattr(kernel, "_pyfunc", None)
        attr = _kernel_attr(kernel)
        man: dict = {"kernel": {"name": rec.kernel, "attr": attr, "module": rec.module,
                                "file": rec.file, "source_sha256": source_sha256(rec.file)},
                     "grid": list(rec.grid), "signature": signature(rec), "cap_bytes": self.cap,
                     "test": rec.extra.get("test"), "args": [], "storages": [], "wrapper": None}
        pend = Pending(self.out / name, man, None)
        try:
            enc = pend.enc = _Encoder()
            names = [a.name for a in rec.args] or [f"arg{i}" for i in range(len(args))]
            man["args"] = [{"name": n, "value": enc.value(v)} for n, v in zip(names, args)]
            hints, no_hints = launch_hints(kernel, attr)
            if hints:
                man["kernel"]["hints"] = hints
            if no_hints:
                man["kernel"]["hints_missing"] = no_hints
            wf, why = find_wrapper(kernel, frame or sys._getframe(1))
            if wf is not None and pyfunc is not None:
                man["wrapper"], why = wrapper_call(wf, enc)
            if why:
                man["wrapper_missing"] = why
            self._copy(enc)
        except Unrecordable as e:
            pend.error = f"an argument of the launch is a {e}, which a recording cannot hold"
        except Exception as e:                    # never break the user's program
            pend.error = f"{type(e).__name__}: {e}"
        return pend

    def _copy(self, enc: _Encoder) -> None:
        stores = sorted(enc.storages.values(), key=lambda s: s.hi - s.lo)
        used = 0.0
        for s in stores:
            size = s.hi - s.lo
            ints = any(_is_int(d) for d in s.dtypes) or not any(v.dtype.is_floating_point for v in s.views)
            s.whole = ints or used + size <= self.cap
            if s.whole:
                used += 0 if ints else size
                s.before = _region(s).cpu().clone()
            else:
                s.stats = _stats(s)
                s.before = _sample(_region(s))

    def after(self, pend: Pending | None, executed: bool) -> None:
        """Write the folder (the launch has returned)."""
        if pend is None:
            return
        try:
            self._write(pend, executed)
        except Exception as e:                    # never break the user's program
            try:
                print(f"cutile-diag: replay recording of {pend.folder.name} failed: {type(e).__name__}: {e}",
                      file=sys.stderr)
            except Exception:
                pass

    def _write(self, pend: Pending, executed: bool) -> None:
        torch = sys.modules.get("torch")
        tmp = pend.folder.parent / f".tmp-{pend.folder.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        man = pend.manifest
        man["executed"] = executed
        if pend.error:
            man["error"] = pend.error
        else:
            if executed and any(s.device.type == "cuda" for s in pend.enc.storages.values()):
                torch.cuda.synchronize()
            for s in sorted(pend.enc.storages.values(), key=lambda s: s.id):
                entry = {"id": s.id, "nbytes": s.nbytes, "start": s.lo, "size": s.hi - s.lo,
                         "device_type": s.device.type, "stored": "whole" if s.whole else "regenerated",
                         "written": None, "pure_output": False}
                if s.stats is not None:
                    entry["stats"] = s.stats
                if s.whole:
                    torch.save(s.before, tmp / f"s{s.id}.pt")
                if executed:
                    now = _region(s).cpu() if s.whole else _sample(_region(s))
                    entry["written"] = not torch.equal(now, s.before)
                    if entry["written"]:
                        entry["pure_output"] = bool(s.before.numel()) and bool((s.before == s.before[0]).all())
                        if s.whole:
                            torch.save(now.clone(), tmp / f"s{s.id}.after.pt")
                man["storages"].append(entry)
        write_manifest(tmp, man)
        try:
            os.rename(tmp, pend.folder)
        except OSError:                           # another process recorded the same signature first
            shutil.rmtree(tmp, ignore_errors=True)
