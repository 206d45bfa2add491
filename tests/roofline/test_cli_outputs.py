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
    assert d["device"]["name"] == "NVIDIA H200" and d["ceilings"] is None
    res = {r["config"]: r for r in d["results"]}
    p = res["4096-f16"]["point"]
    assert p["latency_source"] == "recorded"
    assert p["achieved_tflops"] == pytest.approx(2 * 4096 ** 3 / 0.2155e-3 / 1e12)
    assert p["bound"] == "compute" and p["recipe_class"] == "compute-bound"
    assert p["pct_spec"] == pytest.approx(100 * p["achieved_flops"] / p["roof_flops_spec"]["value"])
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
    assert b"INVALID" in path.read_bytes()


def test_plot_rejects_other_formats(tmp_path, capsys):
    rc = main(["roofline", "examples:vector_add", "--device", "h200", "--config", "16M-f32", "--latency-ms", "0.05",
               "--plot", str(tmp_path / "roof.pdf"), "--no-static"])
    assert rc == 2 and "must end in .png or .svg" in capsys.readouterr().err


@pytest.mark.parametrize("argv,msg", [
    (["roofline", "examples:softmax", "--device", "h200"], "give the recorded latency"),
    (["roofline", "examples:softmax", "--device", "h200", "--latency-ms", "0.05"], "one --latency-ms for 2"),
    (["roofline", "examples:softmax", "--device", "h200", "--latency-ms", "x=1"], "no configuration 'x'"),
    (["roofline", "examples:softmax", "--device", "h200", "--config", "32768x1024-f16", "--latency-ms", "-1"],
     "must be positive"),
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
    assert rc == 0 and d["ceilings"] is None
    assert d["device"]["peak_dram_bw"]["value"] == pytest.approx(4.8146e12, rel=1e-4)
    assert d["device"]["peak_flops"]["bf16:tensor"]["source"].startswith("4096 bf16 tensor FLOP/clk/SM")


def test_peaks_offline_table(capsys):
    assert main(["peaks", "--device", "b200"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA B200" in out and "TB/s" in out and "unverified" in out


def test_peaks_without_gpu(capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["peaks"]) == 2
    assert "offline mode" in capsys.readouterr().err
