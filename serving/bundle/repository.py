"""Write a task's bundle: a Triton model repository that takes raw text in and gives labels out.

    <repository>/<task>/                  the bundle; itself a Triton --model-repository
      bundle.json                          manifest: SHA-256 of every file, provenance, metrics, gates, versions
      README.md                            model card
      meta.json                            the export stage's model description
      <task>/config.pbtxt, 1/              ensemble
      <task>_tokenizer/config.pbtxt, 1/{model.py, bundle_integrity.py, model_support.py, served_metrics.py, vocab.txt, tokenizer_config.json, special_tokens_map.json}
      <task>_model/config.pbtxt, 1/{model.onnx | model.xml + model.bin | model.pdmodel + model.pdiparams
                                    [, model.py (runner.py), engine.py (the engine's served.py), bundle_integrity.py,
                                    model_support.py, served_metrics.py]}
      <task>_postprocess/config.pbtxt, 1/{model.py, bundle_integrity.py, model_support.py, served_metrics.py, labels.json}
      kubernetes.yaml, kserve.yaml         deployment manifests (package stage; serving.bundle.manifests)
      grafana-dashboard.json               the Deployment's Grafana dashboard (serving.bundle.monitoring)
      example_scores.json                  validate's scores per dev example (make gate pairs releases by them)

Token classification / reading comprehension bundles (meta.json "task_type") have the same four
models with other python models (serving/kinds/<kind>/models/) and, next to them, verbatim copies
of the pipeline's pure pre/post-processing modules (wordpiece.py, bio.py, windows.py, spans.py: each kind's object,
serving/kinds/<kind>/bundle.py, names its sources and modules)
and of serving/triton/text_input.py, so the served pre/post-processing is the offline code; like every
file they are hashed in bundle.json.

With package.api fastdeploy (serving/bundle/fastdeploy_api.py) the models are named as FastDeploy's examples name them
(ernie_seqcls*, ernie_tokencls*, uie) and the python models that format FastDeploy's payloads have
fastdeploy_payloads.py beside them; FastDeploy's uie is one folder: uie/1/{model.py (uie_fastdeploy.py), runner.py,
the model file, the tokenizer files, windows.py, spans.py, ...}.

Each task's bundle is its own repository so it can be replaced in one step: it is built in a temp
dir next to the target and swapped in by renames; a failure before the swap leaves the previous good
bundle as it was.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline.backends.registry import ServedEngine, own_forms, served_engine, served_engine_of_form, served_engines
from pipeline.contract import META_FILE, ExportLayout, TaskKind, form, read_meta
from pipeline.errors import ModelError
from pipeline.validation.release import SCORES_FILE
from serving.bundle import fastdeploy_api, model_io, requirements
from serving.bundle.config import FASTDEPLOY, TRITON_ORT, DeployConfig, PackageConfig
from serving.bundle.kinds import BundleKind, all_configs, bundle_kind, check_api, fused_kinds
from serving.bundle.model_config import VERSION, BundleShape, ModelNames, to_pbtxt
from serving.bundle.monitoring import TRUNCATED_WHAT
from serving.triton import integrity, model_support, served_metrics, text_input

# Copied into bundles as files: the python models (the kind's, serving/kinds/<kind>/models, and the shared model
# runner, serving/triton/models), the helpers beside them and the pipeline's pure modules (each kind's, found by
# path, never imported from here).
RUNNER = Path(model_support.__file__).resolve().parent / "models" / "runner.py"
PIPELINE_DIR = Path(__file__).resolve().parents[2] / "pipeline"
SERVING_DIR = Path(__file__).resolve().parents[1]
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
SERVING_PACKAGES = ("numpy", *(e.distribution for e in served_engines()), "tokenizers", "tritonclient", "nvidia-pytriton",
                    "protobuf")
PYTRITON_TRITONSERVER = {"0.7.0": "2.51.0"}  # nvidia-pytriton release -> the tritonserver it ships


class PackageError(ValueError):
    """The export output cannot be packaged as asked (missing model form, bad meta.json)."""


class BundleTooLarge(PackageError):
    """The built bundle is over the size limit; it was not swapped in."""


@dataclass(frozen=True)
class ExportArtifacts:
    """The export stage's output (see the export contract); optional forms are None when absent."""

    onnx_fp32: Path
    tokenizer_dir: Path
    labels: Path
    meta: Path
    onnx_int8: Path | None = None
    onnx_int8_qdq: Path | None = None
    paddle_fp32: Path | None = None  # dir with model.pdmodel + model.pdiparams
    paddle_int8: Path | None = None
    # the forms a served engine runs as its own (form name -> main file; OpenVINO's IR .xml, its .bin beside it)
    own: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def from_dir(cls, out: Path) -> "ExportArtifacts":
        layout = ExportLayout(Path(out))

        def opt(form_name: str) -> Path | None:
            return layout.path(form_name) if layout.has(form_name) else None

        return cls(onnx_fp32=layout.path("onnx_fp32"), tokenizer_dir=layout.tokenizer_dir, labels=layout.labels,
                   meta=layout.meta, onnx_int8=opt("onnx_int8"), onnx_int8_qdq=opt("onnx_int8_qdq"),
                   paddle_fp32=opt("paddle_fp32"), paddle_int8=opt("paddle_int8"),
                   own={f: p for f in own_forms() if (p := opt(f)) is not None})

    def read_meta(self) -> dict:
        """meta.json through the export contract's one reader."""
        try:
            return read_meta(self.meta)
        except ModelError as exc:
            raise PackageError(str(exc)) from None


