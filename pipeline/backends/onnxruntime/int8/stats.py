"""Per-channel activation ranges of the inputs of every weight MatMul, measured by running the FP32 ONNX.

Static int8 activation scales (the batch-independent form) and SmoothQuant's migration factors are both
computed from these.  Only real tokens count: padding rows never reach a real token through attention,
so their values must not widen a scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline.quantization.recipe import weight_matmuls


@dataclass
class ChannelRange:
    """Range of one activation tensor over the calibration tokens: per channel (last axis)."""

    minimum: np.ndarray  # [K]
    maximum: np.ndarray  # [K]

    @property
    def absmax(self) -> np.ndarray:
        return np.maximum(np.abs(self.minimum), np.abs(self.maximum))

    def update(self, rows: np.ndarray) -> None:
        if rows.size:
            np.minimum(self.minimum, rows.min(axis=0), out=self.minimum)
            np.maximum(self.maximum, rows.max(axis=0), out=self.maximum)


def activation_ranges(fp32_path: Path, feeds: Sequence[dict[str, np.ndarray]], pad_id: int,
                      threads: int | None = None) -> dict[str, ChannelRange]:
    """{MatMul input tensor name: per-channel range} over the real tokens of ``feeds``."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(fp32_path))
    names = sorted({n.input[0] for n in weight_matmuls(model)})
    existing = {o.name for o in model.graph.output}
    for name in names:
        if name not in existing:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    so = ort.SessionOptions()
    # Basic level only: the tensors asked for must survive graph optimization by name.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ranges: dict[str, ChannelRange] = {}
    for feed in feeds:
        real = feed["input_ids"] != pad_id  # [B, T]
        outs = sess.run(names, feed)
        for name, value in zip(names, outs):
            # [B, T, C] over every token: the real ones; else every row (a first-token-only layer's [B, 1, C] too)
            rows = value[real] if value.ndim == 3 and value.shape[1] == real.shape[1] else value.reshape(-1, value.shape[-1])
            if name not in ranges:
                k = value.shape[-1]
                ranges[name] = ChannelRange(np.full(k, np.inf, np.float32), np.full(k, -np.inf, np.float32))
            ranges[name].update(rows)
    return ranges
