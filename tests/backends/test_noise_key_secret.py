"""A ``noise_key: secret`` run, end to end on both backends: the record says which key and that
the run is not bit-reproducible, and the key itself is nowhere: not in the record, the log, the
checkpoint or any other file the run wrote (searched as decimal, hex and raw bytes)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytest.importorskip("opacus")

from compare import api  # noqa: E402

#: The "OS entropy" of the test: a distinctive 192-bit value (each framework takes its bits).
KEY = 0x5EC2E7_0DDBA11_C0FFEE_15_BADC0DE_FACADE_D15EA5E_BEEF_1234567


def _forms(value: int, bits: int) -> list[bytes]:
    """How a key could sit in a file: decimal and hex text, little- and big-endian bytes."""
    size = bits // 8
    return [str(value).encode(), f"{value:x}".encode(), value.to_bytes(size, "little"),
            value.to_bytes(size, "big")]


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_a_secret_run_keeps_its_key_nowhere(backend: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[int] = []

    def randbits(bits: int) -> int:
        drawn.append(bits)
        return KEY & ((1 << bits) - 1)

    monkeypatch.setattr("dpcore.noise_key.secrets.randbits", randbits)
    lines: list[str] = []
    config = {"data": {"name": "digits", "image_size": 16}, "model": {"name": "cnn4"},
              "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0,
                          "noise_key": "secret"},
              "train": {"steps": 2, "epochs": None, "batch_size": 64, "lr": 0.1}}
    result = api.train(config, backend, out=tmp_path / "out", faithfulness_subset=0,
                       log=lines.append)
    assert drawn, "the run drew no secret key"
    assert result.privacy["noise_key"] == "secret"
    assert result.privacy["bit_reproducible"] is False
    assert "not bit-reproducible" in lines[0]
    forms = [form for bits in set(drawn) for form in _forms(KEY & ((1 << bits) - 1), bits)]
    log = "\n".join(lines).encode()
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert any(p.name == "result.json" for p in files) and len(files) >= 2
    for blob, where in [(log, "the log"), *((p.read_bytes(), str(p)) for p in files)]:
        for form in forms:
            assert form not in blob, f"the secret key is in {where}"
