"""The device model: what this GPU can do, every number with the place it came from.

Public API::

    dev = live_device(index=None)        # NVML + CUDA device properties (torch); NoGPUError without a GPU
    dev = preset("h200")                 # offline: a100, h100, h200, b200 (PRESETS)
    dev = device_model("h200" | None)    # preset by name, else the live GPU
    dev.theoretical_dram_bw() -> Quantity(bytes/s)       # 2 x max memory clock x bus width / 8
    dev.theoretical_flops("bf16", "tensor") -> Quantity  # table FLOP/clk/SM x SMs x max SM clock
    dev.ridge("bf16", "tensor") -> float                 # FLOP/byte where the two theoretical roofs meet
    dev.theoretical_peaks() -> {"bf16:tensor": Quantity, ...}
    dev.theoretical_peak("dram_bw" | "bf16:tensor") -> Quantity # either of the two above, by key
    dev.datasheet_peak("dram_bw" | "bf16:tensor") -> Quantity   # NVIDIA's figure for this exact variant
    dev.key -> "NVIDIA H200|GPU-…|driver 580.159"  (measured-ceiling cache key)
    datasheet_variant("NVIDIA H100 PCIe") -> "h100-pcie" | None

Two kinds of "peak", never mixed up: *theoretical* = the per-arch table rate x the NVML
**maximum** clock (H100/H200 bf16: 4096 x 132 x 1980 MHz = 1070 TFLOP/s, above NVIDIA's
989, which is quoted at a lower boost clock); *datasheet* = NVIDIA's published dense figure
for the exact product variant (SXM / PCIe / NVL, memory size), unknown when the variant is
not recognised rather than borrowed from a sibling.

``Quantity(value, unit, source)``: ``source`` says which call, table row or preset produced
the value (``"nvmlDeviceGetMaxClockInfo(SM)"``, ``"torch.cuda.get_device_properties"``,
``"preset H200: …"``), or why it is missing (``value=None``).  Roofs use the **maximum**
clocks (the idle current clock would collapse a roof > 10x); the current clocks are kept
for information only.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import NoGPUError, UsageError
from .arch import ARCH_TABLES, arch_family, arch_of_capability, canonical_dtype, flops_per_clk_per_sm
from ..output import prog
from .. import nvml  # read through the module at call time, so a patched probe is the one used

MIB = 1 << 20
KIB = 1 << 10


@dataclass(frozen=True)
class Quantity:
    """A device number with its unit and where it came from (an unknown one says why in ``source``)."""
    value: Any
    unit: str
    source: str

    @property
    def known(self) -> bool:
        """Whether the value is known."""
        return self.value is not None

    def to_json(self) -> dict:
        """The value, unit and source as a dict."""
        return {"value": self.value, "unit": self.unit, "source": self.source}


def _q(value, unit, source) -> Quantity:
    return Quantity(value, unit, source)


@dataclass
class DeviceModel:
    """A GPU's specification, read live (torch/NVML) or from a preset, each number sourced."""
    name: str
    arch: str
    compute_capability: tuple[int, int]
    kind: str                                 # "live" | "preset"
    sm_count: Quantity
    sm_clock_max_mhz: Quantity
    mem_clock_max_mhz: Quantity
    bus_width_bits: Quantity
    l2_bytes: Quantity
    smem_per_sm_bytes: Quantity
    smem_per_block_optin_bytes: Quantity
    power_limit_w: Quantity
    mig_mode: Quantity
    total_memory_bytes: Quantity
    sm_clock_current_mhz: Quantity | None = None
    mem_clock_current_mhz: Quantity | None = None
    driver_version: str | None = None
    uuid: str | None = None
    index: int | None = None
    datasheet: dict[str, Quantity] = field(default_factory=dict)   # vendor headline figures
    warnings: list[str] = field(default_factory=list)

    # -- derived roofs ---------------------------------------------------------------------
    def theoretical_dram_bw(self) -> Quantity:
        """2 x max memory clock x bus width (DDR), or unknown naming the missing input."""
        mc, bw = self.mem_clock_max_mhz, self.bus_width_bits
        if not (mc.known and bw.known):
            why = mc.source if not mc.known else bw.source
            return _q(None, "B/s", f"unknown: {why}")
        value = 2.0 * mc.value * 1e6 * bw.value / 8.0
        return _q(value, "B/s", f"2 x memory clock {mc.value:g} MHz [{mc.source}] x {bw.value} bit "
                                f"[{bw.source}] / 8 (DDR)")

    def theoretical_flops(self, dtype: str, unit: str = "tensor") -> Quantity:
        """SMs x max SM clock x the arch table's rate for (dtype, unit), or unknown naming why."""
        rate = flops_per_clk_per_sm(self.arch, dtype, unit)
        label = f"{canonical_dtype(dtype)} {unit}"
        if rate is None:
            return _q(None, "FLOP/s", f"unknown: no {label} rate for {self.arch} in the arch table")
        sms, clk = self.sm_count, self.sm_clock_max_mhz
        if not (sms.known and clk.known):
            why = sms.source if not sms.known else clk.source
            return _q(None, "FLOP/s", f"unknown: {why}")
        value = float(rate.per_clk_per_sm) * sms.value * clk.value * 1e6
        return _q(value, "FLOP/s", f"{rate.per_clk_per_sm} {label} FLOP/clk/SM [{arch_family(self.arch)} table: "
                                   f"{rate.source}] x {sms.value} SMs [{sms.source}] x {clk.value:g} MHz "
                                   f"[{clk.source}]")

    def ridge(self, dtype: str, unit: str = "tensor") -> float | None:
        """The theoretical ridge point (FLOP/byte) for (dtype, unit), or None when a roof is unknown."""
        f, b = self.theoretical_flops(dtype, unit), self.theoretical_dram_bw()
        if not (f.known and b.known) or b.value <= 0:
            return None
        return f.value / b.value

    def theoretical_peaks(self) -> dict[str, Quantity]:
        """``dtype:unit`` -> theoretical FLOP/s for every rate of the arch's table."""
        table = ARCH_TABLES.get(arch_family(self.arch), {})
        return {f"{d}:{u}": self.theoretical_flops(d, u) for (d, u) in table}

    def theoretical_peak(self, what: str) -> Quantity:
        """``"dram_bw"`` (B/s) or ``"bf16:tensor"`` (FLOP/s), keyed as ``datasheet_peak``."""
        if what == "dram_bw":
            return self.theoretical_dram_bw()
        d, _, u = what.partition(":")
        return self.theoretical_flops(d, u or "tensor")

    def datasheet_peak(self, what: str) -> Quantity:
        """NVIDIA's figure: ``"dram_bw"`` (B/s) or ``"bf16:tensor"`` (FLOP/s); unknown, never guessed."""
        if what != "dram_bw":
            d, _, u = what.partition(":")
            what = f"{canonical_dtype(d)}:{u or 'tensor'}"
        q = self.datasheet.get(what)
        if q is not None:
            return q
        return _q(None, "B/s" if what == "dram_bw" else "FLOP/s",
                  f"unknown: no datasheet figure for {what} on {self.name}")

    @property
    def key(self) -> str:
        """``name|uuid|driver``: what cached ceilings are keyed by (a driver update re-measures)."""
        return f"{self.name}|{self.uuid or 'no-uuid'}|driver {self.driver_version or 'unknown'}"

    def to_json(self) -> dict:
        """The model as JSON, each quantity with its source, plus the theoretical roofs."""
        out: dict[str, Any] = {"name": self.name, "arch": self.arch,
                               "compute_capability": list(self.compute_capability), "kind": self.kind,
                               "driver_version": self.driver_version, "uuid": self.uuid, "index": self.index}
        for f_ in ("sm_count", "sm_clock_max_mhz", "mem_clock_max_mhz", "bus_width_bits", "l2_bytes",
                   "smem_per_sm_bytes", "smem_per_block_optin_bytes", "power_limit_w", "mig_mode",
                   "total_memory_bytes", "sm_clock_current_mhz", "mem_clock_current_mhz"):
            v = getattr(self, f_)
            out[f_] = v.to_json() if v is not None else None
        out["theoretical_dram_bw"] = self.theoretical_dram_bw().to_json()
        out["theoretical_flops"] = {k: q.to_json() for k, q in self.theoretical_peaks().items()}
        out["datasheet"] = {k: q.to_json() for k, q in self.datasheet.items()}
        out["warnings"] = list(self.warnings)
        return out


