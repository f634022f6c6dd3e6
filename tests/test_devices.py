"""Peak FLOP/s table, CANN info.json and peak resolution (msdiag.metrics.devices)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msdiag.metrics.devices import PEAKS, device_key, peak_from_info_json, resolve_peak


def info_files(corpus: Path) -> list[Path]:
    return sorted(p for p in (corpus / "cann-msprof").glob("PROF_*/device_*/info.json.*") if p.suffix != ".done")


def test_peak_from_real_info_json(corpus: Path) -> None:
    files = info_files(corpus)
    assert len(files) == 2
    for f in files:
        # MindSpore AlexNet run, 2023 (Ascend 910A): ai_core_num 32, aic_frequency "1000" (MHz):
        # 32 x 1000e6 x 16*16*16*2 = 32 x 1e9 x 8192 = 2.62144e14 FLOP/s = 262.144 TFLOP/s
        assert peak_from_info_json(f) == pytest.approx(262.144)


def test_info_json_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "info.json.0"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="info.json.0"):
        peak_from_info_json(bad)
    bad.write_text(json.dumps({"DeviceInfo": [{"ai_core_num": 24}]}))
    with pytest.raises(ValueError, match="aic_frequency"):
        peak_from_info_json(bad)
    bad.write_text(json.dumps({"devices": "0"}))
    with pytest.raises(ValueError, match="DeviceInfo"):
        peak_from_info_json(bad)
    # 910B2-like: 24 cores at 1800 MHz: 24 x 1.8e9 x 8192 = 353.8944 TFLOP/s
    bad.write_text(json.dumps({"DeviceInfo": [{"ai_core_num": 24, "aic_frequency": "1800"}]}))
    assert peak_from_info_json(bad) == pytest.approx(353.8944)


def test_table_has_every_device_with_sources() -> None:
    expected = {
        "910A": 256.0,
        "910B2": 354.0,
        "910B4": 280.0,
        "A100": 312.0,
        "H100 SXM": 989.0,
        "H100 PCIe": 756.0,
        "H100 NVL": 835.0,
        "H200": 989.0,
    }
    for name, tflops in expected.items():
        assert PEAKS[name].tflops == tflops
    # derived: 910B1 24 cores x 1.85 GHz (its platform ini's cube_freq, issue 15) x 8192 = 363.7;
    # 910B3 20 x 1.8 x 8192 = 294.9; 910C per die 24 x 1.85 x 8192 = 363.7
    assert PEAKS["910B1"].tflops == pytest.approx(363.7)
    assert PEAKS["910B3"].tflops == pytest.approx(294.9)
    assert PEAKS["910C"].tflops == pytest.approx(363.7)
    assert all(p.source for p in PEAKS.values())


@pytest.mark.parametrize(
    "name, key",
    [
        ("910b2", "910B2"),
        ("Ascend910B2", "910B2"),
        ("ascend 910b2", "910B2"),
        ("h100-sxm", "H100 SXM"),
        ("H100_PCIE", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("a100", "A100"),
        ("h200", "H200"),
        ("910A", "910A"),
    ],
)
def test_device_names_are_case_and_spacing_insensitive(name: str, key: str) -> None:
    assert device_key(name) == key


def test_unknown_device_lists_known_names() -> None:
    with pytest.raises(ValueError) as e:
        device_key("H100")  # ambiguous: SXM, PCIe or NVL
    assert "H100 SXM" in str(e.value) and "910B2" in str(e.value)
    with pytest.raises(ValueError, match="unknown device"):
        resolve_peak(500.0, "tpu-v5", None)  # a typo is never silently ignored


def test_resolve_peak_precedence(corpus: Path) -> None:
    info = info_files(corpus)[0]
    assert resolve_peak(300.0, "910B2", info) == (300.0, "given by the user")
    # --device overrides what the capture records (issue 15: the device is inferred, the flag overrides)
    peak, source = resolve_peak(None, "910B2", info)
    assert peak == 354.0 and source.startswith("910B2")
    peak, source = resolve_peak(None, None, info)
    assert peak == pytest.approx(262.144) and str(info) in source
    peak, source = resolve_peak(None, "ascend910b2", None)
    assert peak == 354.0 and source.startswith("910B2")
    peak, reason = resolve_peak(None, None, None)
    assert peak is None and "no peak" in reason
    with pytest.raises(ValueError):
        resolve_peak(0.0, None, None)
