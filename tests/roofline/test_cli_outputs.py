"""`cutile-diag roofline` / `peaks` offline: JSON, plots, exit codes, bad input."""
import json

import pytest

from cutile_diag.cli import main

pytest.importorskip("cuda.tile")


def run_json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr().out
    return rc, json.loads(out)


def test_roofline_offline_json(capsys):
    rc, d = run_json(capsys, ["roofline", "examples:matmul", "--device", "h200", "--config", "4096-f16", "2048-f16",
                              "--latency-ms", "4096-f16=0.2155", "2048-f16=0.04", "--json"])
    assert rc == 0
    assert d["device"]["name"] == "NVIDIA H200"
    # the preset carries the project's committed H200 measurement, with its provenance
    assert d["ceilings"]["flops"]["f16:tensor"]["value"] == pytest.approx(727e12, rel=1e-3)
    assert "bench/results/optimize-h200/peaks.json" in d["ceilings"]["dram_bw"]["source"]
    res = {r["config"]: r for r in d["results"]}
    p = res["4096-f16"]["point"]
    assert p["latency_source"] == "recorded"
    assert p["achieved_tflops"] == pytest.approx(2 * 4096 ** 3 / 0.2155e-3 / 1e12)
    assert p["bound"] == "compute" and p["recipe_class"] == "compute-bound"
    # % of the datasheet's 989.5 TFLOP/s, of the measured 727, and (separately) of the clock-derived 1070
    assert p["roof_flops_datasheet"]["value"] == pytest.approx(989.5e12)
    assert p["pct_datasheet"] == pytest.approx(100 * p["achieved_flops"] / 989.5e12)
    assert p["pct_measured"] == pytest.approx(100 * p["achieved_flops"] / 727.0287e12, rel=1e-4)
    assert p["pct_theoretical"] == pytest.approx(100 * p["achieved_flops"] / p["roof_flops_theoretical"]["value"])
    assert p["roof_flops_theoretical"]["value"] == pytest.approx(4096 * 132 * 1980e6)
    assert p["valid"] is True and p["verdict"]
    st = res["4096-f16"]["static"]
    assert st["available"] and st["mma_flops"] == 2 * 4096 ** 3 and st["grid"] == [32, 32]


def test_roofline_offline_invalid_point_exits_1(capsys):
    # 0.001 ms for a 4096^3 GEMM is 137 PFLOP/s: far above every roof
    rc, d = run_json(capsys, ["roofline", "examples:matmul", "--device", "h200", "--config", "4096-f16",
                              "--latency-ms", "0.001", "--json", "--no-static"])
    assert rc == 1
    p = d["results"][0]["point"]
    assert p["valid"] is False and p["level"] == "invalid" and p["verdict"].startswith("INVALID")
    assert d["results"][0]["static"] is None


def test_roofline_offline_above_the_measured_ceiling_is_invalid(capsys):
    # 0.18 ms = 764 TFLOP/s f16: below every theoretical roof, 5 % above the recorded cuBLAS ceiling
    rc = main(["roofline", "examples:matmul", "--device", "h200", "--config", "4096-f16", "--latency-ms", "0.18",
               "--no-static"])
    out = capsys.readouterr().out
    assert rc == 1 and "INVALID" in out and "measured f16 tensor ceiling" in out
    assert "% datasheet" in out and "% measured" in out and "% spec" not in out


def test_roofline_offline_preset_without_measurement_says_so(capsys):
    rc, d = run_json(capsys, ["roofline", "examples:matmul", "--device", "a100", "--config", "4096-f16",
                              "--latency-ms", "1.0", "--json", "--no-static"])
    assert rc == 0 and d["ceilings"] is None
    p = d["results"][0]["point"]
    assert p["pct_measured"] is None and p["pct_datasheet"] is not None
    assert any("no measured ceilings" in n for n in p["notes"])


