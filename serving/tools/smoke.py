"""Smoke test of a running server: the whole dev set through the server must give the offline predictions.

Offline predictions come from the bundle's own model file run through the pipeline's tokenizer
(``serving.tools.offline``); served ones from the ensemble over HTTP or gRPC.  Passes only when every
prediction is the same (hence the same accuracy), not merely close numbers.

Token classification bundles are scored with entity chunk F1 (``pipeline.labeling.metric.chunk_f1``),
reading comprehension bundles with CMRC2018 EM/F1 (``pipeline.reading.metric.cmrc_scores``), UIE bundles with
span F1; all are held to the offline run of the same bundle (every example's entities / answer span identical)
and to bundle.json "validated" ({"metric": "entity_f1" | "f1" | "accuracy", "value": ...}).  What differs per kind
(its smoke run, result and printout, its requests and answer keys) is its object in ``serving/kinds/<kind>/tools.py``.

    python -m serving.tools.smoke --task tnews [--repository model_repository] [--url 127.0.0.1:8000] [--concurrency 16]

``--concurrency N`` then sends every dev item alone from N clients at once: Triton's dynamic batcher mixes
them with whatever else is in flight, and each answer must equal the offline answer of that item run alone
(label, entities or answer span, exactly): batch independence under real load.  Where one differs, the run still
fails, and says whether the same model file gives exactly that answer when the item's batch is padded wider (a
longer batch mate): a near-tie that the engine's rounding at another width moves (OpenVINO INT8 does that to about
1 text in 75 by up to 0.06 in a logit; MEASUREMENTS.md), not a serving fault such as a wrong row or stale model.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from serving.tools.client import BundleClient, ClientError, launched_url
from serving.tools.kinds import tool_kind
from serving.triton.integrity import BundleIntegrityError
from serving.tools.offline import BundleModel


EXAMINED = 10  # differing items looked at wider paddings (each width: one offline run of them all)
WIDTHS = 16  # padded widths tried, evenly up to max_seq_len


@dataclass(frozen=True)
class ConcurrentResult:
    """Every item sent alone, from ``concurrency`` clients at once, so Triton's dynamic batcher merges it with
    whatever else is in flight; held to the offline answer of the same item run alone (batch of one)."""
    items: int
    concurrency: int
    mismatches: int
    examples: list  # up to 5 differing items: (index, served, offline, padded widths giving the served answer)
    examined: int = 0  # differing items looked at wider paddings (the first EXAMINED; none for a windowed kind)
    padded: int = 0  # of those, the ones whose served answer the model gives the item in a batch padded wider

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


def padded_widths(bundle: BundleModel, items: Sequence, served: Sequence[tuple]) -> list[list[int]]:
    """For each item, the padded widths (of ``WIDTHS`` tried, evenly up to max_seq_len) at which the bundle's model
    gives exactly the ``served`` answer: where a differing served answer is the item's own answer in a batch a
    longer batch mate padded, the width it needs."""
    from dataclasses import replace

    from pipeline.progress import quiet

    kind, longest = tool_kind(bundle.task_type), bundle.max_seq_len
    step = -(-longest // WIDTHS)
    found: list[list[int]] = [[] for _ in items]
    with quiet():  # a bar per width would bury the report
        for width in sorted({*range(step, longest + 1, step), longest}):
            keys = kind.offline_keys(replace(bundle, pad_to=width), items)
            for widths, key, answer in zip(found, keys, served):
                if key == answer:
                    widths.append(width)
    return found


def offline_keys(bundle: BundleModel, items: Sequence) -> list[tuple]:
    """The offline answer of each item run alone (batch of one), in the form the kind's ``answer_key`` gives served
    ones."""
    return tool_kind(bundle.task_type).offline_keys(bundle, items)


def dev_items(task: str, bundle_dir: Path, data_dir: str | None = None) -> list:
    """The task's dev items as requests carry them: texts, (text, text_pair) pairs for a sentence-pair classifier,
    (question, context) pairs, (text, schema) pairs."""
    bundle = BundleModel.open(bundle_dir)
    return _dev_items(task, data_dir, bundle.task_type, manifest=bundle.manifest)


def run_concurrent(bundle: BundleModel, url: str | None, protocol: str, items: Sequence, concurrency: int) -> ConcurrentResult:
    """``items``: texts, (text, text_pair) pairs for a sentence-pair classifier, (question, context) pairs for reading
    comprehension, (text, schema) for UIE."""
    from concurrent.futures import ThreadPoolExecutor
    import threading

    kind, model = tool_kind(bundle.task_type), bundle.manifest["task"]
    local = threading.local()

    def ask(item):
        if not hasattr(local, "client"):
            local.client = BundleClient(url, protocol, model)
        return kind.ask(local.client, item)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        served = [kind.answer_key(a) for a in pool.map(ask, items)]
    offline = kind.offline_keys(bundle, items)
    differing = [(i, s, o) for i, (s, o) in enumerate(zip(served, offline)) if s != o]
    # A windowed kind's requests are not batched together (max_batch_size 0): no batch mate pads them.
    examined = [] if kind.windowed else differing[:EXAMINED]
    widths = padded_widths(bundle, [items[i] for i, _, _ in examined], [s for _, s, _ in examined]) if examined else []
    examples = [(*d, w) for d, w in zip(differing[:5], widths + [[]] * 5)]
    return ConcurrentResult(len(items), concurrency, len(differing), examples, len(examined), sum(map(bool, widths)))


def _batch_size(bundle: BundleModel, wanted: int | None) -> int:
    """Items per request: by default the batch size validate evaluated with (an INT8 form with per-batch
    activation scales then sees the very same batches), at most the bundle's max_batch_size."""
    if wanted is None:
        summary = (bundle.manifest.get("metrics") or {}).get("summary") or {}
        wanted = int(summary.get("dev_batch_size") or 32)
    limit = int((bundle.manifest.get("package") or {}).get("max_batch_size") or 0)
    return min(wanted, limit) if limit > 0 else wanted


