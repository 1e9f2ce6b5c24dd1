"""The bundle's own model run offline (no server): the reference the smoke test and load test compare to.

Tokenizes with ``pipeline.tokenizer.Tokenizer`` over the bundle's vocabulary (the pipeline's code,
not the served copy) and runs the very model file inside ``<task>_model/1/`` in the engine that serves it.
Imports the pipeline lazily: only these developer tools need it.

Each kind's offline answers live in its tool module (``serving/kinds/<kind>/tools.py``: ``offline_entities``,
``offline_answers``, ``offline_extractions``): they run the pipeline's ``bio`` / ``windows`` + ``spans`` modules
(the originals of the copies inside the bundle) with the same tokenizer settings as the served pre-processing, and
group the items into requests in order (``request_groups``), exactly as ``serving.tools.client`` sends them: every
model call then sees the same rows as the served one (the windowed kinds window through ``windower``).  The served
OpenVINO engine pads a batch's width further, to its bucket (``width_buckets`` in
``pipeline/backends/openvino/served.py``; warmed only in the server), and Triton's batcher pads a text to its
longest batch mate.  Neither changes which rows a kernel sees, but OpenVINO's float reductions over the width treat
a last part of 1-15 columns apart: a text whose tokens reach into it gets other roundings than the same text in a
wider batch, and an INT8 form's quantizer can turn one into a whole step (CLUENER: 4 of 300 texts, up to 0.057 in a
logit, MEASUREMENTS.md).  ``BundleModel.pad_to`` runs a text as such a batch would.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from serving.triton.integrity import verify_bundle
from serving.bundle.model_config import ModelNames


@dataclass(frozen=True)
class BundleModel:
    root: Path
    manifest: dict
    # Every batch padded with [PAD] to this many tokens before the model (0: its own width): what a longer batch mate
    # does to a text in the server (the smoke test's look at a served answer that differs from the offline one).
    pad_to: int = 0

    @classmethod
    def open(cls, root: Path) -> "BundleModel":
        return cls(Path(root), verify_bundle(root, allow_bytecode=True))  # it may be serving meanwhile

    @property
    def names(self) -> ModelNames:
        # the served names (FastDeploy's with package.api fastdeploy), as packaged
        served = (self.manifest.get("models") or {}).get("ensemble", self.manifest["task"])
        return ModelNames(served, fused=self.manifest.get("layout") == "fused")

    @property
    def tokenizer_dir(self) -> Path:
        return self.root / self.names.tokenizer / "1"

    @property
    def model_dir(self) -> Path:
        return self.root / self.names.model / "1"

    def labels(self) -> list[str]:
        lines = (self.root / self.names.postprocess / "1" / "labels.json").read_text(encoding="utf-8").splitlines()
        return [str(json.loads(line)["label"]) for line in lines if line.strip()]

    @property
    def task_type(self) -> str:
        return str(self.manifest.get("task_type", "classification"))

    @property
    def max_seq_len(self) -> int:
        return int(self.manifest["max_seq_len"])

    def wordpiece(self):
        """The HF ``tokenizers`` WordPiece the served pre-processing builds: bundle vocab, no truncation."""
        from serving.triton.text_input import wordpiece

        return wordpiece(self.tokenizer_dir)

    def tokenizer(self):
        from pipeline.tokenizer import Tokenizer

        return Tokenizer.from_model_dir(self.tokenizer_dir, int(self.manifest["max_seq_len"]))

    def session(self, threads: int = 0):
        """A callable ``(input_ids, token_type_ids) -> logits`` over the bundle's model file, run by the served engine
        bundle.json names (a native backend's file by the first registered engine whose model file it is:
        ``pipeline.backends.registry.served_engines``), in this process and unwarmed, with the CPU properties the
        bundle serves with (bundle.json); each batch first padded to ``pad_to`` tokens when that is wider."""
        import pipeline  # noqa: F401  (numpy before paddle)
        from pipeline.backends.registry import served_engine, served_engines

        served = served_engine(str(self.manifest.get("engine")))
        if served is None or not (self.model_dir / served.model_file).is_file():  # a native backend's file
            served = next((e for e in served_engines() if (self.model_dir / e.model_file).is_file()), None)
        if served is None:
            raise FileNotFoundError(f"{self.model_dir}: no model file any registered engine runs "
                                    f"({', '.join(e.model_file for e in served_engines())})")
        params = {"engine_properties": json.dumps(self.manifest.get("engine_properties") or {})}
        engine = served.engine(self.model_dir / served.model_file, threads, False, params)

        def run(ids, types):
            return np.asarray(engine({"input_ids": ids, "token_type_ids": types}))

        if not self.pad_to:
            return run
        pad_id = self.wordpiece().token_to_id("[PAD]")

        def padded(ids, types):
            width = ids.shape[1]
            if self.pad_to <= width:
                return run(ids, types)
            out = run(_pad_columns(ids, self.pad_to, pad_id), _pad_columns(types, self.pad_to, 0))
            return out[:, :width] if out.ndim == 3 else out  # a token-level answer: the batch's own columns

        return padded


def _pad_columns(a: np.ndarray, width: int, value: int) -> np.ndarray:
    out = np.full((a.shape[0], width), value, dtype=a.dtype)
    out[:, : a.shape[1]] = a
    return out


def encode_items(tok, items: Sequence):
    """Texts, or (text, text_pair) tuples, as the bundle's tokenizer encodes them offline (``pipeline.tokenizer``)."""
    items = list(items)
    if items and isinstance(items[0], tuple):
        return tok.encode([a for a, _ in items], [b for _, b in items])
    return tok.encode(items)


