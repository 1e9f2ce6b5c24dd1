"""Int8 word-embedding quantization of a static Paddle inference model (no data, no training).

Replaces ``paddleslim.quant.quant_embedding``, which segfaults on the pinned Paddle (pinned by
``tests/test_compress_embeddings.py``).  The program is rewritten so the table is stored as int8
with one float32 scale per row (symmetric, abs-max / 127) and dequantized on the fly, only for the
looked-up rows:

    ids -> lookup_table_v2(W_int8) -> cast(float32) -> elementwise_mul <- lookup_table_v2(scale)

so the table is ~1/4 of its FP32 size on disk and in memory.  Works on any static model, so the
dygraph path is ``export_static`` then this, and ``--input_infer_model_path`` models use it directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.backends.forms import check_static_dir
from pipeline.errors import ModelError

LOOKUP_OPS = ("lookup_table_v2", "lookup_table")


@dataclass(frozen=True)
class EmbeddingQuantization:
    table: str  # the parameter that was quantized
    rows: int
    dim: int
    fp32_bytes: int
    int8_bytes: int  # int8 table + per-row float32 scales
    max_abs_error: float  # largest |dequantized - original| over the table


def quantize_table(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8: ``weight ~= q * scale`` with ``q`` in [-127, 127], ``scale`` shape [rows, 1]."""
    weight = np.asarray(weight, dtype=np.float32)
    scale = np.abs(weight).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0  # an all-zero row (e.g. [PAD]) stays zero whatever the scale
    q = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def quantize_embeddings(model_dir: Path, out_dir: Path, log=print) -> EmbeddingQuantization:
    """Write ``out_dir/model.pdmodel`` + ``model.pdiparams`` with the word-embedding table in int8.

    The word embedding is the table looked up with ``input_ids`` (possibly through a cast); position
    and token-type tables stay FP32.
    """
    import paddle

    model_dir = check_static_dir(model_dir)
    out_dir = Path(out_dir)
    paddle.enable_static()
    try:
        exe = paddle.static.Executor(paddle.CPUPlace())
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            prog, feed_names, fetch_vars = paddle.static.load_inference_model(str(model_dir / "model"), exe)
            block = prog.global_block()
            lookups = [(i, op) for i, op in enumerate(block.ops) if op.type in LOOKUP_OPS and block.var(op.input("W")[0]).persistable]
            if not lookups:
                raise ModelError(f"static model {model_dir}: no embedding lookup with a stored table to quantize")
            w_name = _word_table(block, lookups, model_dir)
            if block.var(w_name).dtype != paddle.float32:
                raise ModelError(f"static model {model_dir}: embedding table {w_name} is {block.var(w_name).dtype}, not float32 (already quantized?)")
            weight = np.array(scope.find_var(w_name).get_tensor())
            q, scale = quantize_table(weight)
            q_name, s_name = w_name + ".int8", w_name + ".scale"
            for name, value in ((q_name, q), (s_name, scale)):
                block.create_var(name=name, shape=value.shape, dtype=str(value.dtype), persistable=True)
                scope.var(name).get_tensor().set(value, paddle.CPUPlace())
            # Every lookup of this table (usually one) gets the int8 lookup + dequantize.
            for idx in sorted((i for i, op in lookups if op.input("W")[0] == w_name), reverse=True):
                _rewrite_lookup(block, idx, q_name, s_name)
            block._remove_var(w_name)
            prog._sync_with_cpp()
            feeds = [block.var(n) for n in feed_names]
            paddle.static.save_inference_model(str(out_dir / "model"), feeds, fetch_vars, exe, program=prog)
    finally:
        paddle.disable_static()
    deq = q.astype(np.float32) * scale
    info = EmbeddingQuantization(
        table=w_name,
        rows=int(weight.shape[0]),
        dim=int(weight.shape[1]),
        fp32_bytes=int(weight.nbytes),
        int8_bytes=int(q.nbytes + scale.nbytes),
        max_abs_error=float(np.abs(deq - weight).max()),
    )
    log(
        f"[compress] embeddings: {w_name} {info.rows}x{info.dim} int8 "
        f"({info.fp32_bytes / 2**20:.1f} MiB -> {info.int8_bytes / 2**20:.1f} MiB, max abs error {info.max_abs_error:.2e})"
    )
    return info


def _word_table(block, lookups, model_dir: Path) -> str:
    import paddle

    producers = {out: op for op in block.ops for out in op.output_arg_names}

    def from_input_ids(name: str) -> bool:
        for _ in range(8):  # input_ids may pass through a cast/assign or two
            if name == "input_ids":
                return True
            op = producers.get(name)
            if op is None or op.type not in ("cast", "assign", "scale", "reshape2", "unsqueeze2"):
                return False
            name = op.input_arg_names[0]
        return False

    tables = {op.input("W")[0] for _, op in lookups if from_input_ids(op.input("Ids")[0])}
    if any(block.var(t).dtype == paddle.int8 for t in tables):
        raise ModelError(f"static model {model_dir}: the word-embedding table is already int8")
    if len(tables) != 1:
        raise ModelError(f"static model {model_dir}: cannot find the word-embedding table (lookups of input_ids: {sorted(tables)})")
    return tables.pop()


def _rewrite_lookup(block, idx: int, q_name: str, s_name: str) -> None:
    import paddle

    op = block.ops[idx]
    op_type = op.type
    ids = op.input("Ids")[0]
    out = op.output("Out")[0]
    out_var = block.var(out)
    attrs = {"padding_idx": op.attr("padding_idx") if op.has_attr("padding_idx") else -1}
    q_out = block.create_var(name=out + ".int8", dtype=paddle.int8, shape=out_var.shape)
    rows_f = block.create_var(name=out + ".int8.f32", dtype=paddle.float32, shape=out_var.shape)
    s_out = block.create_var(name=out + ".scale", dtype=paddle.float32, shape=list(out_var.shape[:-1]) + [1])
    block._remove_op(idx)  # `op` is dangling from here on: read nothing from it
    block._insert_op(idx, type=op_type, inputs={"W": [q_name], "Ids": [ids]}, outputs={"Out": [q_out]}, attrs=attrs)
    block._insert_op(idx + 1, type=op_type, inputs={"W": [s_name], "Ids": [ids]}, outputs={"Out": [s_out]}, attrs=attrs)
    block._insert_op(idx + 2, type="cast", inputs={"X": [q_out]}, outputs={"Out": [rows_f]},
                     attrs={"in_dtype": q_out.dtype, "out_dtype": paddle.float32})
    block._insert_op(idx + 3, type="elementwise_mul", inputs={"X": [rows_f], "Y": [s_out]}, outputs={"Out": [out]}, attrs={"axis": -1})
