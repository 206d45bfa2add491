"""``load(folder)``: a recorded launch, rebuilt on a device, ready to time or debug.

    r = cutile_diag.replay.load("campaign-out/replay/rms_norm_kernel-1a2b3c4d5e")
    r.args        # the launch's arguments (tensors rebuilt with their shapes, strides, offsets, sharing)
    r.grid        # the recorded grid
    r.kernel      # the kernel object, imported from its module (the code on the path now), with the hints the
                  # launch replaced (``replace_hints`` in the wrapper) replaced again
    r.wrapper     # (function, args, kwargs) of the wrapper call that made the launch, or None
    r.outputs     # {parameter: tensor} the kernel's written arguments after the recorded launch
    r.launch()    # the bare launch: ct.launch(stream, r.grid, r.kernel, r.args)

A recording made from another version of the kernel's file is refused (``ReplayError``) unless
``any_version=True`` (the loop replays a candidate's code on the baseline's recording on purpose).
"""
from __future__ import annotations

import importlib
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..capture.loader import import_file
from .store import ReplayError, read_manifest, source_sha256

_REGEN_SEED = 0             # regenerated inputs are the same at every load (the baseline's answer on them is cached)


@dataclass
class Replay:
    """A recorded launch rebuilt on a device (what ``load`` returns): its arguments, grid, kernel, wrapper call and
    recorded outputs, with the buffers to restore between runs."""
    folder: Path
    manifest: dict
    device: str
    args: tuple = ()
    grid: tuple[int, ...] = ()
    kernel: Any = None
    module: Any = None
    wrapper: tuple | None = None              # (function, args, kwargs)
    outputs: dict[str, Any] = field(default_factory=dict)
    storages: dict[int, Any] = field(default_factory=dict)     # id -> the rebuilt uint8 buffer
    pristine: dict[int, Any] = field(default_factory=dict)     # id -> its bytes before the launch (on the device)

    @property
    def name(self) -> str:
        """The recorded kernel's name."""
        return self.manifest["kernel"]["name"]

    @property
    def arg_names(self) -> list[str]:
        """The launch's parameter names, in argument order."""
        return [a["name"] for a in self.manifest["args"]]

    @property
    def regenerated(self) -> list[int]:
        """Ids of the storages rebuilt from statistics (past the size cap) rather than from their recorded bytes."""
        return [s["id"] for s in self.manifest["storages"] if s.get("stored") != "whole"]

    @property
    def written(self) -> list[str]:
        """Launch parameters whose storage the recorded launch wrote (empty when not executed)."""
        w = {s["id"] for s in self.manifest["storages"] if s.get("written")}
        return [a["name"] for a in self.manifest["args"] if "tensor" in a["value"]
                and a["value"]["tensor"]["storage"] in w]

    def unavailable_transforms(self) -> list[str]:
        """What a bare-launch replay cannot time: transforms that change the grid or the wrapper."""
        return [] if self.wrapper is not None else ["persistent grid", "grid resize", "rows per block"]

    def restore(self) -> None:
        """Every storage back to its bytes before the launch; pure outputs poisoned (NaN / max int)."""
        for i, buf in self.storages.items():
            buf.copy_(self.pristine[i])
        for s in self.manifest["storages"]:
            if s.get("pure_output"):
                self.storages[s["id"]].fill_(0xFF)      # all-ones bits: NaN in every float type, -1 in ints

    def launch(self, stream=None):
        """The bare launch, ``ct.launch(stream, grid, kernel, args)``, on the current CUDA stream by default."""
        import cuda.tile as ct
        import torch
        if stream is None and torch.cuda.is_available():
            stream = torch.cuda.current_stream()
        return ct.launch(stream, self.grid, self.kernel, self.args)


def _module(kernel: dict, file_override: str | None):
    mod_name, file = kernel.get("module"), file_override or kernel.get("file")
    if mod_name and mod_name != "__main__" and file_override is None:
        try:
            m = importlib.import_module(mod_name)
            if getattr(m, "__file__", None) and Path(m.__file__).resolve() == Path(file or m.__file__).resolve():
                return m
        except Exception:
            pass
    if not file or not Path(file).is_file():
        raise ReplayError(f"the kernel's file {file} is gone: the recording cannot be replayed")
    return import_file(Path(file))


def _buffer(folder: Path, s: dict, device: str):
    import torch
    size = int(s.get("size", s["nbytes"]))
    pad = (-size) % 16                       # every element type divides the buffer
    if s.get("stored") == "whole":
        try:
            b = torch.load(folder / f"s{s['id']}.pt", map_location="cpu", weights_only=True)
        except Exception as e:
            raise ReplayError(f"{folder}/s{s['id']}.pt is corrupt: {type(e).__name__}: {e}") from None
        if b.numel() != size:
            raise ReplayError(f"{folder}/s{s['id']}.pt holds {b.numel()} bytes, the record says {size}")
        out = torch.zeros(size + pad, dtype=torch.uint8, device=device)
        out[:size].copy_(b.to(device))
        return out
    st = s.get("stats") or {}
    dt = getattr(torch, st.get("dtype", "float32"))
    esize = torch.empty(0, dtype=dt).element_size()
    # drawn where they are used, in their own type: on the host in float32, a 2 GB bf16 input took a worker
    # tens of seconds to load (session 13: a resumed loop's baseline did not load within its share).  The
    # values depend on the device type (CPU and CUDA generators differ): ``regen_tag`` names them
    dev = torch.device(device)
    g = torch.Generator(device=dev)
    g.manual_seed(_REGEN_SEED + int(s["id"]))
    n = (size + pad) // esize
    try:
        x = torch.randn(n, dtype=dt, device=dev, generator=g)
    except (RuntimeError, TypeError):            # a type randn does not draw (float8): drawn in float32
        x = torch.randn(n, device=dev, generator=g).to(dt)
    x.mul_(float(st.get("std", 1.0))).add_(float(st.get("mean", 0.0)))
    x.clamp_(float(st.get("min", -1e30)), float(st.get("max", 1e30)))
    return x.view(torch.uint8)


