"""Client for a served bundle: tritonclient over HTTP or gRPC, with batching, retries and health checks.  The command
line (``python -m serving.client``) is ``serving.tools.client_cli``.  It looks up no task kind, so the kinds' tool
modules (``serving/kinds/<kind>/tools.py``) use it without either importing the other: ``infer`` sends any request,
and the built-in interfaces have a named method each (``classify``, ``extract_entities``, ``answer``,
``extract_schema``) for users.

Retries cover the transport (connection refused or reset, timeouts, server unavailable) with
exponential backoff; an error the server gives for the request itself (empty text, bad UTF-8,
batch too large) is not retried and is raised as ``RequestRejected``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

CLASS_OUTPUTS = ("label", "label_desc", "confidence", "probs", "topk_label", "topk_prob")
SET_OUTPUTS = ("labels", "label_descs", "label_probs", "count", "probs")  # a multi-label classifier's
NER_OUTPUTS = ("entities",)
MRC_OUTPUTS = ("answer", "start", "end", "score")
UIE_OUTPUTS = ("results",)
DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}



def grpc_module():
    """``tritonclient.grpc``, with gRPC's fork handlers off.  Our tools start children (perf_analyzer, tritonserver,
    haproxy) with a ``preexec_fn``, so with a fork, not vfork; with gRPC channels open, gRPC's pre-fork handler waited
    forever for its threads (seen: ``make test`` hung in make tune's perf_analyzer start, the stack in
    ``__run_prefork_handlers``).  The children exec at once and never use gRPC, so the handlers protect nothing."""
    without_grpc_fork_handlers()
    import tritonclient.grpc as tc

    return tc


def without_grpc_fork_handlers() -> None:
    """Turn gRPC's fork handlers off for this process (``grpc_module`` says why); read when gRPC first
    initializes, so before any gRPC use."""
    import os

    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

def launched_url(bundle, protocol: str) -> str | None:
    """The server ``make serve`` started for ``bundle`` (on ports of its choosing with ``--http-port 0``), said on
    stderr; None (the default ports) when there is none.  The tools and ``python -m serving.client`` ask it when no
    ``--url`` is given."""
    import sys

    from serving.server import running_url

    url = running_url(bundle, protocol)
    if url:
        print(f"server: {url} ({protocol}), the one `make serve` started for {bundle}", file=sys.stderr)
    return url


class ClientError(RuntimeError):
    """The server could not be reached or is not ready."""


class RequestRejected(ClientError):
    """The server answered the request with an error (bad input, too large a batch)."""


@dataclass(frozen=True)
class ServedClass:
    """One text's answer from a classification bundle."""

    text: str
    label: str
    label_desc: str
    confidence: float
    probs: tuple[float, ...]
    top_k: tuple[tuple[str, float], ...]
    text_pair: str | None = None  # a pair classifier's second text


@dataclass(frozen=True)
class ServedLabels:
    """One text's answer from a multi-label classification bundle: its labels (none, one or several)."""

    text: str
    labels: tuple[str, ...]  # the predicted ones, most probable first
    label_descs: tuple[str, ...]
    probs: tuple[float, ...]  # theirs
    ranked: tuple[tuple[str, float], ...]  # every label with its probability, most probable first
    text_pair: str | None = None


@dataclass(frozen=True)
class ServedEntity:
    type: str
    text: str
    start: int  # char offset into the text
    end: int  # exclusive


@dataclass(frozen=True)
class ServedAnswer:
    question: str
    text: str  # "" when the model found no valid span
    start: int  # char offset into the context; -1 when no span
    end: int  # exclusive
    score: float  # start + end logit


@dataclass(frozen=True)
class ServedSpan:
    """One span a UIE prompt found in a text."""

    text: str
    start: int  # char offset into the text
    end: int  # exclusive
    probability: float  # p(start) * p(end)


def _as_bytes(t: str | bytes) -> bytes:
    return t.encode("utf-8") if isinstance(t, str) else bytes(t)


