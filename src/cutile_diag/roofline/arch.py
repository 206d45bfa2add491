"""Per-architecture dense throughput: FLOP (or integer op) per clock per SM, by dtype and unit.

Public API::

    ARCH_TABLES["sm_90"][("bf16", "tensor")] -> Rate(4096, source)
    flops_per_clk_per_sm("sm_90", "bf16", "tensor") -> Rate | None
    arch_of_capability((9, 0)) -> "sm_90";  arch_family("sm_103") -> "sm_100"
    UNITS = ("tensor", "cuda");  DTYPES = ("f64", "f32", "tf32", "f16", "bf16", "f8", "i8", "f4")

Numbers count an FMA as 2 FLOP and are **dense** (no 2:4 sparsity: datasheets headline
sparse figures, twice these).  They are the rates of the data-center / professional part of
each architecture (A100, A40/A6000, L40S, H100/H200, B200, RTX PRO 6000); GeForce parts of
sm_86/89/120 run FP16/BF16 with FP32 accumulate and TF32 at half the listed tensor rate.
Each entry records how it was derived (the datasheet figure ÷ SMs ÷ the clock it is quoted
at), so a roof built from it can say where it came from.  A missing entry means no
published figure — the model then says "unknown" instead of guessing.
"""
from __future__ import annotations

from dataclasses import dataclass

UNITS = ("tensor", "cuda")
DTYPES = ("f64", "f32", "tf32", "f16", "bf16", "f8", "i8", "f4")


@dataclass(frozen=True)
class Rate:
    """FLOPs per clock per SM of one (dtype, unit), with the datasheet line it comes from."""
    per_clk_per_sm: int
    source: str


def _t(n: int, src: str) -> Rate:
    return Rate(n, src)


_A100 = "A100 SXM datasheet (108 SMs, 1410 MHz)"
_A40 = "A40/RTX A6000 datasheet (GA102, 1740-1800 MHz)"
_L40S = "L40S datasheet (AD102, 142 SMs, 2520 MHz)"
_H100 = "H100 SXM datasheet (132 SMs; tensor figures quoted at 1830 MHz, CUDA-core at 1980 MHz)"
_B200 = "B200 (HGX) datasheet (148 SMs, ~1860 MHz implied; unverified on this project)"
_SM120 = "RTX PRO 6000 Blackwell / RTX 5090 datasheets (GB202); unverified on this project"
_ISA = "CUDA programming guide, arithmetic instruction throughput table"

