"""The model files one engine writes and another reads, defined once so that no engine folder imports another.

A Paddle inference program is a directory with ``model.pdmodel`` + ``model.pdiparams``: written by
``pipeline.backends.paddle.convert.export_static`` and Paddle's quantizers (``paddle.quantize``), run by Paddle
sessions, and read by ONNX Runtime's ``convert.export_onnx`` (the FP32 ONNX both CPU engines start from).
Which form the export keeps where, and which engine runs it, is the export contract (``pipeline.contract.FORMS``).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import ModelError

MODEL_FILE = "model.pdmodel"
PARAMS_FILE = "model.pdiparams"


def check_static_dir(model_dir: Path) -> Path:
    """Fail fast, naming the missing file, when ``model_dir`` is not a Paddle inference model dir."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelError(f"static model dir not found: {model_dir}")
    for name in (MODEL_FILE, PARAMS_FILE):
        if not (model_dir / name).is_file():
            raise ModelError(f"static model dir {model_dir}: missing {name} (expected {MODEL_FILE} + {PARAMS_FILE})")
    return model_dir
