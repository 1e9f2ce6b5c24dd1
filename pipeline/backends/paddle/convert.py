"""Dygraph ERNIE -> Paddle inference program (``model.pdmodel`` + ``model.pdiparams``, ``pipeline.backends.forms``),
the form Paddle sessions run, Paddle's quantizers rewrite and ONNX Runtime's ``convert.export_onnx`` reads.

Inputs ``input_ids`` and ``token_type_ids`` (int64, or int32 with ``input_dtype``), one output ``logits``: the
contract every engine keeps.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.backends.forms import MODEL_FILE, PARAMS_FILE, check_static_dir
from pipeline.errors import ModelError

INPUT_NAMES = ("input_ids", "token_type_ids")
OUTPUT_NAME = "logits"
INPUT_DTYPES = ("int64", "int32")


def program_input_dtype(model_dir: Path) -> str:
    """``"int64"`` or ``"int32"``: the dtype of ``input_ids`` in a saved program (read from the protobuf)."""
    from paddle.base.proto import framework_pb2

    desc = framework_pb2.ProgramDesc()
    desc.ParseFromString((Path(model_dir) / MODEL_FILE).read_bytes())
    for var in desc.blocks[0].vars:
        if var.name == "input_ids":
            return "int32" if var.type.lod_tensor.tensor.data_type == framework_pb2.VarType.INT32 else "int64"
    raise ModelError(f"static model {model_dir}: no input named input_ids")


def export_static(model, out_dir: Path, input_dtype: str = "int64") -> Path:
    """``paddle.jit.save`` a dygraph classifier to ``out_dir/model.pdmodel`` + ``model.pdiparams``.

    Inputs ``input_ids`` and ``token_type_ids`` with dynamic ``[-1, -1]`` shape; output: logits.
    """
    import paddle

    if input_dtype not in INPUT_DTYPES:
        from pipeline.errors import ConfigError

        raise ConfigError(f"input_dtype must be one of {', '.join(INPUT_DTYPES)}, got {input_dtype!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.eval()
    specs = [paddle.static.InputSpec(shape=[None, None], dtype=input_dtype, name=n) for n in INPUT_NAMES]

    class _Logits(paddle.nn.Layer):
        # Positional token_type_ids: ERNIE's forward takes it as a keyword after input_ids.
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, token_type_ids):
            if input_ids.dtype != paddle.int64:  # ERNIE compares ids with an int64 pad id inside
                input_ids, token_type_ids = input_ids.astype("int64"), token_type_ids.astype("int64")
            return self.inner(input_ids, token_type_ids=token_type_ids)

    paddle.jit.save(_Logits(model), str(out_dir / "model"), input_spec=specs)
    for extra in out_dir.glob("model.pdiparams.info"):
        extra.unlink()  # dygraph bookkeeping; inference does not read it
    rename_output(out_dir, OUTPUT_NAME)
    return out_dir


def rename_output(model_dir: Path, name: str = OUTPUT_NAME) -> None:
    """Name a saved program's single output (``paddle.jit.save`` calls it ``linear_N.tmp_M``)."""
    import paddle

    path = Path(model_dir) / MODEL_FILE
    was_dynamic = paddle.in_dynamic_mode()
    paddle.enable_static()  # Program objects can only be built in static mode
    try:
        program = paddle.static.Program.parse_from_string(path.read_bytes())
        block = program.global_block()
        fetched = [op.input("X")[0] for op in block.ops if op.type == "fetch"]
        if len(fetched) != 1:
            raise ModelError(f"{path}: expected one output, found {len(fetched)}")
        if fetched[0] != name:
            block._rename_var(fetched[0], name)
            path.write_bytes(program.desc.serialize_to_string())
    finally:
        if was_dynamic:
            paddle.disable_static()


def copy_static(src: Path, dst: Path) -> Path:
    """Copy a Paddle inference program (a missing file is one line naming it)."""
    check_static_dir(src)
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in (MODEL_FILE, PARAMS_FILE):
        shutil.copyfile(Path(src) / name, dst / name)
    return dst