@dataclass
class Provenance:
    """Where the bundle came from; goes into bundle.json and the model card."""

    source_model_sha256: str = ""
    data_fingerprint: str = ""
    # The data directory the bundle was built and validated from (absolute; "" when none, e.g. paddlenlp's
    # download): `make smoke` / `make perf` / ... read their dev set there unless DATA_DIR says otherwise.
    data_dir: str = ""
    selected_candidate: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    gates: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # the pipeline's (training/export) package versions
    description: str = ""
    # Validation's result for each exported form (form -> {"backend", "accuracy"}); the packaged form's
    # entry becomes bundle.json "validated", which the smoke test holds the served accuracy to.
    validated: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The serving settings make tune measured for this bundle on this CPU (serving.bundle.serving_tune), if any
    serving_tune: Any = None
    # validate's example_scores.json (each dev example's share of the shipped form's metric), carried into the bundle
    # so that `make gate BASELINE=<previous bundle>/bundle.json` pairs the releases by example
    example_scores: Path | None = None


@dataclass(frozen=True)
class ModelChoice:
    """Which exported form goes into ``<task>_model/1/`` and under which file names."""

    precision: str  # int8 | fp32
    sources: tuple[tuple[Path, str], ...]  # (exported file, name in 1/)
    model_file: str  # the name the config points at
    form: str  # export artifact role it came from, for the manifest


@dataclass(frozen=True)
class BundleInfo:
    path: Path
    manifest: dict
    choice: ModelChoice

    @property
    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())


def _own_choice(exp: ExportArtifacts, pc: PackageConfig, want: str, engine: ServedEngine) -> ModelChoice:
    """The form ``engine`` runs as its own (OpenVINO's INT8 IR), its files named after the engine's model file."""
    shipped = form(engine.form)
    main = exp.own.get(shipped.name)
    files = [main] + [main.with_suffix(c) for c in shipped.companions] if main is not None else []
    if want != "int8" or not files or not all(f.is_file() for f in files):
        raise PackageError(f"runtime {pc.runtime}: the export has no {engine.name} INT8 model ({shipped.path} and its "
                           f"{', '.join(shipped.companions) or 'files'}); it is made when compress.engines lists {engine.name}")
    names = [engine.model_file] + [str(Path(engine.model_file).with_suffix(c)) for c in shipped.companions]
    return ModelChoice(shipped.precision.value, tuple(zip(files, names)), engine.model_file, shipped.name)


def _onnx_choice(exp: ExportArtifacts, pc: PackageConfig, want: str, int8_form: str | None) -> ModelChoice:
    """``int8_form`` (onnx_int8 or onnx_int8_qdq) when INT8 is wanted and the export has it, else the FP32 ONNX."""
    if want == "int8" and int8_form:
        path = exp.onnx_int8_qdq if int8_form == "onnx_int8_qdq" else exp.onnx_int8
        if path is not None:
            return ModelChoice("int8", ((path, "model.onnx"),), "model.onnx", int8_form)
        if pc.precision == "int8":
            raise PackageError(f"package.precision int8: the export has no {int8_form.replace('onnx_', '')} ONNX model")
    if not exp.onnx_fp32.is_file():
        raise PackageError(f"{exp.onnx_fp32}: missing (export stage output incomplete)")
    return ModelChoice("fp32", ((exp.onnx_fp32, "model.onnx"),), "model.onnx", "onnx_fp32")


def _paddle_choice(exp: ExportArtifacts, pc: PackageConfig, want: str) -> ModelChoice:
    int8 = want == "int8" and exp.paddle_int8
    d, form, precision = (exp.paddle_int8, "paddle_int8", "int8") if int8 else (exp.paddle_fp32, "paddle_fp32", "fp32")
    if want == "int8" and pc.precision == "int8" and exp.paddle_int8 is None:
        raise PackageError("package.precision int8: the export has no paddle_int8 model")
    if d is None or not (d / "model.pdmodel").is_file():
        raise PackageError(f"runtime {pc.runtime}: the export has no Paddle inference model ({form})")
    files = ((d / "model.pdmodel", "model.pdmodel"), (d / "model.pdiparams", "model.pdiparams"))
    return ModelChoice(precision, files, "model.pdmodel", form)


