"""``package.api: fastdeploy``: the served interface of FastDeploy's ERNIE 3.0 and UIE serving examples.

A PaddleNLP user's application talks to those examples' Triton models with FastDeploy's own gRPC clients; a bundle
packaged with this API answers them unchanged.  Read from PaddlePaddle/FastDeploy (develop, 2024-03):

    examples/text/ernie-3.0/serving/triton/models/ernie_seqcls/config.pbtxt          (ensemble)
    examples/text/ernie-3.0/serving/triton/models/ernie_seqcls_postprocess/{config.pbtxt, 1/model.py}
    examples/text/ernie-3.0/serving/triton/models/ernie_tokencls/config.pbtxt        (ensemble)
    examples/text/ernie-3.0/serving/triton/models/ernie_tokencls_postprocess/{config.pbtxt, 1/model.py}
    examples/text/ernie-3.0/serving/triton/models/ernie_tokenizer/{config.pbtxt, 1/model.py}
    examples/text/ernie-3.0/serving/triton/models/ernie_{seqcls,tokencls}_model/config.pbtxt
    examples/text/ernie-3.0/serving/{seq_cls_grpc_client.py, token_cls_grpc_client.py}
    examples/text/uie/serving/triton/models/uie/{config.pbtxt, 1/model.py}, examples/text/uie/serving/grpc_client.py
    python/fastdeploy/text/uie/__init__.py, fastdeploy/text/text_pybind.cc, fastdeploy/text/uie/model.cc (UIE results)

What the clients do, and so what each served model must be:

    classification  ``ernie_seqcls`` (ensemble, max_batch_size 64 as packaged): input ``INPUT`` TYPE_STRING dims [1]
                    (the client sends [B, 1] UTF-8 bytes); outputs ``label`` TYPE_INT64 and ``confidence`` TYPE_FP32,
                    dims [1] in the config but answered as [B] (FastDeploy's post-processing returns argmax(-1) and
                    max softmax, both [B]; its accuracy loop does ``np.sum(labels == ret["label"])`` with [B] labels,
                    which a [B, 1] answer would broadcast to [B, B]).  ``label`` is the class index in labels.json order.
    token cls       ``ernie_tokencls`` (ensemble): input ``INPUT`` as above; output ``OUTPUT`` TYPE_STRING dims [1],
                    answered as [B]: per text the Python literal of a list of ``{'pos': [start, end], 'label': type}``
                    (the client runs ``ast.literal_eval(ret.decode('utf-8'))`` on each row and slices
                    ``text[pos[0]:pos[1] + 1]``: character offsets, end inclusive).
    uie             ``uie`` (one python model, max_batch_size 1): inputs ``INPUT_0`` (a JSON list of texts) and
                    ``INPUT_1`` (a JSON schema: a list of prompts, a dict of prompt -> child prompts for relations,
                    or empty for the schema sent last), TYPE_STRING dims [1], sent as [1, 1]; output ``OUTPUT_0``
                    TYPE_STRING answered as [N], one row per text: the Python literal of ``{prompt: [{'start', 'end',
                    'probability', 'text'[, 'relation': {child: [...]}]}]}`` (prompts with no span left out), which
                    the client reads with ``ast.literal_eval``.

Inside, the bundle keeps its own code: ``<name>_tokenizer`` (our WordPiece, where FastDeploy shares one
``ernie_tokenizer`` per repository: ours has this bundle's vocabulary, so two bundles never collide), ``<name>_model``
and ``<name>_postprocess`` (FastDeploy's model names), with our tensor names between them; the payloads come from
``serving/triton/fastdeploy_payloads.py``, copied into the bundle.
"""

from __future__ import annotations

from dataclasses import dataclass

from serving.bundle.config import PackageConfig, _config_error, runtimes

API = "fastdeploy"


@dataclass(frozen=True)
class Example:
    """FastDeploy's serving example for one task kind (each kind names its own: ``BundleKind.fastdeploy``)."""

    model: str  # the served model's name
    client: str  # FastDeploy's own client script for it
    one_model: bool = False  # one python model that windows, runs the engine in-process and decodes (uie)
    io: str = ""  # the served tensors, as FastDeploy's client reads them (the model card's line; uie writes its own)


# ernie_seqcls / ernie_tokencls ensemble tensors
INPUT, OUTPUT = "INPUT", "OUTPUT"
# uie tensors
UIE_TEXTS, UIE_SCHEMA, UIE_RESULTS = "INPUT_0", "INPUT_1", "OUTPUT_0"
UIE_MAX_BATCH_SIZE = 1  # FastDeploy's uie config: one request carries its texts as one JSON list


def check(task_type: str, example: Example | None, pc: PackageConfig, offered: str) -> None:
    """Refuse, naming package.api, a package config FastDeploy's examples have no served interface for
    (``example``: the kind's; ``offered``: the kinds that have one, for the message)."""
    if pc.api != API:
        return
    if example is None:
        raise _config_error(f"package.api: fastdeploy has serving examples for {offered}, not {task_type}; use "
                            "package.api ernie-bundle")
    if example.one_model and pc.backend != "python":
        python = ", ".join(r for r, (backend, _) in runtimes().items() if backend == "python")
        raise _config_error(f"package.api: fastdeploy's {example.model} is one python model running the engine in-process (as "
                            f"FastDeploy's example does): use a python runtime ({python}), not {pc.runtime}")
    if example.one_model and pc.layout == "ensemble":
        raise _config_error(f"package.api: fastdeploy's {example.model} is one python model (layout fused), not an "
                            "ensemble")


def resolved(pc: PackageConfig, example: Example | None) -> PackageConfig:
    """FastDeploy's uie keeps the schema it was sent last per model instance (``UIEModel.set_schema``; its
    client sends ``[]`` to mean "the same again"), so with instance_count auto the uie model gets one instance, as
    in FastDeploy's config, and every core as engine threads: then "the schema sent last" is one per server."""
    import dataclasses

    if pc.api == API and example is not None and example.one_model and pc.instance_count == 0:
        return dataclasses.replace(pc, instance_count=1)
    return pc
