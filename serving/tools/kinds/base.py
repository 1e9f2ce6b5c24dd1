"""The interface every task kind offers the serving tools (``ToolKind``), and what the kinds' smoke runs share.

One object per ``pipeline.contract.TaskKind`` (``serving.tools.kinds.tool_kind``), looked up once from the bundle's
``task_type`` (or, in the client, from the served ensemble's outputs); the tools call it and compare no kind names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from pipeline.contract import TaskKind

if TYPE_CHECKING:
    from serving.tools.client import BundleClient
    from serving.tools.offline import BundleModel, ModelOnly

SPAN_FAILURE = "served predictions or scores differ from the offline/validated model's"


class ToolKind:
    """What the serving tools (smoke, perf, loadtest, replicas, client) do differently for one task kind."""

    kind: TaskKind
    command: str  # serving.client's command for it (classify, extract, answer, ie)
    output: str  # the ensemble output that tells this kind apart (kind_of_outputs)
    # An item becomes a varying number of windows: max_batch_size 0, no Triton batching, requests carry more than
    # single texts (loadtest: no --file of texts, no offline model-only comparison at a batch size)
    windowed: bool = False
    question_pairs: bool = False  # the client reads (question, context) pairs, not texts
    perf_seconds: float = 5.0  # perf_analyzer's window unless --seconds says otherwise
    sample_texts: tuple[str, ...] = ()  # loadtest's texts when the dev set cannot be read (none: it must be read)
    smoke_failure: str = SPAN_FAILURE  # the smoke test's FAIL line

    @property
    def name(self) -> str:
        return self.kind.value

    # -- the dev set as requests carry it --------------------------------------------------------------------------
    def items(self, examples: Sequence) -> list:
        """One request item per dev example (or per text of a UIE schema request): texts, (text, text_pair) pairs of a
        sentence-pair classifier, (question, context) pairs, (text, schema) pairs."""
        raise NotImplementedError

    def dev_items(self, task: str, data) -> list:
        """The dev split of ``data`` (``pipeline.data.TaskDataset``) as request items."""
        return self.items(list(data.dev.examples))

    def smoke_problem(self, bundle: "BundleModel", data) -> str | None:
        """Why the smoke test cannot score this bundle on ``data`` (None: it can)."""
        return None

    # -- one served answer -----------------------------------------------------------------------------------------
    def ask(self, client: "BundleClient", item) -> Any:
        """The served answer of one item sent alone."""
        raise NotImplementedError

    def send(self, client: "BundleClient", batch: Sequence) -> None:
        """One request of ``batch`` items (loadtest)."""
        raise NotImplementedError

    def answer_key(self, served) -> tuple:
        """What must be identical between a served answer and the offline one (label, entities, span, spans)."""
        raise NotImplementedError

    def offline_keys(self, bundle: "BundleModel", items: Sequence) -> list[tuple]:
        """The offline answer of each item run alone (batch of one), in the form ``answer_key`` gives served ones."""
        raise NotImplementedError

    # -- smoke -----------------------------------------------------------------------------------------------------
    def smoke(self, bundle: "BundleModel", client: "BundleClient", examples: Sequence, batch_size: int):
        """The dev examples through the server and offline: the kind's smoke result (``.ok``; ``.validated``: a
        ``Validated``)."""
        raise NotImplementedError

    def print_smoke(self, task: str, protocol: str, result, backend: str | None) -> None:
        """The smoke result in five lines: what was asked, the served and offline scores, validate's, what differs."""
        asked, served, offline, differ = self.smoke_report(result)
        print(f"smoke {task}: {asked} via {protocol}")
        print(f"  served {served}")
        print(f"  offline {offline}")
        result.validated.print(backend)
        print(f"  {differ}")

    def smoke_report(self, result) -> tuple[str, str, str, str]:
        """The kind's words for ``print_smoke``: what was asked, the served and the offline scores, what differs."""
        raise NotImplementedError

    # -- perf ------------------------------------------------------------------------------------------------------
    def perf_input(self, item) -> dict:
        """One perf_analyzer ``--input-data`` entry: a request of one item."""
        raise NotImplementedError

    def model_only(self, bundle: "BundleModel", items: Sequence, items_per_request: int, alone: bool = False) -> "ModelOnly":
        """perf's yardstick for requests of ``items_per_request`` items: the model file alone on the same items, in
        the batches the server runs them in (Triton's preferred batch of one-item requests, or one request of many);
        ``alone``: one item per call (the latency a lone request is held to)."""
        from serving.tools.offline import text_batches

        preferred = int(bundle.manifest.get("package", {}).get("preferred_batch_size", 16))
        return text_batches(bundle, items, 1 if alone else items_per_request if items_per_request > 1 else preferred)

    def model_only_batch(self, bundle: "BundleModel", items_per_request: int) -> str:
        """How ``model_only`` batches, for the report."""
        preferred = int(bundle.manifest.get("package", {}).get("preferred_batch_size", 16))
        return f"batch {items_per_request if items_per_request > 1 else preferred}"

    def perf_note(self, items: Sequence) -> str:
        """What one request of ``items`` is, where it is more than one item (perf's record and Markdown)."""
        return ""

    # -- the client's command line ---------------------------------------------------------------------------------
    def check_cli(self, args) -> None:
        """ValueError when the command line lacks what this kind's requests need."""

    def print_served(self, client: "BundleClient", items, args) -> None:
        """Send ``items`` (texts, (text, text_pair) pairs, or (questions, contexts)) in requests of ``args.batch_size``;
        print the answers."""
        raise NotImplementedError


