"""Compression arguments (the ``compress:`` section of a task config).  Owned by the compress stage.

Names follow PaddleNLP's ``CompressionArguments`` so upstream recipes carry over; every value is
checked here, so a bad one fails when the config is loaded, before any calibration or training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from pipeline.backends import registry
from pipeline.errors import ConfigError

STRATEGY_PARTS = ("dynabert", "ptq", "qat", "embeddings")
PTQ_ALGOS = ("KL", "abs_max", "min_max", "avg", "hist", "mse", "emd")
WEIGHT_QUANTIZE_TYPES = ("abs_max", "channel_wise_abs_max")
ACTIVATION_QUANTIZE_TYPES = ("range_abs_max", "moving_average_abs_max", "abs_max")
ROUND_TYPES = ("round", "adaround")
INPUT_DTYPES = ("int64", "int32")


def parse_strategy(strategy: str) -> tuple[str, ...]:
    """``"dynabert+ptq"`` -> ``("dynabert", "ptq")``, checked: known parts, no repeats, pruning first,
    at most one of ptq/qat (QAT already produces the quantized model PTQ would)."""
    parts = tuple(p.strip() for p in str(strategy).split("+"))
    unknown = [p for p in parts if p not in STRATEGY_PARTS]
    if not parts or unknown:
        raise ConfigError(
            f"compress.strategy {strategy!r}: unknown part {unknown[0] if unknown else '(empty)'!r}; "
            f"combine {', '.join(STRATEGY_PARTS)} with '+', e.g. dynabert+ptq"
        )
    if len(set(parts)) != len(parts):
        raise ConfigError(f"compress.strategy {strategy!r}: a part is repeated")
    if "dynabert" in parts and parts[0] != "dynabert":
        raise ConfigError(f"compress.strategy {strategy!r}: dynabert (pruning) must come first, before quantization")
    if "ptq" in parts and "qat" in parts:
        raise ConfigError(f"compress.strategy {strategy!r}: choose ptq or qat, not both")
    return parts


def parse_width(value: str | float, key: str = "compress.width_mult_list") -> float:
    """``"3/4"``, ``"0.75"`` or ``0.75`` -> 0.75; must be in (0, 1]."""
    try:
        width = float(Fraction(str(value).strip())) if not isinstance(value, float) else value
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"{key}: {value!r} is not a number or fraction like 3/4") from None
    if not 0 < width <= 1:
        raise ConfigError(f"{key}: {value!r} = {width:g} is outside (0, 1]")
    return width


SKIP_ROLES = ("ffn2", "head")


# compress.candidate_format's values: ONNX forms, each timed in every CPU engine of compress.engines (OpenVINO
# included), or Paddle programs timed in Paddle Inference: see CompressConfig.candidate_format.
ONNX_ROUTE, PADDLE_ROUTE = "onnx", "paddle"
CANDIDATE_FORMATS = (ONNX_ROUTE, PADDLE_ROUTE)


def engine_names() -> tuple[str, ...]:
    """The CPU engines that run the ONNX candidates (compress.candidate_format onnx): the registry's list."""
    return tuple(e.name for e in registry.CPU_ENGINES)


