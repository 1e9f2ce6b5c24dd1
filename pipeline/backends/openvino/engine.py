"""OpenVINO as compress sees it (``pipeline.backends.engine.CpuEngine``): NNCF's INT8 recipe search, and CPU
sessions compiled with the task's ``openvino:`` properties (recorded on each candidate, so what was timed is what
ships).  It has fixed-scale INT8 only: no per-batch form.  Served from its own IR (``served.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pipeline.backends.engine import CpuEngine, Runtime, RunOptions, ServedEngine
from pipeline.backends.openvino.config import OpenVINOConfig
from pipeline.contract import Form, Precision, register_form

SECTION = "openvino"  # the task config's openvino: section (OpenVINOConfig)


def _own(cfg) -> OpenVINOConfig:
    """The task config's openvino: section."""
    return cfg.engine_settings[SECTION]


def _search(source: Path, out_path: Path, rows, cfg, cache_dir: Path, baseline: Path | None, log):
    from pipeline.backends.openvino.quantize import search_recipe

    return search_recipe(source, out_path, rows, cfg.quantization, cfg.gates.max_accuracy_drop, cache_dir,
                         baseline=baseline, log=log, properties=_own(cfg).cpu_properties(),
                         width_independent=_own(cfg).width_independent)


def _speed_form(source: Path, out_path: Path, rows, cfg):
    from pipeline.backends.openvino.quantize import build, calibration_items
    from pipeline.quantization.recipe import Int8Recipe

    # scales do not change speed: one batch calibrates it
    return build(source, out_path, calibration_items(rows.feeds[:1], rows.pad_id), Int8Recipe(),
                 width_independent=_own(cfg).width_independent)


def _open(path: Path, precision: str, settings: dict):
    from pipeline.backends.openvino.session import session

    return session(path, precision=precision, properties=OpenVINOConfig(**settings.get(SECTION, {})).cpu_properties())


def _settings(cfg) -> dict:
    return {SECTION: dataclasses.asdict(_own(cfg))}


def _form_params(cfg) -> dict:
    from importlib import metadata

    versions = {}
    for package in ("openvino", "nncf"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    own = _own(cfg)
    return {"alphas": cfg.quantization.openvino_smooth_alphas, "inference_precision": own.inference_precision,
            "properties": own.served(),  # every property, defaults too: each changes numerics
            "width_independent": own.width_independent, **versions}


def _check(cfg) -> None:
    from pipeline.errors import ConfigError

    why = _missing()
    if why:
        raise ConfigError(f"compress.engines: openvino cannot run here: {why} (or --set 'compress.engines=[onnxruntime]')")
    _own(cfg).check()  # a property the CPU plugin refuses: named now, not after DynaBERT


# Its own shipped form, beside the export's ONNX forms: compress builds it for the selected width, bundles serve it.
FORM = register_form(Form("openvino_int8", "openvino/int8.xml", Precision.INT8, companions=(".bin",))).name

def _validate_open(path: Path, opts: RunOptions):
    """As validate opens it: the task's openvino: properties, with validate's threads."""
    from pipeline.backends.openvino.session import session

    own = opts.engine_settings.get(SECTION)
    props = own.cpu_properties(opts.threads or 0) if own is not None else None
    return session(path, precision="int8", threads=opts.threads, properties=props)


def _missing() -> str | None:
    from pipeline.backends.openvino import missing

    return missing()


ENGINE = CpuEngine(
    name="openvino", int8_suffix="ov-int8", quantization="nncf", candidate_file="model.xml",  # model.bin beside it
    where="OpenVINO on CPU (INT8 from NNCF's recipe search)",
    search=_search, open=_open, speed_form=_speed_form, settings=_settings, check=_check, form=FORM, form_params=_form_params,
    # served from its own IR, with the CPU properties validate ran it with; one instance has every core (its
    # threads share one request: MEASUREMENTS.md, served at the engine's speed)
    served=ServedEngine(name="openvino", served="pipeline.backends.openvino.served", model_file="model.xml",
                        distribution="openvino", import_name="openvino", form=FORM,
                        properties=True, one_instance=True),
    section=(SECTION, OpenVINOConfig),
    # its frontend reads model.pdmodel; FP32 there is 2.5x dygraph's pace (TNEWS's dev set, Zen 4, MEASUREMENTS.md)
    opens_paddle_program=True,
    # its INT8 IR, its ratio taken to ONNX Runtime's FP32 (the same base as ONNX Runtime's INT8: one yardstick per CPU)
    runtimes=(Runtime("openvino-cpu-int8", "openvino", "cpu", "int8", FORM, _validate_open, _missing,
                      ratio_base="onnxruntime-cpu-fp32"),))