ARCH_TABLES: dict[str, dict[tuple[str, str], Rate]] = {
    "sm_80": {
        ("f64", "tensor"): _t(128, f"{_A100}: 19.5 TFLOP/s FP64 tensor"),
        ("f64", "cuda"): _t(64, f"{_A100}: 9.7 TFLOP/s FP64"),
        ("f32", "cuda"): _t(128, f"{_A100}: 19.5 TFLOP/s FP32 (64 FP32 lanes/SM)"),
        ("tf32", "tensor"): _t(1024, f"{_A100}: 156 TFLOP/s TF32 dense"),
        ("f16", "tensor"): _t(2048, f"{_A100}: 312 TFLOP/s FP16 dense"),
        ("bf16", "tensor"): _t(2048, f"{_A100}: 312 TFLOP/s BF16 dense"),
        ("i8", "tensor"): _t(4096, f"{_A100}: 624 TOP/s INT8 dense"),
        ("f16", "cuda"): _t(512, f"{_A100}: 78 TFLOP/s FP16 non-tensor"),
        ("bf16", "cuda"): _t(256, f"{_A100}: 39 TFLOP/s BF16 non-tensor"),
    },
    "sm_86": {
        ("f64", "cuda"): _t(4, f"{_ISA}: FP64 at 1/64 of FP32 on GA10x"),
        ("f32", "cuda"): _t(256, f"{_A40}: 128 FP32 lanes/SM"),
        ("tf32", "tensor"): _t(512, f"{_A40}: 74.8 TFLOP/s TF32 dense"),
        ("f16", "tensor"): _t(1024, f"{_A40}: 149.7 TFLOP/s FP16 dense"),
        ("bf16", "tensor"): _t(1024, f"{_A40}: 149.7 TFLOP/s BF16 dense"),
        ("i8", "tensor"): _t(2048, f"{_A40}: 299 TOP/s INT8 dense"),
        ("f16", "cuda"): _t(256, f"{_A40}: FP16 non-tensor at the FP32 rate"),
        ("bf16", "cuda"): _t(256, f"{_A40}: BF16 non-tensor at the FP32 rate"),
    },
    "sm_89": {
        ("f64", "cuda"): _t(4, f"{_ISA}: FP64 at 1/64 of FP32 on AD10x"),
        ("f32", "cuda"): _t(256, f"{_L40S}: 91.6 TFLOP/s FP32 (128 lanes/SM)"),
        ("tf32", "tensor"): _t(512, f"{_L40S}: 183 TFLOP/s TF32 dense"),
        ("f16", "tensor"): _t(1024, f"{_L40S}: 362 TFLOP/s FP16 dense"),
        ("bf16", "tensor"): _t(1024, f"{_L40S}: 362 TFLOP/s BF16 dense"),
        ("f8", "tensor"): _t(2048, f"{_L40S}: 733 TFLOP/s FP8 dense"),
        ("i8", "tensor"): _t(2048, f"{_L40S}: 733 TOP/s INT8 dense"),
        ("f16", "cuda"): _t(256, f"{_L40S}: FP16 non-tensor at the FP32 rate"),
        ("bf16", "cuda"): _t(256, f"{_L40S}: BF16 non-tensor at the FP32 rate"),
    },
    "sm_90": {
        ("f64", "tensor"): _t(256, f"{_H100}: 67 TFLOP/s FP64 tensor"),
        ("f64", "cuda"): _t(128, f"{_H100}: 34 TFLOP/s FP64"),
        ("f32", "cuda"): _t(256, f"{_H100}: 67 TFLOP/s FP32 (128 lanes/SM)"),
        ("tf32", "tensor"): _t(2048, f"{_H100}: 495 TFLOP/s TF32 dense"),
        ("f16", "tensor"): _t(4096, f"{_H100}: 989 TFLOP/s FP16 dense"),
        ("bf16", "tensor"): _t(4096, f"{_H100}: 989 TFLOP/s BF16 dense"),
        ("f8", "tensor"): _t(8192, f"{_H100}: 1979 TFLOP/s FP8 dense"),
        ("i8", "tensor"): _t(8192, f"{_H100}: 1979 TOP/s INT8 dense"),
        ("f16", "cuda"): _t(512, f"{_H100}: 134 TFLOP/s FP16 non-tensor"),
        ("bf16", "cuda"): _t(512, f"{_H100}: 134 TFLOP/s BF16 non-tensor"),
    },
    "sm_100": {
        ("f64", "tensor"): _t(128, f"{_B200}: 40 TFLOP/s FP64"),
        ("f64", "cuda"): _t(128, f"{_B200}: 40 TFLOP/s FP64"),
        ("f32", "cuda"): _t(256, f"{_B200}: 128 FP32 lanes/SM"),
        ("tf32", "tensor"): _t(4096, f"{_B200}: 1.1 PFLOP/s TF32 dense"),
        ("f16", "tensor"): _t(8192, f"{_B200}: 2.25 PFLOP/s FP16 dense"),
        ("bf16", "tensor"): _t(8192, f"{_B200}: 2.25 PFLOP/s BF16 dense"),
        ("f8", "tensor"): _t(16384, f"{_B200}: 4.5 PFLOP/s FP8 dense"),
        ("i8", "tensor"): _t(16384, f"{_B200}: 4.5 POP/s INT8 dense"),
        ("f4", "tensor"): _t(32768, f"{_B200}: 9 PFLOP/s FP4 dense"),
    },
    "sm_120": {
        ("f64", "cuda"): _t(4, f"{_ISA}: FP64 at 1/64 of FP32"),
        ("f32", "cuda"): _t(256, f"{_SM120}: 128 FP32 lanes/SM"),
        ("tf32", "tensor"): _t(512, f"{_SM120}: TF32 dense (professional part)"),
        ("f16", "tensor"): _t(1024, f"{_SM120}: FP16 dense (professional part)"),
        ("bf16", "tensor"): _t(1024, f"{_SM120}: BF16 dense (professional part)"),
        ("f8", "tensor"): _t(2048, f"{_SM120}: FP8 dense"),
        ("i8", "tensor"): _t(2048, f"{_SM120}: INT8 dense"),
        ("f4", "tensor"): _t(4096, f"{_SM120}: FP4 dense"),
        ("f16", "cuda"): _t(256, f"{_SM120}: FP16 non-tensor at the FP32 rate"),
        ("bf16", "cuda"): _t(256, f"{_SM120}: BF16 non-tensor at the FP32 rate"),
    },
}

# variants without a table of their own use their family's
_FAMILY = {"sm_87": "sm_80", "sm_88": "sm_80", "sm_103": "sm_100", "sm_107": "sm_100", "sm_110": "sm_100",
           "sm_121": "sm_120"}

_DTYPE_ALIASES = {"f8e4m3": "f8", "f8e5m2": "f8", "f8e4m3fn": "f8", "fp8": "f8", "int8": "i8", "u8": "i8",
                  "float16": "f16", "half": "f16", "bfloat16": "bf16", "float32": "f32", "float": "f32",
                  "float64": "f64", "tfloat32": "tf32", "fp4": "f4", "f4e2m1": "f4"}


def canonical_dtype(dtype: str) -> str:
    """The arch tables' dtype name (``torch.float16``/``fp16`` -> ``f16``; every f8/f4 form one name)."""
    d = str(dtype).lower().replace("torch.", "")
    if d.startswith(("float8", "f8")):
        return "f8"
    if d.startswith(("float4", "f4")):
        return "f4"
    return _DTYPE_ALIASES.get(d, d)


def arch_family(arch: str) -> str:
    """The arch whose table applies (e.g. sm_87 -> sm_80); unknown archs map to themselves."""
    return arch if arch in ARCH_TABLES else _FAMILY.get(arch, arch)


def arch_of_capability(cc: tuple[int, int]) -> str:
    """``sm_XY`` of a compute capability (X, Y)."""
    return f"sm_{cc[0]}{cc[1]}"


def flops_per_clk_per_sm(arch: str, dtype: str, unit: str) -> Rate | None:
    """The dense rate of ``dtype`` on ``unit`` (tensor or cuda) for ``arch``, or None when the table has none."""
    table = ARCH_TABLES.get(arch_family(arch))
    if table is None:
        return None
    return table.get((canonical_dtype(dtype), unit))
