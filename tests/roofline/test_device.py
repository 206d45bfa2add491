"""Device model vs the offline presets, the arch tables, and the live path with a fake NVML."""
from types import SimpleNamespace

import pytest

from cutile_diag.errors import NoGPUError, UsageError
from cutile_diag.roofline import arch, device as devmod
from cutile_diag.roofline.device import preset, preset_names


def test_h200_preset_matches_the_measured_numbers():
    d = preset("h200")
    assert d.arch == "sm_90" and d.sm_count.value == 132
    assert d.l2_bytes.value == 60 * (1 << 20)
    bw = d.theoretical_dram_bw()
    assert bw.value == pytest.approx(2 * 3201e6 * 6016 / 8)
    assert bw.value / 1e12 == pytest.approx(4.814, abs=1e-3)
    bf16 = d.theoretical_flops("bf16", "tensor")
    assert bf16.value == pytest.approx(4096 * 132 * 1980e6)     # 1070 TFLOP/s at the NVML max clock
    assert 1.06e15 < bf16.value < 1.08e15
    assert d.ridge("bf16", "tensor") == pytest.approx(bf16.value / bw.value)
    # every derived roof names its inputs' sources
    assert "6016 bit" in bw.source and "3201" in bw.source
    assert "4096" in bf16.source and "132 SMs" in bf16.source and "1980" in bf16.source


@pytest.mark.parametrize("name,arch_,sms,bw_tbps,bf16_tflops", [
    ("a100", "sm_80", 108, 2.039, 312.0),
    ("h100", "sm_90", 132, 3.352, 1070.0),
    ("h200", "sm_90", 132, 4.814, 1070.0),
    ("b200", "sm_100", 148, 8.0, 2383.0),
])
def test_presets(name, arch_, sms, bw_tbps, bf16_tflops):
    d = preset(name)
    assert d.arch == arch_ and d.sm_count.value == sms and d.kind == "preset"
    assert d.theoretical_dram_bw().value / 1e12 == pytest.approx(bw_tbps, rel=5e-3)
    assert d.theoretical_flops("bf16", "tensor").value / 1e12 == pytest.approx(bf16_tflops, rel=5e-3)
    # the datasheet's dense figure is within the model at max clock (datasheets quote lower clocks)
    ds = d.datasheet["bf16:tensor"].value
    assert ds <= d.theoretical_flops("bf16", "tensor").value * 1.001
    assert d.datasheet["dram_bw"].value == pytest.approx(d.theoretical_dram_bw().value, rel=0.02)
    assert d.datasheet_peak("bf16:tensor") is d.datasheet["bf16:tensor"]
    assert d.datasheet_peak("f64:cuda").value is None and "no datasheet figure" in d.datasheet_peak("f64:cuda").source
    for q in (d.sm_count, d.sm_clock_max_mhz, d.mem_clock_max_mhz, d.bus_width_bits):
        assert q.source.startswith("preset ")


def test_preset_lookup_is_forgiving_and_errors_are_clear():
    assert preset("H200").name == preset("h200_sxm").name == preset("h200-sxm").name
    assert set(preset_names()) >= {"a100", "h100", "h200", "b200"}
    with pytest.raises(UsageError, match="unknown device preset 'x100'"):
        preset("x100")
    # presets are copies: editing one does not leak into the next lookup
    d = preset("h100")
    d.warnings.append("edited")
    assert "edited" not in preset("h100").warnings


def test_arch_tables_cover_the_architectures():
    for a in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"):
        t = arch.ARCH_TABLES[a]
        for dt in ("f32", "f16", "bf16", "tf32"):
            unit = "cuda" if dt == "f32" else "tensor"
            assert (dt, unit) in t, (a, dt)
        for rate in t.values():
            assert rate.per_clk_per_sm > 0 and rate.source
    # Hopper doubles Ampere's tensor rate per SM, Blackwell doubles Hopper's
    r = {a: arch.flops_per_clk_per_sm(a, "bf16", "tensor").per_clk_per_sm for a in ("sm_80", "sm_90", "sm_100")}
    assert r == {"sm_80": 2048, "sm_90": 4096, "sm_100": 8192}
    assert arch.flops_per_clk_per_sm("sm_80", "f8", "tensor") is None       # no FP8 on Ampere
    assert arch.flops_per_clk_per_sm("sm_90", "f4", "tensor") is None
    assert arch.flops_per_clk_per_sm("sm_100", "f4", "tensor").per_clk_per_sm == 32768
    assert arch.flops_per_clk_per_sm("sm_103", "bf16", "tensor").per_clk_per_sm == 8192   # family fallback
    assert arch.flops_per_clk_per_sm("sm_90", "float8_e4m3fn", "tensor").per_clk_per_sm == 8192
    assert arch.flops_per_clk_per_sm("sm_75", "f16", "tensor") is None


