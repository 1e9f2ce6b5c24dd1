"""What every served python model shares: its set-up (the bundle check, its parameters, its sibling files) and
its per-request loop (gather each request's inputs, refuse a bad one alone, run, answer each request, a failure
as a per-request error).  Each ``model.py`` keeps only what differs:

    class TritonPythonModel(model_support.PerRequest):   # or model_support.Batched
        folder, siblings, what = HERE, ("spans",), "postprocessing"
        def setup(self, params): ...                      # its own parameters
        def one(self, request): ... return {name: array}  # Batched: take(request), run(parts), split(result, parts)

Standard library only (``triton_python_backend_utils`` is imported by ``initialize``, inside Triton): this file
is copied next to each python model of a bundle (as ``model_support.py``, beside ``bundle_integrity.py`` and the
pure pipeline modules), where neither ``serving`` nor ``pipeline`` is installed.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path


# A served bundle is checked file by file (bundle.json): nothing may write into it while it serves.
sys.dont_write_bytecode = True


def sibling(folder: Path, name: str):
    """Import ``folder/<name>.py`` (a file copied next to the model) under a name of its own.

    Compiled from the source file itself, never from a ``__pycache__`` entry, so the code that runs is the
    code the bundle's manifest covers."""
    path = Path(folder) / f"{name}.py"
    module = types.ModuleType(f"ernie_bundle_{name}")
    module.__file__ = str(path)
    # Registered before running it: dataclasses (bio.Entity, windows.Window, spans.Span) look their
    # module up in sys.modules while the class is being made.
    sys.modules[module.__name__] = module
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


def params(args: dict) -> dict[str, str]:
    """The ``parameters`` of a python model's config, as Triton hands them to ``initialize``."""
    return {k: v.get("string_value", "") for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}


def start(folder: Path, args: dict) -> dict[str, str]:
    """``initialize``'s first step for every model: refuse a bundle whose files were changed since packaging
    (``bundle_integrity.py``; the bundle root is two levels up), warn where the engine installed is not the version
    that validated the bundle, then return the model's parameters."""
    folder = Path(folder)
    integrity = sibling(folder, "bundle_integrity")
    manifest = integrity.verify_bundle(folder.parent.parent, allow_bytecode=True)
    if (folder / "engine.py").is_file():  # the model that runs the engine says once if it is not the validated one
        note = integrity.engine_version_note(manifest)
        if note:
            print(f"warning: {note}", file=sys.stderr, flush=True)
    return params(args)


def _error(pb_utils, message: str, code: str):
    """``pb_utils.TritonError`` with status ``code`` where this python backend has error codes (Triton 23.x on);
    without one where it has not (FastDeploy's serving image, Triton 21.10: ``TritonError(message)`` only), so the
    request is still answered with the message, under the server's default status."""
    status = getattr(pb_utils.TritonError, code, None)
    return pb_utils.TritonError(message) if status is None else pb_utils.TritonError(message, status)


def _log_error(pb_utils, text: str) -> None:
    """The server log: ``pb_utils.Logger`` where it exists (not in Triton 21.10), else the stub's stderr (the
    server's own: the stub inherits it)."""
    logger = getattr(pb_utils, "Logger", None)
    if logger is not None:
        logger.log_error(text)
    else:
        print(text, file=sys.stderr, flush=True)


def refused(pb_utils, message: str):
    """A response for a request that is wrong as sent: INVALID_ARGUMENT over gRPC, HTTP 400."""
    return pb_utils.InferenceResponse(error=_error(pb_utils, message, "INVALID_ARG"))


