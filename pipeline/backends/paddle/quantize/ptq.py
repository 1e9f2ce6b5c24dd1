"""Post-training quantization of a static Paddle inference model, with a grid search over its settings.

``paddle.static.quantization.PostTrainingQuantization`` does the work.  Two upstream problems are
handled here (each pinned by a test in ``tests/test_compress_ptq.py``):

* PaddleNLP's ``Trainer.compress()`` passes ``batch_generator``, which Paddle 2.6 no longer accepts:
  calibration data comes from a real ``paddle.io.DataLoader`` whose collate function yields feed dicts.
* ``algo="avg"`` raises ``IndexError`` on ERNIE: it reshapes every observed activation to
  ``(shape[0], -1)``, and ERNIE's program has 0-d activations (scalar constants of the attention
  mask arithmetic).  ``_PostTrainingQuantization`` samples those as one-element tensors.
* ``algo="min_max"`` inserts no quantization ops at all (it only annotates ops with min/max for Paddle
  Lite), so its "int8" model runs in FP32 on Paddle Inference; here its ranges become abs-max
  thresholds and the program gets the same fake-quant ops as every other algo.

Only the quantized ops' inputs are observed (not every op's output, as upstream does): see
``_QuantizedOpsOnly``; ``observe_all_ops=True`` restores upstream's behaviour.

Calibration examples come from the *training* split (never dev: dev is what candidates are judged on).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pipeline.backends.forms import MODEL_FILE, PARAMS_FILE, check_static_dir
from pipeline.kinds.base import FeatureSet
from pipeline.errors import ConfigError, DataError

# matmul_v2 covers every Linear of ERNIE (and the attention products); mul/matmul for older exports.
QUANTIZABLE_OPS = ["matmul_v2", "matmul", "mul"]


@dataclass(frozen=True)
class PTQSettings:
    algo: str
    batch_size: int
    batch_num: int
    weight_quantize_type: str = "channel_wise_abs_max"
    activation_quantize_type: str = "range_abs_max"
    round_type: str = "round"
    bias_correction: bool = False
    skip_layers: tuple[str, ...] = ()  # roles left in FP32 (see CompressConfig.skip_layers_list)

    @property
    def name(self) -> str:
        extra = ("-adaround" if self.round_type == "adaround" else "") + ("-bc" if self.bias_correction else "")
        extra += "".join(f"-fp32{r}" for r in self.skip_layers)
        return f"ptq-{self.algo}-bs{self.batch_size}-bn{self.batch_num}{extra}"

    @property
    def calibration_examples(self) -> int:
        return self.batch_size * self.batch_num

    def to_dict(self) -> dict:
        return asdict(self)


def ptq_grid(cfg) -> list[PTQSettings]:
    """Every algo x batch_size x batch_num of a ``CompressConfig``, in config order."""
    return [
        PTQSettings(
            algo=algo,
            batch_size=bs,
            batch_num=bn,
            weight_quantize_type=cfg.weight_quantize_type,
            activation_quantize_type=cfg.ptq_activation_type(),
            round_type=cfg.round_type,
            bias_correction=cfg.bias_correction,
            skip_layers=tuple(r.strip() for r in str(skip).split(",") if r.strip()),
        )
        for algo, bs, bn, skip in itertools.product(cfg.algo_list, cfg.batch_size_list, cfg.batch_num_list,
                                                    getattr(cfg, "skip_layers_list", [""]))
    ]


def weights_of_roles(program, roles: Sequence[str]) -> list[str]:
    """Weight names of the fc/matmul ops playing ``roles`` in a static program (found by graph structure).

    "ffn2": the matmul whose input is an activation function's output (GELU/ReLU: the FFN output
    projection); "head": the last matmul with a persistable weight (the task head).
    """
    block = program.global_block()
    producer = {}
    for op in block.ops:
        for name in op.output_arg_names:
            producer[name] = op.type
    weighted = []
    for op in block.ops:
        if op.type in ("matmul_v2", "matmul", "mul", "fc"):
            w = op.input("Y" if op.type in ("matmul_v2", "matmul") else ("W" if op.type == "fc" else "Y"))
            if w and block.has_var(w[0]) and block.var(w[0]).persistable:
                x = op.input("X" if op.type != "fc" else "Input")[0]
                weighted.append((w[0], producer.get(x)))
    out = []
    if "ffn2" in roles:
        out += [w for w, src in weighted if src in ("gelu", "relu")]
    if "head" in roles and weighted:
        out.append(weighted[-1][0])
    return out


def check_calibration(num_examples: int, grid: Sequence[PTQSettings], source: str = "train split") -> None:
    """Fail before any work when the calibration data cannot feed a grid point."""
    if num_examples == 0:
        raise DataError(f"PTQ calibration set is empty ({source} has no examples)")
    for s in grid:
        if s.calibration_examples > num_examples:
            raise DataError(
                f"PTQ {s.name}: batch_size {s.batch_size} x batch_num {s.batch_num} = {s.calibration_examples} "
                f"calibration examples, but the {source} has only {num_examples} "
                f"(lower compress.batch_num_list or compress.batch_size_list)"
            )


def calibration_examples(train: FeatureSet, n: int, seed: int) -> FeatureSet:
    """A deterministic random sample of ``n`` training features (calibration should see every class)."""
    if n >= len(train):
        return train
    return train.subset(np.random.RandomState(seed).choice(len(train), n, replace=False))


def calibration_loader(examples: FeatureSet, batch_size: int, input_dtype: str = "int64"):
    """A ``paddle.io.DataLoader`` yielding ``{"input_ids", "token_type_ids"}`` feed dicts (padded per batch)."""
    import paddle

    dtype = np.int32 if input_dtype == "int32" else np.int64

    def collate(indices):
        b = examples.batch(indices)
        return {"input_ids": b.input_ids.astype(dtype), "token_type_ids": b.token_type_ids.astype(dtype)}

    class Indices(paddle.io.Dataset):
        # Items are example indices; ``collate`` tokenizes a whole batch at once (padded to its longest).
        def __len__(self):
            return len(examples)

        def __getitem__(self, i):
            return i

    return paddle.io.DataLoader(Indices(), batch_size=batch_size, shuffle=False, drop_last=False, collate_fn=collate,
                                return_list=True, num_workers=0)


def _ptq_class():
    from paddle.static.quantization import PostTrainingQuantization
    from paddle.static.quantization.quant_config import BaseQuantizer
    from paddle.static.quantization.utils import load_variable_data

    class _QuantizedOpsOnly(BaseQuantizer):
        # Upstream also observes the output of ~every other op (equal, elementwise_add, softmax, ...) to
        # write out_threshold attributes.  Paddle Inference only runs fc in int8 here
        # (session.ONEDNN_INT8_OPS), which needs the scales of the quantized ops' own inputs;
        # the extra observations only cost time (KL/hist run one threshold search per observed tensor).
        # 4-layer TNEWS ERNIE, 128 calibration sentences: KL 117 s instead of > 330 s, mse 11 s instead
        # of 21 s, with the same int8 accuracy.
        @property
        def observer_operation_types(self):
            return []

    class _PostTrainingQuantization(PostTrainingQuantization):
        def __init__(self, *args, observe_all_ops: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            if not observe_all_ops:
                self.quant_config = _QuantizedOpsOnly(quantizable_op_type=kwargs["quantizable_op_type"], quant_bits=8)

        def _sample_avg(self):
            # Upstream does var.reshape(var.shape[0], -1) on every activation: IndexError on 0-d ones.
            # A 0-d activation is a single value; its per-sample abs max is its abs value.
            scalars = {n for n in self._quantized_act_var_name if np.ndim(load_variable_data(self._scope, n)) == 0}
            if not scalars:
                return super()._sample_avg()
            names = self._quantized_act_var_name
            self._quantized_act_var_name = names - scalars
            try:
                super()._sample_avg()
            finally:
                self._quantized_act_var_name = names
            for n in scalars:
                self._quantized_var_avg.setdefault(n, []).append(float(np.abs(load_variable_data(self._scope, n))))

        def _save_input_threhold(self):  # (sic) upstream's name
            # Upstream min_max only writes ".min"/".max" op attributes (Paddle Lite's format): no fake-quant
            # ops, so Paddle Inference would silently run the "quantized" model in FP32.  Symmetric int8
            # from a min/max range is the abs-max threshold; with it, the ordinary program update applies.
            for name, lo in self._quantized_var_min.items():
                hi = self._quantized_var_max[name]
                if isinstance(lo, list):
                    self._quantized_threshold[name] = [max(abs(a), abs(b)) for a, b in zip(lo, hi)]
                else:
                    self._quantized_threshold[name] = max(abs(lo), abs(hi))
            self._update_program()

    return _PostTrainingQuantization


def quantize_static(
    fp32_dir: Path,
    out_dir: Path,
    calibration: FeatureSet,
    settings: PTQSettings,
    *,
    input_dtype: str = "int64",
    onnx_format: bool = False,
    observe_all_ops: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Quantize the static model in ``fp32_dir`` into ``out_dir/model.pdmodel`` + ``model.pdiparams``.

    ``onnx_format=False`` keeps Paddle's fake-quant ops + ``out_threshold`` attributes, the form the
    oneDNN int8 passes of Paddle Inference 2.6 consume.
    """
    import paddle

    check_static_dir(fp32_dir)
    check_calibration(len(calibration), [settings])
    out_dir = Path(out_dir)
    examples = calibration.subset(range(min(len(calibration), settings.calibration_examples)))
    paddle.enable_static()
    try:
        exe = paddle.static.Executor(paddle.CPUPlace())
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            skip = None
            if settings.skip_layers:
                with paddle.static.scope_guard(paddle.static.Scope()):
                    program, _, _ = paddle.static.load_inference_model(str(Path(fp32_dir) / Path(MODEL_FILE).stem), exe)
                skip = weights_of_roles(program, settings.skip_layers)
                if not skip:
                    raise ConfigError(f"PTQ {settings.name}: no layer of role {', '.join(settings.skip_layers)} in {fp32_dir}")
            ptq = _ptq_class()(
                skip_tensor_list=skip,
                executor=exe,
                scope=scope,
                model_dir=str(fp32_dir),
                model_filename=MODEL_FILE,
                params_filename=PARAMS_FILE,
                data_loader=calibration_loader(examples, settings.batch_size, input_dtype),
                batch_size=settings.batch_size,
                batch_nums=settings.batch_num,
                algo=settings.algo,
                quantizable_op_type=list(QUANTIZABLE_OPS),
                round_type=settings.round_type,
                bias_correction=settings.bias_correction,
                weight_quantize_type=settings.weight_quantize_type,
                activation_quantize_type=settings.activation_quantize_type,
                onnx_format=onnx_format,
                is_full_quantize=False,
                observe_all_ops=observe_all_ops,
            )
            ptq.quantize()
            ptq.save_quantized_model(str(out_dir), model_filename=MODEL_FILE, params_filename=PARAMS_FILE)
    finally:
        paddle.disable_static()
    log(f"[compress] {settings.name}: quantized with {len(examples)} calibration examples -> {out_dir}")
    return check_static_dir(out_dir)
