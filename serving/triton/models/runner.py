"""``<task>_model`` on the python backend: the model run in-process by ONNX Runtime, OpenVINO or Paddle Inference.

Requests of different lengths arrive together (the config allows ragged batching); they are
re-padded with the vocabulary's [PAD] id into one array and run in one call, then split back
(per-token logits [B, T, C] are also cut back to each request's own T).
ERNIE masks [PAD] positions, so the extra padding does not change a request's logits beyond float
rounding.
"""

from __future__ import annotations  # `str | None` below: Python 3.8 (FastDeploy's serving image) runs this file too

import json
import sys
from pathlib import Path

import numpy as np  # before paddle, always

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class _OrtEngine:
    def __init__(self, path, threads, gpu):
        import onnxruntime as ort

        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
        # ORT's pool threads spin between ops by default: alone on a machine that buys a little latency, but in a
        # server they burn the cores the tokenizer, post-processing and Triton itself need.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = ["CPUExecutionProvider"]
        if gpu and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        self.session = ort.InferenceSession(str(path), so, providers=providers)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.output = self.session.get_outputs()[0].name

    def __call__(self, feeds):
        return self.session.run([self.output], {k: v for k, v in feeds.items() if k in self.inputs})[0]


class _OpenVINOEngine:
    """OpenVINO on the CPU with the properties the bundle was validated with (``engine_properties``: fixed
    precision f32, no per-batch dynamic quantization, no core pinning across instances)."""

    def __init__(self, path, threads, gpu, properties):
        try:
            import openvino as ov
        except ImportError as exc:  # one line in the server log; the model (and the server) does not come up
            raise RuntimeError(f"this bundle's model runs in OpenVINO, which this Triton's python cannot import ({exc}); "
                               "install openvino==2026.4.1 there") from None
        props = dict(properties)
        if threads:
            props["INFERENCE_NUM_THREADS"] = threads
        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(str(path)), "CPU", props)
        self.request = self.compiled.create_infer_request()
        self.inputs = {name for i in self.compiled.inputs for name in i.get_names()}
        self.output = self.compiled.output(0)

    def __call__(self, feeds):
        result = self.request.infer({k: v for k, v in feeds.items() if k in self.inputs})
        return np.array(result[self.output])  # a copy: the request reuses its output buffer


class _PaddleEngine:
    def __init__(self, path, threads, gpu):
        from paddle import inference

        config = inference.Config(str(path), str(path.with_suffix(".pdiparams")))
        if gpu:
            config.enable_use_gpu(256, 0)
        else:
            config.disable_gpu()
            config.set_cpu_math_library_num_threads(threads or 1)
        config.disable_glog_info()
        self.predictor = inference.create_predictor(config)
        self.inputs = self.predictor.get_input_names()

    def __call__(self, feeds):
        for name in self.inputs:
            self.predictor.get_input_handle(name).copy_from_cpu(feeds[name])
        self.predictor.run()
        return self.predictor.get_output_handle(self.predictor.get_output_names()[0]).copy_to_cpu()


def make_engine(folder: Path, params: dict, gpu: bool):
    """The in-process engine named by the config's ``engine``/``model_file``/``threads`` parameters (also
    used by the fused classifier, which loads this file as its ``runner.py``)."""
    path = folder / params["model_file"]
    threads = int(params.get("threads", "0") or 0)
    engine = params["engine"]
    if engine == "onnxruntime":
        return _OrtEngine(path, threads, gpu)
    if engine == "openvino":
        return _OpenVINOEngine(path, threads, gpu, json.loads(params.get("engine_properties") or "{}"))
    if engine == "paddle":
        return _PaddleEngine(path, threads, gpu)
    raise RuntimeError(f"unknown engine {engine!r} in the model config (onnxruntime, openvino, paddle)")


class TritonPythonModel(model_support.Batched):
    folder, what = HERE, "inference"

    def setup(self, params):
        self.pad_id = int(params.get("pad_id", "0"))
        self.max_seq_len = int(params.get("max_seq_len", "0") or 0)
        self.vocab_size = int(params.get("vocab_size", "0") or 0)
        self.engine = make_engine(HERE, params, self.gpu)

    def problem(self, ids: np.ndarray, types: np.ndarray) -> str | None:
        """What is wrong with one request's arrays (None: nothing), checked before it may join a batch."""
        if ids.ndim != 2 or types.shape != ids.shape or 0 in ids.shape:
            return f"input_ids {list(ids.shape)} and token_type_ids {list(types.shape)} must be one non-empty [texts, tokens] shape"
        if self.max_seq_len and ids.shape[1] > self.max_seq_len:
            return f"{ids.shape[1]} tokens per text is over this model's max_seq_len {self.max_seq_len}"
        if ids.min() < 0 or (self.vocab_size and ids.max() >= self.vocab_size):
            return f"input_ids must be vocabulary ids in [0, {self.vocab_size}), got {ids.min()}..{ids.max()}"
        if types.min() < 0 or types.max() > 1:
            return f"token_type_ids must be 0 or 1, got {types.min()}..{types.max()}"
        return None

    def take(self, request):
        ids, types = self.tensor(request, "input_ids"), self.tensor(request, "token_type_ids")
        problem = self.problem(ids, types)
        if problem:  # answered alone; its batch mates still run
            raise model_support.Refused(problem)
        return ids, types

    def run(self, parts):
        width = max(ids.shape[1] for ids, _ in parts)
        total = sum(ids.shape[0] for ids, _ in parts)
        ids = np.full((total, width), self.pad_id, dtype=np.int64)
        types = np.zeros((total, width), dtype=np.int64)
        for rows, (a, b) in zip(model_support.slices([a for a, _ in parts]), parts):
            ids[rows, : a.shape[1]] = a
            types[rows, : b.shape[1]] = b
        return np.asarray(self.engine({"input_ids": ids, "token_type_ids": types}), dtype=np.float32)

    def split(self, logits, parts):
        for rows, (a, _) in zip(model_support.slices([a for a, _ in parts]), parts):
            part = logits[rows]
            if part.ndim == 3:  # per-token logits (token classification, reading comprehension): back to this request's width
                part = np.ascontiguousarray(part[:, : a.shape[1]])
            yield {"logits": part}