# ---------------------------------------------------------------------------------------
# presets and datasheets

_NV_NAME = {"tf32": "TF32", "f16": "FP16", "bf16": "BF16", "f8": "FP8"}


def _sheet(doc: str, tbps: float, sparse_tflops: dict[str, float], fp32: float | None = None) -> dict[str, Quantity]:
    """NVIDIA's datasheet figures for one variant; tensor rates are quoted with 2:4 sparsity, dense = half."""
    src = f"NVIDIA {doc} datasheet"
    out = {"dram_bw": _q(tbps * 1e12, "B/s", f"{src}: {tbps:g} TB/s")}
    for dt, sp in sparse_tflops.items():
        out[f"{dt}:tensor"] = _q(sp / 2 * 1e12, "FLOP/s", f"{src}: {sp:g} TFLOPS {_NV_NAME.get(dt, dt)} with sparsity "
                                                          f"-> {sp / 2:g} dense")
    if fp32:
        out["f32:cuda"] = _q(fp32 * 1e12, "FLOP/s", f"{src}: {fp32:g} TFLOPS FP32")
    return out


_A100_T = {"tf32": 312, "f16": 624, "bf16": 624}
_H100_SXM_T = {"tf32": 989, "f16": 1979, "bf16": 1979, "f8": 3958}
_NVL_T = {"tf32": 835, "f16": 1671, "bf16": 1671, "f8": 3341}
DATASHEETS: dict[str, dict[str, Quantity]] = {
    "a100-sxm4-80gb": _sheet("A100 80GB SXM", 2.039, _A100_T, 19.5),
    "a100-sxm4-40gb": _sheet("A100 40GB SXM", 1.555, _A100_T, 19.5),
    "a100-pcie-80gb": _sheet("A100 80GB PCIe", 1.935, _A100_T, 19.5),
    "a100-pcie-40gb": _sheet("A100 40GB PCIe", 1.555, _A100_T, 19.5),
    "h100-sxm": _sheet("H100 SXM", 3.35, _H100_SXM_T, 67),
    "h100-pcie": _sheet("H100 PCIe", 2.0, {"tf32": 756, "f16": 1513, "bf16": 1513, "f8": 3026}, 51),
    "h100-nvl": _sheet("H100 NVL", 3.9, _NVL_T, 60),
    "h200-sxm": _sheet("H200 SXM", 4.8, _H100_SXM_T, 67),
    "h200-nvl": _sheet("H200 NVL", 4.8, _NVL_T, 60),
    "b200": _sheet("HGX B200 (per GPU)", 8.0, {"f16": 4500, "bf16": 4500, "f8": 9000}),
}


