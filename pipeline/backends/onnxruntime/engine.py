"""ONNX Runtime as compress sees it (``pipeline.backends.engine.CpuEngine``): its fixed-scale INT8 recipe search,
its per-batch form where the task asks for one, and its CPU sessions; served from its ONNX forms (``served.py``)."""

from __future__ import annotations

from pathlib import Path

from pipeline.backends.engine import CpuEngine, Runtime, RunOptions, ServedEngine


def _search(source: Path, out_path: Path, rows, cfg, cache_dir: Path, baseline: Path | None, log):
    from pipeline.backends.onnxruntime.int8.search import search_recipe
    from pipeline.contract import detect_cpu

    return search_recipe(source, out_path, rows, cfg.quantization, cfg.gates.max_accuracy_drop, detect_cpu(), cache_dir,
                         baseline=baseline, log=log)


def _speed_form(source: Path, out_path: Path, rows, cfg):
    from pipeline.backends.onnxruntime.int8.recipe import build
    from pipeline.backends.onnxruntime.int8.stats import activation_ranges
    from pipeline.quantization.recipe import Int8Recipe

    ranges = activation_ranges(source, rows.feeds[:1], rows.pad_id)  # scales do not change speed: one batch
    return build(source, out_path, ranges, Int8Recipe(), embeddings=cfg.quantization.int8_embeddings)


def _per_batch(source: Path, out_path: Path, cfg):
    from pipeline.backends.onnxruntime.quantize import dynamic_int8

    return dynamic_int8(source, out_path, cfg.quantization)


def _open(path: Path, precision: str, settings: dict):
    from pipeline.backends.onnxruntime.session import session

    return session(path, precision=precision)


def _cpu(precision: str):
    def open_(path: Path, opts: RunOptions):
        from pipeline.backends.onnxruntime.session import session

        return session(path, precision=precision, threads=opts.threads)
    return open_


def _gpu(provider: str, int8: bool):
    def open_(path: Path, opts: RunOptions):
        from pipeline.backends.onnxruntime.session import gpu_session
        from pipeline.backends.shapes import of_options

        return gpu_session(path, provider, of_options(opts), fp16=provider == "tensorrt", int8=int8)
    return open_


def _gpu_reason(provider: str):
    def reason():
        from pipeline.backends.onnxruntime.session import provider_missing

        return provider_missing(provider)
    return reason


# Its CPU forms, and its CUDA and TensorRT execution providers on GPU (TensorRT runs the QDQ form)
RUNTIMES = (
    Runtime("onnxruntime-cpu-fp32", "onnxruntime", "cpu", "fp32", "onnx_fp32", _cpu("fp32")),
    Runtime("onnxruntime-cpu-int8", "onnxruntime", "cpu", "int8", "onnx_int8", _cpu("int8")),
    Runtime("onnxruntime-cpu-int8-qdq", "onnxruntime", "cpu", "int8", "onnx_int8_qdq", _cpu("int8")),
    Runtime("ort-cuda", "onnxruntime", "gpu", "fp32", "onnx_fp32", _gpu("cuda", False), _gpu_reason("cuda")),
    Runtime("ort-tensorrt", "onnxruntime", "gpu", "int8", "onnx_int8_qdq", _gpu("tensorrt", True), _gpu_reason("tensorrt")),
)

ENGINE = CpuEngine(
    name="onnxruntime", int8_suffix="int8", quantization="ort", candidate_file="model.onnx",
    where="ONNX Runtime on CPU (FP32 ONNX per width, INT8 from the recipe search)",
    search=_search, open=_open, per_batch_int8=_per_batch, speed_form=_speed_form,
    int8_embeddings=lambda cfg: cfg.quantization.int8_embeddings,
    served=ServedEngine(name="onnxruntime", served="pipeline.backends.onnxruntime.served", model_file="model.onnx",
                        distribution="onnxruntime", import_name="onnxruntime",
                        gpu_distribution="onnxruntime-gpu"),
    runtimes=RUNTIMES)
