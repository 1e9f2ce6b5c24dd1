"""ONNX Runtime's own INT8 forms of the FP32 ONNX, the int8 embedding tables every ONNX INT8 form stores, and
what an ONNX file stores (weight stats).

INT8 forms built from the FP32 ONNX (int8 weight initializers with per-channel scales in both):

* ``quantize_int8_dynamic``: ``quantize_dynamic`` per-channel (DynamicQuantizeMatMul / MatMulInteger: activations quantized on
  the fly, one scale per batch), then the word-embedding table stored int8 (Gather on int8 + per-row scale).
  Shipped only with ``quantization.batch_independent_int8: false``; the default form is ``int8``'s
  (``pipeline.backends.onnxruntime.int8``: fixed activation scales chosen by an accuracy-aware search).
* ``quantize_int8_qdq``: static QuantizeLinear/DequantizeLinear per-channel calibrated on training
  sentences: the explicit-quantization form TensorRT accepts.  Slower than FP32 on ORT CPU.
* ``quantize_anchor``: ORT's one-liner ``quantize_dynamic(per_channel=True)``, what validate and ``make bench``
  measure every shipped form against.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from pipeline.backends.onnxruntime.convert import load_onnx, optimize_transformer

# Float Gather tables with at least this many rows (word and position embeddings; not the 2-row token-type one).
MIN_EMBEDDING_ROWS = 64


class _NoPreprocessingHint(logging.Filter):
    """onnxruntime.quantization warns on the root logger, once per call, to run its shape-inference
    pre-processing; paddle2onnx graphs are already cleaned here, and the search makes dozens of calls."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


logging.getLogger().addFilter(_NoPreprocessingHint())


def _quant_extra_options() -> dict:
    import onnx

    # paddle2onnx leaves some intermediate tensors without type info; they are all float.
    return {"DefaultTensorType": onnx.TensorProto.FLOAT}


def quantize_anchor(fp32_path: Path, out_path: Path, *, reduce_range: bool = False) -> Path:
    """The anchor: ORT's one-liner ``quantize_dynamic(per_channel=True)`` of the FP32 ONNX, what any user gets
    without this project (per-batch activation scales).  validate gates the shipped model's speed against it
    (``gates.min_anchor_ratio``) and ``make bench`` reports every form against it."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    quantize_dynamic(str(fp32_path), str(out_path), weight_type=QuantType.QInt8, per_channel=True,
                     reduce_range=reduce_range, extra_options=_quant_extra_options())
    return Path(out_path)


def quantize_int8_dynamic(fp32_path: Path, out_path: Path, *, optimize: bool = False, embeddings: bool = True) -> Path:
    """The fast CPU INT8: per-channel dynamic quantization of every weight MatMul, int8 word embeddings.

    ``optimize`` runs ``optimize_transformer`` first.  Off by default: measured on a TNEWS-shaped
    ERNIE (4x312) at batch 32 it made the int8 model ~12% slower, because BiasGelu takes the bias
    Add that ORT's own session-time fusion would fold into MatMulIntegerToFloat, and ORT already
    fuses LayerNorm/SkipLayerNorm/Gelu itself when the session is created.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out_path = Path(out_path)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(fp32_path)
        if optimize:
            src = Path(tmp) / "optimized.onnx"
            optimize_transformer(fp32_path, src)
        quant = Path(tmp) / "quant.onnx"
        quantize_dynamic(str(src), str(quant), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"], extra_options=_quant_extra_options())
        model = onnx.load(str(quant))
    if embeddings:
        quantize_embedding_tables(model)
    onnx.save(model, str(out_path))
    return out_path


@dataclass(frozen=True)
class DynamicRecipe:
    """``quantization.batch_independent_int8: false``: ``quantize_dynamic``'s per-batch scales, nothing searched."""

    name: str = "dynamic-per-batch"

    def as_dict(self) -> dict:
        return {"name": self.name, "batch_independent": False}


@dataclass(frozen=True)
class DynamicForm:
    """The per-batch INT8 form as a compress candidate sees a recipe search's result (``chosen.recipe``,
    ``chosen.drop_points``, ``within_budget``): no held-out score, compress scores it on dev like every candidate."""

    path: Path
    recipe: DynamicRecipe = DynamicRecipe()
    drop_points: float | None = None
    within_budget: bool | None = None

    @property
    def chosen(self) -> "DynamicForm":
        return self

    def as_dict(self) -> dict:
        """As a shipped form's search record (``int8_search.json``): the recipe, nothing searched."""
        return {"recipe": self.recipe.name, "batch_independent": False}


def dynamic_int8(fp32_path: Path, out_path: Path, qcfg) -> DynamicForm:
    """The per-batch form as compress measures it and export ships it (one call, the same settings, so the shipped
    file is the measured one)."""
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    return DynamicForm(quantize_int8_dynamic(fp32_path, out_path, optimize=qcfg.ort_transformer_optimize,
                                             embeddings=qcfg.int8_embeddings))


class _FeedReader:
    """``CalibrationDataReader`` over pre-encoded batches."""

    def __init__(self, feeds: Sequence[dict[str, np.ndarray]]):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):  # pragma: no cover - not used by MinMax
        pass