def choose_model(exp: ExportArtifacts, pc: PackageConfig, preferred: str | None = None,
                 preferred_form: str | None = None) -> ModelChoice:
    """Pick the exported form the runtime can run: int8 where it exists and is wanted, else fp32.

    ``preferred`` (int8/fp32) is what validation chose, ``preferred_form`` the export form it ran (``runtime: auto``
    ships OpenVINO's form when that is the one); ``package.precision`` other than auto overrides them.
    """
    want = pc.precision if pc.precision != "auto" else (preferred or "int8")
    qdq_chosen = pc.precision == "auto" and preferred == "int8_qdq"  # validation picked the QDQ ONNX
    want = "int8" if want == "int8_qdq" else want
    onnx = lambda int8_form: _onnx_choice(exp, pc, want, int8_form)  # noqa: E731
    paddle = lambda: _paddle_choice(exp, pc, want)  # noqa: E731

    if pc.runtime == "auto":  # the engine of the form validate verified; ONNX Runtime's for the ONNX forms
        python = served_engine_of_form(preferred_form) if want == "int8" else None
    else:
        python = served_engine(pc.engine) if pc.backend == "python" else None
    if python is not None and python.form is not None:  # an engine that runs a form of its own (OpenVINO's IR)
        return _own_choice(exp, pc, want, python)
    if python is not None and python.reads_programs:
        return paddle()
    if pc.runtime == "auto" or python is not None or (pc.runtime == TRITON_ORT and pc.device == "CPU" and pc.accelerator == "none"):
        if qdq_chosen and exp.onnx_int8_qdq is not None:
            return onnx("onnx_int8_qdq")
        return onnx("onnx_int8")  # ONNX Runtime's INT8 (int8.onnx: fixed scales unless the task asks per-batch): the CPU form
    if pc.runtime == TRITON_ORT:
        if pc.accelerator == "tensorrt-int8":
            return onnx("onnx_int8_qdq")  # TensorRT builds int8 engines from explicit Q/DQ
        if pc.accelerator == "tensorrt-fp16" or pc.device == "GPU":
            return onnx(None)  # int8.onnx's integer MatMuls are CPU kernels
        return onnx("onnx_int8")
    fd = FASTDEPLOY[pc.fastdeploy_engine]  # its form (serving.bundle.config.FASTDEPLOY says why)
    if fd.form is None:
        return paddle()
    return onnx(fd.form if fd.form != "onnx_int8" or pc.device == "CPU" else None)  # int8.onnx's kernels are CPU ones


def _engine_properties(meta: dict, choice: ModelChoice) -> str:
    """The CPU properties the export recorded for the shipped form's engine (validated with them: OpenVINO's), as
    JSON; "" for an engine that records none."""
    engine = served_engine_of_form(choice.form)
    if engine is None or not engine.properties:
        return ""
    props = (meta.get(engine.name) or {}).get("properties")
    if not isinstance(props, dict):
        raise PackageError(f"meta.json: field '{engine.name}.properties' missing for the {engine.name} form")
    return json.dumps(props, sort_keys=True)


def _served(pc: PackageConfig) -> ServedEngine:
    engine = served_engine(pc.engine)
    if engine is None:
        raise PackageError(f"package.runtime {pc.runtime}: no engine named {pc.engine!r} is registered to serve")
    return engine


def _engine_needs(engine: ServedEngine, pc: PackageConfig) -> dict:
    gpu = pc.device == "GPU"
    return {"module": engine.import_name, "install": engine.requirement(gpu),
            "distribution": (engine.gpu_distribution if gpu else None) or engine.distribution,
            "validated_version": engine.validated_version(), "requirements": requirements.FILE}