@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG\r\n\x1a\n"), (".svg", b"<svg")])
def test_plot_files(tmp_path, capsys, suffix, magic):
    path = tmp_path / f"roof{suffix}"
    rc = main(["roofline", "examples:vector_add", "--device", "h200", "--config", "16M-f32", "64M-f32",
               "--latency-ms", "16M-f32=0.0525", "64M-f32=0.2", "--plot", str(path), "--no-static"])
    assert rc == 0
    data = path.read_bytes()
    assert len(data) > 1000
    if suffix == ".png":
        assert data.startswith(magic)
    else:
        assert magic in data[:2000] and data.rstrip().endswith(b"</svg>")
    assert str(path) in capsys.readouterr().out


def test_plot_marks_invalid_points(tmp_path):
    path = tmp_path / "roof.svg"
    main(["roofline", "examples:vector_add", "--device", "h200", "--config", "16M-f32", "--latency-ms", "0.001",
          "--plot", str(path), "--no-static"])
    data = path.read_bytes()
    assert b"INVALID" in data
    # every roof line says which kind it is: no bare "spec"
    assert b"datasheet" in data and b"measured" in data and b"theoretical (max clock)" in data and b"spec" not in data


def test_plot_rejects_other_formats(tmp_path, capsys):
    rc = main(["roofline", "examples:vector_add", "--device", "h200", "--config", "16M-f32", "--latency-ms", "0.05",
               "--plot", str(tmp_path / "roof.pdf"), "--no-static"])
    assert rc == 2 and "must end in .png or .svg" in capsys.readouterr().err


