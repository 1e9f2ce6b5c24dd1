"""Client for a served bundle: tritonclient over HTTP or gRPC, with batching, retries and health checks.

    python -m serving.client health   --model tnews
    python -m serving.client classify --model tnews "国足今晚出战" "央行下调存款准备金率"
    python -m serving.client classify --model tnews --file texts.txt --batch-size 32 --protocol grpc --url 127.0.0.1:8001

Retries cover the transport (connection refused or reset, timeouts, server unavailable) with
exponential backoff; an error the server gives for the request itself (empty text, bad UTF-8,
batch too large) is not retried and is raised as ``RequestRejected``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

OUTPUTS = ("label", "label_desc", "confidence", "probs", "topk_label", "topk_prob")
DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}


class ClientError(RuntimeError):
    """The server could not be reached or is not ready."""


class RequestRejected(ClientError):
    """The server answered the request with an error (bad input, too large a batch)."""


@dataclass(frozen=True)
class Prediction:
    text: str
    label: str
    label_desc: str
    confidence: float
    probs: tuple[float, ...]
    top_k: tuple[tuple[str, float], ...]


def _transient(exc: Exception) -> bool:
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, InferenceServerException):
        status = str(exc.status() or "")
        # None/empty: the HTTP client saw no response at all; UNAVAILABLE/DEADLINE: gRPC transport.
        return status in ("", "None", "503", "StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
    return isinstance(exc, (ConnectionError, TimeoutError, OSError))


class ClassifierClient:
    def __init__(self, url: str | None = None, protocol: str = "http", model: str = "tnews", timeout: float = 60.0,
                 retries: int = 3, backoff: float = 0.5):
        if protocol not in ("http", "grpc"):
            raise ValueError(f"protocol must be http or grpc, got {protocol!r}")
        self.protocol, self.model, self.timeout, self.retries, self.backoff = protocol, model, timeout, retries, backoff
        self.url = url or DEFAULT_URLS[protocol]
        if protocol == "http":
            import tritonclient.http as tc

            self._client = tc.InferenceServerClient(self.url, connection_timeout=timeout, network_timeout=timeout)
        else:
            import tritonclient.grpc as tc

            self._client = tc.InferenceServerClient(self.url)
        self._tc = tc

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
    def infer_raw(self, texts: Sequence[str | bytes]) -> dict[str, np.ndarray]:
        """One request with ``len(texts)`` texts; returns the ensemble's outputs by name."""
        arr = np.array([[t.encode("utf-8") if isinstance(t, str) else bytes(t)] for t in texts], dtype=np.object_)
        inp = self._tc.InferInput("text", list(arr.shape), "BYTES")
        inp.set_data_from_numpy(arr)
        outputs = [self._tc.InferRequestedOutput(n) for n in OUTPUTS]
        from tritonclient.utils import InferenceServerException

        attempt = 0
        while True:
            try:
                if self.protocol == "grpc":
                    result = self._client.infer(self.model, [inp], outputs=outputs, client_timeout=self.timeout)
                else:
                    result = self._client.infer(self.model, [inp], outputs=outputs)
                return {n: result.as_numpy(n) for n in OUTPUTS}
            except Exception as exc:  # noqa: BLE001 - classified below
                if not _transient(exc) or attempt >= self.retries:
                    if isinstance(exc, InferenceServerException) and not _transient(exc):
                        raise RequestRejected(exc.message() or str(exc)) from None
                    raise ClientError(f"{self.protocol} {self.url}: {exc}") from None
                time.sleep(self.backoff * (2**attempt))
                attempt += 1

    def classify_batch(self, texts: Sequence[str | bytes]) -> list[Prediction]:
        out = self.infer_raw(texts)
        preds = []
        for i, t in enumerate(texts):
            preds.append(Prediction(
                text=t if isinstance(t, str) else t.decode("utf-8", errors="replace"),
                label=out["label"][i, 0].decode("utf-8"),
                label_desc=out["label_desc"][i, 0].decode("utf-8"),
                confidence=float(out["confidence"][i, 0]),
                probs=tuple(float(p) for p in out["probs"][i]),
                top_k=tuple((lab.decode("utf-8"), float(p)) for lab, p in zip(out["topk_label"][i], out["topk_prob"][i])),
            ))
        return preds

    def classify(self, texts: Iterable[str | bytes], batch_size: int = 32) -> list[Prediction]:
        texts = list(texts)
        preds: list[Prediction] = []
        for start in range(0, len(texts), batch_size):
            preds.extend(self.classify_batch(texts[start : start + batch_size]))
        return preds

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "ClassifierClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_texts(args) -> list[str]:
    texts = list(args.texts)
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise ClientError(f"--file {path}: not found")
        texts += [line.rstrip("\n") for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise ClientError("no texts: give them as arguments or with --file")
    return texts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.client", description="Classify texts with a served bundle.")
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("classify", "health"):
        sp = sub.add_parser(name)
        sp.add_argument("--model", default="tnews", help="the ensemble (= task) name")
        sp.add_argument("--protocol", choices=("http", "grpc"), default="http")
        sp.add_argument("--url", help="host:port (default 127.0.0.1:8000 for http, :8001 for grpc)")
        sp.add_argument("--timeout", type=float, default=60.0)
        if name == "classify":
            sp.add_argument("texts", nargs="*", help="texts to classify")
            sp.add_argument("--file", help="a UTF-8 file, one text per line")
            sp.add_argument("--batch-size", type=int, default=32, help="texts per request")
            sp.add_argument("--retries", type=int, default=3)
            sp.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    args = p.parse_args(argv)
    try:
        client = ClassifierClient(args.url, args.protocol, args.model, args.timeout, getattr(args, "retries", 3))
        if args.command == "health":
            h = client.health()
            print(json.dumps({"url": client.url, "protocol": args.protocol, "model": args.model, **h}))
            return 0 if h["model_ready"] else 1
        preds = client.classify(_read_texts(args), args.batch_size)
    except (ClientError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for pr in preds:
        if args.json:
            print(json.dumps(asdict(pr), ensure_ascii=False))
        else:
            print(f"{pr.label}\t{pr.label_desc}\t{pr.confidence:.3f}\t{pr.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