def offline_logits(bundle: BundleModel, texts: Sequence, batch_size: int = 64, threads: int = 0) -> np.ndarray:
    """Logits for ``texts`` (or (text, text_pair) tuples) in order; batches are length-sorted like the pipeline's
    evaluation."""
    from pipeline.progress import progress

    tok = bundle.tokenizer()
    run = bundle.session(threads)
    order = np.argsort([len(t) if isinstance(t, str) else len(t[0]) + len(t[1]) for t in texts], kind="stable")
    out = np.zeros((len(texts), int(bundle.manifest["num_labels"])), dtype=np.float32)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for idx in progress(batches, desc="offline model", unit="batch"):
        enc = encode_items(tok, [texts[i] for i in idx])
        out[idx] = run(enc.input_ids, enc.token_type_ids)
    return out


@dataclass
class ModelOnly:
    """The bundle's model file alone on requests prepared in advance (tokenized, padded): the yardstick a served
    rate is held to.  Every prepared batch runs once when it is made, so every padded width is warm before a round
    is timed (OpenVINO compiles a kernel per new shape: a first call is slow), as the served engine is warmed at
    load."""

    run: object  # (input_ids, token_type_ids) -> logits
    batches: list  # [(input_ids, token_type_ids)]
    items: list  # items per batch (texts; one question or one UIE text per batch of windows)

    def __post_init__(self):
        for ids, types in self.batches:
            self.run(ids, types)

    def round(self, seconds: float) -> tuple[float, float]:
        """(items/s, CPU seconds per item) over one round of ``seconds``; CPU is this process's (every engine thread)."""
        done, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < seconds:
            for (ids, types), n in zip(self.batches, self.items):
                self.run(ids, types)
                done += n
                if time.perf_counter() - t0 >= seconds:
                    break
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return done / wall, cpu / max(done, 1)

    def p50_ms(self, seconds: float) -> float:
        """Median milliseconds of one call over a round of ``seconds`` (the batch-1 latency a lone request is held to)."""
        times: list[float] = []
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for ids, types in self.batches:
                start = time.perf_counter()
                self.run(ids, types)
                times.append(time.perf_counter() - start)
                if time.perf_counter() - t0 >= seconds:
                    break
        return 1000 * float(np.median(times))


def engine_threads(bundle: BundleModel) -> int:
    """The yardstick's intra-op threads: every core this process may use, whatever the served instances x threads
    are (the model alone on the machine is what a served rate is held to; a 1-thread yardstick for a 2 x 1 bundle
    would make the serving configuration look better than the model)."""
    import os

    return max(1, len(os.sched_getaffinity(0)))


def text_batches(bundle: BundleModel, texts: Sequence[str], batch_size: int) -> ModelOnly:
    """Texts in requests of ``batch_size`` in the order given (as a client sends them), tokenized as served."""
    tok = bundle.tokenizer()
    encoded = [encode_items(tok, texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    return ModelOnly(bundle.session(engine_threads(bundle)), [(b.input_ids, b.token_type_ids) for b in encoded],
                     [len(b.input_ids) for b in encoded])


def windower(bundle: BundleModel, section: str, first_len: str):
    """``(firsts, contexts) -> (windows, input_ids, token_type_ids)``: ``pipeline.reading.windows`` over the bundle's
    WordPiece, as its served pre-processing windows (reading comprehension's questions, UIE's prompts, each with its
    context): bundle.json's ``section`` gives doc_stride and the first segment's length (``first_len``:
    max_query_len, max_prompt_len); padded with ``[PAD]``."""
    from pipeline.reading import windows

    settings = bundle.manifest[section]
    tok = bundle.wordpiece()
    pad_id = tok.token_to_id("[PAD]")

    def window(firsts: Sequence[str], contexts: Sequence[str]):
        wins = windows.make_windows(tok, firsts, contexts, max_seq_len=bundle.max_seq_len,
                                    doc_stride=int(settings["doc_stride"]), max_query_len=int(settings[first_len]))
        return (wins, *windows.pad_windows(wins, pad_id))

    return window


def window_batches(bundle: BundleModel, window, requests: Sequence[tuple[Sequence[str], Sequence[str]]]) -> ModelOnly:
    """perf's yardstick for a windowed kind: each request's (firsts, contexts) windowed by ``window`` (``windower``)
    and run as one batch, what the served model executes per request (max_batch_size 0: Triton batches nothing);
    the first 200 requests."""
    batches = [window(firsts, contexts)[1:] for firsts, contexts in requests[:200]]
    return ModelOnly(bundle.session(engine_threads(bundle)), batches, [1] * len(batches))


def model_only_throughput(bundle: BundleModel, texts: Sequence[str], batch_size: int, seconds: float = 5.0, threads: int = 0) -> float:
    """Texts/s of the model file alone (pre-tokenized batches), the yardstick for served throughput."""
    return text_batches(bundle, texts, batch_size).round(seconds)[0]


def request_groups(n: int, size: int) -> list[range]:
    """Item indices in requests of ``size``, in order, as ``serving.tools.client`` sends them."""
    return [range(i, min(i + size, n)) for i in range(0, n, size)]