def datasheet_variant(gpu_name: str) -> str | None:
    """The DATASHEETS key of a device name (NVML/torch spelling), None when not sure.

    Only exact variants count: an A100 40GB, an H100 PCIe or NVL, a GH200 or GB200 must not
    get the SXM / HGX figures of the preset with the same family name.
    """
    toks = gpu_name.upper().replace("-", " ").replace("_", " ").split()
    if "MIG" in toks:                                  # "... MIG 3g.40gb": the parent's name comes first
        toks = toks[:toks.index("MIG")]
    rest = set(toks) - {"NVIDIA"}
    sxm = any(t.startswith("SXM") for t in rest)
    if "A100" in rest:
        form = "pcie" if "PCIE" in rest else "sxm4" if sxm else None
        mem = "80gb" if "80GB" in rest else "40gb" if "40GB" in rest else None
        return f"a100-{form}-{mem}" if form and mem else None
    if "H100" in rest:
        if "NVL" in rest:
            return "h100-nvl"
        if "PCIE" in rest:
            return "h100-pcie"
        return "h100-sxm" if "80GB" in rest and (sxm or "HBM3" in rest) else None
    if "H200" in rest:
        if "NVL" in rest:
            return "h200-nvl"
        return "h200-sxm" if rest - {"H200", "141GB", "HBM3E"} <= {"SXM", "SXM5"} else None
    if "B200" in rest:
        return "b200" if rest - {"B200", "HGX"} <= {"SXM", "SXM6"} else None
    return None


def _preset(name, variant, arch, sms, sm_mhz, mem_mhz, bus, l2_mib, smem_kib, optin_kib, watts, mem_gb, src,
            warnings=()) -> DeviceModel:
    major, minor = int(arch[3:-1]), int(arch[-1])
    p = f"preset {name}: {src}"
    return DeviceModel(
        name=name, arch=arch, compute_capability=(major, minor), kind="preset",
        sm_count=_q(sms, "SMs", p), sm_clock_max_mhz=_q(sm_mhz, "MHz", p), mem_clock_max_mhz=_q(mem_mhz, "MHz", p),
        bus_width_bits=_q(bus, "bit", p), l2_bytes=_q(l2_mib * MIB, "B", p),
        smem_per_sm_bytes=_q(smem_kib * KIB, "B", p), smem_per_block_optin_bytes=_q(optin_kib * KIB, "B", p),
        power_limit_w=_q(watts, "W", p), mig_mode=_q(False, "", p), total_memory_bytes=_q(mem_gb * 10**9, "B", p),
        datasheet=dict(DATASHEETS[variant]), warnings=list(warnings))


