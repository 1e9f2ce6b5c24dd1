"""OpenVINO: Intel's CPU inference engine, a runtime beside ONNX Runtime and Paddle Inference.

One folder, one module per concern:

    convert.py    ONNX -> OpenVINO model (read at load; IR .xml/.bin written for quantized forms)
    quantize.py   NNCF post-training INT8 (fixed activation scales) and its held-out recipe search
    session.py    CPU sessions, with the properties a bundle records and serves with

Why a second CPU engine: ONNX Runtime's int8 path (ours and its ``quantize_dynamic`` one-liner alike) runs
the same MLAS GEMMs, so unpruned INT8 only ties the one-liner.  OpenVINO fuses the quantized graph into its
own int8 kernels (oneDNN brgemm, VNNI where the CPU has it).  Which engine is faster depends on the CPU:
compress and validate measure both on the machine at hand and ship the faster (``make bench`` shows both).
"""

from __future__ import annotations

REQUIREMENT = "openvino==2026.4.1 nncf==3.4.0"  # the pins requirements.lock carries


def missing() -> str | None:
    """None when OpenVINO can run here; otherwise why not (one line)."""
    try:
        import openvino  # noqa: F401
    except ImportError as exc:
        return f"OpenVINO is not installed ({exc}); pip install {REQUIREMENT}"
    return None