def regen_tag(device: str) -> str:
    """Which regenerated values a replay on ``device`` holds (the cached answer on them is kept per tag)."""
    import torch
    return f"{torch.device(device).type}-v2"


def _view(buf, s: dict, spec: dict):
    import torch
    dt = getattr(torch, spec["dtype"])
    esize = torch.empty(0, dtype=dt).element_size()
    start = int(s["start"])
    typed = buf.view(dt)
    off = int(spec["offset"]) - start // esize
    if start % esize or off < 0:
        raise ReplayError(f"storage {s['id']} of the recording is not aligned to {spec['dtype']}")
    return torch.as_strided(typed, spec["shape"], spec["stride"], off)


class _Ctx(types.SimpleNamespace):
    """An autograd.Function's ctx in a replay: the recorded attributes and saved tensors; what a ``forward`` called
    again tells it (tensors to save, dirty or non-differentiable outputs) changes nothing the launch reads."""

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_dirty(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        pass


def decode(v: dict, views):
    """A recorded value (``store``'s encoding) back to Python; tensors through ``views(spec)``."""
    import torch
    if "tensor" in v:
        return views(v["tensor"])
    if "value" in v:
        return v["value"]
    if "dtype" in v:
        return getattr(torch, v["dtype"])
    if "stream" in v:
        return torch.cuda.current_stream() if torch.cuda.is_available() else None
    if "tuple" in v:
        return tuple(decode(x, views) for x in v["tuple"])
    if "list" in v:
        return [decode(x, views) for x in v["list"]]
    if "dict" in v:
        return {k: decode(x, views) for k, x in v["dict"].items()}
    if "ctx" in v:                  # an autograd.Function's ctx, as its backward reads it
        c = v["ctx"]
        return _Ctx(**{k: decode(x, views) for k, x in c["attrs"].items()},
                    saved_tensors=tuple(decode(x, views) for x in c["saved"]),
                    needs_input_grad=tuple(c["needs_input_grad"]))
    raise ReplayError(f"unknown value in the recording: {sorted(v)}")


def load(folder: str | Path, *, device: str | None = None, any_version: bool = False,
         file: str | None = None) -> Replay:
    """Rebuild the recorded launch in ``folder`` on ``device`` (default: cuda when there is one, else cpu).
    ``file``: import the kernel's module from this path instead (the loop's worktree copy)."""
    import torch
    folder = Path(folder)
    man = read_manifest(folder)
    if man.get("error"):
        raise ReplayError(f"{folder.name} was not recorded: {man['error']}")
    k = man["kernel"]
    path = file or k.get("file")
    have = source_sha256(path)
    if not any_version and k.get("source_sha256") and have != k["source_sha256"]:
        raise ReplayError(f"{folder.name} was recorded from another version of {path}"
                          if have else f"the kernel's file {path} is gone",
                          hint="record it again (the campaign's --resurvey, or the loop's baseline check)")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    r = Replay(folder, man, device, grid=tuple(man["grid"]))
    by_id = {s["id"]: s for s in man["storages"]}
    for i, s in by_id.items():
        r.storages[i] = _buffer(folder, s, device)
        r.pristine[i] = r.storages[i].clone()

    def views(spec):
        return _view(r.storages[spec["storage"]], by_id[spec["storage"]], spec)
    r.args = tuple(decode(a["value"], views) for a in man["args"])
    for i, s in by_id.items():
        if s.get("written") and s.get("stored") == "whole":
            after = folder / f"s{i}.after.pt"
            if not after.is_file():
                raise ReplayError(f"{folder} is incomplete: {after.name} is missing")
            b = torch.load(after, map_location="cpu", weights_only=True)
            buf = torch.zeros(r.storages[i].numel(), dtype=torch.uint8, device=device)
            buf[:b.numel()].copy_(b.to(device))
            for a in man["args"]:
                if "tensor" in a["value"] and a["value"]["tensor"]["storage"] == i:
                    r.outputs[a["name"]] = _view(buf, s, a["value"]["tensor"])
    try:
        r.module = _module(k, file)
    except ReplayError:
        raise
    except Exception as e:          # the user's module fails to import: one line, no traceback
        raise ReplayError(f"cannot import the kernel's module {k.get('module') or path}: {type(e).__name__}: {e}")
    r.kernel = getattr(r.module, k.get("attr") or k["name"], None)
    if r.kernel is None:
        raise ReplayError(f"{path} has no kernel {k.get('attr') or k['name']} any more")
    if k.get("hints"):              # the hints the wrapper replaced at the launch (record.launch_hints)
        try:
            r.kernel = r.kernel.replace_hints(**k["hints"])
        except (AttributeError, TypeError, ValueError) as e:
            raise ReplayError(f"{k['name']} cannot take the recorded launch's hints {k['hints']}: {e}") from None
    w = man.get("wrapper")
    if w:
        fn = r.module
        for part in w["name"].split("."):       # a module-level function, or ``Class.method`` (a static method)
            fn = getattr(fn, part, None)
        if fn is not None:
            r.wrapper = (fn, [decode(a, views) for a in w["args"]], {n: decode(a, views) for n, a in w["kwargs"].items()})
    return r
