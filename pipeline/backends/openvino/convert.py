"""ONNX -> OpenVINO model, and the IR files a quantized model is kept in.

OpenVINO reads paddle2onnx's ONNX directly (the FP32 form needs no file of its own: reading and compiling
the TNEWS FP32 ONNX takes ~0.35 s).  NNCF's INT8 model exists only in memory, so it is written as IR
(``model.xml`` + ``model.bin``; int8 weights: 19.4 MB for the 6-layer TNEWS model against 18.5 MB for ORT's
INT8 ONNX).  Weights are written as they are (``compress_to_fp16=False``): the default would round every
float constant NNCF left (biases, LayerNorm, scales) to FP16, changing the model that was scored.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from pipeline.errors import ModelError

IR_SUFFIX = ".xml"
WEIGHTS_SUFFIX = ".bin"


def core():
    """One ``openvino.Core`` per process (it caches plugins; creating one costs ~0.1 s)."""
    global _CORE
    if _CORE is None:
        import openvino as ov

        _CORE = ov.Core()
    return _CORE


_CORE = None


def read_model(path: Path):
    """An ONNX file or an IR ``.xml`` (its ``.bin`` beside it) as an OpenVINO model; one line when unreadable."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model not found: {path}")
    if path.suffix == IR_SUFFIX and not path.with_suffix(WEIGHTS_SUFFIX).is_file():
        raise ModelError(f"{path}: its weights file {path.with_suffix(WEIGHTS_SUFFIX).name} is missing")
    try:
        return core().read_model(str(path))
    except Exception as exc:  # OpenVINO raises RuntimeError with a multi-line frontend message
        raise ModelError(f"{path}: OpenVINO cannot read it ({type(exc).__name__}: {reason(exc)})") from None


def reason(exc: BaseException) -> str:
    """OpenVINO's exception text without its "Exception from <source file>" lines: the reason, on one line."""
    lines = [l.strip() for l in str(exc).splitlines() if l.strip() and not l.strip().startswith("Exception from ")]
    return lines[-1] if lines else type(exc).__name__


def save_ir(model, xml: Path) -> Path:
    """Write ``model`` as ``xml`` + its ``.bin``, atomically: the ``.bin`` is moved first and the ``.xml`` last,
    so an ``.xml`` that exists always has its complete weights beside it."""
    import openvino as ov

    xml = Path(xml)
    xml.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=xml.parent, prefix=".ir-") as tmp:
        staged = Path(tmp) / "model.xml"
        ov.save_model(model, str(staged), compress_to_fp16=False)
        shutil.move(str(staged.with_suffix(WEIGHTS_SUFFIX)), str(xml.with_suffix(WEIGHTS_SUFFIX)))
        shutil.move(str(staged), str(xml))
    return xml


def move_ir(src: Path, dst: Path) -> Path:
    """Rename an IR pair (``.bin`` first, then ``.xml``)."""
    src, dst = Path(src), Path(dst)
    src.with_suffix(WEIGHTS_SUFFIX).replace(dst.with_suffix(WEIGHTS_SUFFIX))
    src.replace(dst)
    return dst


def copy_ir(src: Path, dst: Path) -> Path:
    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src.with_suffix(WEIGHTS_SUFFIX), dst.with_suffix(WEIGHTS_SUFFIX))
    shutil.copyfile(src, dst)
    return dst