def test_unknown_rate_is_reported_not_guessed():
    d = preset("a100")
    q = d.theoretical_flops("f8", "tensor")
    assert q.value is None and q.source.startswith("unknown")
    assert d.ridge("f8", "tensor") is None


def test_device_json_has_every_number_with_a_source():
    j = preset("h200").to_json()
    assert j["theoretical_dram_bw"]["unit"] == "B/s"
    assert j["theoretical_flops"]["bf16:tensor"]["value"] > 1e15
    assert j["datasheet"]["bf16:tensor"]["value"] == pytest.approx(989.5e12)
    for k in ("sm_count", "sm_clock_max_mhz", "mem_clock_max_mhz", "bus_width_bits", "l2_bytes"):
        assert set(j[k]) == {"value", "unit", "source"}


def test_live_device_without_gpu_points_to_offline_mode(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(NoGPUError) as e:
        devmod.live_device()
    assert "--device h200 --latency-ms" in e.value.one_line()


def _fake_torch_gpu(monkeypatch, name="NVIDIA H200"):
    import torch
    props = SimpleNamespace(name=name, major=9, minor=0, multi_processor_count=132, L2_cache_size=60 << 20,
                            shared_memory_per_multiprocessor=228 << 10, shared_memory_per_block_optin=227 << 10,
                            total_memory=141 * 10**9, uuid="1234-abcd")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=None: props)


def test_live_device_from_nvml(monkeypatch):
    from cutile_diag import nvml
    _fake_torch_gpu(monkeypatch)
    monkeypatch.setattr(nvml, "nvml_available", lambda: None)
    monkeypatch.setattr(nvml, "nvml_handle_for_torch_device", lambda d=None: "handle")
    fields = {"name": ("NVIDIA H200", "nvmlDeviceGetName"), "uuid": ("GPU-1234", "nvmlDeviceGetUUID"),
              "sm_clock_max_mhz": (1980, "nvmlDeviceGetMaxClockInfo(SM)"),
              "mem_clock_max_mhz": (3201, "nvmlDeviceGetMaxClockInfo(MEM)"),
              "sm_clock_current_mhz": (345, "nvmlDeviceGetClockInfo(SM)"),
              "mem_clock_current_mhz": (3201, "nvmlDeviceGetClockInfo(MEM)"),
              "bus_width_bits": (6016, "nvmlDeviceGetMemoryBusWidth"),
              "power_limit_w": (700.0, "nvmlDeviceGetEnforcedPowerLimit"), "mig_mode": (False, "nvmlDeviceGetMigMode"),
              "driver_version": ("580.159", "nvmlSystemGetDriverVersion")}
    monkeypatch.setattr(nvml, "read_nvml", lambda h: fields)
    d = devmod.live_device()
    assert d.kind == "live" and d.arch == "sm_90"
    assert d.sm_count.source.startswith("torch.cuda.get_device_properties")
    assert d.sm_clock_max_mhz.value == 1980 and d.sm_clock_max_mhz.source == "nvmlDeviceGetMaxClockInfo(SM)"
    assert d.theoretical_dram_bw().value == pytest.approx(preset("h200").theoretical_dram_bw().value)
    # the idle-low current clock never feeds a roof
    assert d.sm_clock_current_mhz.value == 345
    assert d.theoretical_flops("bf16").value == pytest.approx(preset("h200").theoretical_flops("bf16").value)
    assert d.key == "NVIDIA H200|GPU-1234|driver 580.159"
    assert not d.warnings


def test_live_device_nvml_refused_falls_back_to_the_preset_with_a_warning(monkeypatch):
    from cutile_diag import nvml
    _fake_torch_gpu(monkeypatch)
    monkeypatch.setattr(nvml, "nvml_available", lambda: "NVML init failed: NVMLError_NoPermission")
    d = devmod.live_device()
    assert d.sm_clock_max_mhz.value == 1980
    assert "preset NVIDIA H200" in d.sm_clock_max_mhz.source and "NoPermission" in d.sm_clock_max_mhz.source
    assert any("NVML unavailable" in w for w in d.warnings)