_NV = "NVIDIA datasheet"
PRESETS: dict[str, DeviceModel] = {
    "a100": _preset("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb", "sm_80", 108, 1410, 1593, 5120, 40, 164, 163, 400, 80,
                    f"{_NV} (A100 SXM4 80GB: 108 SMs, 1410 MHz boost, HBM2e 1593 MHz x 5120 bit)"),
    "h100": _preset("NVIDIA H100 80GB HBM3", "h100-sxm", "sm_90", 132, 1980, 2619, 5120, 50, 228, 227, 700, 80,
                    f"{_NV} (H100 SXM5: 132 SMs, 1980 MHz max, HBM3 2619 MHz x 5120 bit)"),
    "h200": _preset("NVIDIA H200", "h200-sxm", "sm_90", 132, 1980, 3201, 6016, 60, 228, 227, 700, 141,
                    "measured on an H200 (NVML max SM clock 1980 MHz, max memory clock 3201 MHz, bus width "
                    "6016 bit, power limit 700 W; torch: 132 SMs, 60 MiB L2; driver 580)"),
    "b200": _preset("NVIDIA B200", "b200", "sm_100", 148, 1965, 3906, 8192, 126, 228, 227, 1000, 180,
                    f"{_NV} (HGX B200: 148 SMs, 8 TB/s HBM3e over 8192 bit -> 3906 MHz); SM clock and L2 "
                    "unverified on this project",
                    warnings=["B200 preset: SM clock (1965 MHz) and L2 size are not verified on hardware by "
                              "this project; query the device when one is available"]),
}
_PRESET_VARIANT = {"a100-sxm4-80gb": "a100", "h100-sxm": "h100", "h200-sxm": "h200", "b200": "b200"}
_PRESET_ALIASES = {"a100-sxm4": "a100", "a100-80gb": "a100", "h100-sxm": "h100", "h100-sxm5": "h100",
                   "h200-sxm": "h200", "b200-hgx": "b200"}


def preset_names() -> list[str]:
    """The preset names, sorted."""
    return sorted(PRESETS)


def preset(name: str) -> DeviceModel:
    """A copy of the preset ``name`` (case and ``_``/``-`` insensitive, aliases too); UsageError
    listing the presets when unknown."""
    key = name.strip().lower().replace("_", "-")
    key = _PRESET_ALIASES.get(key, key)
    if key not in PRESETS:
        raise UsageError(f"unknown device preset '{name}'", hint="presets: " + ", ".join(preset_names()))
    d = PRESETS[key]
    return replace(d, datasheet=dict(d.datasheet), warnings=list(d.warnings))


def preset_for_name(gpu_name: str) -> DeviceModel | None:
    """The preset of exactly this variant (``"NVIDIA H200"`` -> h200; an H100 PCIe -> None)."""
    key = _PRESET_VARIANT.get(datasheet_variant(gpu_name) or "")
    return preset(key) if key else None


# ---------------------------------------------------------------------------------------
# live

_TORCH = "torch.cuda.get_device_properties"


