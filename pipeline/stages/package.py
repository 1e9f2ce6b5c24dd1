"""Stage ``package``: the export stage's models + validation results -> a Triton model repository.

The bundle is written to ``<package.repository>/<task>`` (default ``model_repository/tnews``) by
``serving.bundle.repository.write_repository``, atomically: a failure leaves the previous bundle as it
was.  ``out/`` keeps a copy of the manifest and model card for the record.

The repository lives outside ``out/``, so its state is one of this stage's inputs: a bundle that
was deleted or edited by hand makes the stage run again (an intact one costs one extra, cheap run
after the first).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipeline.stage import Stage
from pipeline.config import PROJECT_ROOT, TaskConfig


def repository_dir(cfg: TaskConfig) -> Path:
    p = Path(cfg.package.repository).expanduser()
    return p if p.is_absolute() else PROJECT_ROOT / p


def params(cfg: TaskConfig) -> dict:
    import dataclasses

    return {"package": dataclasses.asdict(cfg.package), "deploy": dataclasses.asdict(cfg.deploy),
            "description": cfg.description,  # the model card says it
            "max_accuracy_drop": cfg.gates.max_accuracy_drop,
            "max_bundle_mb": cfg.gates.max_bundle_mb}


def check(cfg: TaskConfig) -> None:
    """Before the first stage runs: the bundle's directory can be written (not after five stages of work), what
    sits at ``<repository>/<task>`` is ours to replace (not a user's folder or a link)."""
    from pipeline.errors import ModelError
    from pipeline.records import check_writable
    from serving.bundle.repository import PackageError, check_replaceable

    check_writable(repository_dir(cfg), "package.repository")
    try:
        check_replaceable(repository_dir(cfg) / cfg.task)
    except PackageError as exc:
        raise ModelError(str(exc)) from None


CODE_INPUT = "ernie-bundle's serving and pipeline code"


def inputs(cfg: TaskConfig) -> dict[str, str]:
    """Everything else comes from export and validate (the bundle itself is checked by external_intact).  make tune's
    record beside the bundle is an input: measured settings package the bundle again.  So is the code that writes
    the bundle: after an upgrade or a fix to a served model, the bundle in place was written by other code."""
    from pipeline.hashing import file_sha256
    from serving.bundle.repository import bundle_code_sha256
    from serving.bundle.serving_tune import tune_file

    record = tune_file(repository_dir(cfg) / cfg.task)
    return {CODE_INPUT: bundle_code_sha256(), **({"serving_tune": file_sha256(record)} if record.is_file() else {})}


def external_intact(cfg: TaskConfig, external: dict[str, str]) -> bool:
    """The packaged bundle is still there, the one this run wrote: the same bundle.json, and every file and
    directory as it lists them (the bytecode Triton's stubs cache while serving does not count)."""
    from pipeline.hashing import file_sha256
    from serving.triton.integrity import MANIFEST, BundleIntegrityError, verify_bundle

    target = repository_dir(cfg) / cfg.task
    if not (target / MANIFEST).is_file() or external.get("bundle") != file_sha256(target / MANIFEST):
        return False
    try:
        verify_bundle(target, allow_bytecode=True)
    except BundleIntegrityError:
        return False
    return True


def _artifacts(ctx) -> "object":
    from pipeline.backends.registry import own_forms
    from serving.bundle.repository import ExportArtifacts

    rec = ctx.upstream["export"]

    def path(role: str) -> Path | None:
        value = rec.artifacts.get(role)
        if value is None:
            return None
        p = Path(value)
        p = p if p.is_absolute() else ctx.runs_dir / "export" / "out" / p
        return p if p.exists() else None

    required = {r: path(r) for r in ("onnx_fp32", "tokenizer_dir", "labels", "meta")}
    missing = [r for r, p in required.items() if p is None]
    if missing:
        from pipeline.errors import ModelError

        raise ModelError(f"export stage output lacks {', '.join(missing)} (runs/{ctx.cfg.task}/export/out)")
    return ExportArtifacts(onnx_fp32=required["onnx_fp32"], tokenizer_dir=required["tokenizer_dir"], labels=required["labels"],
                           meta=required["meta"], onnx_int8=path("onnx_int8"), onnx_int8_qdq=path("onnx_int8_qdq"),
                           paddle_fp32=path("paddle_fp32"), paddle_int8=path("paddle_int8"),
                           own={f: p for f in own_forms() if (p := path(f)) is not None})


def _gates(ctx) -> dict:
    """validate's gates.json as written (the bundle manifest carries it whole)."""
    path = ctx.artifact("validate", "gates")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        from pipeline.errors import ModelError

        raise ModelError(f"{path}: cannot read validate's gates ({exc}); re-run the validate stage") from None
    return data if isinstance(data, dict) else {}


def _tune(cfg: TaskConfig, ctx):
    """make tune's record for this bundle, or None (none yet; an unreadable one is said and ignored)."""
    from serving.bundle.serving_tune import ServingTune, TuneRecordError, tune_file

    record = tune_file(repository_dir(cfg) / cfg.task)
    if not record.is_file():
        return None
    try:
        return ServingTune.read(record)
    except TuneRecordError as exc:
        ctx.log(f"[package] {exc}: packaging with the default serving settings")
        return None


def run(ctx):
    from pipeline.env import versions
    from pipeline.errors import ModelError
    from pipeline.handoffs import ExportManifest, Validation
    from pipeline.records import StageResult
    from pipeline.data import data_hashes
    from pipeline.hashing import file_sha256, json_sha256
    from serving.bundle.repository import BundleTooLarge, PackageError, Provenance, write_repository

    cfg = ctx.cfg
    exported = _artifacts(ctx)
    validation = ctx.handoff("validate", Validation)
    finetune = ctx.upstream.get("finetune")
    prov = Provenance(
        source_model_sha256=json_sha256(finetune.outputs) if finetune else "",
        data_fingerprint=json_sha256(data_hashes(cfg)),
        selected_candidate=ctx.handoff("export", ExportManifest).selected_candidate,
        metrics=validation.data,
        gates=_gates(ctx),
        versions=versions(),
        description=cfg.description,
        validated=validation.by_form(),
        data_dir=str(cfg.data_dir()) if cfg.data_dir() is not None and cfg.data_dir().is_dir() else "",
        serving_tune=_tune(cfg, ctx),
        example_scores=ctx.optional_artifact("validate", "example_scores"),
    )
    repo = repository_dir(cfg)
    try:
        info = write_repository(repo, cfg.task, exported, cfg.package, prov, validation.chosen_precision, cfg.gates.max_bundle_mb,
                                preferred_form=validation.chosen_form,
                                deploy=cfg.deploy)
    except BundleTooLarge as exc:  # checked before the swap: the previous bundle stays in place
        return StageResult(gate_error=f"{exc} (gates.max_bundle_mb)", message=str(exc))
    except PackageError as exc:
        raise ModelError(str(exc)) from None
    shutil.copyfile(info.path / "bundle.json", ctx.out_dir / "bundle.json")
    shutil.copyfile(info.path / "README.md", ctx.out_dir / "README.md")
    size_mb = info.size_bytes / 2**20
    runtime = info.manifest["runtime"]  # package.runtime auto: the engine validation chose
    ctx.log(f"[package] {info.path}: runtime {runtime}, {info.choice.precision} model ({info.choice.form}), {size_mb:.1f} MiB")
    pkg, settings = info.manifest["package"], info.manifest.get("serving_settings", {})
    why = settings.get("tune_not_applied")
    ctx.log(f"[package] serving {pkg['instances']} instance(s) x {pkg['engine_threads']} engine thread(s): "
            f"{settings.get('chosen_by', 'package defaults')}" + (f" (make tune's record not applied: {why})" if isinstance(why, str) else "")
            + (f"; {settings['kind_default']}" if settings.get("kind_default") else ""))
    deploy = info.manifest.get("deploy")
    if deploy:
        kinds = ", ".join(o["kind"] for o in deploy["objects"])
        ctx.log(f"[package] {' and '.join(deploy['files'])}: {kinds}, all valid (Kubernetes {cfg.deploy.kubernetes_version})")
        ctx.log(f"[package] requests {deploy['sizing']['why']}")
    return StageResult(
        metrics={"bundle_mb": round(size_mb, 3), "runtime": runtime, "precision": info.choice.precision,
                 "files": len(info.manifest["files"])},
        artifacts={"bundle_dir": str(info.path), "manifest": "bundle.json", "model_card": "README.md"},
        external_outputs={"bundle": file_sha256(info.path / "bundle.json")},  # it holds every file's hash
        message=f"{info.path} ({runtime}, {info.choice.precision}, {size_mb:.1f} MiB)",
    )


STAGE = Stage(
    name="package",
    description="Triton / FastDeploy model repository with pre- and post-processing, bundle manifest",
    requires=("finetune", "export", "validate"),  # finetune: the source model's hash in bundle.json
    params=params,
    inputs=inputs,
    run=run,
    check=check,
    external_intact=external_intact,
    version="5",  # kept for the records; its code is an input (CODE_INPUT), so a change to it needs no bump
)