@dataclass
class CompressConfig:
    strategy: str = "dynabert+ptq"
    # What candidates are built as, and so the engines they are scored and timed in (the one that ships serves the
    # selected candidate).  onnx (the CPU bundle): FP32 ONNX per architecture and, with ptq, an INT8 form per engine
    # in ``engines`` below (ONNX Runtime's recipe search of pipeline.quantization and, by default, OpenVINO's NNCF
    # search), each timed in its own engine, so an OpenVINO form may ship (algo_list and the other PTQ-grid settings
    # are Paddle's).  paddle: Paddle Inference programs (PaddleSlim PTQ grid, QAT, int8 embeddings), for serving with
    # Paddle Inference; no OpenVINO form is made.  (It was compress.runtime, whose "onnxruntime" meant OpenVINO too.)
    candidate_format: str = ONNX_ROUTE
    # With candidate_format onnx: the CPU engines each width's INT8 form is made for and timed in (ONNX Runtime's
    # recipe search, OpenVINO's NNCF search).  Which one is faster depends on the CPU: every form is measured
    # in the same interleaved rounds and the fastest within the budget ships.
    engines: list[str] = field(default_factory=lambda: list(engine_names()))
    # With candidate_format onnx: time every candidate's architecture first (speed does not depend on trained weights),
    # build fastest first, and skip a candidate that one already built within the budget surely beats (every round
    # of the screen, or a duel; pipeline.compress.screen).  false: build and score every candidate (the whole frontier).
    screen: bool = True
    # DynaBERT pruning: every width (share of heads and FFN neurons kept) x every depth (share of encoder layers kept,
    # DynaBERT's depth_mult: 2/3 of 6 layers keeps layers 0, 1, 3, 4) is one architecture, distilled from the FP32 model
    width_mult_list: list[str | float] = field(default_factory=lambda: ["3/4"])
    depth_mult_list: list[str | float] = field(default_factory=lambda: [1])
    # With dynabert: also quantize the unpruned model (a fallback when pruning costs too much accuracy;
    # costs one more PTQ grid / QAT run).  Upstream quantizes only the pruned widths.
    quantize_unpruned: bool = True
    # PTQ grid: every algo x batch_size x batch_num is one candidate
    algo_list: list[str] = field(default_factory=lambda: ["mse", "KL"])
    batch_size_list: list[int] = field(default_factory=lambda: [4])
    batch_num_list: list[int] = field(default_factory=lambda: [1])
    weight_quantize_type: str = "channel_wise_abs_max"
    activation_quantize_type: str | None = None  # None: range_abs_max for PTQ, moving_average_abs_max for QAT
    round_type: str = "round"
    bias_correction: bool = False
    # Layers PTQ leaves in FP32, one grid dimension: each entry is a comma-separated set of roles
    # ("" = quantize every fc).  "ffn2": the FFN output projections (their input is the GELU output, where
    # pretrained encoders such as e5 carry outlier activations that a per-tensor int8 scale destroys:
    # CLUENER entity F1 0.07 instead of 0.51, 0.46 with ffn2 in FP32); "head": the task head.
    skip_layers_list: list[str] = field(default_factory=lambda: [""])
    # QAT
    use_pact: bool = True
    moving_rate: float = 0.9
    # training (DynaBERT distillation and QAT)
    learning_rate: float = 2e-5
    num_train_epochs: int = 1
    max_steps: int = -1
    per_device_train_batch_size: int = 32
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    seed: int = 42
    # DynaBERT distillation stops when it stops paying: the held-out metric is checked every distill_eval_steps
    # steps, and training ends after distill_patience checks in a row that do not beat the best by more than
    # distill_min_gain points (the best check's weights are kept; max_steps / num_train_epochs stay the cap).
    # distill_patience 0: train the whole budget.  0.25 points is 5 of the 2,000 held-out rows: smaller moves between
    # checks are what the same weights' neighbours reorder (MEASUREMENTS.md, TNEWS).
    distill_eval_steps: int = 100
    distill_patience: int = 2
    distill_min_gain: float = 0.25
    # inputs / outputs
    input_infer_model_path: str | None = None  # a static Paddle model dir to compress (ptq, embeddings)
    input_dtype: str = "int64"
    # evaluation of candidates
    throughput_batch_size: int = 32
    throughput_batches: int = 8  # batches per candidate in each timing round
    timing_rounds: int = 5  # interleaved rounds over every candidate: medians and the spread decide
    # None: validate.dev_batch_size (TaskConfig fills it in).  Validate reads compress's outputs of the files it ships
    # only when they were made in its batches (pipeline.dev_outputs).
    eval_batch_size: int | None = None
    keep_all_candidates: bool = False  # False: delete non-selected quantized models (the FP32 baseline stays)

    def __post_init__(self) -> None:
        self.parts()
        self._check_ptq()
        self._check_training()
        self._check_engines()

    def _check_ptq(self) -> None:
        """Widths and PaddleSlim PTQ's settings (one line naming the field)."""
        if not isinstance(self.width_mult_list, list) or not self.width_mult_list:
            raise ConfigError("compress.width_mult_list: at least one width is needed, e.g. [3/4]")
        self.widths()
        if not isinstance(self.depth_mult_list, list) or not self.depth_mult_list:
            raise ConfigError("compress.depth_mult_list: at least one depth is needed, e.g. [1] (every layer)")
        self.depths()
        if not self.algo_list:
            raise ConfigError(f"compress.algo_list: at least one algo is needed ({', '.join(PTQ_ALGOS)})")
        for algo in self.algo_list:
            if algo not in PTQ_ALGOS:
                raise ConfigError(f"compress.algo_list: unknown algo {algo!r}; known: {', '.join(PTQ_ALGOS)}")
        for key in ("batch_size_list", "batch_num_list"):
            values = getattr(self, key)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise ConfigError(f"compress.{key}: a non-empty list of integers >= 1 is needed, got {values!r}")

    def _check_training(self) -> None:
        """Layer roles, quantize types and the distillation/QAT training settings."""
        for entry in self.skip_layers_list:
            unknown = [r for r in str(entry).split(",") if r.strip() and r.strip() not in SKIP_ROLES]
            if unknown:
                raise ConfigError(f"compress.skip_layers_list: unknown layer role {unknown[0]!r}; known: {', '.join(SKIP_ROLES)}")
        choices = (
            ("weight_quantize_type", WEIGHT_QUANTIZE_TYPES),
            ("round_type", ROUND_TYPES),
            ("input_dtype", INPUT_DTYPES),
        )
        for key, allowed in choices:
            if getattr(self, key) not in allowed:
                raise ConfigError(f"compress.{key}: {getattr(self, key)!r} is not one of {', '.join(allowed)}")
        if self.activation_quantize_type is not None and self.activation_quantize_type not in ACTIVATION_QUANTIZE_TYPES:
            raise ConfigError(
                f"compress.activation_quantize_type: {self.activation_quantize_type!r} is not one of "
                f"{', '.join(ACTIVATION_QUANTIZE_TYPES)}"
            )
        if not 0 < self.moving_rate < 1:
            raise ConfigError(f"compress.moving_rate must be in (0, 1), got {self.moving_rate}")
        if self.learning_rate <= 0:
            raise ConfigError(f"compress.learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"compress.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.weight_decay < 0:
            raise ConfigError(f"compress.weight_decay must be >= 0, got {self.weight_decay}")

    def _check_engines(self) -> None:
        """The format candidates are built as, its engines, and what each strategy part needs."""
        if self.candidate_format not in CANDIDATE_FORMATS:
            raise ConfigError(f"compress.candidate_format: {self.candidate_format!r} is not one of "
                              f"{', '.join(CANDIDATE_FORMATS)}")
        names = engine_names()
        if not isinstance(self.engines, list) or not self.engines:
            raise ConfigError(f"compress.engines: a non-empty list of engines ({', '.join(names)}) is needed, "
                              f"got {self.engines!r}")
        for i, engine in enumerate(self.engines):
            if engine not in names:
                raise ConfigError(f"compress.engines[{i}]: unknown engine {engine!r}; engines are {', '.join(names)}")
        if len(set(self.engines)) != len(self.engines):
            raise ConfigError(f"compress.engines: an engine is repeated in {self.engines!r}")
        if self.onnx_route:
            paddle_only = {"qat": "QAT trains a Paddle int8 program", "embeddings": "the ONNX Runtime INT8 form already "
                           "stores int8 embeddings (quantization.int8_embeddings)"}
            for part in self.parts():
                if part in paddle_only:
                    raise ConfigError(f"compress.strategy {self.strategy!r}: {part} needs compress.candidate_format: "
                                      f"paddle ({paddle_only[part]}); with onnx use dynabert and/or ptq")
        for key in ("num_train_epochs", "per_device_train_batch_size", "throughput_batch_size", "throughput_batches",
                    "eval_batch_size", "timing_rounds", "distill_eval_steps"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ConfigError(f"compress.{key} must be >= 1, got {getattr(self, key)}")
        if self.distill_patience < 0:
            raise ConfigError(f"compress.distill_patience must be >= 0 (0: distill the whole budget), got {self.distill_patience}")
        if not 0 <= self.distill_min_gain < 100:
            raise ConfigError(f"compress.distill_min_gain must be in [0, 100) points, got {self.distill_min_gain}")
        parts = self.parts()
        if "qat" in parts and self.activation_quantize_type not in (None, "moving_average_abs_max"):
            raise ConfigError(
                f"compress.activation_quantize_type: QAT trains moving_average_abs_max activations only, "
                f"got {self.activation_quantize_type!r}"
            )
        if self.input_infer_model_path and ("dynabert" in parts or "qat" in parts):
            raise ConfigError(
                f"compress.input_infer_model_path: a static model can only be compressed with ptq and/or "
                f"embeddings (dynabert and qat need the dygraph model), strategy is {self.strategy!r}"
            )

    @property
    def onnx_route(self) -> bool:
        """Whether candidates are ONNX, timed in every engine of ``engines`` (``candidate_format: onnx``), rather than
        Paddle programs timed in Paddle Inference."""
        return self.candidate_format == ONNX_ROUTE

    def parts(self) -> tuple[str, ...]:
        return parse_strategy(self.strategy)

    def widths(self) -> list[float]:
        return [parse_width(w, f"compress.width_mult_list[{i}]") for i, w in enumerate(self.width_mult_list)]

    def depths(self) -> list[float]:
        return [parse_width(d, f"compress.depth_mult_list[{i}]") for i, d in enumerate(self.depth_mult_list)]

    def architectures(self) -> list:
        """Every architecture compress plans (``architecture.architectures``): the unpruned one alone without dynabert."""
        from pipeline.compress.architecture import UNPRUNED, architectures

        return architectures(self.widths(), self.depths()) if "dynabert" in self.parts() else [UNPRUNED]

    def ptq_activation_type(self) -> str:
        return self.activation_quantize_type or "range_abs_max"

    def qat_activation_type(self) -> str:
        return self.activation_quantize_type or "moving_average_abs_max"
