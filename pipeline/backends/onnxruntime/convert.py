"""Paddle static -> ONNX for ONNX Runtime (and OpenVINO, which reads the same file), and the ONNX model contract.

``export_onnx`` turns a Paddle inference program (``pipeline.backends.forms``) into the clean FP32 ONNX every
INT8 form is built from; ``load_onnx``/``check_onnx`` read any ONNX file with a one-line error.

Why the conversion does more than call paddle2onnx (1.3.1):

* paddle2onnx writes every weight as a ``Constant`` node, not an initializer, so
  ``onnxruntime.quantization`` sees no weights and quantizes nothing.  They are moved to initializers.
* the word embedding's ``padding_idx`` becomes ``Mul(table, row_mask)`` computed on every run (a full
  table multiply, and the file holds the table twice).  ORT's basic constant folding removes it.
* its output is named ``save_infer_model/scale_0.tmp_0`` and each input has its own symbolic dims;
  the output is renamed ``logits`` and the dims ``batch``/``seq`` so every consumer sees one contract.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pipeline.errors import ModelError

INPUT_NAMES = ("input_ids", "token_type_ids")
OUTPUT_NAME = "logits"
DEFAULT_OPSET = 13


# ----------------------------------------------------------------------------------------------
# loading and checking


def load_onnx(path: Path):
    """``onnx.load`` with a one-line ModelError for missing, truncated or corrupt files."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"ONNX model not found: {path}")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf DecodeError, or a truncated external-data read
        raise ModelError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
    if not model.graph.node:
        raise ModelError(f"{path}: ONNX model has an empty graph (corrupt or truncated file?)")
    return model


def check_onnx(path: Path):
    """Load ``path`` and check it is a valid ONNX classifier with inputs ``input_ids``/``token_type_ids``."""
    import onnx

    model = load_onnx(path)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise ModelError(f"{path}: invalid ONNX model ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
    check_io_names(model, path)
    return model


def check_io_names(model, path: Path | str) -> None:
    initializers = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    if sorted(names) != sorted(INPUT_NAMES):
        raise ModelError(f"{path}: unexpected ONNX input names {names}, expected {list(INPUT_NAMES)}")
    outputs = [o.name for o in model.graph.output]
    if outputs != [OUTPUT_NAME]:
        raise ModelError(f"{path}: unexpected ONNX output names {outputs}, expected [{OUTPUT_NAME!r}]")


# ----------------------------------------------------------------------------------------------
# Paddle static -> ONNX


def export_onnx(static_dir: Path, out_path: Path, opset: int = DEFAULT_OPSET) -> Path:
    """Convert a Paddle inference model dir (``model.pdmodel``/``model.pdiparams``) to a clean FP32 ONNX."""
    import onnx
    import paddle2onnx

    from pipeline.backends.forms import MODEL_FILE, PARAMS_FILE, check_static_dir

    if opset < 13:
        from pipeline.errors import ConfigError

        raise ConfigError(f"export.opset must be >= 13 (per-channel QuantizeLinear needs it), got {opset}")
    static_dir = check_static_dir(static_dir)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        raw = paddle2onnx.export(str(static_dir / MODEL_FILE), str(static_dir / PARAMS_FILE), None,
                                 opset_version=opset, auto_upgrade_opset=False, verbose=False)
    except Exception as exc:
        raise ModelError(f"{static_dir}: paddle2onnx cannot convert it ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
    if not raw:
        raise ModelError(f"{static_dir}: paddle2onnx produced nothing (corrupt {MODEL_FILE} or {PARAMS_FILE}?)")
    model = onnx.load_from_string(raw)
    _constants_to_initializers(model)
    _int64_inputs(model)
    _rename_output(model, OUTPUT_NAME)
    _name_dynamic_dims(model)
    check_io_names(model, static_dir)
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "staged.onnx"
        onnx.save(model, str(staged))
        _ort_fold_constants(staged, out_path)
    folded = onnx.load(str(out_path))
    _name_dynamic_dims(folded)  # ORT rewrites value infos; restate the contract
    folded.producer_name = "ernie-bundle (paddle2onnx + ORT constant folding)"
    onnx.save(folded, str(out_path))
    check_onnx(out_path)
    return out_path


def _int64_inputs(model) -> None:
    """The contract's inputs are int64 (every session and served model feeds int64).  A program saved with int32 inputs
    (``compress.input_dtype: int32``, a user's static model) gets int64 graph inputs cast to int32 inside the graph."""
    from onnx import TensorProto, helper

    for inp in model.graph.input:
        tensor = inp.type.tensor_type
        if inp.name in INPUT_NAMES and tensor.elem_type == TensorProto.INT32:
            inner = f"{inp.name}_int32"
            for node in model.graph.node:
                node.input[:] = [inner if i == inp.name else i for i in node.input]
            model.graph.node.insert(0, helper.make_node("Cast", [inp.name], [inner], to=TensorProto.INT32,
                                                        name=f"{inp.name}_to_int32"))
            tensor.elem_type = TensorProto.INT64


def _constants_to_initializers(model) -> None:
    from onnx import numpy_helper

    keep = []
    for node in model.graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            model.graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(node.attribute[0].t), node.output[0]))
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)


def _rename_output(model, new: str) -> None:
    (out,) = model.graph.output
    old = out.name
    if old == new:
        return
    for node in model.graph.node:
        for i, name in enumerate(node.output):
            if name == old:
                node.output[i] = new
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
    out.name = new


def _name_dynamic_dims(model) -> None:
    for value in model.graph.input:
        if value.name in INPUT_NAMES:
            dims = value.type.tensor_type.shape.dim
            for dim, label in zip(dims, ("batch", "seq")):
                dim.Clear()
                dim.dim_param = label
    for value in model.graph.output:
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].Clear()
            dims[0].dim_param = "batch"


def _ort_fold_constants(src: Path, dst: Path) -> None:
    """ORT's basic level (standard ONNX ops only): constant folding and redundant-node removal."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(dst)
    so.intra_op_num_threads = 1
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])


# ----------------------------------------------------------------------------------------------
# graph optimization


def optimize_transformer(fp32_path: Path, out_path: Path) -> dict[str, int]:
    """ORT's BERT fusions on the FP32 graph; returns the fused-op counts.

    On paddle2onnx's graph LayerNorm+residual (SkipLayerNormalization) and bias+GELU (BiasGelu)
    fuse (EmbedLayerNormalization is left off: it needs a float embedding table); the attention block does not match ORT's patterns and stays as MatMul/Softmax.  Symbolic
    shape inference is off: it needs sympy, which this environment does not ship, and the fusions
    above do not need it.
    """
    import logging

    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    options = FusionOptions("bert")
    options.enable_shape_inference = False
    # EmbedLayerNormalization needs float tables; keeping the word-embedding Gather lets it be int8.
    options.enable_embed_layer_norm = False
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    opt = optimizer.optimize_model(str(fp32_path), model_type="bert", num_heads=0, hidden_size=0, opt_level=0,
                                   optimization_options=options)
    opt.save_model_to_file(str(out_path))
    return {k: int(v) for k, v in opt.get_fused_operator_statistics().items() if v}