def live_device(index: int | None = None) -> DeviceModel:
    """The model of GPU ``index`` (default: torch's current) from torch's properties and NVML, the
    datasheet of its exact variant filling gaps; NoGPUError without a GPU."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        raise NoGPUError("torch is not installed") from None
    if not torch.cuda.is_available():
        raise NoGPUError("no CUDA GPU visible to torch (torch.cuda.is_available() is False)",
                         hint="for a recorded latency use the offline mode: --device h200 --latency-ms X")
    idx = torch.cuda.current_device() if index is None else int(index)
    if idx >= torch.cuda.device_count():
        raise UsageError(f"GPU index {idx} does not exist (torch sees {torch.cuda.device_count()})")
    p = torch.cuda.get_device_properties(idx)
    cc = (int(p.major), int(p.minor))
    warnings: list[str] = []
    variant = datasheet_variant(p.name)
    fallback = preset_for_name(p.name)     # only for this exact variant: a sibling's clocks would be wrong

    def tq(attr, unit, scale=1):
        v = getattr(p, attr, None)
        return _q(int(v) * scale if v is not None else None, unit,
                  f"{_TORCH}().{attr}" if v is not None else f"unknown: {_TORCH}() has no {attr}")

    nv: dict[str, tuple[Any, str]] = {}
    why = nvml.nvml_available()
    if why is None:
        try:
            nv = nvml.read_nvml(nvml.nvml_handle_for_torch_device(idx))
        except Exception as e:
            why = f"NVML handle lookup failed: {e}"
    if why:
        warnings.append(f"NVML unavailable ({why}); clocks and bus width from "
                        + ("the " + fallback.name + " preset" if fallback else "torch where it has them"))

    def nq(key, unit, torch_attr=None, torch_scale=1.0, preset_field=None):
        val, src = nv.get(key, (None, why or f"nvml: no {key}"))
        if val is not None:
            return _q(val, unit, src)
        if torch_attr and getattr(p, torch_attr, None):
            return _q(getattr(p, torch_attr) * torch_scale, unit, f"{_TORCH}().{torch_attr} (NVML: {src})")
        if fallback is not None and preset_field:
            pv = getattr(fallback, preset_field)
            return _q(pv.value, unit, f"{pv.source} (NVML: {src})")
        return _q(None, unit, f"unknown: {src}")

    for key in ("sm_clock_max_mhz", "mem_clock_max_mhz", "bus_width_bits", "power_limit_w"):
        val, src = nv.get(key, (None, None))
        if val is None and src and why is None:
            warnings.append(f"NVML refused {key}: {src}")
    mig_val, mig_src = nv.get("mig_mode", (None, why or ""))
    if mig_val:
        warnings.append("MIG is enabled: clock, bandwidth and FLOP roofs are the whole GPU's, the instance "
                        f"gets a fraction of them; trust the measured ceilings ({prog()} peaks) instead")
    driver = nv.get("driver_version", (None, ""))[0]
    uuid = nv.get("uuid", (None, ""))[0] or (str(getattr(p, "uuid", "")) or None)
    dev = DeviceModel(
        name=p.name, arch=arch_of_capability(cc), compute_capability=cc, kind="live",
        sm_count=_q(int(p.multi_processor_count), "SMs", f"{_TORCH}().multi_processor_count"),
        sm_clock_max_mhz=nq("sm_clock_max_mhz", "MHz", "clock_rate", 1e-3, "sm_clock_max_mhz"),
        mem_clock_max_mhz=nq("mem_clock_max_mhz", "MHz", "memory_clock_rate", 1e-3, "mem_clock_max_mhz"),
        bus_width_bits=nq("bus_width_bits", "bit", "memory_bus_width", 1, "bus_width_bits"),
        l2_bytes=tq("L2_cache_size", "B"),
        smem_per_sm_bytes=tq("shared_memory_per_multiprocessor", "B"),
        smem_per_block_optin_bytes=tq("shared_memory_per_block_optin", "B"),
        power_limit_w=nq("power_limit_w", "W", preset_field="power_limit_w"),
        mig_mode=_q(mig_val, "", mig_src or "unknown"),
        total_memory_bytes=_q(int(p.total_memory), "B", f"{_TORCH}().total_memory"),
        sm_clock_current_mhz=_nvq(nv, "sm_clock_current_mhz", "MHz", why),
        mem_clock_current_mhz=_nvq(nv, "mem_clock_current_mhz", "MHz", why),
        driver_version=driver, uuid=uuid, index=idx,
        datasheet=dict(DATASHEETS[variant]) if variant else {}, warnings=warnings)
    if not variant:
        dev.warnings.append(f"no datasheet figures for '{p.name}' (not a variant this project has figures for: "
                            "A100 SXM4/PCIe 40/80GB, H100 SXM/PCIe/NVL, H200 SXM/NVL, B200): % of datasheet "
                            "is unknown")
    if arch_family(dev.arch) not in ARCH_TABLES:
        dev.warnings.append(f"{dev.arch} has no FLOP table: compute roofs are unknown")
    return dev


def _nvq(nv: dict, key: str, unit: str, why: str | None) -> Quantity:
    val, src = nv.get(key, (None, why or f"nvml: no {key}"))
    return _q(val, unit, src)


def device_model(name: str | None = None, index: int | None = None) -> DeviceModel:
    """The preset ``name`` when given, else the live GPU ``index``."""
    return preset(name) if name else live_device(index)