@dataclass(frozen=True)
class Validated:
    """What the smoke test compares its served score with: validate's number from bundle.json, when it scored the
    same dev set (``metric``/``value`` None otherwise: ``note`` says so, or validation left no number)."""

    metric: str | None
    value: float | None
    note: str = ""  # validate scored another dev set (other_dev_set): said, not compared
    label: str = field(default="", compare=False)  # how reports name the metric ("micro-F1"; bundles before: none)

    def agrees(self, served: float) -> bool:
        return self.value is None or abs(served - self.value) < 1e-9

    def print(self, backend: str | None) -> None:
        """The smoke printout's line for validate's number (and, when validate scored another dev set, why not)."""
        if self.value is not None:
            print(f"  validated {self.label or self.metric} {self.value:.4f}  (validate stage, {backend})")
        if self.note:
            print(self.note)


def validated(manifest: dict, scored: int | None = None, count_key: str = "") -> Validated:
    """bundle.json "validated", against this run's ``scored`` dev items (validate's count under ``count_key``)."""
    v = manifest.get("validated") or {}
    value, note = v.get("value", v.get("accuracy")), other_dev_set(manifest, scored, count_key)
    if not isinstance(value, (int, float)) or note:
        return Validated(None, None, note)
    return Validated(str(v.get("metric", "accuracy")), float(value), label=str(v.get("metric_label") or ""))


def other_dev_set(manifest: dict, scored: int | None, count_key: str) -> str:
    """A line saying validate scored another number of dev items (recorded under ``count_key``) than this run's
    ``scored``, as a ``--set`` such as ``uie.max_eval_texts`` makes happen; "" when the counts agree or are unknown."""
    v = manifest.get("validated") or {}
    count, value = v.get(count_key), v.get("value", v.get("accuracy"))
    if not count_key or scored is None or not isinstance(count, int) or count == scored:
        return ""
    shown = f"{value:.4f} " if isinstance(value, (int, float)) else ""
    return (f"  validated {v.get('metric', 'accuracy')} {shown}was on {count} {count_key}, this run scored {scored}: "
            "another dev set, not compared")



def text_row(item) -> dict:
    """A perf_analyzer request of one text."""
    return {"text": {"content": [item], "shape": [1]}}