def _as_str(t: str | bytes) -> str:
    return t if isinstance(t, str) else t.decode("utf-8", errors="replace")


def _transient(exc: Exception) -> bool:
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, InferenceServerException):
        status = str(exc.status() or "")
        # None/empty: the HTTP client saw no response at all; UNAVAILABLE/DEADLINE: gRPC transport.
        return status in ("", "None", "503", "StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
    return isinstance(exc, (ConnectionError, TimeoutError, OSError))


def check_url(url: str) -> str:
    """``host:port`` as tritonclient takes it (no scheme, a port 1-65535); ClientError saying what is wrong."""
    if "://" in url:
        raise ClientError(f"url {url!r}: give host:port without the scheme (e.g. 127.0.0.1:8000)")
    host, sep, port = url.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ClientError(f"url {url!r}: expected host:port with a port 1-65535 (e.g. 127.0.0.1:8000)")
    return url


class BundleClient:
    """A served bundle of any task kind (``model``: the task's name): health, the transport (``infer``) and a named
    method per built-in interface."""

    def __init__(self, url: str | None = None, protocol: str = "http", model: str = "tnews", timeout: float = 60.0,
                 retries: int = 3, backoff: float = 0.5):
        if protocol not in ("http", "grpc"):
            raise ValueError(f"protocol must be http or grpc, got {protocol!r}")
        if not timeout > 0:  # NaN too
            raise ClientError(f"timeout {timeout}: seconds, must be > 0")
        if retries < 0:
            raise ClientError(f"retries {retries}: must be >= 0")
        self.protocol, self.model, self.timeout, self.retries, self.backoff = protocol, model, timeout, retries, backoff
        self.url = check_url(url or DEFAULT_URLS[protocol])
        if protocol == "http":
            import tritonclient.http as tc

            self._client = tc.InferenceServerClient(self.url, connection_timeout=timeout, network_timeout=timeout)
        else:
            tc = grpc_module()
            self._client = tc.InferenceServerClient(self.url)
        self._tc = tc
        self._label_sets: bool | None = None  # answers_label_sets, once asked

    # -- health ---------------------------------------------------------------------------
    def health(self) -> dict[str, bool]:
        out = {"live": False, "ready": False, "model_ready": False}
        try:
            out["live"] = bool(self._client.is_server_live())
            out["ready"] = bool(self._client.is_server_ready())
            out["model_ready"] = bool(self._client.is_model_ready(self.model))
        except Exception:  # any transport failure means "not healthy", which is the answer
            pass
        return out

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            h = self.health()
            if h["model_ready"]:
                return
            time.sleep(0.5)
        raise ClientError(f"model {self.model!r} not ready at {self.url} ({self.protocol}) after {timeout:.0f}s: {self.health()}")

    # -- inference ------------------------------------------------------------------------
    def output_names(self) -> list[str]:
        """The served ensemble's output names: what tells its kind apart (``serving.tools.kinds.kind_of_outputs``)."""
        return self._metadata_names("outputs")

    def classify_raw(self, texts: Sequence, pairs: Sequence | None = None) -> dict[str, np.ndarray]:
        """One request to a classification bundle with ``len(texts)`` texts (and, for a pair classifier, as many
        ``pairs``: each text's second text); returns its outputs (``CLASS_OUTPUTS``) by name as arrays.  ``texts``
        may also be (text, text_pair) tuples."""
        texts, pairs = split_pairs(texts, pairs)
        arrays = {"text": np.array([[_as_bytes(t)] for t in texts], dtype=np.object_)}
        if pairs is not None:
            arrays["text_pair"] = np.array([[_as_bytes(t)] for t in pairs], dtype=np.object_)
        return self.infer(arrays, SET_OUTPUTS if self.answers_label_sets() else CLASS_OUTPUTS)

    def answers_label_sets(self) -> bool:
        """The served classifier is multi-label (its outputs are ``SET_OUTPUTS``); asked of the server once."""
        if self._label_sets is None:
            self._label_sets = "count" in self.output_names()
        return self._label_sets

    def _metadata_names(self, side: str) -> list[str]:
        """The served model's input or output names (``side``: inputs | outputs), over HTTP (dicts) or gRPC."""
        try:
            meta = self._client.get_model_metadata(self.model)
        except Exception as exc:  # noqa: BLE001 - any failure: the model is not there
            raise ClientError(f"model {self.model!r} at {self.url} ({self.protocol}): no metadata ({exc})") from None
        tensors = meta[side] if isinstance(meta, dict) else getattr(meta, side)
        return [t["name"] if isinstance(t, dict) else t.name for t in tensors]

    def infer(self, arrays: dict[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        """One request with the given BYTES inputs, returning the ``names`` outputs: the transport every method below
        uses, and what a kind's tools.py calls when its interface has no named method here.  Retries transport
        failures, raises RequestRejected for the rest."""
        inputs = []
        for name, arr in arrays.items():
            inp = self._tc.InferInput(name, list(arr.shape), "BYTES")
            inp.set_data_from_numpy(arr)
            inputs.append(inp)
        outputs = [self._tc.InferRequestedOutput(n) for n in names]
        from tritonclient.utils import InferenceServerException

        attempt = 0
        while True:
            try:
                if self.protocol == "grpc":
                    result = self._client.infer(self.model, inputs, outputs=outputs, client_timeout=self.timeout)
                else:
                    result = self._client.infer(self.model, inputs, outputs=outputs)
                return {n: result.as_numpy(n) for n in names}
            except Exception as exc:  # noqa: BLE001 - classified below
                if not _transient(exc) or attempt >= self.retries:
                    if isinstance(exc, InferenceServerException) and not _transient(exc):
                        raise RequestRejected(exc.message() or str(exc)) from None
                    raise ClientError(f"{self.protocol} {self.url}: {exc}") from None
                time.sleep(self.backoff * (2**attempt))
                attempt += 1

    def classify_batch(self, texts: Sequence, pairs: Sequence | None = None) -> list[ServedClass] | list[ServedLabels]:
        """One request; ``texts`` are texts, or (text, text_pair) tuples for a pair classifier (or give ``pairs``).
        A multi-label classifier answers ``ServedLabels``."""
        texts, pairs = split_pairs(texts, pairs)
        out = self.classify_raw(texts, pairs)
        if "count" in out:
            return [_label_set(out, i, t, None if pairs is None else _as_str(pairs[i])) for i, t in enumerate(texts)]
        preds = []
        for i, t in enumerate(texts):
            preds.append(ServedClass(
                text_pair=None if pairs is None else _as_str(pairs[i]),
                text=t if isinstance(t, str) else t.decode("utf-8", errors="replace"),
                label=out["label"][i, 0].decode("utf-8"),
                label_desc=out["label_desc"][i, 0].decode("utf-8"),
                confidence=float(out["confidence"][i, 0]),
                probs=tuple(float(p) for p in out["probs"][i]),
                top_k=tuple((lab.decode("utf-8"), float(p)) for lab, p in zip(out["topk_label"][i], out["topk_prob"][i])),
            ))
        return preds

    def classify(self, texts: Iterable, batch_size: int = 32) -> list[ServedClass]:
        """Texts (or (text, text_pair) tuples) in requests of ``batch_size``."""
        texts = list(texts)
        preds: list[ServedClass] = []
        for start in range(0, len(texts), batch_size):
            preds.extend(self.classify_batch(texts[start : start + batch_size]))
        return preds

    # -- token classification -------------------------------------------------------------
    def extract_entities_batch(self, texts: Sequence[str | bytes]) -> list[list[ServedEntity]]:
        """One request: the entities of each text (a token-classification bundle)."""
        arr = np.array([[_as_bytes(t)] for t in texts], dtype=np.object_)
        out = self.infer({"text": arr}, NER_OUTPUTS)["entities"].reshape(-1)
        return [[ServedEntity(str(e["type"]), str(e["text"]), int(e["start"]), int(e["end"])) for e in json.loads(_as_str(raw))]
                for raw in out]

    def extract_entities(self, texts: Iterable[str | bytes], batch_size: int = 32) -> list[list[ServedEntity]]:
        texts = list(texts)
        out: list[list[ServedEntity]] = []
        for start in range(0, len(texts), batch_size):
            out.extend(self.extract_entities_batch(texts[start : start + batch_size]))
        return out

    # -- reading comprehension --------------------------------------------------------------
    def answer_batch(self, questions: Sequence[str | bytes], contexts: Sequence[str | bytes]) -> list[ServedAnswer]:
        """One request: the best answer span in ``contexts[i]`` for ``questions[i]`` (a reading-comprehension bundle)."""
        if len(questions) != len(contexts):
            raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
        q = np.array([_as_bytes(t) for t in questions], dtype=np.object_)
        c = np.array([_as_bytes(t) for t in contexts], dtype=np.object_)
        out = self.infer({"question": q, "context": c}, MRC_OUTPUTS)
        return [ServedAnswer(_as_str(questions[i]), _as_str(out["answer"].reshape(-1)[i]), int(out["start"].reshape(-1)[i]),
                             int(out["end"].reshape(-1)[i]), float(out["score"].reshape(-1)[i])) for i in range(len(questions))]

    def answer(self, questions: Sequence[str | bytes], contexts: Sequence[str | bytes], batch_size: int = 32) -> list[ServedAnswer]:
        if len(questions) != len(contexts):
            raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
        out: list[ServedAnswer] = []
        for start in range(0, len(questions), batch_size):
            out.extend(self.answer_batch(list(questions[start : start + batch_size]), list(contexts[start : start + batch_size])))
        return out

    def extract_schema_batch(self, texts: Sequence[str | bytes], schema: Sequence[str]) -> list[dict[str, list[ServedSpan]]]:
        """One request to a UIE bundle: every text asked every prompt of ``schema``; per text, prompt -> spans."""
        t = np.array([_as_bytes(x) for x in texts], dtype=np.object_)
        s = np.array([_as_bytes(x) for x in schema], dtype=np.object_)
        results = self.infer({"text": t, "schema": s}, UIE_OUTPUTS)["results"].reshape(len(texts), len(schema))
        return [{prompt: [ServedSpan(**d) for d in json.loads(_as_str(results[i, j]))] for j, prompt in enumerate(schema)}
                for i in range(len(texts))]

    def extract_schema(self, texts: Sequence[str | bytes], schema: Sequence[str], batch_size: int = 32) -> list[dict[str, list[ServedSpan]]]:
        out: list[dict[str, list[ServedSpan]]] = []
        for start in range(0, len(texts), batch_size):
            out.extend(self.extract_schema_batch(list(texts[start : start + batch_size]), schema))
        return out

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "BundleClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _label_set(out: dict[str, np.ndarray], i: int, text, pair: str | None) -> ServedLabels:
    """Text ``i``'s answer from a multi-label classifier's outputs: the first ``count`` of its ranked labels."""
    n = int(out["count"][i, 0])
    names = [lab.decode("utf-8") for lab in out["labels"][i]]
    probs = [float(p) for p in out["label_probs"][i]]
    return ServedLabels(text=_as_str(text), labels=tuple(names[:n]),
                        label_descs=tuple(d.decode("utf-8") for d in out["label_descs"][i][:n]), probs=tuple(probs[:n]),
                        ranked=tuple(zip(names, probs)), text_pair=pair)


def split_pairs(texts: Sequence, pairs: Sequence | None = None) -> tuple[list, list | None]:
    """(texts, their second texts or None) from texts and ``pairs``, or from (text, text_pair) tuples."""
    texts = list(texts)
    if pairs is None and texts and isinstance(texts[0], tuple):
        return [a for a, _ in texts], [b for _, b in texts]
    if pairs is not None and len(pairs) != len(texts):
        raise ClientError(f"{len(pairs)} text_pair(s) for {len(texts)} text(s): give one text_pair per text")
    return texts, None if pairs is None else list(pairs)