def failed(pb_utils, what: str, exc: BaseException):
    """A response for a failure on the server's side: the details (paths, library messages) go to the server
    log, the client gets what failed and where to look."""
    import traceback

    _log_error(pb_utils, f"{what} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    return pb_utils.InferenceResponse(error=_error(pb_utils, f"{what} failed on the server (details in its log)", "INTERNAL"))


# Rows an unbatched model's engine is warmed for (a question's windows, a UIE text's prompts x windows: rarely more).
UNBATCHED_WARM_ROWS = 16


def engine_rows(max_batch_size: int) -> int:
    """The most rows one execute can hand the engine: Triton's batch limit; a model that takes whole requests
    (max_batch_size 0: windows of one question or one UIE text) warms its engine for ``UNBATCHED_WARM_ROWS``."""
    return int(max_batch_size or 0) or UNBATCHED_WARM_ROWS


class Refused(ValueError):
    """A request that is wrong as sent (the message says what to change): answered with ``refused``, alone."""


class Window:
    """What ``spans.best_spans`` / ``spans.decode_spans`` read of one window: the pair it belongs to, its char offsets."""

    __slots__ = ("example_index", "offsets")

    def __init__(self, example_index, offsets):
        self.example_index = example_index
        self.offsets = offsets


def windows(example, offsets) -> list:
    """The windows of a request from the pre-processing model's ``window_example`` [W] and ``offsets`` [W, T, 2]."""
    return [Window(int(example[k]), offsets[k]) for k in range(len(example))]


def slices(parts) -> list:
    """Where each part's rows are once the parts are laid end to end (one slice per part, in order)."""
    out, start = [], 0
    for part in parts:
        out.append(slice(start, start + len(part)))
        start += len(part)
    return out


class PythonModel:
    """What every served python model shares; a ``model.py`` subclasses ``PerRequest`` or ``Batched`` (below).

    ``initialize`` refuses a changed bundle, reads the parameters, loads the ``siblings`` (copied modules, as
    attributes of the same names) and hands the parameters to the model's own ``setup``.  The subclass sets
    ``folder`` (its ``HERE``), ``siblings``, ``what`` (the step named when it fails on the server's side) and, for
    errors that mean "wrong as sent", ``refusals`` (``text_setup`` adds ``text_input.BadText``).
    """

    pairs = False  # takes (text, text_pair) items: set where a model reads its texts (take_texts)

    folder = None  # the model's version folder, model.py's HERE
    siblings = ()
    what = "processing"
    refusals = (Refused,)

    # What this model counts on /metrics (served_metrics.py): its answers' labels (set by a model that answers), and
    # whether it cuts texts to max_seq_len (text_setup with truncate, or a model that cuts itself).
    answer_labels = ()
    truncates = False

    def initialize(self, args):
        params = start(self.folder, args)
        import triton_python_backend_utils  # Triton's python stub provides it; nothing else here needs it

        self.pb_utils = triton_python_backend_utils
        self.metrics = None
        self.gpu = args.get("model_instance_kind") == "GPU"
        self.max_rows = engine_rows(json.loads(args["model_config"]).get("max_batch_size", 0))
        self.fastdeploy = params.get("api") == "fastdeploy"  # FastDeploy's example interface (package.api)
        for name in self.siblings:
            setattr(self, name, sibling(self.folder, name))
        self.setup(params)
        self.metrics = sibling(self.folder, "served_metrics").ServedMetrics(
            self.pb_utils, args.get("model_name", ""), args.get("model_instance_name", ""), self.answer_labels, self.truncates)

    def finalize(self):
        if self.metrics is not None:
            self.metrics.close()

    def setup(self, params: dict) -> None:
        """The model's own set-up, from its config's parameters."""

    def text_setup(self, params: dict, truncate: bool = False, pad: bool = False) -> None:
        """Set-up of a model that takes texts: ``text_input`` (per-item checks, refused as ``BadText``), the bundle's
        WordPiece and its [PAD] id (``truncate``: cut to ``max_seq_len`` as offline; otherwise the model cuts or
        windows itself; ``pad``: a batch comes out padded, ``text_input.encode_padded``), ``max_seq_len``,
        ``max_text_bytes`` and ``max_items`` (texts per request, 0: no limit).  A pair classifier (parameter
        ``text_pair``) reads ``text_pair`` too and encodes pairs as offline (``encode``)."""
        self.text_input = sibling(self.folder, "text_input")
        self.refusals = self.refusals + (self.text_input.BadText,)
        self.max_seq_len = int(params["max_seq_len"])
        self.max_text_bytes = int(params["max_text_bytes"])
        self.max_items = int(params.get("max_items", "0") or 0)
        self.pairs = params.get("text_pair") == "true"
        self.wordpiece = self.text_input.wordpiece_module(self.folder)
        self.truncates = truncate or self.pairs
        if self.pairs:  # pairs are cut by the model's longest_first rule and padded here, not by the tokenizer
            truncate = pad = False
            self.pair_rules = self.text_input.wordpiece_options(self.folder, self.wordpiece)["rules"]
        self.tok = self.text_input.wordpiece(self.folder, max_seq_len=self.max_seq_len if truncate else None, pad=pad,
                                             module=self.wordpiece)
        self.pad_id = self.tok.token_to_id("[PAD]")

    def take_texts(self, request, name: str = "text"):
        """The request's texts checked one by one; for a pair classifier (texts, text_pairs), the second ones checked
        the same way and against the count of the first (a request is refused alone, naming the field)."""
        texts = self.texts(self.items(request, name), name)
        if not self.pairs:
            return texts
        tensor = self.pb_utils.get_input_tensor_by_name(request, "text_pair")
        if tensor is None:
            raise self.text_input.BadText("text_pair: missing: this model classifies text pairs; send one text_pair "
                                          f"per {name}")
        seconds = tensor.as_numpy().reshape(-1)
        if len(seconds) != len(texts):
            raise self.text_input.BadText(f"text_pair: {len(seconds)} item(s) for {len(texts)} {name} item(s): send "
                                          f"one text_pair per {name}")
        return texts, self.texts(seconds, "text_pair")

    def encode(self, parts):
        """``input_ids``, ``token_type_ids`` (int64 [N, longest]) of every text of ``parts`` (``take_texts``'s
        results), in order: single texts in one padded ``encode_batch``, pairs by ``wordpiece.encode_pairs``."""
        if not self.pairs:
            ids, types, encodings = self.text_input.encode_padded(self.tok, [t for texts in parts for t in texts])
            if ids.shape[1] >= self.max_seq_len:  # only a batch at the limit can hold a cut text
                self.metrics.count("truncated", sum(1 for e in encodings if e.overflowing))
            return ids, types
        firsts = [t for texts, _ in parts for t in texts]
        seconds = [t for _, texts in parts for t in texts]
        rows, n_cut = self.wordpiece.encode_pairs(self.tok, firsts, seconds, self.max_seq_len, self.pair_rules)
        self.metrics.count("truncated", n_cut)
        return self.text_input.pad_rows(rows, self.pad_id)

    def rows_of(self, parts) -> list:
        """``slices`` of ``take_texts`` parts: each request's rows in the batch."""
        return slices([p[0] for p in parts] if self.pairs else parts)

    def runner_engine(self, params: dict):
        """The model step's engine from the ``runner.py`` copied beside (a model that runs the model step itself),
        warmed for ``max_rows``."""
        return sibling(self.folder, "runner").make_engine(self.folder, params, self.gpu, self.max_rows)

    # -- a request's inputs -----------------------------------------------------------------------------------------

    def tensor(self, request, name: str):
        return self.pb_utils.get_input_tensor_by_name(request, name).as_numpy()

    def items(self, request, name: str):
        """The input ``name`` as a flat array of items."""
        return self.tensor(request, name).reshape(-1)

    def texts(self, items, field: str) -> list:
        """``items`` of the input ``field`` checked and decoded one by one (``text_input.decode_item``)."""
        return [self.text_input.decode_item(x, field, j, self.max_text_bytes) for j, x in enumerate(items)]

    def strings(self, request, name: str) -> list:
        """The input ``name`` as str, for text the pre-processing model already checked."""
        return [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in self.items(request, name)]

    def response(self, outputs: dict, wanted=None):
        """An answer with the tensors of ``outputs`` (name -> array) the request asked for (``wanted``; None: all),
        in that order."""
        return self.pb_utils.InferenceResponse(output_tensors=[self.pb_utils.Tensor(k, v) for k, v in outputs.items()
                                                               if wanted is None or k in wanted])

    @staticmethod
    def requested(request):
        """The output names ``request`` asked for (Triton passes every output when a client names none), or None
        where this python backend cannot say (Triton 21.10)."""
        names = getattr(request, "requested_output_names", None)
        return frozenset(names()) if names is not None else None


class PerRequest(PythonModel):
    """Each request alone: ``one(request)`` gives its outputs (name -> array).  A ``refusals`` error answers that
    request with ``refused`` (its message), any other with ``failed(what)``; the other requests go on."""

    def one(self, request) -> dict:
        raise NotImplementedError

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self.response(self.one(request)))
            except self.refusals as exc:
                self.metrics.count("refused")
                responses.append(refused(self.pb_utils, str(exc)))
            except Exception as exc:  # never let one request take the others or the instance down
                self.metrics.count("failed")
                responses.append(failed(self.pb_utils, self.what, exc))
        return responses


