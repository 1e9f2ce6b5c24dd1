"""``make tune``: choose the bundle's serving settings (engine instances x threads, the dynamic batcher's delay) by
measuring them on this CPU, and record them for the next ``make bundle``.

    python -m serving.tools.tune --task tnews [--repository model_repository] [--rounds 2] [--seconds 5]
                                 [--delays 0] [--shapes 1x1 1x16 32x1 32x4]

One tritonserver serves the bundle (model control ``explicit``); each candidate is loaded in turn with Triton's
config override (``POST /v2/repository/models/<model>/load`` with the changed config), so the bundle's files never
change.  For every round, every candidate in turn: perf_analyzer at each shape (items per request x concurrency:
by default one title per request from 1 and from 16 clients, FastDeploy's 32 titles per request from 1 and from 4),
CPU by process as ``make perf`` takes it.  A candidate's score is the geometric mean over shapes of its median served rate; the best
is written to ``<repository>/.<task>.tune.json`` (``serving.bundle.serving_tune``) with every candidate's rates, and
the package stage builds the next bundle with it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Sequence


class TuneError(RuntimeError):
    """One line, exit 2."""


# One title alone and from 16 clients, FastDeploy's 32 titles per request from one client and from 4: a setting that
# wins under load but leaves a core idle for a lone request (2 instances x 1 thread at 32x1) must pay for it here.
SHAPES = ((1, 1), (1, 16), (32, 1), (32, 4))


def candidates(cores: int, delays: Sequence[int]) -> list:
    """Instances x threads on ``cores`` cores: one instance with every core, one single-thread instance per core,
    and one instance per core with every core each (oversubscribed, but one instance's Python and Triton's hand-offs
    overlap the other's engine), each with every delay."""
    from serving.bundle.serving_tune import ServingSettings

    shapes = [(1, cores), (cores, 1), (cores, cores)] if cores > 1 else [(1, 1), (2, 1)]
    return [ServingSettings(i, t, d) for i, t in dict.fromkeys(shapes) for d in delays]


def _http(url: str, body: dict | None = None, timeout: float = 300) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode() or "{}"
    except urllib.error.HTTPError as exc:
        raise TuneError(f"{url}: {exc.code} {exc.read().decode(errors='replace')[:300]}") from None
    except (urllib.error.URLError, TimeoutError) as exc:  # a server gone, or one that does not answer in time
        reason = getattr(exc, "reason", exc)  # a TimeoutError is its own reason
        raise TuneError(f"{url}: " + (f"no answer within {timeout:g} s" if isinstance(reason, TimeoutError)
                                      else f"no answer ({reason})")) from None
    return json.loads(text)


def load_with(http: str, model: str, base: dict, settings) -> None:
    """(Re)load ``model`` with ``base`` config changed to ``settings``: instance count, the engine's threads parameter
    and the batcher's delay.  Triton swaps the model in once the new instances are ready (the engine warmed)."""
    cfg = json.loads(json.dumps(base))
    cfg["instance_group"] = [{**g, "count": settings.instances} for g in cfg.get("instance_group") or [{"kind": "KIND_CPU"}]]
    cfg.setdefault("parameters", {})["threads"] = {"string_value": str(settings.threads)}
    if "dynamic_batching" in cfg:
        cfg["dynamic_batching"]["max_queue_delay_microseconds"] = settings.max_queue_delay_microseconds
    _http(f"http://{http}/v2/repository/models/{model}/load", {"parameters": {"config": json.dumps(cfg)}})


def tune(repository: Path, task: str, data_dir: str | None, shapes: Sequence[tuple[int, int]], rounds: int,
         seconds: float, delays: Sequence[int], log=lambda m: print(m, file=sys.stderr), items: Sequence | None = None):
    """Measure every candidate; returns the ``ServingTune`` record (not yet written).  ``items`` replace the dev set."""
    import os

    import pipeline  # noqa: F401  (numpy before paddle)
    from pipeline.contract import detect_cpu
    from serving.bundle.serving_tune import ServingTune
    from serving.server import start_server
    from serving.tools import perf, process_cpu
    from serving.tools.kinds import tool_kind
    from serving.tools.offline import BundleModel

    pa = perf.find_perf_analyzer()
    bundle = BundleModel.open(repository)
    if bundle.manifest.get("backend") != "python":
        raise TuneError(f"the bundle runs on Triton's {bundle.manifest.get('backend')} backend: make tune sets the "
                        "python backend's engine instances and threads")
    names = bundle.names
    engine_model = names.model  # the model that runs the engine (the fused model itself when fused)
    items = list(items) if items is not None else perf.request_items(task, data_dir, bundle.task_type, bundle.manifest)
    kind = tool_kind(bundle.task_type)
    most = int(bundle.manifest.get("package", {}).get("max_batch_size", 0) or 0)
    shapes = [(n, c) for n, c in shapes if n == 1 or (not kind.windowed and n <= most)]
    cands = candidates(len(os.sched_getaffinity(0)), delays)
    rates: dict = {(k, s): [] for k in range(len(cands)) for s in shapes}
    p50s: dict = {(k, s): [] for k in range(len(cands)) for s in shapes}
    composing = tuple(dict.fromkeys((names.tokenizer, names.model, names.postprocess)))
    with tempfile.TemporaryDirectory() as tmp, start_server(
            repository, log_path=Path(tmp) / "tritonserver.log", die_with_parent=True,
            extra_args=("--model-control-mode=explicit", "--load-model=*")) as server:
        data = perf.input_data(bundle.task_type, items, Path(tmp) / "input.json")
        base = _http(f"http://{server.http_url}/v2/models/{engine_model}/config")
        grpc = f"127.0.0.1:{server.grpc_port}"
        for r in range(rounds):
            for k, cand in enumerate(cands):
                log(f"tune: round {r + 1}/{rounds}, {cand.label()}")
                load_with(server.http_url, engine_model, base, cand)
                procs = process_cpu.server_processes(server.process.pid, composing)
                for shape in shapes:
                    level = perf.run_level(pa, grpc, names.ensemble, data, shape[1], seconds, composing, Path(tmp), log,
                                           shape[0], procs)
                    rates[(k, shape)].append(level.requests_per_s)
                    p50s[(k, shape)].append(level.p50_ms)
                    log(f"tune:   {shape[0]}x{shape[1]}: {level.requests_per_s:.0f} items/s, "
                        f"p50 {level.p50_ms:.1f} ms")
    rows = [_row(cand, {s: rates[(k, s)] for s in shapes}, {s: p50s[(k, s)] for s in shapes})
            for k, cand in enumerate(cands)]
    best = max(range(len(cands)), key=lambda k: rows[k]["score"])
    files = bundle.manifest["files"]
    folder = f"{engine_model}/1/"
    model_files = {rel[len(folder):]: digest for rel, digest in files.items()
                   if rel.startswith(folder) and rel[len(folder):].startswith("model.") and not rel.endswith(".py")}
    return ServingTune(task=task, engine=str(bundle.manifest.get("engine")), model_files=model_files,
                       cpu=detect_cpu().as_dict(), chosen=cands[best], candidates=rows,
                       shapes=[list(s) for s in shapes], rounds=rounds)


def _row(cand, rates: dict, p50s: dict) -> dict:
    """One candidate's row of the record: its settings, per shape ("NxC") the rates' and p50s' spreads over the
    rounds, and its score (the geometric mean of the median rates)."""
    from pipeline.validation.release import Spread

    medians = {f"{n}x{c}": asdict(Spread.of(v)) for (n, c), v in rates.items()}
    score = math.exp(sum(math.log(max(m["median"], 1e-9)) for m in medians.values()) / len(medians))
    return {"settings": {"instances": cand.instances, "threads": cand.threads,
                         "max_queue_delay_microseconds": cand.max_queue_delay_microseconds},
            "rates": medians, "p50_ms": {f"{n}x{c}": asdict(Spread.of(v)) for (n, c), v in p50s.items()}, "score": score}


def format_markdown(record) -> str:
    shapes = [f"{n}x{c}" for n, c in record.shapes]
    lines = [f"# tune: {record.task} ({record.engine}) on {record.cpu.get('model')} "
             f"({', '.join(record.cpu.get('flags') or [])}, {record.cpu.get('cores')} cores)", "",
             f"Items/s served, median [min-max] over {record.rounds} interleaved round(s); shape = items per request x "
             "concurrency; score = geometric mean of the medians.", "",
             "| instances | threads | delay µs | " + " | ".join(shapes) + " | score |",
             "|---:|---:|---:|" + "---:|" * (len(shapes) + 1)]
    from pipeline.validation.release import Spread
    from serving.tools.perf import fmt

    for row in record.candidates:
        s = row["settings"]
        chosen = " **chosen**" if (s["instances"], s["threads"], s["max_queue_delay_microseconds"]) == (
            record.chosen.instances, record.chosen.threads, record.chosen.max_queue_delay_microseconds) else ""
        lines.append(f"| {s['instances']} | {s['threads']} | {s['max_queue_delay_microseconds']} | "
                     + " | ".join(fmt(Spread(**row["rates"][k])) for k in shapes) + f" | {row['score']:.0f}{chosen} |")
    return "\n".join(lines) + "\n"


def _shape(text: str) -> tuple[int, int]:
    try:
        n, c = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: ITEMSxCONCURRENCY, e.g. 1x16") from None
    if n < 1 or c < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: both must be >= 1")
    return n, c


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.tools.tune", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, help="task name or task YAML")
    p.add_argument("--repository", default="model_repository", help="folder holding <task>/ (or the bundle itself)")
    p.add_argument("--data-dir")
    p.add_argument("--shapes", type=_shape, nargs="+", default=list(SHAPES), metavar="NxC",
                   help="items per request x concurrency (default " + " ".join(f"{n}x{c}" for n, c in SHAPES) + ")")
    p.add_argument("--delays", type=int, nargs="+", default=[0], help="dynamic batcher delays to try, µs (default 0)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=5.0, help="perf_analyzer measurement window")
    args = p.parse_args(argv)
    import pipeline  # noqa: F401
    from pipeline.config import task_name
    from pipeline.errors import UserInputError
    from serving.bundle.serving_tune import tune_file
    from serving.server import ServerError, resolve_repository
    from serving.tools.perf import PerfError, find_perf_analyzer

    try:
        find_perf_analyzer()
        if not 1 <= args.rounds <= 10:
            raise TuneError(f"--rounds {args.rounds}: 1 to 10")
        if not 0.5 <= args.seconds <= 600:
            raise TuneError(f"--seconds {args.seconds}: 0.5 to 600")
        if any(not 0 <= d <= 100_000 for d in args.delays):
            raise TuneError(f"--delays: microseconds from 0 to 100000, got {args.delays}")
        repo = resolve_repository(Path(args.repository), task_name(args.task))
        t0 = time.monotonic()
        record = tune(repo, args.task, args.data_dir, args.shapes,
                      args.rounds, args.seconds, args.delays)
    except (TuneError, PerfError, ServerError, UserInputError, FileNotFoundError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    out = tune_file(repo)
    record.write(out)
    print(format_markdown(record))
    print(f"wrote {out} ({time.monotonic() - t0:.0f} s): the next make bundle TASK={args.task} packages with "
          f"{record.chosen.label()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
