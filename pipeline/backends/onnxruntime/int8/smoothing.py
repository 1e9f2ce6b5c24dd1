"""SmoothQuant-style migration of activation outliers into the weights, on the FP32 ONNX graph.

Pretrained encoders (the e5 stand-in here, ERNIE/BERT in general) carry a few activation channels tens of
times larger than the rest.  One int8 scale per tensor must cover them, so every ordinary channel is left
with a handful of levels: that is what made fixed (calibrated) activation scales cost 0.84 points on the
fine-tuned TNEWS model.  Dividing channel j of a MatMul input by s_j and multiplying row j of the weight
by s_j leaves the product unchanged and flattens the activation (Xiao et al. 2023):

    s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)

ERNIE is post-LayerNorm, and the LayerNorm output also feeds the residual, so the division cannot be
folded into LayerNorm's gamma: it is one ``Mul`` per distinct MatMul input (shared by Q, K and V).  Folding
that Mul into a per-channel ``QuantizeLinear`` instead was measured 0.21x the speed: ORT's CPU kernel has a
fast path only for one scale per tensor.
"""

from __future__ import annotations

import numpy as np

from pipeline.backends.onnxruntime.int8.stats import ChannelRange
from pipeline.quantization.recipe import weight_matmuls


def smoothing_factors(act_absmax: np.ndarray, weights: list[np.ndarray], alpha: float) -> np.ndarray:
    """Per-input-channel s for one activation shared by ``weights`` ([K, N] each)."""
    w_absmax = np.max(np.stack([np.abs(w).max(axis=1) for w in weights]), axis=0)
    a = np.maximum(act_absmax.astype(np.float64), 1e-5)
    w = np.maximum(w_absmax.astype(np.float64), 1e-5)
    s = a ** alpha / w ** (1.0 - alpha)
    return np.clip(s, 1e-2, 1e2).astype(np.float32)


def smooth(model, ranges: dict[str, ChannelRange], alpha: float,
           skip: set[str] = frozenset()) -> dict[str, np.ndarray]:
    """Rewrite ``model`` in place: X/s feeds the MatMuls, their weights are diag(s)·W.

    ``skip`` names MatMul nodes left untouched (those kept in FP32 need no migration).  Returns the
    factors applied per input tensor; ``ranges`` of the smoothed inputs are divided accordingly.
    """
    from onnx import helper, numpy_helper

    if not 0.0 < alpha < 1.0:
        from pipeline.errors import ConfigError

        raise ConfigError(f"smoothquant alpha must be in (0, 1), got {alpha}")
    inits = {i.name: i for i in model.graph.initializer}
    by_input: dict[str, list] = {}
    for node in weight_matmuls(model):
        if node.name not in skip and node.input[0] in ranges:
            by_input.setdefault(node.input[0], []).append(node)
    applied: dict[str, np.ndarray] = {}
    inserts: list[tuple[int, object]] = []
    positions = {id(n): i for i, n in enumerate(model.graph.node)}
    for x, nodes in by_input.items():
        weights = [numpy_helper.to_array(inits[n.input[1]]) for n in nodes]
        s = smoothing_factors(ranges[x].absmax, weights, alpha)
        for node, w in zip(nodes, weights):
            name = f"{node.input[1]}_smoothed"
            model.graph.initializer.append(numpy_helper.from_array((w * s[:, None]).astype(np.float32), name))
            node.input[1] = name
        inv, y = f"{x}_smooth_inv", f"{x}_smoothed"
        model.graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), inv))
        inserts.append((min(positions[id(n)] for n in nodes), helper.make_node("Mul", [x, inv], [y], name=f"{x}_smooth")))
        for node in nodes:
            node.input[0] = y
        applied[x] = s
        r = ranges[x]
        ranges[y] = ChannelRange(r.minimum / s, r.maximum / s)
    for pos, node in sorted(inserts, key=lambda t: -t[0]):
        model.graph.node.insert(pos, node)
    used = {i for n in model.graph.node for i in n.input}
    keep = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    return applied
