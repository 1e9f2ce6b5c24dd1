"""One named INT8 recipe, as every engine's search varies it, and the weight MatMuls a recipe may keep in FP32.

A recipe varies three things, all searched by ``pipeline.quantization.search``:

* ``smooth_alpha``: SmoothQuant migration strength (``None``: off);
* ``reduce_range``: 7-bit weights (ONNX Runtime only).  Without AVX512-VNNI, ORT's u8s8 kernel sums pairs of
  u8*s8 products in int16 (``vpmaddubsw``), which saturates for large activations; 7-bit weights cannot overflow it;
* ``fp32_matmuls``: MatMul node names kept in float (mixed precision for the most sensitive layers).

Each engine turns a recipe into a model: ONNX Runtime's ``pipeline.backends.onnxruntime.int8.recipe.build``
(and ``build_qdq``), OpenVINO's ``pipeline.backends.openvino.quantize.build``.  ``name`` and ``as_dict`` name the
cached candidates (``Search``): changing them rebuilds every cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Int8Recipe:
    smooth_alpha: float | None = None
    reduce_range: bool = False
    fp32_matmuls: tuple[str, ...] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        parts = ["static"]
        parts.append(f"sq{self.smooth_alpha:g}" if self.smooth_alpha else "nosq")
        if self.reduce_range:
            parts.append("rr")
        if self.fp32_matmuls:
            parts.append(f"fp32x{len(self.fp32_matmuls)}")
        return "-".join(parts)

    def as_dict(self) -> dict:
        return {"name": self.name, "smooth_alpha": self.smooth_alpha, "reduce_range": self.reduce_range,
                "fp32_matmuls": list(self.fp32_matmuls)}


def weight_matmuls(model) -> list:
    """MatMul (and untransposed Gemm) nodes whose second input is a 2-D float initializer: the Linear layers.

    ORT's basic optimizations turn the pooler and head (2-D MatMul + Add) into Gemm, and ``quantize_dynamic``
    quantizes those as well.  Both engines quantize the same FP32 ONNX, so these node names are what
    ``fp32_matmuls`` holds for either (NNCF's ``ignored_scope`` takes them as they are).
    """
    from onnx import TensorProto

    inits = {i.name: i for i in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or node.input[1] not in inits:
            continue
        if node.op_type == "Gemm" and any(a.name in ("transA", "transB") and a.i for a in node.attribute):
            continue
        w = inits[node.input[1]]
        if w.data_type == TensorProto.FLOAT and len(w.dims) == 2:
            out.append(node)
    return out
