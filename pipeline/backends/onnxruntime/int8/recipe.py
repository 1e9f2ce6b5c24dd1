"""One named INT8 recipe (``pipeline.quantization.recipe.Int8Recipe``) -> one batch-independent INT8 ONNX file for
ONNX Runtime's CPU kernels.

Every form built here is **batch-independent**: activations are quantized with fixed scales calibrated on
training sentences (``QuantizeLinear``), never with ORT's ``DynamicQuantizeLinear``, whose scale is taken
over the whole batch, so that a text's answer would change with the texts that share its batch (44 of
10,000 TNEWS predictions did).  Weights are int8 per output channel; each integer MatMul, its rescale and
its bias are written as one ``MatMulIntegerToFloat`` (``fusion``: ORT does not fuse them
itself once the scales are constants), and the attention-score GEMM reads K untransposed (``fold_key_transpose``).

A recipe varies three things, all searched by ``pipeline.quantization.search`` (``search.search_recipe``):

* ``smooth_alpha``: SmoothQuant migration strength (``None``: off; ``smoothing``);
* ``reduce_range``: 7-bit weights.  Without AVX512-VNNI, ORT's u8s8 kernel sums pairs of u8*s8 products in
  int16 (``vpmaddubsw``), which saturates for large activations; 7-bit weights cannot overflow it;
* ``fp32_matmuls``: MatMul node names kept in float (mixed precision for the most sensitive layers).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from pipeline.backends.onnxruntime.int8.stats import ChannelRange
from pipeline.quantization.recipe import Int8Recipe


# Bumped whenever ``build`` writes a different graph for the same recipe: cached candidates of an older
# form are rebuilt, never reused (2: fused MatMulIntegerToFloat; 3: K^T read by the score GEMM, not transposed).
# This form's and the QDQ form's builder version (``search.fixed_scale_form``'s record): part of their cache keys.
FORM_VERSION = 3


def tensor_scale(r: ChannelRange) -> tuple[float, int]:
    """Asymmetric uint8 (scale, zero point) covering the whole tensor's range, zero included."""
    lo = min(float(r.minimum.min()), 0.0)
    hi = max(float(r.maximum.max()), 0.0)
    scale = max(hi - lo, 1e-8) / 255.0
    zp = int(np.clip(round(-lo / scale), 0, 255))
    return scale, zp


def static_activations(model, ranges: dict[str, ChannelRange]) -> int:
    """Replace every ``DynamicQuantizeLinear`` whose input has a calibrated range by a fixed ``QuantizeLinear``."""
    from onnx import helper, numpy_helper

    nodes, extra, count = [], [], 0
    for node in model.graph.node:
        if node.op_type != "DynamicQuantizeLinear" or node.input[0] not in ranges:
            nodes.append(node)
            continue
        x = node.input[0]
        q, scale_out, zp_out = node.output
        scale, zp = tensor_scale(ranges[x])
        s_name, z_name = f"{x}_static_scale", f"{x}_static_zero_point"
        extra += [numpy_helper.from_array(np.array(scale, np.float32), s_name),
                  numpy_helper.from_array(np.array(zp, np.uint8), z_name)]
        nodes += [helper.make_node("QuantizeLinear", [x, s_name, z_name], [q], name=f"{x}_QuantizeLinear_static"),
                  helper.make_node("Identity", [s_name], [scale_out]),
                  helper.make_node("Identity", [z_name], [zp_out])]
        count += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(extra)
    return count


def dynamic_left(model) -> list[str]:
    return [n.input[0] for n in model.graph.node if n.op_type == "DynamicQuantizeLinear"]


def build(fp32_path: Path, out_path: Path, ranges: dict[str, ChannelRange], recipe: Int8Recipe, *,
          embeddings: bool = True) -> Path:
    """Write ``recipe`` applied to ``fp32_path`` to ``out_path``.  ``ranges`` come from ``stats.activation_ranges``."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from pipeline.backends.onnxruntime.int8.fusion import fold_key_transpose, fuse_integer_matmuls
    from pipeline.backends.onnxruntime.int8.smoothing import smooth
    from pipeline.backends.onnxruntime.quantize import _quant_extra_options, quantize_embedding_tables
    from pipeline.errors import ModelError

    ranges = dict(ranges)  # smoothing adds the smoothed tensors' ranges
    model = onnx.load(str(fp32_path))
    if recipe.smooth_alpha:
        smooth(model, ranges, recipe.smooth_alpha, skip=set(recipe.fp32_matmuls))
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory() as tmp:
        src, quant = Path(tmp) / "src.onnx", Path(tmp) / "quant.onnx"
        onnx.save(model, str(src))
        quantize_dynamic(str(src), str(quant), weight_type=QuantType.QInt8, per_channel=True,
                         reduce_range=recipe.reduce_range, op_types_to_quantize=["MatMul"],
                         nodes_to_exclude=list(recipe.fp32_matmuls), extra_options=_quant_extra_options())
        model = onnx.load(str(quant))
    static_activations(model, ranges)
    left = dynamic_left(model)
    if left:  # a per-batch scale would make answers depend on batch mates: never ship that silently
        raise ModelError(f"INT8 recipe {recipe.name}: no calibrated range for {', '.join(left[:3])}")
    fuse_integer_matmuls(model)
    fold_key_transpose(model)
    if embeddings:
        quantize_embedding_tables(model)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return out_path


def build_qdq(fp32_path: Path, out_path: Path, ranges: dict[str, ChannelRange], recipe: Int8Recipe,
              calibration, *, embeddings: bool = True) -> Path:
    """The explicit-quantization (QDQ, TensorRT) form of ``recipe``: the same SmoothQuant migration and the
    same MatMuls kept in FP32 as the ONNX Runtime form, so the accuracy the search bought carries over;
    symmetric int8 activations (TensorRT's convention), scaled from ``ranges`` (real tokens) where measured and
    from ORT's calibration on ``calibration`` elsewhere (the attention MatMuls' inputs).  Leaving the attention
    MatMuls (two activations) in float as well was measured no better on TNEWS (-5.74 vs -5.63 points)."""
    import onnx

    from pipeline.backends.onnxruntime.int8.smoothing import smooth
    from pipeline.backends.onnxruntime.quantize import quantize_int8_qdq

    model = onnx.load(str(fp32_path))
    ranges = dict(ranges)  # smoothing adds the smoothed tensors' ranges
    if recipe.smooth_alpha:
        smooth(model, ranges, recipe.smooth_alpha, skip=set(recipe.fp32_matmuls))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "smoothed.onnx"
        onnx.save(model, str(src))
        return quantize_int8_qdq(src, out_path, calibration, embeddings=embeddings, exclude=recipe.fp32_matmuls,
                                 ranges=ranges)
