"""OpenVINO inside Triton's python backend: the engine ``runner.py`` runs a bundle's OpenVINO IR with.

Copied into bundles as ``<task>_model/1/engine.py`` (``pipeline.backends.engine.ServedEngine``): it imports numpy
and OpenVINO only.  ``serving.tools.offline`` runs the same class, unwarmed, as the offline reference."""

from __future__ import annotations

import json

import numpy as np


def width_buckets(max_seq_len: int) -> list[int]:
    """The padded widths an OpenVINO engine runs: multiples of 8 up to 64, of 16 up to 128, of 32 up to 256, of 64
    beyond (at most max_seq_len, which is always one); multiples of 4 up to 64 for a short-text model (max_seq_len
    at most 128: titles, CLUENER's sentences, UIE's prompt and text).  There a batch of 32 texts padded to multiples
    of 8 ran 1.07-1.09x the time of its exact width, to multiples of 4 1.00-1.02x (MEASUREMENTS.md); each warmed
    shape holds ~4 MB, so a long-window model (reading comprehension, whose windows are mostly full) keeps steps of 8."""
    fine = 4 if max_seq_len <= 128 else 8
    out, w = [], 0
    while w < max_seq_len:
        w += fine if w < 64 else 16 if w < 128 else 32 if w < 256 else 64
        out.append(min(w, max_seq_len))
    return sorted(set(out))


def row_buckets(max_rows: int) -> list[int]:
    """The row counts an OpenVINO engine runs: each count up to 16 as it is (a batch of 9 padded to 16 would cost
    7 texts' compute), then multiples of 8 up to ``max_rows`` (a few padding rows on a batch already large)."""
    return sorted({*range(1, min(16, max_rows) + 1), *range(24, max_rows + 1, 8), max(1, max_rows)})


class Engine:
    """OpenVINO on the CPU with the properties the bundle was validated with (``engine_properties``: fixed
    precision f32, no per-batch dynamic quantization, no core pinning across instances).

    OpenVINO builds its kernels for each input shape the first time it sees it, and keeps them in a cache: a first
    call on a new (rows, width) costs several calls' time.  Served batches come in every row count and every width,
    so an engine left to its defaults keeps meeting new shapes (measured on TNEWS, 2 cores: 320 titles/s over the
    first 250 batches of mixed sizes, still 830 after 1,500, where the same batches on warm shapes ran 1,000-1,100).
    So each batch is padded with [PAD] to a width of ``width_buckets`` (ERNIE masks [PAD]: a text's logits change
    only by float rounding, as with any longer batch mate: where its tokens reach into the last, partial 16-column
    block of the width, unless the IR was built ``width_independent``: then not at all; MEASUREMENTS.md), a batch of more than 16 rows with [PAD] rows to a multiple of
    8 (``row_buckets``: rows never mix, a padding row changes nobody's logits), and ``warm`` runs every (rows,
    width) bucket once at load (TNEWS, 64 rows x 16 widths: 22 x 16 shapes, about 9 s on 2 cores)."""

    def __init__(self, path, threads: int, gpu: bool, params: dict):
        try:
            import openvino as ov
        except ImportError as exc:  # one line in the server log; the model (and the server) does not come up
            raise RuntimeError(f"this bundle's model runs in OpenVINO, which this Triton's python cannot import ({exc}); "
                               "install the openvino version bundle.json's serving versions name there") from None
        props = json.loads(params.get("engine_properties") or "{}")
        if threads:
            props["INFERENCE_NUM_THREADS"] = threads
        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(str(path)), "CPU", props)
        self.request = self.compiled.create_infer_request()
        self.inputs = {name for i in self.compiled.inputs for name in i.get_names()}
        self.output = self.compiled.output(0)
        self.pad_id = int(params.get("pad_id", "0") or 0)
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