def _pad_id(vocab: Path) -> int:
    with open(vocab, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if line.rstrip("\n") == "[PAD]":
                return i
    raise PackageError(f"{vocab}: vocabulary has no [PAD] token")


def serving_versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in SERVING_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    if out.get("nvidia-pytriton") in PYTRITON_TRITONSERVER:
        out["tritonserver (nvidia-pytriton)"] = PYTRITON_TRITONSERVER[out["nvidia-pytriton"]]
    return out


def bundle_code_sha256() -> str:
    """One hash of the code a bundle is written from: everything under serving/ (the python models, helpers, chart,
    schemas and the writers) and under pipeline/ (the pure modules copied in, the package stage).  The package stage
    keys on it, so a bundle packaged by other code (an upgraded ernie-bundle, a fix to a served model) is packaged
    again instead of kept; it costs seconds, so the whole of both trees counts rather than a list that could miss a
    file.  Bytecode does not count."""
    from pipeline.hashing import json_sha256, tree_hashes

    def sources(root: Path) -> dict[str, str]:
        return {k: v for k, v in tree_hashes(root).items() if "__pycache__/" not in k and not k.endswith(".pyc")}

    return json_sha256({"serving": sources(SERVING_DIR), "pipeline": sources(PIPELINE_DIR)})


def _copy_python_model(version_dir: Path, source: Path, pure: tuple[str, ...] = ()) -> None:
    shutil.copyfile(source, version_dir / "model.py")
    shutil.copyfile(Path(integrity.__file__), version_dir / "bundle_integrity.py")
    shutil.copyfile(Path(model_support.__file__), version_dir / "model_support.py")
    shutil.copyfile(Path(served_metrics.__file__), version_dir / "served_metrics.py")
    for rel in pure:
        src = PIPELINE_DIR / rel
        if not src.is_file():
            raise PackageError(f"{src}: missing; packaging this task kind needs the pipeline's {rel}")
        shutil.copyfile(src, version_dir / src.name)


def _kind(meta: dict) -> BundleKind:
    """The bundle's kind object, from meta.json's task_type (read_meta checked it is a TaskKind value)."""
    return bundle_kind(meta.get("task_type", TaskKind.CLASSIFICATION.value))


def _names(task: str, pc: PackageConfig, kind: BundleKind) -> ModelNames:
    """The bundle's model names: the task's, or FastDeploy's example names with package.api fastdeploy."""
    return ModelNames(kind.served_name(task, pc), fused=kind.layout(pc) == "fused")


def _build(tmp: Path, task: str, exp: ExportArtifacts, pc: PackageConfig, meta: dict, choice: ModelChoice) -> BundleShape:
    kind = _kind(meta)
    names = _names(task, pc, kind)
    vocab = exp.tokenizer_dir / "vocab.txt"
    if not vocab.is_file():
        raise PackageError(f"{vocab}: missing (export stage output incomplete)")
    if not exp.labels.is_file():
        raise PackageError(f"{exp.labels}: missing (export stage output incomplete)")
    num_labels = int(meta["num_labels"])
    label_rows = [line for line in exp.labels.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(label_rows) != num_labels:
        raise PackageError(f"{exp.labels}: {len(label_rows)} labels but meta.json says num_labels={num_labels}")
    problem = kind.label_problem(label_rows)  # the label rows the served post-processing relies on
    if problem:
        raise PackageError(f"{exp.labels}: {problem}")
    shape = BundleShape(task=names.ensemble, num_labels=num_labels, max_seq_len=int(meta["max_seq_len"]),
                        model_file=choice.model_file, pad_id=_pad_id(vocab), task_type=kind.name,
                        vocab_size=sum(1 for _ in open(vocab, encoding="utf-8")),
                        engine_properties=_engine_properties(meta, choice), model_output=_model_output(exp, pc, choice),
                        settings=kind.shape_fields(meta))
    one_model = kind.one_model(pc)  # FastDeploy's uie: one python model
    if names.fused and not kind.fusable and not one_model:
        raise PackageError(f"package.layout: fused is for {fused_kinds()} bundles; {task} is {kind.name}")
    configs = all_configs(shape, pc)
    for name in names.all():
        (tmp / name / VERSION).mkdir(parents=True)
        (tmp / name / "config.pbtxt").write_text(to_pbtxt(configs[name]), encoding="utf-8")
    # The ensemble's version folder stays empty: Triton requires it to exist.
    tok = tmp / names.tokenizer / VERSION
    # Fused: the three steps' files share one folder, whose model.py is the kind's fused model (or FastDeploy's uie).
    files = kind.files
    _copy_python_model(tok, kind.models / (kind.fused_model(pc) if names.fused else files.tokenizer),
                       files.tokenizer_pure + (files.postprocess_pure if names.fused else ()))
    for helper in (Path(text_input.__file__), *kind.tokenizer_helpers(pc)):  # uie_requests.py: UIE's request checks
        shutil.copyfile(helper, tok / helper.name)
    for f in TOKENIZER_FILES:
        if (exp.tokenizer_dir / f).is_file():
            shutil.copyfile(exp.tokenizer_dir / f, tok / f)
    post = tmp / names.postprocess / VERSION
    if not names.fused:
        _copy_python_model(post, kind.models / files.postprocess, files.postprocess_pure)
    for helper in kind.postprocess_helpers(pc):  # class_outputs.py, entity_outputs.py, uie_requests.py; FastDeploy's rows
        shutil.copyfile(helper, post / helper.name)
    shutil.copyfile(exp.labels, post / "labels.json")
    model = tmp / names.model / VERSION
    for src, dst in choice.sources:
        shutil.copyfile(src, model / dst)
    if names.fused:  # the model step's engine, loaded by the fused model as its runner.py
        shutil.copyfile(RUNNER, model / "runner.py")
    elif pc.backend == "python":
        _copy_python_model(model, RUNNER)
    if pc.backend == "python":  # the engine runner.py runs, from its folder in the pipeline
        shutil.copyfile(_served(pc).source, model / "engine.py")
    shutil.copyfile(exp.meta, tmp / META_FILE)
    # What the python models import, at the validated versions: the Dockerfile installs it
    (tmp / requirements.FILE).write_text(requirements.requirements_text(_served(pc) if pc.backend == "python" else None,
                                                                        gpu=pc.device == "GPU"), encoding="utf-8")
    return shape


def _model_output(exp: ExportArtifacts, pc: PackageConfig, choice: ModelChoice) -> str:
    """The model file's output tensor, which native backends match by name (python runners answer ``logits``);
    PackageError when the file lacks the inputs the tokenizer feeds."""
    from serving.bundle.model_config import LOGITS

    if pc.backend == "python":
        return LOGITS
    try:
        return model_io.logits_output(choice.sources[0][0], ("input_ids", "token_type_ids"))
    except model_io.ModelIOError as exc:
        raise PackageError(f"runtime {pc.runtime}: {exc}") from None


def _deployed(task: str, pc: PackageConfig, meta: dict, prov: Provenance, memory: dict | None = None) -> dict:
    """What the manifests read of the bundle, as bundle.json will say it: the sizes, the model clients call and
    validate's dev counts (the alerts' thresholds)."""
    return {"package": {"instances": pc.instances, "engine_threads": pc.engine_threads}, "cpu": meta.get("cpu", {}),
            **({"served_memory": memory} if memory is not None else {}),
            "models": {"ensemble": _names(task, pc, _kind(meta)).ensemble}, "metrics": prov.metrics}


def _deploy_manifests(tmp: Path, task: str, pc: PackageConfig, deploy: DeployConfig, meta: dict,
                      prov: Provenance) -> tuple[dict, dict]:
    """The manifests written into ``tmp`` (their summary), and the served memory they were sized by (bundle.json's
    ``served_memory``: measured by loading the bundle's engines, or why not).  They read what bundle.json will say:
    the sizes, the model clients call and validate's dev counts (the alerts' thresholds)."""
    from serving.bundle import manifests, served_memory

    try:
        memory = served_memory.measure(tmp).as_dict()
    except served_memory.MemoryNotMeasured as exc:
        memory = {"not_measured": str(exc)}
    try:
        bundle = _deployed(task, pc, meta, prov, memory)
        written = manifests.write(tmp, task, bundle, manifests.bundle_bytes(tmp), deploy)
    except manifests.ManifestError as exc:
        raise PackageError(f"deploy manifests: {exc}") from None
    return written.summary(), memory


def _serving_settings(pc: PackageConfig, prov: Provenance, choice: ModelChoice, meta: dict):
    """The package config with make tune's measured instances x threads applied where they apply, and what
    bundle.json says of it (``serving_tune.applied``)."""
    from serving.bundle import serving_tune

    defaults = _kind(meta).serving_defaults(pc)
    if prov.serving_tune is None:
        return serving_tune.applied(pc, None, pc.engine, {}, [], defaults)
    flags = (meta.get("cpu") or {}).get("flags")
    if flags is None:  # an export that did not record its CPU: the one packaging it
        from pipeline.contract import detect_cpu

        flags = detect_cpu().as_dict()["flags"]
    return serving_tune.applied(pc, prov.serving_tune, pc.engine, serving_tune.file_digests(choice.sources), flags,
                                defaults)


def _manifest(tmp: Path, task: str, pc: PackageConfig, meta: dict, choice: ModelChoice, prov: Provenance,
              deployment: dict | None = None, settings: dict | None = None, memory: dict | None = None) -> dict:
    kind = _kind(meta)
    names = _names(task, pc, kind)
    m = {
        "format": "ernie-bundle/1",
        "task": task,
        "task_type": kind.name,
        "api": pc.api,  # the interface clients call: ernie-bundle, or FastDeploy's examples' (models below)
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "layout": kind.layout(pc),
        "models": {role: getattr(names, role) for role in ("ensemble", "tokenizer", "model", "postprocess")},
        "runtime": pc.runtime,
        "backend": pc.backend,
        "engine": pc.fastdeploy_engine if pc.runtime == "fastdeploy" else pc.engine,
        # what the serving python must import for the in-process engine, what to install where it cannot, and the
        # version that validated the bundle (serving/triton/start.py checks them before the server starts, and the
        # model that runs the engine says when it runs another version)
        **({"engine_needs": _engine_needs(_served(pc), pc)} if pc.backend == "python" else {}),
        # the engine's CPU settings as validated, served with (OpenVINO); the offline reference uses them too
        **({"engine_properties": json.loads(props)} if (props := _engine_properties(meta, choice)) else {}),
        "accelerator": pc.accelerator,
        "precision": choice.precision,
        "model_form": choice.form,
        "max_seq_len": int(meta["max_seq_len"]),
        "num_labels": int(meta["num_labels"]),
        "labels": meta.get("labels", []),
        "label_names": meta.get("label_names", []),
        **kind.meta_sections(meta),  # what the tools window and decode with (reading, uie)
        # as configured, plus what 0 ("auto") resolved to on the packaging machine
        "package": {**dataclasses.asdict(pc), "instances": pc.instances, "engine_threads": pc.engine_threads},
        # where the instances x threads (and batcher delay) came from: make tune's measurement, or why not
        "serving_settings": settings or {},
        "source": {"model_sha256": prov.source_model_sha256, "data_fingerprint": prov.data_fingerprint,
                   **({"data_dir": prov.data_dir} if prov.data_dir else {})},
        "selected_candidate": prov.selected_candidate or meta.get("selected_candidate", {}),
        # The CPU the INT8 recipe was chosen and validated on: the launcher warns when the serving CPU lacks
        # one of its int8 instruction sets (speed, and on AVX2 the u8s8 numerics, differ).
        "cpu": meta.get("cpu", {}),
        "int8_recipe": (meta.get("int8") or {}).get("chosen", meta.get("int8", {})),
        "validated": prov.validated.get(choice.form, {}),
        "metrics": prov.metrics,
        "gates": prov.gates,
        "versions": {"pipeline": prov.versions, "serving": serving_versions()},
        **({"deploy": deployment} if deployment else {}),  # manifests beside the models, each object's check
        # what the python models held when loaded here, the memory request's basis (serving.bundle.served_memory)
        **({"served_memory": memory} if memory else {}),
        "files": {rel: integrity.file_sha256(tmp / rel) for rel in integrity.bundle_files(tmp)},
        "directories": integrity.bundle_dirs(tmp),  # an ensemble's version directory is empty, and still the bundle's
    }
    m["manifest_sha256"] = integrity.manifest_sha256(m)
    return m


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def _measured(metrics: dict, names: dict | None = None) -> list[tuple[str, str]]:
    """The model card's measured rows: from validate's metrics.json, what ships and how it scored and ran against its
    FP32 and the anchor, on which CPU (its ``summary``); a record without one (older, or hand-made): its scalars.
    ``names``: a label's name where it is not the label itself (TNEWS's 100 is news_story)."""
    summary = metrics.get("summary")
    if not isinstance(summary, dict):
        return [(k, _fmt(v)) for k, v in metrics.items() if isinstance(v, (int, float, str))]

    def ratio(key: str) -> str:
        spread = summary.get(f"{key}_range")
        return f"{summary[key]:.2f}x" + (f" [{spread[0]:.2f}-{spread[1]:.2f}]" if spread else "")

    label = summary.get("metric_label", "accuracy")
    rows = [("shipped", f"`{metrics.get('chosen_backend', '')}` ({metrics.get('chosen_by', '')})")]
    if isinstance(summary.get("accuracy"), float):
        against = [f"FP32 {summary['fp32_accuracy']:.4f}" if isinstance(summary.get("fp32_accuracy"), float) else "",
                   f"drop {summary['accuracy_drop_points']:+.2f} points"
                   if isinstance(summary.get("accuracy_drop_points"), float) else "",
                   f"{summary['dev_examples']} examples" if summary.get("dev_examples") else ""]
        said = "; ".join(a for a in against if a)
        rows.append((f"dev {label}", f"{summary['accuracy']:.4f}" + (f" ({said})" if said else "")))
    rows += [(f"dev {k}", _fmt(v)) for k, v in (summary.get("metrics") or {}).items() if k != summary.get("metric")]
    levels = summary.get("levels") or {}
    for depth, got in ((levels.get("shipped") or {}).get("per_level") or {}).items():
        fp32 = ((levels.get("fp32") or {}).get("per_level") or {}).get(depth) or {}
        rows.append((f"dev level {depth} micro-F1", f"{_fmt(got.get('micro_f1'))} (FP32 {_fmt(fp32.get('micro_f1'))}; "
                                                   f"{got.get('labels')} labels)"))
    sure = summary.get("accuracy_interval")
    if isinstance(sure, dict) and isinstance(sure.get("drop_points"), dict):
        metric, drop = sure["metric"], sure["drop_points"]
        rows.append((f"dev {label}, {drop['level']:.0%} interval",
                     f"[{metric['low']:.4f}, {metric['high']:.4f}]; the drop [{drop['low']:+.2f}, {drop['high']:+.2f}] "
                     f"points ({sure.get('how')})"))
    changed = summary.get("answers_changed")
    if isinstance(changed, dict) and isinstance(changed.get("changed"), int):
        rows.append(("dev answers not FP32's", f"{changed['changed']} of {changed.get('examples')}: "
                                               f"{changed.get('now_right')} now right, {changed.get('now_wrong')} now "
                                               f"wrong (validate's {changed.get('file')})"))
    rows += _dev_count_rows(summary.get("dev_counts"), names or {})
    if isinstance(summary.get("throughput_ratio"), float):
        rows.append(("throughput vs FP32", f"{ratio('throughput_ratio')} (median [min-max] of interleaved rounds, "
                                           f"batch {summary.get('batch_size')}, dev lengths)"))
    if isinstance(summary.get("anchor_ratio"), float):
        anchor = summary.get("anchor") or {}
        below = (summary.get("accuracy_interval") or {}).get("below_anchor_points")
        against = (f"; what ships {summary['accuracy_interval']['below_anchor_value']:+.2f} points below it, "
                   f"[{below['low']:+.2f}, {below['high']:+.2f}]") if isinstance(below, dict) else ""
        rows.append(("throughput vs the anchor", f"{ratio('anchor_ratio')} ({anchor.get('what', 'the anchor')}: "
                                                 f"{label} {_fmt(anchor.get('accuracy'))}{against})"))
    for key, name in (("batch1_p99_ms", "batch-1 p99 ms"), ("model_files_mib", "model files MiB")):
        if isinstance(summary.get(key), (int, float)):
            rows.append((name, f"{summary[key]:.2f}"))
    cpu = summary.get("cpu") or {}
    if cpu:
        rows.append(("measured on", f"{cpu.get('model')} ({', '.join(cpu.get('flags') or [])}), {cpu.get('cores')} cores"))
    return rows


def _share(k: int, n: int) -> str:
    """``k`` of ``n`` in percent, to the first decimal that shows it is not zero (1 of 10,000 is 0.01%, not 0.0%)."""
    pct = 100 * k / n if n else 0.0
    return f"{pct:.1f}%" if pct >= 0.1 or not k else f"{pct:.1g}%"


def _dev_count_rows(counts, names: dict) -> list[tuple[str, str]]:
    """The model card's rows for what the served counters read on dev (validate's ``dev_counts``): the shares a user
    holds ``ernie_bundle_truncated_items_total`` and ``ernie_bundle_answers_total`` to on traffic like dev's; a label
    shown with its name where it has one (``names``)."""
    if not isinstance(counts, dict) or not counts.get("items"):
        return []
    n, rows = counts["items"], []
    if isinstance(counts.get("truncated"), int):
        rows.append((f"dev {counts.get('truncated_what') or TRUNCATED_WHAT}",
                     f"{counts['truncated']} of {n} ({_share(counts['truncated'], n)}; served: "
                     "`ernie_bundle_truncated_items_total`)"))
    answers = counts.get("answers")
    if isinstance(answers, dict) and answers:
        total = sum(answers.values())
        mix = ", ".join(f"{label}{f' {names[label]}' if names.get(label, label) != label else ''} {_share(k, total)}"
                        for label, k in answers.items())
        rows.append(("dev answers by label", f"{mix} (of {total}; served: `ernie_bundle_answers_total`)"))
    return rows


def _card_models(task: str, pc: PackageConfig, meta: dict, choice: ModelChoice) -> list[str]:
    """The "What it is" lines of the model card: the kind's, around the lines every kind shares."""
    kind = _kind(meta)
    names = _names(task, pc, kind)
    if pc.api == fastdeploy_api.API:  # FastDeploy's example interface
        engine = f"the {choice.precision} model from `{choice.form}` ({pc.backend} backend, runtime `{pc.runtime}`)"
        return kind.fastdeploy_card_lines(names, pc, meta, engine)
    model_line = (f"- `{names.model}` ({pc.backend} backend, runtime `{pc.runtime}`): {choice.precision} model from `{choice.form}`"
                  + (f", TensorRT {pc.accelerator}" if pc.accelerator != "none" else "") + ".")
    batching = (f"- Batching: max_batch_size {pc.max_batch_size}, preferred {pc.preferred_batch_size}, queue delay "
                f"{pc.max_queue_delay_microseconds} µs; {pc.instances} {pc.device} instance(s) per model"
                + (f", {pc.engine_threads} engine thread(s) each." if pc.device == "CPU" else "."))
    return kind.card_lines(names, pc, meta, model_line, batching, choice)


def _card_deployment(task: str, pc: PackageConfig, meta: dict, prov: Provenance, deploy: DeployConfig) -> list[str]:
    """The model card's "Deploying and watching it": where the manifests send the bundle and what the alerts fire on
    and mean (the PrometheusRule the package stage writes beside it, built by the same call)."""
    from serving.bundle import manifests
    from serving.bundle.monitoring import DASHBOARD_FILE

    try:
        builtin, custom, _ = manifests.build(task, _deployed(task, pc, meta, prov), 0, deploy)
    except manifests.ManifestError:
        return []  # the package stage's manifests refuse it, naming why
    objects = {o["kind"]: o for o in builtin + custom}
    deployment, hpa = objects["Deployment"], objects["HorizontalPodAutoscaler"]["spec"]
    name, namespace = deployment["metadata"]["name"], deployment["metadata"]["namespace"]
    claim = deployment["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    dashboard = objects["ConfigMap"]["metadata"]["name"]
    rows = [(r["alert"], r["labels"]["severity"], r.get("for", "at once"),
             r["annotations"]["summary"].split(": ", 1)[-1], r["annotations"]["description"])
            for r in objects["PrometheusRule"]["spec"]["groups"][0]["rules"]]
    return [
        "", "## Deploying and watching it",
        f"- Image: `docker build --build-arg TASK={task} -t {image} .` in the ernie-bundle project (its Dockerfile "
        "installs this bundle's `requirements.txt`).",
        f"- Kubernetes: `kubectl apply -f kubernetes.yaml`: Deployment `{name}` in namespace `{namespace}` "
        f"({hpa['minReplicas']}-{hpa['maxReplicas']} replicas on CPU), reading this bundle from the "
        f"PersistentVolumeClaim `{claim}` at `{task}/`; Service, HorizontalPodAutoscaler, PodDisruptionBudget, "
        "ServiceMonitor (Triton's `/metrics`, port 8002). KServe: `kserve.yaml`.",
        f"- Grafana: `{DASHBOARD_FILE}`, also in the ConfigMap `{dashboard}` that kube-prometheus-stack's Grafana "
        "sidecar loads (label `grafana_dashboard: \"1\"`).",
        f"- Alerts (PrometheusRule `{name}`):", "",
        "| alert | severity | for | fires on | what it means |", "| --- | --- | --- | --- | --- |",
        *(f"| {alert} | {severity} | {wait} | {summary} | {description} |"
          for alert, severity, wait, summary, description in rows)]


def model_card(task: str, pc: PackageConfig, meta: dict, choice: ModelChoice, prov: Provenance,
               deploy: DeployConfig | None = None) -> str:
    kind = _kind(meta)
    lines = [
        f"# {task} — ernie-bundle serving bundle",
        "",
        prov.description or f"Chinese {kind.describes} for task `{task}` ({meta['num_labels']} {kind.unit}), packaged for Triton Inference Server.",
        "",
        "## What it is",
        *_card_models(task, pc, meta, choice),
        "",
        "## How it was made",
        "finetune -> finetune-check -> compress -> export -> validate -> package (ernie-bundle).",
    ]
    if prov.selected_candidate or meta.get("selected_candidate"):
        lines.append(f"- Selected compression candidate: `{json.dumps(prov.selected_candidate or meta.get('selected_candidate'), ensure_ascii=False)}`")
    if prov.source_model_sha256:
        lines.append(f"- Source model SHA-256: `{prov.source_model_sha256}`; data fingerprint `{prov.data_fingerprint}`")
    if prov.data_dir:
        lines.append(f"- Data: `{prov.data_dir}` (the serving tools' default dev set: `make smoke`, `make perf`, ...)")
    lines += ["", "## Measured numbers (validate stage)"]
    rows = _measured(prov.metrics, dict(zip(meta.get("labels") or [], meta.get("label_names") or [])))
    if rows:
        lines += ["| metric | value |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows]
    else:
        lines.append("No validation metrics were available when this bundle was packaged.")
    if prov.gates:
        lines += ["", "## Gates", "```json", json.dumps(prov.gates, indent=2, ensure_ascii=False), "```"]
    if prov.example_scores is not None:
        lines += ["", f"`{SCORES_FILE}` holds each dev example's share of the metric above. The next release's gate, "
                      f"`make gate TASK={task} BASELINE=<this folder>/bundle.json`, compares the two example by "
                      "example and gives the accuracy drop's 95% interval."]
    lines += [
        "", "## Using it",
        "```",
        f"python -m serving.server --repository <dir containing {task}/> --task {task}",
        ("python -m serving.client " + kind.client_example.format(task=task) if pc.api != fastdeploy_api.API else
         f"python {kind.fastdeploy.client}   # FastDeploy's own example client, unchanged"),
        "```",
        "Every file's SHA-256 is in bundle.json; the server launcher and each python model refuse a bundle that changed.",
    ]
    if deploy is not None:
        lines += _card_deployment(task, pc, meta, prov, deploy)
    return "\n".join(lines) + "\n"


def check_replaceable(target: Path) -> None:
    """PackageError unless ``target`` is absent, an empty directory or one of our bundles (a bundle.json whose
    "format" is ``ernie-bundle/...``, as every bundle has had): packaging replaces the target whole, and must never
    take a user's folder, or what a symbolic link points to, with it."""
    target = Path(target)
    if target.is_symlink():
        raise PackageError(f"{target} is a symbolic link: not replacing it or what it points to; remove the link "
                           "or set package.repository to another directory")
    if not target.exists():
        return
    if not target.is_dir():
        raise PackageError(f"{target} is a file, not a bundle: not replacing it; move it away or set package.repository")
    manifest = target / integrity.MANIFEST
    try:
        data = None if manifest.is_symlink() else json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    fmt = data.get("format") if isinstance(data, dict) else None
    if not (isinstance(fmt, str) and fmt.startswith("ernie-bundle/")) and any(target.iterdir()):
        raise PackageError(f"{target} exists and is not an ernie-bundle bundle (no {integrity.MANIFEST} with "
                           "\"format\": \"ernie-bundle/...\"): not replacing it; move it away or set package.repository")


def _scratch_path(repository: Path, task: str, what: str) -> Path:
    """Where a package builds (``what`` tmp) or sets aside (old) a bundle, beside the target: named by this process,
    so that a later package tells a copy a killed one left (its process gone) from one still being written."""
    import os

    return repository / f".{task}.{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _process_alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    except (OverflowError, ValueError):  # no such pid can exist
        return False
    return True


def sweep_stale_copies(repository: Path, task: str, legacy_age_s: float = 3600.0) -> list[Path]:
    """Remove the copies of ``task``'s bundle that killed packages left in ``repository`` (``kill -9`` while building
    leaves a whole ``.<task>.tmp-*``; between the two renames, a ``.<task>.old-*``): only folders of exactly that
    name, for this task, whose process is gone; a copy named before names carried the pid only once it is
    ``legacy_age_s`` old (no package takes that long).  Returns what was removed."""
    import re
    import time

    pattern = re.compile(rf"\.{re.escape(task)}\.(?:tmp|old)-(?:(\d+)-)?[0-9a-f]{{8}}")
    removed = []
    try:
        entries = sorted(Path(repository).iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir():
            continue
        if match.group(1) is not None:
            if _process_alive(int(match.group(1))):
                continue  # still being written (or set aside) by a live package
        else:
            try:
                if time.time() - entry.stat().st_mtime < legacy_age_s:
                    continue
            except OSError:
                continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def write_repository(
    repository: Path,
    task: str,
    exported: ExportArtifacts,
    pc: PackageConfig,
    provenance: Provenance | None = None,
    preferred_precision: str | None = None,
    max_mb: float | None = None,
    deploy: DeployConfig | None = None,
    preferred_form: str | None = None,
) -> BundleInfo:
    """Write ``<repository>/<task>`` atomically and return what was written.  With ``deploy``, the bundle also
    carries its Kubernetes / KServe manifests (``serving.bundle.manifests``), validated before anything is swapped in.
    ``preferred_form``: the export form validation chose (``package.runtime: auto`` serves it in its engine)."""
    if not task or task in (".", "..") or Path(task).name != task:  # the bundle goes *in* the repository
        raise PackageError(f"task {task!r} is not a plain name: the bundle would not be written inside {repository}")
    repository = Path(repository)
    target = repository / task
    check_replaceable(target)  # first: nothing is built next to what we would refuse to replace
    repository.mkdir(parents=True, exist_ok=True)
    sweep_stale_copies(repository, task)  # what killed packages of this task left: whole bundle copies
    prov = provenance or Provenance()
    meta = exported.read_meta()
    kind = _kind(meta)
    problem = kind.meta_problem(meta)  # what the served windowing would trip on
    if problem:
        raise PackageError(f"{exported.meta}: {problem}")
    check_api(kind.name, pc)  # a combination FastDeploy's examples do not serve: one line, exit 2
    pc = fastdeploy_api.resolved(pc, kind.fastdeploy)
    choice = choose_model(exported, pc, preferred_precision, preferred_form)
    own = served_engine_of_form(choice.form)
    pc = pc.resolved(own.name if own is not None else "onnxruntime")
    pc, settings = _serving_settings(pc, prov, choice, meta)
    tmp = _scratch_path(repository, task, "tmp")
    tmp.mkdir()
    try:
        _build(tmp, task, exported, pc, meta, choice)
        (tmp / "README.md").write_text(model_card(task, pc, meta, choice, prov, deploy), encoding="utf-8")
        if prov.example_scores is not None:
            shutil.copyfile(prov.example_scores, tmp / SCORES_FILE)
        deployment, memory = _deploy_manifests(tmp, task, pc, deploy, meta, prov) if deploy is not None else (None, None)
        manifest = _manifest(tmp, task, pc, meta, choice, prov, deployment, settings, memory)
        (tmp / integrity.MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        integrity.verify_bundle(tmp)  # what we hand over must pass the check the server makes
        size_mb = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()) / 2**20
        if max_mb is not None and size_mb > max_mb:
            raise BundleTooLarge(f"bundle is {size_mb:.1f} MiB, over the limit of {max_mb} MiB")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = _scratch_path(repository, task, "old")
    try:
        check_replaceable(target)  # again: the build took a while, and the target may have changed meanwhile
    except PackageError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return BundleInfo(target, manifest, choice)