class Batched(PythonModel):
    """All requests in one call: ``take(request)`` checks each request alone and gives its part (a ``refusals``
    error answers that request with ``refused``; its batch mates go on), ``run(parts)`` runs the accepted parts
    together (a failure is the server's: each of them gets ``failed(what)``), ``split(result, parts)`` gives each
    part's outputs (name -> array, views into the batch's arrays where they can be), in order.  While ``run`` and
    ``split`` are called, ``wanted`` is the set of outputs any accepted request asked for (None: every output), so a
    model computes only those; each answer carries only what its request asked for."""

    wanted = None

    def take(self, request):
        raise NotImplementedError

    def run(self, parts):
        raise NotImplementedError

    def split(self, result, parts):
        """Each request's share of ``run``'s whole-batch arrays, as views (no copies); a model whose outputs are
        not row-aligned arrays overrides it."""
        for rows in self.rows_of(parts):
            yield {k: v[rows] for k, v in result.items()}

    def execute(self, requests):
        responses = [None] * len(requests)
        parts, rows, asked = [], [], []
        for i, request in enumerate(requests):
            try:
                part = self.take(request)
            except self.refusals as exc:
                self.metrics.count("refused")
                responses[i] = refused(self.pb_utils, str(exc))
                continue
            parts.append(part)
            rows.append(i)
            asked.append(self.requested(request))
        if not parts:
            return responses
        self.wanted = None if any(a is None for a in asked) else frozenset().union(*asked)
        try:
            result = self.run(parts)
        except Exception as exc:  # every request was checked: what fails here is the server's
            self.metrics.count("failed", len(rows))
            for i in rows:
                responses[i] = failed(self.pb_utils, self.what, exc)
            return responses
        for i, wanted, outputs in zip(rows, asked, self.split(result, parts)):
            responses[i] = self.response(outputs, wanted)
        return responses
