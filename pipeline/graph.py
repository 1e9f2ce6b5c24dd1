"""The stage graph, declared once: what each stage needs, which config keys key its cache, what it runs.

    finetune -> finetune-check -> compress -> export -> validate -> package

A stage's cache key is the hash of its name, its code version, the config values it names in
``params`` and the content hashes of its inputs (external files it names in ``inputs`` plus the
outputs of the stages it ``requires``).  Change any of them and the stage, and everything after it,
runs again; change nothing and it is reused.  The runner (``pipeline.runner``) does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pipeline.config import TaskConfig
from pipeline.stages import compress, finetune, finetune_check
from pipeline.stages import package  # issue #5
from pipeline.stages import export, validate  # issue #4


@dataclass(frozen=True)
class Stage:
    name: str
    description: str
    requires: tuple[str, ...]
    params: Callable[[TaskConfig], dict]
    inputs: Callable[[TaskConfig], dict[str, str]]  # external inputs -> content hash (cheap: no parsing)
    run: Callable | None  # (StageContext) -> StageResult; None: declared but not built yet
    version: str = "1"  # bump when the stage's logic changes what it produces
    planned_in: str = ""  # for stages not built yet: where they are tracked
    # Raises UserInputError when the config cannot work for this stage; called for every selected
    # stage before the first one runs, so a run never fails at its end on something knowable at its start.
    check: Callable[[TaskConfig], None] | None = None
    # Outputs that live outside the stage's out/ (the package stage's bundle): True when the record's
    # external outputs are still in place and unchanged; a stage whose outputs were removed reruns.
    external_intact: Callable[[TaskConfig, dict[str, str]], bool] | None = None


def _none(cfg: TaskConfig) -> dict[str, str]:
    return {}


STAGES: tuple[Stage, ...] = (
    Stage(
        name="finetune",
        description="train the task's head (classifier, BIO tagger or span extractor; and the scratch model) when the model has none",
        requires=(),
        params=finetune.params,
        inputs=finetune.inputs,
        run=finetune.run,
        version="1",
    ),
    Stage(
        name="finetune-check",
        description="evaluate the FP32 model on the full dev set (accuracy, entity F1 or EM/F1); baseline for every later gate",
        requires=("finetune",),
        params=finetune_check.params,
        inputs=finetune_check.inputs,
        run=finetune_check.run,
        version="1",
    ),
    Stage(
        name="compress",
        description="DynaBERT width pruning, then INT8; every candidate scored and timed in the runtime that ships",
        requires=("finetune", "finetune-check"),  # the model from finetune, the baseline from finetune-check
        params=compress.params,
        inputs=compress.inputs,
        run=compress.run,
        version="2",  # 2: INT8 candidates with fused MatMulIntegerToFloat (pipeline.int8.fusion)
    ),
    Stage(
        name="export",
        description="Paddle inference model and INT8 ONNX of the selected candidate and the FP32 baseline",
        requires=("compress", "finetune-check"),
        params=export.params,
        inputs=export.inputs,
        run=export.run,
        version="5",  # 2: calibrated activation scales in onnx/int8.onnx; 3: fused MatMulIntegerToFloat; 4: QDQ on MatMul inputs only;
        # 5: QDQ activation scales from real tokens
    ),
    Stage(
        name="validate",
        description="parity and benchmarks per backend; regression gates",
        requires=("export", "finetune-check"),
        params=validate.params,
        inputs=validate.inputs,
        run=validate.run,
        version="2",  # 2: 2048 timed dev examples; ONNX Runtime measured before Paddle
    ),
    Stage(
        name="package",
        description="Triton / FastDeploy model repository with pre- and post-processing, bundle manifest",
        requires=("finetune", "export", "validate"),  # finetune: the source model's hash in bundle.json
        params=package.params,
        inputs=package.inputs,
        run=package.run,
        check=package.check,
        external_intact=package.external_intact,
        version="3",  # 2: kubernetes.yaml and kserve.yaml in the bundle; 3: bundle.json lists directories
    ),
)

STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)


def get_stage(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(name)
