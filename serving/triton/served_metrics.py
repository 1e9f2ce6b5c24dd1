"""What a served python model counts on Triton's ``/metrics`` (port 8002, which every bundle's ServiceMonitor
scrapes) beside Triton's own request and latency metrics: what only the model can see.

    ernie_bundle_refused_requests_total          requests refused as sent (HTTP 400, gRPC INVALID_ARGUMENT)
    ernie_bundle_failed_requests_total           requests that failed on the server's side (details: its log)
    ernie_bundle_truncated_items_total           texts (pairs) cut to max_seq_len tokens: the model did not read
                                                 their end (classification and NER); questions cut to
                                                 max_query_len (reading comprehension)
    ernie_bundle_answers_total{label}            a classifier's answers by label (each label of a set), a tagger's
                                                 entities by type

Each series is labelled ``model`` (Triton's model name), ``model_instance`` and ``pid`` (the stub process counting):
one per process, so a dashboard sums them (``sum by (model, label)``).  A series must never be shared: Triton counts
a series' owners per MetricFamily object, and each stub process makes its own, so the first process to let go of a
shared series frees it under the others (triton-inference-server/server#8663: a crash when a model with two
instances was loaded again, seen here as "malloc(): unaligned fastbin chunk detected").  The pid keeps the series of
an instance that is being replaced (a reload starts the new one first) apart from its successor's.

Triton counts a refusal and a server fault alike (``nv_inference_request_failure``); an alert wants them apart.
Truncation and the answers' mix are how a served input stream drifts from the dev set the bundle was validated on
(the model card gives dev's shares).

A counter's increment is a round trip to the Triton process (~15-30 us measured here): counts gather in this process
and a thread hands them over once a second, so a request pays a dict update, and a scrape may lag by a second.  Where
the python backend has no custom metrics (FastDeploy's Triton 21.10) nothing is counted.  Standard library only:
copied next to every python model of a bundle (as ``served_metrics.py``) and loaded by ``model_support``.
"""

from __future__ import annotations

import sys
import threading

FAMILIES = {
    "refused": ("ernie_bundle_refused_requests_total", "Requests refused as sent (HTTP 400, gRPC INVALID_ARGUMENT)"),
    "failed": ("ernie_bundle_failed_requests_total", "Requests that failed on the server's side (details in its log)"),
    "truncated": ("ernie_bundle_truncated_items_total",
                  "Texts (pairs) cut to max_seq_len tokens; questions cut to max_query_len"),
    "answers": ("ernie_bundle_answers_total", "Answers by label: a classifier's labels, a tagger's entity types"),
}

FLUSH_SECONDS = 1.0


class ServedMetrics:
    """The counters of one served model instance (one stub process).  ``count`` and ``answers`` only
    add to a pending tally; a daemon thread hands it to Triton every ``FLUSH_SECONDS`` and ``close`` (the model's
    ``finalize``) hands over the rest.  ``answer_labels`` are created at zero up front, with ``refused``, ``failed``
    and, where ``truncates``, ``truncated``: a series that exists from the start rates correctly from the start."""

    def __init__(self, pb_utils, model: str, instance: str = "", answer_labels=(), truncates: bool = False):
        import os

        self.labels = {"model": model, "model_instance": instance, "pid": str(os.getpid())}
        self.pending: dict[tuple[str, str], int] = {}
        self.warned: set[tuple[str, str]] = set()  # series whose failure was said once (then counted in ``lost``)
        self.lost = 0
        self.lock = threading.Lock()
        self.families, self.series = {}, {}
        family = getattr(pb_utils, "MetricFamily", None)
        self.enabled = family is not None
        if not self.enabled:
            return
        for key in ("refused", "failed", *(("truncated",) if truncates else ()), *(("answers",) if answer_labels else ())):
            name, description = FAMILIES[key]
            self.families[key] = family(name=name, description=description, kind=family.COUNTER)
        for key in ("refused", "failed", "truncated"):
            if key in self.families:
                self._series(key, "")
        for label in answer_labels:
            self._series("answers", str(label))
        self.wake = threading.Event()
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="ernie-bundle-metrics", daemon=True)
        self.thread.start()

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to ``key``'s counter ("refused", "failed", "truncated")."""
        self._add({(key, ""): n})

    def answers(self, counts) -> None:
        """Add ``counts`` (label -> how many answers gave it) to ``ernie_bundle_answers_total``."""
        self._add({("answers", label): n for label, n in counts.items()})

    def _add(self, moves: dict) -> None:
        if self.enabled:
            with self.lock:
                for key, n in moves.items():
                    if n:
                        self.pending[key] = self.pending.get(key, 0) + int(n)

    def flush(self) -> None:
        """Hand the pending tally to Triton (one increment per series that moved)."""
        with self.lock:
            pending, self.pending = self.pending, {}
        for (key, label), n in pending.items():
            try:
                self._series(key, label).increment(n)
            except Exception as exc:  # a count lost must never take a request or the instance down
                self.lost += n
                if (key, label) not in self.warned:  # once a series: a broken metrics API would say it every second
                    self.warned.add((key, label))
                    print(f"warning: ernie-bundle metric {key} {label!r} not counted: {exc} (its later losses are "
                          "counted, and said at unload)", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Stop the thread and hand over what is left (``finalize``)."""
        if not self.enabled or self.closed:
            return
        self.closed = True
        self.wake.set()
        self.thread.join(timeout=5)
        self.flush()
        if self.lost:
            print(f"warning: ernie-bundle metrics: {self.lost} counts lost in all (series {sorted(self.warned)})",
                  file=sys.stderr, flush=True)
        self.series.clear()  # a family outlives its series (the python backend refuses the other order)
        self.families.clear()

    def _run(self) -> None:
        while not self.wake.wait(FLUSH_SECONDS):
            self.flush()

    def _series(self, key: str, label: str):
        series = self.series.get((key, label))
        if series is None:  # a key the model did not declare is a KeyError: flush warns, the request is not touched
            labels = {**self.labels, **({"label": label} if key == "answers" else {})}
            series = self.series[key, label] = self.families[key].Metric(labels=labels)
        return series
