"""Client for a served bundle: tritonclient over HTTP or gRPC, with batching, retries and health checks.

    python -m serving.client health   --model tnews
    python -m serving.client classify --model tnews "国足今晚出战" "央行下调存款准备金率"
    python -m serving.client classify --model tnews --file texts.txt --batch-size 32 --protocol grpc --url 127.0.0.1:8001
    python -m serving.client extract  --model cluener "浙商银行企业信贷部叶老桂博士"
    python -m serving.client answer   --model cmrc2018 --question "谁改进了造纸术？" --context "东汉蔡伦改进了造纸术。"
    python -m serving.client predict  --model <task> ...   (classify / extract / answer, as the served ensemble's kind)

Retries cover the transport (connection refused or reset, timeouts, server unavailable) with
exponential backoff; an error the server gives for the request itself (empty text, bad UTF-8,
batch too large) is not retried and is raised as ``RequestRejected``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from serving.tools.kinds import COMMANDS, kind_of_outputs, tool_kind

OUTPUTS = ("label", "label_desc", "confidence", "probs", "topk_label", "topk_prob")
NER_OUTPUTS = ("entities",)
MRC_OUTPUTS = ("answer", "start", "end", "score")
UIE_OUTPUTS = ("results",)
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


class ClassifierClient:
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
    def task_type(self) -> str:
        """The served ensemble's kind, from its outputs: classification | token_classification | reading_comprehension | uie."""
        try:
            meta = self._client.get_model_metadata(self.model)
        except Exception as exc:  # noqa: BLE001 - any failure: the model is not there
            raise ClientError(f"model {self.model!r} at {self.url} ({self.protocol}): no metadata ({exc})") from None
        outputs = meta["outputs"] if isinstance(meta, dict) else meta.outputs
        return kind_of_outputs(o["name"] if isinstance(o, dict) else o.name for o in outputs).name

    def infer_raw(self, texts: Sequence[str | bytes]) -> dict[str, np.ndarray]:
        """One request with ``len(texts)`` texts; returns the ensemble's outputs by name."""
        arr = np.array([[_as_bytes(t)] for t in texts], dtype=np.object_)
        return self._infer({"text": arr}, OUTPUTS)

    def _infer(self, arrays: dict[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        """One request with the given BYTES inputs; retries transport failures, raises RequestRejected for the rest."""
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

    # -- token classification -------------------------------------------------------------
    def extract_entities_batch(self, texts: Sequence[str | bytes]) -> list[list[ServedEntity]]:
        """One request: the entities of each text (a token-classification bundle)."""
        arr = np.array([[_as_bytes(t)] for t in texts], dtype=np.object_)
        out = self._infer({"text": arr}, NER_OUTPUTS)["entities"].reshape(-1)
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
        out = self._infer({"question": q, "context": c}, MRC_OUTPUTS)
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
        results = self._infer({"text": t, "schema": s}, UIE_OUTPUTS)["results"].reshape(len(texts), len(schema))
        return [{prompt: [ServedSpan(**d) for d in json.loads(_as_str(results[i, j]))] for j, prompt in enumerate(schema)}
                for i in range(len(texts))]

    def extract_schema(self, texts: Sequence[str | bytes], schema: Sequence[str], batch_size: int = 32) -> list[dict[str, list[ServedSpan]]]:
        out: list[dict[str, list[ServedSpan]]] = []
        for start in range(0, len(texts), batch_size):
            out.extend(self.extract_schema_batch(list(texts[start : start + batch_size]), schema))
        return out

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "ClassifierClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_file(name: str) -> str:
    path = Path(name)
    if not path.exists():
        raise ClientError(f"--file {path}: not found")
    if not path.is_file():
        raise ClientError(f"--file {path}: not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ClientError(f"--file {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ClientError(f"--file {path}: cannot read it ({exc.strerror})") from None


def _read_texts(args) -> list[str]:
    texts = list(args.texts)
    if args.file:
        texts += [line.rstrip("\n") for line in _read_file(args.file).splitlines() if line.strip()]
    if not texts:
        raise ClientError("no texts: give them as arguments or with --file")
    return texts


def _read_pairs(args) -> tuple[list[str], list[str]]:
    questions, contexts = list(args.question or []), list(args.context or [])
    if len(questions) != len(contexts):
        raise ClientError(f"{len(questions)} --question but {len(contexts)} --context: give them in pairs")
    if args.file:
        path = Path(args.file)
        for n, line in enumerate(_read_file(args.file).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                questions.append(str(row["question"]))
                contexts.append(str(row["context"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ClientError(f"--file {path}:{n}: expected a JSON object with 'question' and 'context'") from None
    if not questions:
        raise ClientError("no questions: give --question/--context pairs or --file with JSON lines {question, context}")
    return questions, contexts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.client", description="Query a served bundle.")
    sub = p.add_subparsers(dest="command", required=True)
    helps = {"classify": "classify texts (classification bundle)", "extract": "named entities of texts (token classification bundle)",
             "answer": "answer questions about contexts (reading comprehension bundle)",
             "ie": "spans each schema prompt finds in texts (UIE bundle)",
             "predict": "whatever the served ensemble does: classify, extract or answer", "health": "server and model readiness"}
    for name in ("classify", "extract", "answer", "ie", "predict", "health"):
        sp = sub.add_parser(name, help=helps[name])
        sp.add_argument("--model", default="tnews", help="the ensemble (= task) name")
        sp.add_argument("--protocol", choices=("http", "grpc"), default="http")
        sp.add_argument("--url", help="host:port (default 127.0.0.1:8000 for http, :8001 for grpc)")
        sp.add_argument("--timeout", type=float, default=60.0)
        if name == "health":
            continue
        if name != "answer":
            sp.add_argument("texts", nargs="*", help="texts (classify / extract)")
        if name in ("ie", "predict"):
            sp.add_argument("--schema", action="append", help="a prompt (e.g. 姓名); repeat for several (UIE bundle)")
        if name in ("answer", "predict"):
            sp.add_argument("--question", action="append", help="a question; repeat, paired with --context")
            sp.add_argument("--context", action="append", help="the passage for the question at the same position")
        sp.add_argument("--file", help="a UTF-8 file: one text per line, or for answer JSON lines {question, context}")
        sp.add_argument("--batch-size", type=int, default=32, help="items per request")
        sp.add_argument("--retries", type=int, default=3)
        sp.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    args = p.parse_args(argv)
    try:
        client = ClassifierClient(args.url, args.protocol, args.model, args.timeout, getattr(args, "retries", 3))
    except (ClientError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return _run_command(args, client)
    finally:
        client.close()  # an open HTTP connection would hold up the server's shutdown


def _run_command(args, client: ClassifierClient) -> int:
    try:
        if args.command == "health":
            h = client.health()
            print(json.dumps({"url": client.url, "protocol": args.protocol, "model": args.model, **h}))
            return 0 if h["model_ready"] else 1
        if args.batch_size < 1:
            raise ClientError(f"--batch-size {args.batch_size}: items per request, must be >= 1")
        kind = COMMANDS.get(args.command) or client.task_type()
        try:
            _predict(args, client, kind)
        except RequestRejected:
            served = client.task_type() if args.command in COMMANDS else kind
            if served != kind:  # e.g. extract asked of a classification bundle: say so, not Triton's output error
                command = tool_kind(served).command
                raise ClientError(f"model {args.model!r} is a {served.replace('_', ' ')} bundle: use `{command}` "
                                  f"(or `predict`), not `{args.command}`") from None
            raise
    except (ClientError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _predict(args, client: ClassifierClient, kind: str) -> None:
    """Ask the served ensemble (of ``kind``) what the command line gives and print its answers."""
    k = tool_kind(kind)
    k.check_cli(args)
    k.print_served(client, _read_pairs(args) if k.question_pairs else _read_texts(args), args)


if __name__ == "__main__":
    sys.exit(main())
