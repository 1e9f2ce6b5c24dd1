"""``python -m serving.client``: query a served bundle from the command line.

    python -m serving.client health   --model tnews
    python -m serving.client classify --model tnews "国足今晚出战" "央行下调存款准备金率"
    python -m serving.client classify --model tnews --file texts.txt --batch-size 32 --protocol grpc --url 127.0.0.1:8001
    python -m serving.client classify --model ocnli "他去了北京" --text-pair "他在北京"   (a pair classifier)
    python -m serving.client extract  --model cluener "浙商银行企业信贷部叶老桂博士"
    python -m serving.client answer   --model cmrc2018 --question "谁改进了造纸术？" --context "东汉蔡伦改进了造纸术。"
    python -m serving.client predict  --model <task> ...   (classify / extract / answer, as the served ensemble's kind)

Each command is its kind's (``serving.tools.kinds``); the transport is ``serving.tools.client``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from serving.tools.client import BundleClient, ClientError, RequestRejected, launched_url
from serving.tools.kinds import commands, kind_of_outputs, tool_kind


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


def _read_texts(args) -> list:
    """Texts from the arguments and --file; (text, text_pair) tuples where --text-pair is given (one per text) or the
    file has two tab-separated columns."""
    texts = list(args.texts)
    seconds = list(getattr(args, "text_pair", None) or [])
    if seconds and len(seconds) != len(texts):
        raise ClientError(f"{len(seconds)} --text-pair for {len(texts)} text(s): give one --text-pair per text")
    items: list = list(zip(texts, seconds)) if seconds else texts
    if args.file:
        lines = [line.rstrip("\n") for line in _read_file(args.file).splitlines() if line.strip()]
        if any("\t" in line for line in lines):
            for n, line in enumerate(lines, start=1):
                cols = line.split("\t")
                if len(cols) != 2 or not cols[0].strip() or not cols[1].strip():
                    raise ClientError(f"--file {args.file}: line {n}: expected two tab-separated columns (text, text_pair)")
            items += [tuple(line.split("\t")) for line in lines]
        else:
            items += lines
    if not items:
        raise ClientError("no texts: give them as arguments or with --file")
    if len({isinstance(i, tuple) for i in items}) > 1:
        raise ClientError("give every text its text_pair (--text-pair, or a second column in --file), or none")
    return items


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
        sp.add_argument("--url", help="host:port (default: the server `make serve` started for <repository>/<model>, "
                        "else 127.0.0.1:8000 for http, :8001 for grpc)")
        sp.add_argument("--repository", default="model_repository",
                        help="where `make serve` found the bundle, to find the server it started (without --url)")
        sp.add_argument("--timeout", type=float, default=60.0)
        if name == "health":
            continue
        if name != "answer":
            sp.add_argument("texts", nargs="*", help="texts (classify / extract)")
        if name in ("classify", "predict"):
            sp.add_argument("--text-pair", action="append", help="a pair classifier's second text, one per text, in order")
        if name in ("ie", "predict"):
            sp.add_argument("--schema", action="append", help="a prompt (e.g. 姓名); repeat for several (UIE bundle)")
        if name in ("answer", "predict"):
            sp.add_argument("--question", action="append", help="a question; repeat, paired with --context")
            sp.add_argument("--context", action="append", help="the passage for the question at the same position")
        sp.add_argument("--file", help="a UTF-8 file: one text per line (text TAB text_pair for a pair classifier), "
                        "or for answer JSON lines {question, context}")
        sp.add_argument("--batch-size", type=int, default=32, help="items per request")
        sp.add_argument("--retries", type=int, default=3)
        sp.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    args = p.parse_args(argv)
    try:
        url = args.url or launched_url(Path(args.repository) / args.model, args.protocol)
        client = BundleClient(url, args.protocol, args.model, args.timeout, getattr(args, "retries", 3))
    except (ClientError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return _run_command(args, client)
    finally:
        client.close()  # an open HTTP connection would hold up the server's shutdown


def _run_command(args, client: BundleClient) -> int:
    try:
        if args.command == "health":
            h = client.health()
            print(json.dumps({"url": client.url, "protocol": args.protocol, "model": args.model, **h}))
            return 0 if h["model_ready"] else 1
        if args.batch_size < 1:
            raise ClientError(f"--batch-size {args.batch_size}: items per request, must be >= 1")
        kind = commands().get(args.command) or kind_of_outputs(client.output_names()).name
        try:
            _predict(args, client, kind)
        except RequestRejected:
            served = kind_of_outputs(client.output_names()).name if args.command in commands() else kind
            if served != kind:  # e.g. extract asked of a classification bundle: say so, not Triton's output error
                command = tool_kind(served).command
                raise ClientError(f"model {args.model!r} is a {served.replace('_', ' ')} bundle: use `{command}` "
                                  f"(or `predict`), not `{args.command}`") from None
            raise
    except (ClientError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _predict(args, client: BundleClient, kind: str) -> None:
    """Ask the served ensemble (of ``kind``) what the command line gives and print its answers."""
    k = tool_kind(kind)
    k.check_cli(args)
    k.print_served(client, _read_pairs(args) if k.question_pairs else _read_texts(args), args)


if __name__ == "__main__":
    sys.exit(main())
