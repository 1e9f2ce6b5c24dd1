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


def width_buckets(max_seq_len: int) -> list[int]:
    """The padded widths an OpenVINO engine runs: multiples of 8 up to 64, of 16 up to 128, of 32 up to 256, of 64
    beyond (at most max_seq_len, which is always one).  At most an eighth more tokens than the batch's longest."""
    out, w = [], 0
    while w < max_seq_len:
        w += 8 if w < 64 else 16 if w < 128 else 32 if w < 256 else 64
        out.append(min(w, max_seq_len))
    return sorted(set(out))


def row_buckets(max_rows: int) -> list[int]:
    """The row counts an OpenVINO engine runs: each count up to 16 as it is (a batch of 9 padded to 16 would cost
    7 texts' compute), then multiples of 8 up to ``max_rows`` (a few padding rows on a batch already large)."""
    return sorted({*range(1, min(16, max_rows) + 1), *range(24, max_rows + 1, 8), max(1, max_rows)})


class _OpenVINOEngine:
    """OpenVINO on the CPU with the properties the bundle was validated with (``engine_properties``: fixed
    precision f32, no per-batch dynamic quantization, no core pinning across instances).

    OpenVINO builds its kernels for each input shape the first time it sees it, and keeps them in a cache: a first
    call on a new (rows, width) costs several calls' time.  Served batches come in every row count and every width,
    so an engine left to its defaults keeps meeting new shapes (measured on TNEWS, 2 cores: 320 titles/s over the
    first 250 batches of mixed sizes, still 830 after 1,500, where the same batches on warm shapes ran 1,000-1,100).
    So each batch is padded with [PAD] to a width of ``width_buckets`` (ERNIE masks [PAD]: a text's logits change
    only by float rounding, as with any batch mate), a batch of more than 16 rows with [PAD] rows to a multiple of
    8 (``row_buckets``: rows never mix, a padding row changes nobody's logits), and ``warm`` runs every (rows,
    width) bucket once at load (TNEWS, 64 rows x 8 widths: 22 x 8 shapes, about 8 s)."""

    def __init__(self, path, threads, gpu, properties, pad_id: int = 0):
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
        self.pad_id = pad_id
        self.rows: list[int] = []  # bucket lists: empty until warm (nothing padded)
        self.buckets: list[int] = []

    def warm(self, max_rows: int, max_seq_len: int) -> int:
        """Pad batches to ``row_buckets(max_rows)`` x ``width_buckets(max_seq_len)`` from now on, and run each of
        those shapes once, so that no request pays for a shape's first call.  Returns how many shapes ran."""
        self.rows, self.buckets = row_buckets(max_rows), width_buckets(max_seq_len)
        for rows in self.rows:
            for width in self.buckets:
                self._infer(np.full((rows, width), self.pad_id, dtype=np.int64), np.zeros((rows, width), dtype=np.int64))
        return len(self.rows) * len(self.buckets)

    def _infer(self, ids, types):
        feeds = {"input_ids": ids, "token_type_ids": types}
        result = self.request.infer({k: v for k, v in feeds.items() if k in self.inputs})
        return result[self.output]

    def __call__(self, feeds):
        ids, types = feeds["input_ids"], feeds["token_type_ids"]
        rows, width = ids.shape
        shape = (next((r for r in self.rows if r >= rows), rows), next((b for b in self.buckets if b >= width), width))
        if shape != (rows, width):
            ids, types = _pad(ids, shape, self.pad_id), _pad(types, shape, 0)
        out = self._infer(ids, types)
        # a copy (the request reuses its output buffer) of the batch's own rows (and, per token, its own width)
        return np.array(out[:rows, :width] if out.ndim == 3 else out[:rows])


def _pad(a: np.ndarray, shape: tuple[int, int], value: int) -> np.ndarray:
    out = np.full(shape, value, dtype=a.dtype)
    out[: a.shape[0], : a.shape[1]] = a
    return out


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


def make_engine(folder: Path, params: dict, gpu: bool, max_rows: int = 0):
    """The in-process engine named by the config's ``engine``/``model_file``/``threads`` parameters (also
    used by the fused classifier, which loads this file as its ``runner.py``), warmed for batches of up to
    ``max_rows`` rows of up to the ``max_seq_len`` parameter's width (engines that need it: OpenVINO)."""
    engine = _make(folder, params, gpu)
    if max_rows and hasattr(engine, "warm") and int(params.get("max_seq_len", "0") or 0):
        engine.warm(max_rows, int(params["max_seq_len"]))
    return engine


def _make(folder: Path, params: dict, gpu: bool):
    path = folder / params["model_file"]
    threads = int(params.get("threads", "0") or 0)
    engine = params["engine"]
    if engine == "onnxruntime":
        return _OrtEngine(path, threads, gpu)
    if engine == "openvino":
        return _OpenVINOEngine(path, threads, gpu, json.loads(params.get("engine_properties") or "{}"),
                               int(params.get("pad_id", "0") or 0))
    if engine == "paddle":
        return _PaddleEngine(path, threads, gpu)
    raise RuntimeError(f"unknown engine {engine!r} in the model config (onnxruntime, openvino, paddle)")


class TritonPythonModel(model_support.Batched):
    folder, what = HERE, "inference"

    def setup(self, params):
        self.pad_id = int(params.get("pad_id", "0"))
        self.max_seq_len = int(params.get("max_seq_len", "0") or 0)
        self.vocab_size = int(params.get("vocab_size", "0") or 0)
        self.engine = make_engine(HERE, params, self.gpu, self.max_rows)

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