def quantize_int8_qdq(fp32_path: Path, out_path: Path, calibration: Sequence[dict[str, np.ndarray]], *,
                      embeddings: bool = True, exclude: Sequence[str] = (), ranges: Mapping | None = None) -> Path:
    """Static per-channel QDQ (QuantizeLinear/DequantizeLinear on every MatMul's inputs), MinMax calibration.

    The explicit-quantization form TensorRT builds int8 engines from.  On ORT CPU it is slower than
    FP32 (each activation is quantized and dequantized around float MatMuls unless ORT fuses them).
    ``ranges`` (``int8.stats.activation_ranges``, real tokens only) replace the scales ORT's
    calibrator measured for those tensors: it counts padding positions as well (see ``symmetric_scales``).
    """
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if not calibration:
        from pipeline.errors import DataError

        raise DataError("QDQ INT8: no calibration batch (quantization.calibration_sentences is 0 or the training split is empty)")
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory() as tmp:
        quant = Path(tmp) / "qdq.onnx"
        quantize_static(str(fp32_path), str(quant), _FeedReader(calibration), quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=["MatMul"], nodes_to_exclude=list(exclude), per_channel=True,
                        activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                        extra_options={**_quant_extra_options(), "ActivationSymmetric": True, "WeightSymmetric": True,
                                       # Q/DQ at MatMul inputs only, as QDQBERT places them: quantize_static also
                                       # quantizes every MatMul's output by default, and the FFN output's outlier
                                       # channels (+-200 on the e5 encoder) then get one per-tensor step of 1.6
                                       # for all channels: CLUENER entity F1 -32.9 points; inputs only -0.38.
                                       "OpTypesToExcludeOutputQuantization": ["MatMul"]})
        model = onnx.load(str(quant))
    if ranges:
        symmetric_scales(model, ranges)
    _fold_weight_qdq(model)
    if embeddings:
        quantize_embedding_tables(model)
    onnx.save(model, str(out_path))
    return out_path


def symmetric_scales(model, ranges: Mapping) -> int:
    """Set each activation ``QuantizeLinear`` whose input has a measured range to the symmetric int8 scale
    ``absmax / 127`` over real tokens; returns how many were set.

    ORT's MinMax calibrator takes every position of the padded calibration batches, and the hidden states
    at padding positions (which no real token attends to) reach values real tokens never do: CMRC2018's
    held-out F1 lost 1.06 points with its scales and 0.02 with real-token scales (900 windows, e5 encoder).
    Q and DQ of one tensor share the scale initializer, so both change together.
    """
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    count = 0
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in inits or node.input[0] not in ranges:
            continue
        absmax = float(np.max(ranges[node.input[0]].absmax))
        scale = inits[node.input[1]]
        scale.CopyFrom(numpy_helper.from_array(np.array(max(absmax, 1e-8) / 127.0, np.float32), scale.name))
        count += 1
    return count