def _overrides(data_dir, sets) -> dict:
    from pipeline.config import parse_override

    out = dict(parse_override(x) for x in (sets or []))
    if data_dir:
        out["data.dir"] = str(Path(data_dir).expanduser().resolve())  # as the pipeline's --data-dir: from here
    return out


def recorded_data_dir(manifest: dict | None) -> str:
    """The data dir the bundle was built and validated from (bundle.json ``source.data_dir``); "" when unrecorded."""
    value = ((manifest or {}).get("source") or {}).get("data_dir")
    return value if isinstance(value, str) else ""


def dev_data_dir(data_dir: str | Path | None, manifest: dict | None) -> str | None:
    """The dev data to read: ``--data-dir``; else the dir the bundle was built from, while it is there; else None
    (the task config's ``data.dir``)."""
    if data_dir:
        return str(data_dir)
    recorded = recorded_data_dir(manifest)
    return recorded if recorded and Path(recorded).is_dir() else None


def _load_dev(task: str, data_dir, sets, manifest: dict | None):
    """(task config, task data) for the dev set, with the bundle's own data dir unless ``--data-dir`` says
    otherwise; a data error says which dir was tried and how to point at another (one line)."""
    from pipeline.config import load_task_config
    from pipeline.errors import DataError
    from pipeline.kinds import load_task_data

    chosen = dev_data_dir(data_dir, manifest)
    if chosen and not data_dir:
        print(f"dev data: {chosen} (the bundle was built from it; --data-dir for another)", file=sys.stderr)
    try:
        cfg = load_task_config(task, _overrides(chosen, sets))
        return cfg, load_task_data(cfg)
    except DataError as exc:
        if data_dir or chosen:  # the dir given, or the bundle's own that is there: its error says it all (file:line)
            raise
        recorded = recorded_data_dir(manifest)
        built = (f"the bundle was built from {recorded}, which is not there" if recorded
                 else "the bundle does not record the data it was built from")
        how = "" if "--data-dir" in str(exc) else ": pass --data-dir DIR (make: DATA_DIR=DIR)"
        raise DataError(f"{exc}; {built}{how}") from None


