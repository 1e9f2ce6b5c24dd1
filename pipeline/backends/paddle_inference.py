"""Paddle Inference backend: static export of a dygraph ERNIE classifier and CPU sessions (oneDNN).

Same shape as ``pipeline.backends.onnxruntime``: ``export_static``, ``session`` and a ``Session`` with
``name``, ``input_names`` and ``run(input_ids, token_type_ids) -> float32 logits``.

``precision="int8"`` turns on oneDNN's int8 pipeline (``enable_mkldnn_int8``): its
``quant_dequant_mkldnn_pass`` reads the scales that PTQ/QAT left in a quantized program, removes the
fake-quant ops and the ``cpu_quantize_*`` passes then run matmul/fc in int8.  On a program without
quantization scales the int8 switch changes nothing, so an FP32 model is always run with ``fp32``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

from pipeline.errors import ModelError

MODEL_FILE = "model.pdmodel"
PARAMS_FILE = "model.pdiparams"
INPUT_NAMES = ("input_ids", "token_type_ids")
OUTPUT_NAME = "logits"
PRECISIONS = ("fp32", "int8")
# The ops oneDNN may run in int8.  Only ``fc`` (every Linear: Q/K/V/output projections, FFN, pooler,
# classifier), which is where the time goes.  Letting the int8 passes quantize everything that has a
# scale (the default, an empty set) also puts the attention matmuls (QK^T with the -1e4 mask added,
# softmax x V), residual adds and reshapes/transposes in int8: on a (partly trained) TNEWS model that
# took the same PTQ program from 98.9% prediction agreement with FP32 to 31% (dev accuracy 35.2 -> 18.1
# on 1000 examples); fc + matmul alone collapses the same way, fc + elementwise_add does not.
# Pinned in tests/test_paddle_inference.py.
ONEDNN_INT8_OPS = frozenset({"fc"})
INPUT_DTYPES = ("int64", "int32")


def check_static_dir(model_dir: Path) -> Path:
    """Fail fast, naming the missing file, when ``model_dir`` is not a Paddle inference model dir."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelError(f"static model dir not found: {model_dir}")
    for name in (MODEL_FILE, PARAMS_FILE):
        if not (model_dir / name).is_file():
            raise ModelError(f"static model dir {model_dir}: missing {name} (expected {MODEL_FILE} + {PARAMS_FILE})")
    return model_dir


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


class Session:
    """One Paddle Inference predictor on CPU."""

    def __init__(self, model_dir: Path, precision: str, threads: int | None, int8_ops=None):
        from paddle.inference import Config, create_predictor

        if precision not in PRECISIONS:
            from pipeline.errors import ConfigError

            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.model_dir = check_static_dir(model_dir)
        self.precision = precision
        self.name = f"paddle-cpu-{precision}"
        config = Config(str(self.model_dir / MODEL_FILE), str(self.model_dir / PARAMS_FILE))
        config.disable_gpu()
        config.enable_mkldnn()
        # Dynamic batch/sequence shapes: oneDNN caches primitives per shape; bound the cache.
        config.set_mkldnn_cache_capacity(32)
        if precision == "int8":
            # An empty set means "every op with a scale" to Paddle (kept reachable for benchmarks).
            config.enable_mkldnn_int8(set(ONEDNN_INT8_OPS if int8_ops is None else int8_ops))
        config.set_cpu_math_library_num_threads(threads or int(os.environ.get("OMP_NUM_THREADS", "1")))
        config.switch_ir_optim(True)
        config.disable_glog_info()
        with _captured_stderr():  # the int8 passes print ~60 lines of "quantized 0 xyz ops" per model
            self._predictor = create_predictor(config)
        self.input_names = list(self._predictor.get_input_names())
        missing = [n for n in INPUT_NAMES if n not in self.input_names]
        if missing:
            raise ModelError(f"static model {self.model_dir}: inputs {self.input_names}, expected {list(INPUT_NAMES)}")
        self._inputs = {n: self._predictor.get_input_handle(n) for n in self.input_names}
        self.input_dtype = program_input_dtype(self.model_dir)
        self._np_dtype = np.int32 if self.input_dtype == "int32" else np.int64
        self._output = self._predictor.get_output_handle(self._predictor.get_output_names()[0])

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        for name, value in (("input_ids", input_ids), ("token_type_ids", token_type_ids)):
            handle = self._inputs[name]
            arr = np.ascontiguousarray(value, dtype=self._np_dtype)
            handle.reshape(arr.shape)
            handle.copy_from_cpu(arr)
        self._predictor.run()
        return self._output.copy_to_cpu().astype(np.float32, copy=False)


@contextlib.contextmanager
def _captured_stderr():
    """Send fd 2 (C++ logging) to a temp file; replay it only if the block raises."""
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            tmp.seek(0)
            sys.stderr.write(tmp.read().decode("utf-8", "replace")[-4000:])
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def session(model_dir: Path, *, precision: str = "fp32", threads: int | None = None, int8_ops=None) -> Session:
    """``int8_ops``: op types oneDNN may run in int8 (default ``ONEDNN_INT8_OPS``); for experiments only."""
    return Session(Path(model_dir), precision, threads, int8_ops)