def _fold_weight_qdq(model) -> None:
    """Store QDQ weights as int8: ``float W -> QuantizeLinear -> DequantizeLinear`` becomes ``int8 W -> DequantizeLinear``.

    quantize_static already does this for most weights (QuantizeLinear folded into an int8
    initializer); this catches any float weight left behind a QuantizeLinear.
    """
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    remove = []
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] not in inits:
            continue
        w = numpy_helper.to_array(inits[node.input[0]])
        scale = numpy_helper.to_array(inits[node.input[1]])
        zp = numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.int8)
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        shape = [1] * w.ndim
        if scale.ndim:
            shape[axis] = -1
        q = np.clip(np.round(w / scale.reshape(shape)) + zp.reshape(shape).astype(np.int32), -128, 127).astype(zp.dtype)
        model.graph.initializer.append(numpy_helper.from_array(q, node.output[0]))
        remove.append(node)
    for node in remove:
        model.graph.node.remove(node)
    used = {i for n in model.graph.node for i in n.input}
    keep = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)


def quantize_embedding_tables(model) -> list[str]:
    """Store float Gather tables (word and position embeddings) as int8 with a per-row scale.

    ``Gather(table_f32, ids)`` becomes ``Gather(table_i8, ids) -> Cast -> Mul(Gather(scale, ids))``:
    only the gathered rows are dequantized, so it costs nothing at run time, and the table (the
    largest tensor of a small ERNIE) shrinks 4x.  Per-row symmetric scales keep rare-token rows exact
    enough.  Returns the names of the tables it quantized.
    """
    from onnx import TensorProto, helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    done = []
    new_nodes = []
    for node in list(model.graph.node):
        if node.op_type != "Gather" or node.input[0] not in inits:
            continue
        init = inits[node.input[0]]
        if init.data_type != TensorProto.FLOAT or len(init.dims) != 2 or init.dims[0] < MIN_EMBEDDING_ROWS:
            continue
        if any(a.name == "axis" and a.i != 0 for a in node.attribute):
            continue
        table = numpy_helper.to_array(init)
        scale = np.abs(table).max(axis=1, keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        q = np.clip(np.round(table / scale), -127, 127).astype(np.int8)
        base = init.name
        q_name, s_name = f"{base}_int8", f"{base}_row_scale"
        model.graph.initializer.remove(init)
        model.graph.initializer.extend([numpy_helper.from_array(q, q_name),
                                        numpy_helper.from_array(scale.astype(np.float32), s_name)])
        ids, out = node.input[1], node.output[0]
        rows, rows_f, row_scale = f"{out}_i8rows", f"{out}_f32rows", f"{out}_rowscale"
        idx = list(model.graph.node).index(node)
        model.graph.node.remove(node)
        replacement = [
            helper.make_node("Gather", [q_name, ids], [rows], name=f"{base}_gather_int8", axis=0),
            helper.make_node("Cast", [rows], [rows_f], name=f"{base}_cast", to=TensorProto.FLOAT),
            helper.make_node("Gather", [s_name, ids], [row_scale], name=f"{base}_gather_scale", axis=0),
            helper.make_node("Mul", [rows_f, row_scale], [out], name=f"{base}_dequant"),
        ]
        for offset, n in enumerate(replacement):
            model.graph.node.insert(idx + offset, n)
        new_nodes += replacement
        done.append(base)
    return done


@dataclass(frozen=True)
class WeightStats:
    """What an ONNX file stores: how many weight bytes are int8 vs float."""

    file_bytes: int
    int8_initializers: int
    int8_bytes: int
    float_bytes: int
    ops: dict[str, int]

    def as_dict(self) -> dict:
        return {"file_bytes": self.file_bytes, "int8_initializers": self.int8_initializers,
                "int8_bytes": self.int8_bytes, "float_bytes": self.float_bytes, "ops": self.ops}


def weight_stats(path: Path) -> WeightStats:
    import collections

    from onnx import TensorProto, numpy_helper

    model = load_onnx(path)
    n8 = b8 = bf = 0
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        if init.data_type in (TensorProto.INT8, TensorProto.UINT8):
            if arr.size > 1:
                n8 += 1
                b8 += arr.nbytes
        elif init.data_type == TensorProto.FLOAT:
            bf += arr.nbytes
    ops = collections.Counter(n.op_type for n in model.graph.node)
    return WeightStats(Path(path).stat().st_size, n8, b8, bf, dict(sorted(ops.items())))