def _fake_nvml_refused(monkeypatch):
    from cutile_diag import nvml
    monkeypatch.setattr(nvml, "nvml_available", lambda: "NVML init failed: NVMLError_NoPermission")


def test_live_h100_pcie_gets_its_own_datasheet_not_the_sxm_one(monkeypatch):
    _fake_torch_gpu(monkeypatch, name="NVIDIA H100 PCIe")
    _fake_nvml_refused(monkeypatch)
    d = devmod.live_device()
    assert d.datasheet["dram_bw"].value == pytest.approx(2.0e12) and "H100 PCIe" in d.datasheet["bf16:tensor"].source
    # no SXM clocks borrowed either: unknown, with the reason
    assert d.sm_clock_max_mhz.value is None and "NoPermission" in d.sm_clock_max_mhz.source


def test_live_unknown_variant_has_no_datasheet_and_says_so(monkeypatch):
    _fake_torch_gpu(monkeypatch, name="NVIDIA GH200 480GB")
    _fake_nvml_refused(monkeypatch)
    d = devmod.live_device()
    assert d.datasheet == {} and d.datasheet_peak("bf16:tensor").value is None
    assert any("no datasheet figures for 'NVIDIA GH200 480GB'" in w for w in d.warnings)


def test_live_device_mig_warns(monkeypatch):
    from cutile_diag import nvml
    _fake_torch_gpu(monkeypatch, name="NVIDIA H100 80GB HBM3 MIG 3g.40gb")
    monkeypatch.setattr(nvml, "nvml_available", lambda: None)
    monkeypatch.setattr(nvml, "nvml_handle_for_torch_device", lambda d=None: "handle")
    monkeypatch.setattr(nvml, "read_nvml", lambda h: {
        "mig_mode": (True, "nvmlDeviceGetMigMode"),
        "sm_clock_max_mhz": (None, "nvmlDeviceGetMaxClockInfo(SM): NVMLError_NoPermission: Insufficient Permissions")})
    d = devmod.live_device()
    assert any("MIG is enabled" in w for w in d.warnings)
    assert any("NoPermission" in w for w in d.warnings)
    # clock refused by NVML: the H100 preset fills in, and says why
    assert d.sm_clock_max_mhz.value == 1980 and "NoPermission" in d.sm_clock_max_mhz.source


@pytest.mark.parametrize("name,variant", [
    ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"), ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"), ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "h100-sxm"), ("NVIDIA H200", "h200-sxm"), ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA B200", "b200"),
    # not sure -> unknown, never a sibling's figures
    ("NVIDIA A100 80GB", None), ("NVIDIA A100X", None), ("NVIDIA GH200 480GB", None), ("NVIDIA GB200", None),
    ("NVIDIA H100", None), ("NVIDIA L40S", None),
])
def test_datasheet_variants(name, variant):
    assert devmod.datasheet_variant(name) == variant


def test_variant_datasheets_differ_where_nvidia_says_so():
    ds = devmod.DATASHEETS
    tbps = {k: v["dram_bw"].value / 1e12 for k, v in ds.items()}
    assert tbps["a100-sxm4-40gb"] == pytest.approx(1.555) and tbps["a100-sxm4-80gb"] == pytest.approx(2.039)
    assert tbps["a100-pcie-80gb"] == pytest.approx(1.935) and tbps["h100-pcie"] == pytest.approx(2.0)
    assert ds["h100-pcie"]["bf16:tensor"].value == pytest.approx(756.5e12)
    assert tbps["h100-nvl"] == pytest.approx(3.9) and ds["h100-nvl"]["bf16:tensor"].value == pytest.approx(835.5e12)
    assert ds["h200-sxm"]["bf16:tensor"].value == pytest.approx(989.5e12)
    # a preset stands in (for clocks when NVML is refused) only for its own variant
    assert devmod.preset_for_name("NVIDIA H200").name == "NVIDIA H200"
    assert devmod.preset_for_name("NVIDIA H100 PCIe") is None
    assert devmod.preset_for_name("NVIDIA A100-PCIE-40GB") is None