def dev_data(task: str, data_dir: str | Path | None, task_type: str, sets: list[str] | None = None,
             manifest: dict | None = None):
    """The task data (``pipeline.data.TaskDataset``) read by the pipeline's own loader, refused when the task config's
    kind is not the bundle's.  ``manifest``: the bundle's, whose recorded data dir is read when ``data_dir`` is not
    given."""
    from pipeline.errors import ConfigError

    cfg, data = _load_dev(task, data_dir, sets, manifest)
    if cfg.type != task_type:
        raise ConfigError(f"task {task}: the bundle serves {task_type} but the task config says {cfg.type}")
    return data


def _dev_items(task: str, data_dir: str | Path | None, task_type: str, sets: list[str] | None = None,
               manifest: dict | None = None) -> list:
    """The dev set as the bundle's requests carry it, one item each: texts, (text, text_pair) pairs for a sentence-pair
    classifier (AFQMC, OCNLI, CMNLI, CSL: the served model takes a ``text_pair`` input), (question, context) pairs,
    (text, schema) pairs."""
    return tool_kind(task_type).dev_items(task, dev_data(task, data_dir, task_type, sets, manifest))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.tools.smoke", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, help="task name or task YAML (its dev set and config)")
    p.add_argument("--repository", default="model_repository", help="folder holding <task>/ (or the bundle itself)")
    p.add_argument("--data-dir", help="dev data dir (default: the task config's)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--url", help="host:port (default: the server `make serve` started for this bundle, else 127.0.0.1:8000 / :8001)")
    p.add_argument("--batch-size", type=int, default=None, help="items per request (default: validate's batch size)")
    p.add_argument("--json-out", help="also write the result here")
    p.add_argument("--concurrency", type=int, default=0,
                   help="then also send every dev item alone from this many clients at once (dynamic batching "
                        "mixes them): each answer must equal the offline answer of the item run alone")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="task config override, as given to the pipeline run (so the same dev set is scored)")
    args = p.parse_args(argv)
    import pipeline  # noqa: F401  (process setup before anything imports paddle)
    from pipeline.config import task_name
    from pipeline.errors import UserInputError

    try:
        check_args(args)
        repo, name = Path(args.repository), task_name(args.task)
        bundle = BundleModel.open(_bundle_dir(repo, name, args.task))
        if bundle.manifest.get("api", "ernie-bundle") != "ernie-bundle":
            raise ClientError(f"{bundle.root}: packaged with package.api {bundle.manifest['api']} (model "
                              f"{bundle.names.ensemble}); the smoke test speaks package.api ernie-bundle: package it with "
                              "that to smoke-test the model, or call it with FastDeploy's example client")
        kind = tool_kind(bundle.task_type)
        data = dev_data(args.task, args.data_dir, kind.name, args.set, bundle.manifest)
        problem = refused_example(list(data.dev.examples), bundle.manifest)  # named by its line, before any request
        if problem:
            raise ClientError(problem)
        items = kind.dev_items(args.task, data)
        problem = kind.smoke_problem(bundle, data)
        if problem:
            raise ClientError(problem)
        args.url = args.url or launched_url(bundle.root, args.protocol)  # for the batched and the concurrent phase
        with BundleClient(args.url, args.protocol, bundle.manifest["task"]) as client:
            client.wait_ready(30)
            result = kind.smoke(bundle, client, list(data.dev.examples), _batch_size(bundle, args.batch_size))
        kind.print_smoke(name, args.protocol, result, (bundle.manifest.get("validated") or {}).get("backend"))
        concurrent = _concurrent(args, bundle, items)
        _write(args, result, concurrent)
    except (ClientError, BundleIntegrityError, UserInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failure = kind.smoke_failure if not result.ok else _concurrent_failure(concurrent)
    print(f"FAIL: {failure}" if failure else "PASS")  # the verdict the exit status gives, never PASS with status 1
    return 1 if failure else 0


def _bundle_dir(repo: Path, name: str, given: str) -> Path:
    """``<repository>/<name>``, or the repository itself when it is a bundle (``REPO=`` the bundle's folder, which
    holds a model folder of that name too).  A folder of the task's without ``bundle.json`` is opened, to be refused
    as a broken bundle naming the file."""
    if (repo / name / "bundle.json").is_file():
        return repo / name
    if (repo / "bundle.json").is_file():
        return repo
    if (repo / name).is_dir():
        return repo / name
    raise ClientError(f"no bundle for task {name!r} at {repo / name}: run `make bundle TASK={given}` first")


def refused_example(examples: Sequence, manifest: dict | None) -> str | None:
    """The first dev example whose text the served model would refuse (the server's own check,
    ``text_input.decode_item``, with the bundle's ``max_text_bytes``), named by its file and line: said before any
    request, not as a server error naming an item of some batch.  None when every one would be served (and for the
    kinds whose examples are not text pairs)."""
    from serving.bundle.config import PackageConfig
    from serving.triton.text_input import BadText, decode_item

    limit = ((manifest or {}).get("package") or {}).get("max_text_bytes")
    limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else PackageConfig.max_text_bytes
    for i, example in enumerate(examples):
        if not hasattr(example, "text_a"):
            return None  # token classification, reading comprehension, UIE: their readers hold their own texts
        for field, text in (("text", example.text_a), ("text_pair", example.text_b)):
            if text is None:
                continue
            try:
                decode_item(text, field, 0, limit)
            except (BadText, UnicodeEncodeError) as exc:
                why = str(exc).split(": ", 1)[-1] if isinstance(exc, BadText) else "not encodable as UTF-8"
                where = getattr(example, "where", "") or f"dev example {i + 1}"
                return f"{where}: the served model refuses this dev example's {field} ({why}): fix or remove the row"
    return None


def _concurrent_failure(concurrent: ConcurrentResult | None) -> str:
    if concurrent is None or concurrent.ok:
        return ""
    said = (f"{concurrent.mismatches} of {concurrent.items} items sent alone from {concurrent.concurrency} clients "
            "differ from their offline answer alone")
    if concurrent.padded:
        said += (f"; of the {concurrent.examined} examined, {concurrent.padded} the model's own answer in a batch "
                 "padded wider (a near-tie the engine's rounding at that width moves: README, Serving)")
    return said


def check_out_file(path: str | None, flag: str = "--json-out") -> None:
    """Before a run: where its report goes can be written (a directory there, or a folder that cannot be made,
    would fail only after the whole run).  ClientError, one line."""
    if not path:
        return
    import os

    out = Path(path)
    if out.is_dir():
        raise ClientError(f"{flag} {out}: a directory; give a file path")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # what the run would do at its end
    except OSError as exc:
        raise ClientError(f"{flag} {out}: cannot make its folder ({exc.strerror})") from None
    if not os.access(out.parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise ClientError(f"{flag} {out}: not writable")


def check_args(args) -> None:
    """The numbers and paths a smoke run takes, before it starts (one line each)."""
    if args.batch_size is not None and args.batch_size < 1:
        raise ClientError(f"--batch-size {args.batch_size}: items per request, must be >= 1")
    if args.concurrency < 0:
        raise ClientError(f"--concurrency {args.concurrency}: clients, must be >= 0 (0: no concurrent pass)")
    check_out_file(args.json_out)


def _concurrent(args, bundle: BundleModel, items: Sequence) -> ConcurrentResult | None:
    if args.concurrency <= 0:
        return None
    r = run_concurrent(bundle, args.url, args.protocol, items, args.concurrency)
    print(f"  concurrent: {r.items} items sent one per request from {r.concurrency} clients; "
          f"answers differing from the offline single-item run: {r.mismatches}")
    for i, served, offline, widths in r.examples:
        print(f"    item {i}: served {served} offline {offline}" + (_widths_said(widths) if r.examined else ""))
    return r


def _widths_said(widths: Sequence[int]) -> str:
    if not widths:
        return "; the model gives it at no padded width tried: not rounding, look for a serving fault"
    return f"; the model's own answer when its batch is padded to {', '.join(map(str, widths))} tokens"


def _write(args, result, concurrent: ConcurrentResult | None) -> None:
    if args.json_out:
        out = {**asdict(result), "ok": result.ok}
        if concurrent is not None:
            out["concurrent"] = {**asdict(concurrent), "examples": [list(map(str, e)) for e in concurrent.examples],
                                 "ok": concurrent.ok}
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    sys.exit(main())
