"""``ReplayWorkload``: recorded launches as a ``Workload``, one configuration per recording.

So everything that times and checks a workload (``measure.measure_config``, the loop's long-lived
workers) times and checks a replay: inputs are the recorded bytes (restored before every check and
every timed block; pure outputs poisoned), ``run`` calls the kernel's module *as it is now* (the
candidate's wrapper when the recording has the wrapper's call, else the bare launch), and the
reference is the recorded launch's written arguments (the baseline's answer).

Tolerances are TileGym's by dtype (``workload.DEFAULT_TOLERANCES``: f16 1e-2/1e-2, bf16 1e-2/2e-2,
f32 1e-5/1e-8, integers exact); ``tolerances=`` overrides them (a transform that changes numerics).

Inputs regenerated from statistics (past the size cap) have no recorded answer: the baseline's
answer on them is computed by the recorded version of the kernel's file (same source digest) the
first time and kept in the folder (``expected-regenerated.pt``); a candidate is checked against it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import libcst

from ..capture.launches import describe_launch
from ..errors import CutileDiagError
from ..harness.correctness import compare
from ..source import overrides
from ..source.analysis import param_access
from ..source.model import load as load_kernel
from ..workload import Workload, WorkloadConfig, WorkloadError
from .load import Replay, load, regen_tag
from .store import (MANIFEST, ReplayError, read_manifest, replay_folders, source_sha256, wrapper_verdict,
                    write_wrapper_verdict)

REF_PREFIX = "replay:"
_REGEN_CACHE = "expected-regenerated-{tag}.pt"      # per replay.load.regen_tag: the values it was computed on


def folders_of(target: str | Path) -> list[Path]:
    """A recording folder, or a folder of recordings."""
    p = Path(target)
    if (p / MANIFEST).is_file():
        return [p]
    found = replay_folders(p)
    if not found:
        read_manifest(p)                 # the one-line error for a missing / non-recording folder
    return found


def _kernel_named(folder: Path) -> str | None:
    """The kernel a recording names, read leniently (None: not even that can be read)."""
    try:
        return json.loads((folder / MANIFEST).read_text())["kernel"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


class ReplayWorkload(Workload):
    """The recordings in a folder as a workload: one configuration per recording, checked against the recorded answer.
    The recordings in a folder as a workload: one configuration per recording, checked against the recorded answer."""
    framework = "cutile"

    def __init__(self, folder: str, file: str | None = None, tolerances: dict | None = None,
                 counts: dict | None = None, kernel: str | None = None):
        self.folders = folders_of(folder)
        self.file = file
        self.tolerances = {k: tuple(v) for k, v in (tolerances or {}).items()}
        self.counts = dict(counts or {})
        self.manifests = {}
        self.notes: dict[str, str] = {}
        damaged: list[str] = []
        for f in self.folders:
            try:
                m = read_manifest(f)
            except ReplayError as e:
                # one damaged recording (a survey killed half-way, a file lost in a copy) costs its own configuration,
                # not every kernel's: another kernel's is not this workload's, and this kernel's others still replay
                if len(self.folders) == 1:
                    raise
                if kernel and _kernel_named(f) not in (None, kernel):
                    continue
                damaged.append(e.one_line())
                self.notes[f.name] = f"not replayed: {e.one_line()}"
                continue
            if kernel and m["kernel"]["name"] != kernel:
                continue
            if m.get("error"):
                continue
            self.manifests[f.name] = (f, m)
        if not self.manifests:
            raise ReplayError(f"{folder} holds no replayable recording" + (f" of {kernel}" if kernel else "")
                              + (f" ({damaged[0]})" if damaged else ""))
        first = next(iter(self.manifests.values()))[1]["kernel"]
        self.name = f"replay:{first['name']}"
        self.kernel_name = first["name"]
        self.configs = [WorkloadConfig(n, {"grid": m["grid"], "signature": m["signature"]})
                        for n, (_f, m) in self.manifests.items()]
        self.outputs = ()
        self.repeatable = not any(s.get("written") and not s.get("pure_output")
                                  for _f, m in self.manifests.values() for s in m["storages"])
        self._loaded: dict[str, Replay] = {}
        self._names = {m["kernel"]["name"] for _f, m in self.manifests.values()}
        self._launch_mods: list | None = None
        self._accesses: dict[str, dict[str, str] | None] = {}

    def _file(self, m: dict) -> str | None:
        return self.file or m["kernel"].get("file")

    def available(self) -> str | None:
        """Why this workload cannot be checked (a recording made without executing), or None."""
        for f, m in self.manifests.values():
            if not m.get("executed"):
                return f"{f.name} was recorded without executing: there is no recorded answer to check against"
        return None

    # -- the launch watch: which arguments the wrapper's launch of the kernel passed ----------------
    @contextlib.contextmanager
    def _watch(self):
        """Around one wrapper call: ``ct.launch`` (and the modules that imported it by name) notes the kernel's launch
        in the dict yielded, then calls whatever launched before.  Scoped, not installed for good: the check's launch
        interceptor restores its own original on exit, which took a hook installed inside it out of every later call
        (an H100 campaign: "geglu no longer launches" for every candidate of TileGym's geglu)."""
        import cuda.tile as ct
        current = ct.launch
        if self._launch_mods is None:       # modules that did `from cuda.tile import launch`, found once
            self._launch_mods = [m for m in list(sys.modules.values())
                                 if m is not None and m is not ct and getattr(m, "__dict__", {}).get("launch") is current]
        names = self._names
        seen: dict = {}

        def launch(stream, grid, kernel, kernel_args, /, **kw):
            f = getattr(kernel, "_pyfunc", None)
            if getattr(f, "__name__", None) in names:
                seen["grid"], seen["args"], seen["kernel"] = grid, kernel_args, kernel
            return current(stream, grid, kernel, kernel_args, **kw)
        rebound = [m for m in self._launch_mods if m.__dict__.get("launch") is current]
        ct.launch = launch
        for m in rebound:
            m.launch = launch
        try:
            yield seen
        finally:
            ct.launch = current
            for m in rebound:
                m.launch = current

    def replay(self, cfg: WorkloadConfig, device: str = "cuda") -> Replay:
        """The configuration's recording, loaded once; its wrapper call is dropped when the wrapper no longer matches
        the recorded launch."""
        r = self._loaded.get(cfg.name)
        if r is None:
            f, m = self.manifests[cfg.name]
            r = self._loaded[cfg.name] = load(f, device=device, any_version=True, file=self._file(m))
            if r.wrapper is not None:
                why = self._wrapper_verdict(r, cfg, m)
                if why:
                    self.notes[cfg.name] = f"the bare launch is replayed: {why}"
                    r.wrapper = None
        return r

    def _wrapper_verdict(self, r: Replay, cfg: WorkloadConfig, m: dict) -> str | None:
        """Why the wrapper cannot replay this recording (None: it can).  Judged once on the recorded version and the
        verdict kept in the folder (``store.wrapper_verdict``), so the workers of later versions replay the same way
        (a wrapper the recorded version rejects would fail every later version's check)."""
        if not self._same_version(m):
            return wrapper_verdict(r.folder, m)
        why = self._wrapper_matches(r, cfg)
        write_wrapper_verdict(r.folder, m, why)
        return why

    def _same_version(self, m: dict) -> bool:
        """The kernel's module was loaded from the recorded text: the file on disk, or the text a worker of a sweep
        was given for that path (``source.overrides``) while the disk still holds the kept version; judged by the
        disk alone, a candidate with another grid looked like the recorded version whose wrapper no longer matched,
        and was replayed bare, its change untimed."""
        path = self._file(m)
        given = overrides.text(path)
        have = hashlib.sha256(given.encode()).hexdigest() if given is not None else source_sha256(path)
        return have == m["kernel"].get("source_sha256")

    def _wrapper_matches(self, r: Replay, cfg: WorkloadConfig) -> str | None:
        """The recorded version's wrapper, called with the recorded arguments, must make the recorded launch; where it
        was called with arguments it had rebound by the launch, it must also compute the recorded outputs (a
        rebinding that changes values, not only a layout, would replay another computation)."""
        r.restore()
        fn, args, kwargs = r.wrapper
        with self._watch() as hook:
            fn(*args, **kwargs)
        moved = (r.manifest.get("wrapper") or {}).get("rebound") or []
        differs = None
        if moved and (not r.outputs or r.regenerated):
            differs = (f"{fn.__qualname__} rebinds {', '.join(moved)} before the launch, and the recording cannot show "
                       "the values at the launch reproduce it (its inputs are regenerated, or it did not run)")
        elif "args" in hook and moved:
            names = r.arg_names
            got = {n: hook["args"][names.index(n)] for n in r.written if names.index(n) < len(hook["args"])}
            # not a timed run's check (measure.version's): whether this recording's wrapper call is the launch's
            bad = [c for n, a in got.items() if n in r.outputs
                   and not (c := compare(a, r.outputs[n], self.tolerance(cfg, getattr(a, "dtype", "f32")), n)).passed]
            if bad:
                differs = (f"{fn.__qualname__} with {', '.join(moved)} as rebound at the launch computes other outputs "
                           f"than the recorded launch ({'; '.join(f'{c.name}: {c.message}' for c in bad)})")
        r.restore()
        if "args" not in hook:
            return f"{fn.__qualname__} did not launch {r.name}"
        got = " ".join(str(x) for x in describe_launch(hook["kernel"], hook["grid"], hook["args"]).shape_key())
        if got != r.manifest["signature"]:
            return f"{fn.__qualname__} with the recorded arguments launches {got[:120]}, not the recorded " \
                   f"{r.manifest['signature'][:120]}"
        return differs

    # -- the Workload protocol --------------------------------------------------------------------
    def make_inputs(self, cfg: WorkloadConfig, seed: int, device: str = "cuda") -> dict[str, Any]:
        """The recording, restored to its bytes before the launch (``seed`` is unused: the inputs are recorded)."""
        r = self.replay(cfg, device)
        r.restore()
        return {"replay": r}

    def reset(self, inputs: dict[str, Any]) -> None:
        """Restore the recorded inputs before the next check or timed block."""
        inputs["replay"].restore()

    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Run the kernel's code as it is now (the wrapper call when recorded, else the bare launch) and return the
        written arguments."""
        r: Replay = inputs["replay"]
        if r.wrapper is None:
            r.launch()
            args = r.args
        else:
            fn, a, kw = r.wrapper
            with self._watch() as hook:
                fn(*a, **kw)
            if "args" not in hook:
                raise WorkloadError(f"{fn.__qualname__} no longer launches {r.name}")
            args = hook["args"]
        names = r.arg_names
        return {n: args[names.index(n)] for n in r.written if names.index(n) < len(args)}

    def reference(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The recorded launch's written arguments; with regenerated inputs, the recorded version's answer on them,
        computed once and cached in the folder."""
        r: Replay = inputs["replay"]
        if not r.regenerated:
            return dict(r.outputs)
        import torch
        cache = r.folder / _REGEN_CACHE.format(tag=regen_tag(r.device))
        if cache.is_file():
            return {k: v.to(r.device) for k, v in torch.load(cache, weights_only=True).items()}
        if not self._same_version(r.manifest):
            raise WorkloadError(f"{r.folder.name}: its inputs are regenerated and the recorded version's answer on "
                                "them is not known yet; replay the recorded version of the kernel first")
        r.restore()
        out = {k: v.clone() for k, v in self.run(inputs).items()}
        r.restore()
        torch.cuda.synchronize()
        torch.save({k: v.cpu() for k, v in out.items()}, cache)
        return out

    def flops(self, cfg: WorkloadConfig) -> float:
        """The FLOPs given in ``counts`` for this recording (0 when none were given)."""
        return float((self.counts.get(cfg.name) or {}).get("flops") or 0.0)

    def bytes(self, cfg: WorkloadConfig) -> float:
        """The memory the launch's arrays span, each storage once, written storages twice (read + write) unless the
        kernel only stores to them (``source.analysis.param_access``; a ``torch.empty`` output's bytes are not one
        value, so the recording cannot tell it is a pure output); arrays the kernel never uses, and the wrapper's
        other tensors, not at all.  Without the kernel's source: every storage, written ones twice."""
        given = (self.counts.get(cfg.name) or {}).get("bytes")
        if given:
            return float(given)
        _f, m = self.manifests[cfg.name]
        access = self._access(cfg.name, m)
        viewers: dict[int, list[str]] = {}
        for a in m["args"]:
            t = a["value"].get("tensor") if isinstance(a["value"], dict) else None
            if t is not None:
                viewers.setdefault(t["storage"], []).append(a["name"])
        total = 0
        for s in m["storages"]:
            twice = bool(s.get("written")) and not s.get("pure_output")
            if access is not None:
                used = [access[n] for n in viewers.get(s["id"], []) if n in access]
                if not used:
                    continue
                twice = twice and any(u != "write" for u in used)
            total += s.get("size", s["nbytes"]) * (2 if twice else 1)
        return float(total)

    def _access(self, name: str, m: dict) -> dict[str, str] | None:
        """The kernel's parameters by how its body moves them (read once per recording), or None when its source
        cannot be read."""
        if name not in self._accesses:
            try:
                text = Path(self._file(m) or "").read_text()
                self._accesses[name] = param_access(load_kernel(text, m["kernel"].get("attr") or m["kernel"]["name"]))
            except (OSError, UnicodeDecodeError, libcst.ParserSyntaxError, CutileDiagError):
                self._accesses[name] = None      # no file, not Python, no such kernel: the footprint rule alone
        return self._accesses[name]

    def compute_unit(self, cfg: WorkloadConfig) -> tuple[str, str]:
        """The (dtype, unit) given in ``counts``, else f32 on CUDA cores."""
        u = (self.counts.get(cfg.name) or {}).get("unit")
        return tuple(u) if u else ("f32", "cuda")


def replay_workload(ref: str, **kwargs) -> ReplayWorkload:
    """``replay:FOLDER`` -> the workload (``workloads.load_workload`` resolves the prefix here)."""
    return ReplayWorkload(ref[len(REF_PREFIX):], **kwargs)


def describe(folder: str | Path) -> list[dict]:
    """One line per recording (for the plan and ``replay --json`` without a GPU)."""
    out = []
    for f in folders_of(folder):
        m = read_manifest(f)
        out.append({"folder": str(f), "kernel": m["kernel"]["name"], "grid": m["grid"], "executed": m.get("executed"),
                    "wrapper": (m.get("wrapper") or {}).get("name"), "wrapper_missing": m.get("wrapper_missing"),
                    "regenerated": [s["id"] for s in m["storages"] if s.get("stored") != "whole"],
                    "error": m.get("error")})
    return out