@pytest.mark.parametrize("argv,msg", [
    (["roofline", "examples:softmax", "--device", "h200"], "give the recorded latency"),
    (["roofline", "examples:softmax", "--device", "h200", "--latency-ms", "0.05"], "one --latency-ms for 2"),
    (["roofline", "examples:softmax", "--device", "h200", "--latency-ms", "x=1"], "no configuration 'x'"),
    (["roofline", "examples:softmax", "--device", "h200", "--config", "32768x1024-f16", "--latency-ms", "-1"],
     "must be a finite number > 0"),
    *[(["roofline", "examples:matmul", "--device", "h200", "--config", "4096-f16", "--latency-ms", v],
       "must be a finite number > 0") for v in ("inf", "nan", "0", "-0.5")],
    (["roofline", "examples:matmul", "--device", "h200", "--config", "4096-f16", "--latency-ms", "4096-f16=inf"],
     "--latency-ms 4096-f16: must be a finite number > 0, not inf"),
    (["roofline", "examples:matmul", "--device", "h200", "--config", "4096-f16", "--latency-ms", "abc"],
     "is not a number"),
    *[(["roofline", "examples:matmul", "--timeout", v], "--timeout: must be a finite number > 0") for v in
      ("-5", "0", "inf", "nan")],
    (["roofline", "examples:matmul", "--timeout", "abc"], "--timeout: 'abc' is not a number"),
    (["roofline", "examples:matmul", "--rep-ms", "-1"], "--rep-ms: must be a finite number >= 0"),
    (["roofline", "examples:matmul", "--check-seed", "1.5"], "--check-seed: '1.5' is not an integer"),
    (["roofline", "examples:matmul", "--gpu", "-1"], "--gpu: must be a finite number >= 0"),
    (["roofline", "examples:matmul", "--device", "h200", "--config", "4096-f16", "--latency-ms", "0.2", "--plot",
      "/proc/nope/x.png"], "--plot /proc/nope/x.png: cannot create"),
    *[(["roofline", w, "--device", "h200", "--config", "4096-f16", "--latency-ms", "0.2", "--workload-arg",
        "foo=bar"], f"cannot create workload {w}: got an unexpected keyword argument 'foo'")
      for w in ("examples:matmul", "tilegym:matmul")],
    (["roofline", "examples:softmax", "--device", "z900", "--latency-ms", "1"], "unknown device preset"),
    (["roofline", "examples:softmax", "--config", "nope"], "no configuration 'nope'"),
    (["roofline", "nope.py::W"], "no such file"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, msg):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_no_gpu_points_to_offline_mode(capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = main(["roofline", "examples:softmax"])
    err = capsys.readouterr().err
    assert rc == 2 and "no CUDA GPU" in err and "--device h200 --latency-ms" in err


def test_list_configs(capsys):
    assert main(["roofline", "tilegym:rms_norm", "--list"]) == 0
    assert "16384x4096-bf16-persistent" in capsys.readouterr().out


def test_peaks_offline_json(capsys):
    rc, d = run_json(capsys, ["peaks", "--device", "h200", "--json"])
    assert rc == 0 and d["ceilings"]["measured_at"].startswith("2026-12-02")
    assert d["device"]["theoretical_dram_bw"]["value"] == pytest.approx(4.8146e12, rel=1e-4)
    assert d["device"]["theoretical_flops"]["bf16:tensor"]["source"].startswith("4096 bf16 tensor FLOP/clk/SM")
    assert d["device"]["datasheet"]["bf16:tensor"]["value"] == pytest.approx(989.5e12)


def test_peaks_offline_table_labels_every_kind(capsys):
    assert main(["peaks", "--device", "h200"]) == 0
    out = capsys.readouterr().out
    assert "bf16:tensor (datasheet)" in out and "bf16:tensor (theoretical, max clock)" in out
    assert "bf16:tensor (measured)" in out and "% of datasheet" in out and "(spec)" not in out
    assert main(["peaks", "--device", "a100"]) == 0
    assert "no measured ceilings for the NVIDIA A100-SXM4-80GB preset" in " ".join(capsys.readouterr().out.split())


def test_peaks_offline_table(capsys):
    assert main(["peaks", "--device", "b200"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA B200" in out and "TB/s" in out and "unverified" in out


def test_peaks_without_gpu_names_its_own_offline_form(capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUTILE_DIAG_PROG", "./dev")
    assert main(["peaks"]) == 2
    err = capsys.readouterr().err
    assert "./dev peaks --device h200" in err and "a100, b200, h100, h200" in err
    assert "--latency-ms" not in err                  # a roofline option: peaks does not take it


def test_peaks_table_shows_each_provenance_once(capsys):
    """Rows stay one line; a long source is a numbered note under the table, printed once however
    many rows (or derived figures) rest on it."""
    assert main(["peaks", "--device", "h200"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    curve = next(i for i, ln in enumerate(lines) if "bandwidth by bytes moved" in ln)   # the size curve's own table
    assert curve < 70                                 # was ~150: the preset's text in every row, 2-3 times
    preset_src = "preset NVIDIA H200: measured on an H200"
    assert out.count(preset_src) == 1
    note = next(ln for ln in lines if preset_src in ln)
    ref = note.split()[0]                             # "[1]"
    sms = next(ln for ln in lines if ln.startswith("│ SMs "))
    assert sms.rstrip(" │").endswith(ref)
    bw = next(ln for ln in lines if "DRAM bandwidth (theoretical)" in ln)
    derived = next(ln for ln in lines if ln.startswith("[") and "2 x memory clock" in ln)
    assert bw.rstrip(" │").endswith(derived.split()[0])   # the derivation is a note of its own...
    assert f"2 x memory clock 3201 MHz {ref} x 6016 bit {ref} / 8 (DDR)" in derived   # ...citing the preset
    assert out.count("bench/results/optimize-h200/peaks.json") == 3   # one note per measured ceiling
    rows = [ln for ln in lines if ln.startswith("│ ")]
    assert len(rows) == len({ln.split("│")[1] for ln in rows})   # no row wraps onto a second line


def test_check_seed_reaches_the_harness_and_a_failure_says_how_to_replay(capsys, monkeypatch):
    import cutile_diag.measure.roofline as analysis
    from cutile_diag.harness.correctness import CheckResult
    from cutile_diag.measure.isolated import MeasureResult
    from cutile_diag.roofline import device
    seen = []

    def fake_measure(ref, config, *, check_seed=None, **kw):
        seen.append(check_seed)
        chk = CheckResult(False, 1234567 if check_seed is None else check_seed, error=None)
        return MeasureResult(ref, config, "mismatch", error="FAIL (seed ...): y: wrong", check=chk)

    monkeypatch.setattr(device, "live_device", lambda index=None: device.preset("h200"))
    monkeypatch.setattr(analysis, "measure_isolated", fake_measure)
    assert main(["roofline", "examples:vector_add", "--config", "1M-f32", "--no-static"]) == 1
    assert "--check-seed 1234567" in capsys.readouterr().out
    assert main(["roofline", "examples:vector_add", "--config", "1M-f32", "--no-static", "--check-seed", "42"]) == 1
    assert seen == [None, 42]          # default: None = a fresh seed drawn by the check itself


def test_plot_write_failure_is_a_usage_error(tmp_path):
    from cutile_diag.errors import UsageError
    from cutile_diag.roofline import analyze, plot_roofline, preset
    dev = preset("h200")
    p = analyze("w", "c", latency_ms=1.0, flops=1e9, bytes=1e9, unit=("f32", "cuda"), device=dev)
    (tmp_path / "taken.svg").mkdir()                 # the file name is a folder: savefig fails
    with pytest.raises(UsageError, match="cannot write"):
        plot_roofline([p], dev, None, tmp_path / "taken.svg")


@pytest.mark.parametrize("argv,flag", [
    (["roofline", "--device", "h200", "--latency-ms", "0.1", "examples:softmax"], "--latency-ms"),
    (["roofline", "--config", "4096-f16", "ops/k.py::kern"], "--config"),
])
def test_a_kernel_written_after_a_many_valued_option_is_named(capsys, monkeypatch, argv, flag):
    """--config and --latency-ms take several values and swallow a kernel written after them:
    say so, not 'nothing to place'."""
    monkeypatch.setenv("CUTILE_DIAG_PROG", "./dev")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    kernel = argv[-1]
    assert len(err) == 1 and f"{kernel} was read as a {flag} value" in err[0]
    assert f"./dev roofline {kernel} {flag}" in err[0]


def test_peaks_table_fits_100_columns(monkeypatch):
    """One line per quantity at 100 columns: a long provenance goes below the table as a
    numbered note, said once however many rows share it."""
    import re
    from rich.console import Console
    from cutile_diag.commands import peaks
    console = Console(width=100, record=True, color_system=None)
    monkeypatch.setattr(peaks, "console", console)
    assert main(["peaks", "--device", "h200"]) == 0
    lines = console.export_text().splitlines()
    rows = [ln for ln in lines if ln.startswith("│")]
    assert len(rows) > 20 and not [ln for ln in rows if re.match(r"│ +│", ln)]   # no wrapped row
    note_lines = [ln for ln in lines if re.match(r"\[\d+\] ", ln)]
    notes = [ln.split()[0] for ln in note_lines]
    # cited by a row, or by another note (a derivation's note cites the sources it rests on)
    refs = {m for ln in rows + [n.split(" ", 1)[1] for n in note_lines] for m in re.findall(r"\[\d+\]", ln)}
    assert refs and sorted(notes) == sorted(refs)                       # each note once, each one used
    assert sum("preset NVIDIA H200" in ln for ln in rows) == 0


def test_workload_table_fits_100_columns(monkeypatch, natural_width):
    """One line per configuration at 100 columns; the class and the ridge are on its lines below."""
    from rich.console import Console
    from rich.table import Table
    from cutile_diag.commands import roofline
    console = Console(width=100, record=True, color_system=None)
    tables = []
    monkeypatch.setattr(roofline, "console", console)
    real_print = console.print
    monkeypatch.setattr(console, "print", lambda *a, **k: (tables.extend(x for x in a if isinstance(x, Table)),
                                                          real_print(*a, **k)))
    assert main(["roofline", "examples:vector_add", "--device", "h200", "--config", "16M-f32", "64M-f32",
                 "--latency-ms", "16M-f32=0.0525", "64M-f32=0.2", "--no-static"]) == 0
    (t,) = tables
    assert natural_width(t) <= 100
    lines = console.export_text().splitlines()
    assert [ln.split()[0] for ln in lines if ln.rstrip().endswith("near roof")] == ["16M-f32", "64M-f32"]
    assert sum(ln.strip() == "class memory-bound; by the theoretical ridge (14 FLOP/B): memory" for ln in lines) == 2
