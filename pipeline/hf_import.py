"""Hugging Face BERT/ERNIE checkpoints in: a HF model directory -> the PaddleNLP ERNIE directory the pipeline runs.

A HF directory is one with ``model.safetensors`` (or a pickled ``pytorch_model.bin``) and no
``model_state.pdparams``; its ``config.json`` says ``model_type`` ``bert`` (bert-base-chinese, hfl's RoBERTa-wwm
and MacBERT) or ``ernie`` (the ERNIE 3.0 ports).  The network is the same as PaddleNLP's ERNIE: post-LayerNorm
encoder, absolute positions, token types (and ERNIE's task types), a tanh pooler.  What differs is only where the
numbers live, so the conversion is a renaming and, for every ``nn.Linear``, a transpose (torch stores
``[out, in]``, paddle ``[in, out]``); ``layer_norm_eps`` is kept (``pipeline.ernie_models.configure_layer_norms``)
and the tokenizer keeps HF's rules (``pipeline.wordpiece``: ``wordpiece_rules: huggingface``).

Heads: ``...ForSequenceClassification`` / ``...ForTokenClassification`` (``classifier``) and
``...ForQuestionAnswering`` (``qa_outputs``, [start, end]) become this project's heads of the same names; an
encoder (``BertModel``, or a pre-training checkpoint whose ``cls.*`` heads are dropped) gets the task's head by
fine-tuning, as a PaddleNLP encoder does.  ``id2label`` becomes ``labels.json`` when it names real labels.

A trained head is never dropped unless asked (``model.head: replace``): given the task's labels, its ``id2label``
is matched to them and its rows put in the task's order, or refused (``pipeline.hf_heads``).

Weights are read with ``safetensors`` (no code can run from them).  A ``pytorch_model.bin`` is a pickle: refused,
unless ``model.allow_pickled_weights`` is set, and then read only by ``torch.load(weights_only=True)``.
Everything a user can get wrong is one line naming the file and the field or tensor (``ModelError``).

The tests hold the conversion against Hugging Face's own forward pass and tokenizer: ``tests/golden/hf/``
(made once by ``scripts/make_hf_golden.py`` with transformers + torch, which CI cannot install).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from pipeline.errors import ModelError, shown_json
from pipeline.hf_heads import LABELLED_HEADS, map_head, named_labels
from pipeline.tokenizer import TOKENIZER_CONFIG

SAFETENSORS = "model.safetensors"
PICKLED = "pytorch_model.bin"
PADDLE_WEIGHTS = "model_state.pdparams"
CONFIG = "config.json"
MODEL_TYPES = ("bert", "ernie")
ACTIVATIONS = ("gelu", "relu")  # HF's "gelu" is the erf form, as paddle's; gelu_new/tanh forms are not
# HF architecture -> (this project's head class, the HF head's tensor prefix); None: an encoder (head trained later)
ARCHITECTURES: dict[str, tuple[str | None, str | None]] = {
    **{f"{m}ForSequenceClassification": ("ErnieForSequenceClassification", "classifier") for m in ("Bert", "Ernie")},
    **{f"{m}ForTokenClassification": ("ErnieForTokenClassification", "classifier") for m in ("Bert", "Ernie")},
    **{f"{m}ForQuestionAnswering": ("ErnieForQuestionAnswering", "qa_outputs") for m in ("Bert", "Ernie")},
    **{f"{m}{suffix}": (None, None) for m in ("Bert", "Ernie")
       for suffix in ("Model", "ForMaskedLM", "ForPreTraining", "ForNextSentencePrediction")},
}
DROPPED = ("cls.", "embeddings.position_ids")  # pre-training heads; a buffer older checkpoints saved
SPECIAL_TOKENS = {k: v for k, v in TOKENIZER_CONFIG.items() if k.endswith("_token")}  # the only ones served
TOKENIZER_CLASSES = ("BertTokenizer", "BertTokenizerFast", "ErnieTokenizer")
# HF name (after the bert./ernie. prefix) -> PaddleNLP ERNIE name; {} is the layer index
RENAMES = (
    (r"embeddings\.LayerNorm\.", "embeddings.layer_norm."),
    (r"encoder\.layer\.(\d+)\.attention\.self\.query\.", "encoder.layers.{}.self_attn.q_proj."),
    (r"encoder\.layer\.(\d+)\.attention\.self\.key\.", "encoder.layers.{}.self_attn.k_proj."),
    (r"encoder\.layer\.(\d+)\.attention\.self\.value\.", "encoder.layers.{}.self_attn.v_proj."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", "encoder.layers.{}.self_attn.out_proj."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", "encoder.layers.{}.norm1."),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", "encoder.layers.{}.linear1."),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", "encoder.layers.{}.linear2."),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", "encoder.layers.{}.norm2."),
    (r"embeddings\.(word|position|token_type|task_type)_embeddings\.", "embeddings.{}_embeddings."),
    (r"pooler\.dense\.", "pooler.dense."),
)
RECORD = "hf_import.json"  # written into a converted directory: what it came from


@dataclass(frozen=True)
class HFCheckpoint:
    """What a HF directory holds, read without loading the weights (config and file checks only)."""

    path: Path
    model_type: str
    architecture: str  # the HF class named in config.json (BertModel when it names none)
    head: str | None  # this project's head class, None for an encoder (or when the head is dropped)
    weights: Path
    config: dict  # config.json as read
    tokenizer: dict  # the converted directory's tokenizer_config.json (tokenizer_settings)
    vocab: tuple[str, ...]  # the tokens by id


def is_hugging_face(model_dir: Path) -> bool:
    """A HF checkpoint directory: HF weights and no PaddleNLP weights beside them."""
    d = Path(model_dir)
    return d.is_dir() and not (d / PADDLE_WEIGHTS).exists() and ((d / SAFETENSORS).exists() or (d / PICKLED).exists())


def inspect(model_dir: Path, allow_pickle: bool = False) -> HFCheckpoint:
    """The checks that need no weights (``status`` and cache keys come here): config fields, tokenizer files."""
    from pipeline.modeling import read_json_object

    d = Path(model_dir)
    check_links(d)
    weights = _weights_file(d, allow_pickle)
    if not (d / CONFIG).is_file():
        raise ModelError(f"{d}: a Hugging Face model directory needs {CONFIG}")
    config = read_json_object(d / CONFIG)
    model_type = config.get("model_type")
    where = d / CONFIG
    if model_type not in MODEL_TYPES:
        raise ModelError(f"{where}: model_type {model_type!r} is not supported: BERT and ERNIE checkpoints "
                         f"({', '.join(MODEL_TYPES)}) only")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ModelError(f"{where}: position_embedding_type {config['position_embedding_type']!r}: only absolute "
                         "position embeddings are supported")
    for flag in ("is_decoder", "add_cross_attention"):
        if config.get(flag):
            raise ModelError(f"{where}: {flag} is true: only encoder models are supported")
    if config.get("hidden_act", "gelu") not in ACTIVATIONS:
        raise ModelError(f"{where}: hidden_act {config.get('hidden_act')!r} is not supported ({', '.join(ACTIVATIONS)})")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ModelError(f"{where}: field {key!r} must be a positive integer, got {value!r}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ModelError(f"{where}: hidden_size {config['hidden_size']} is not a multiple of num_attention_heads "
                         f"{config['num_attention_heads']}")
    _check_fields(where, config)
    architectures = config.get("architectures")
    if architectures is not None and (not isinstance(architectures, list)
                                      or not all(isinstance(a, str) and a for a in architectures)):
        raise ModelError(f"{where}: field 'architectures' must be a list of class names (e.g. [\"BertModel\"]), got "
                         f"{shown_json(architectures)}")
    architecture = (architectures or [f"{'Bert' if model_type == 'bert' else 'Ernie'}Model"])[0]
    if architecture not in ARCHITECTURES:
        known = sorted({a.replace("Ernie", "Bert") for a in ARCHITECTURES})
        raise ModelError(f"{where}: architectures {architecture!r}: a head this pipeline does not know "
                         f"(known: {', '.join(known)} and their Ernie forms)")
    tokenizer, vocab = tokenizer_settings(d)  # refuse a tokenizer we cannot reproduce before anything runs
    return HFCheckpoint(path=d, model_type=model_type, architecture=architecture, head=ARCHITECTURES[architecture][0],
                        weights=weights, config=config, tokenizer=tokenizer, vocab=tuple(vocab))


# Optional config.json fields the conversion reads: (default, lowest, highest, lowest allowed, highest allowed)
FLOAT_FIELDS = {
    "layer_norm_eps": (1e-12, 0.0, 1.0, False, True),
    "initializer_range": (0.02, 0.0, 10.0, True, True),
    "hidden_dropout_prob": (0.1, 0.0, 1.0, True, False),
    "attention_probs_dropout_prob": (0.1, 0.0, 1.0, True, False),
}
OPTIONAL_INT_FIELDS = ("vocab_size", "max_position_embeddings", "type_vocab_size", "task_type_vocab_size")


def _check_fields(where: Path, config: dict) -> None:
    """The optional fields the conversion reads: numbers in range, integers positive, flags true or false."""
    import math

    for key, (_, low, high, low_ok, high_ok) in FLOAT_FIELDS.items():
        if config.get(key) is None:
            continue
        value = config[key]
        bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        if bad or value < low or value > high or (value == low and not low_ok) or (value == high and not high_ok):
            span = f"{'[' if low_ok else '('}{low:g}, {high:g}{']' if high_ok else ')'}"
            raise ModelError(f"{where}: field {key!r} must be a number in {span}, got {shown_json(value)}")
    for key in OPTIONAL_INT_FIELDS:
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ModelError(f"{where}: field {key!r} must be a positive integer, got {shown_json(value)}")
    if config.get("use_task_id") is not None and not isinstance(config["use_task_id"], bool):
        raise ModelError(f"{where}: field 'use_task_id' must be true or false, got {shown_json(config['use_task_id'])}")



def check_links(d: Path) -> None:
    """Refuse a symbolic link in the directory (at any depth) that leaves it: what it points to would be read,
    hashed and copied as the model's.  A Hugging Face hub cache snapshot (``.../snapshots/<rev>/``, its files links
    to ``../../blobs/``) may point into its own ``blobs/``."""
    import os

    root = Path(d).resolve()
    allowed = [root]
    if root.parent.name == "snapshots":
        allowed.append(root.parent.parent / "blobs")
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in (*dirs, *files):
            p = Path(top) / name
            if not p.is_symlink():
                continue
            target = p.resolve()
            if not any(target == a or target.is_relative_to(a) for a in allowed):
                raise ModelError(f"{p}: a symbolic link to {target}, outside the model directory: not read; copy the "
                                 "file into the directory instead")


def _weights_file(d: Path, allow_pickle: bool) -> Path:
    if (d / SAFETENSORS).is_file():
        return d / SAFETENSORS
    if (d / PICKLED).is_file():
        if not allow_pickle:
            raise ModelError(f"{d / PICKLED}: a pickle (it can run code when read): convert it to {SAFETENSORS} "
                             "(transformers: model.save_pretrained(dir, safe_serialization=True)), or set "
                             "model.allow_pickled_weights: true to read it with torch.load(weights_only=True)")
        return d / PICKLED
    if (d / f"{SAFETENSORS}.index.json").is_file():
        raise ModelError(f"{d}: sharded weights ({SAFETENSORS}.index.json) are not supported: save the model as one "
                         f"{SAFETENSORS}")
    raise ModelError(f"{d}: no {SAFETENSORS}")


def tokenizer_settings(d: Path) -> tuple[dict, list[str]]:
    """(``tokenizer_config.json`` for the converted directory, the vocabulary by id) from HF's tokenizer files:
    ``vocab.txt``, or a WordPiece ``tokenizer.json``; a setting ``pipeline.wordpiece`` cannot reproduce is refused
    by name."""
    from pipeline.modeling import read_json_object

    cfg_path = d / "tokenizer_config.json"
    hf = read_json_object(cfg_path) if cfg_path.is_file() else {}
    cls = hf.get("tokenizer_class")
    if cls is not None and cls not in TOKENIZER_CLASSES:
        raise ModelError(f"{cfg_path}: tokenizer_class {cls!r} is not a BERT WordPiece tokenizer "
                         f"({', '.join(TOKENIZER_CLASSES)})")
    if hf.get("do_basic_tokenize", True) is not True:
        raise ModelError(f"{cfg_path}: do_basic_tokenize {hf['do_basic_tokenize']!r} is not supported (only true)")
    if hf.get("never_split"):
        raise ModelError(f"{cfg_path}: never_split is not supported (the served tokenizer splits every word)")
    for key, token in SPECIAL_TOKENS.items():
        value = hf.get(key, token)
        value = value.get("content") if isinstance(value, dict) else value
        if value != token:
            raise ModelError(f"{cfg_path}: {key} {value!r} is not supported (only {token!r})")
    for key in ("do_lower_case", "tokenize_chinese_chars"):
        if not isinstance(hf.get(key, True), bool):
            raise ModelError(f"{cfg_path}: {key} must be true or false, got {hf[key]!r}")
    if hf.get("strip_accents") is not None and not isinstance(hf["strip_accents"], bool):
        raise ModelError(f"{cfg_path}: strip_accents must be true, false or null, got {hf['strip_accents']!r}")
    vocab = _vocabulary(d)
    from pipeline.wordpiece import RULES_KEY

    settings = {"tokenizer_class": "BertTokenizer", "do_lower_case": hf.get("do_lower_case", True),
                "tokenize_chinese_chars": hf.get("tokenize_chinese_chars", True),
                "strip_accents": hf.get("strip_accents"), RULES_KEY: "huggingface", **SPECIAL_TOKENS}
    return settings, vocab


def _vocabulary(d: Path) -> list[str]:
    """The tokens by id: ``vocab.txt`` (a token a line), else ``tokenizer.json``'s WordPiece vocabulary."""
    from pipeline.modeling import MAX_VOCAB_BYTES, read_json_object, read_text

    if (d / "vocab.txt").is_file():
        tokens = read_text(d / "vocab.txt", MAX_VOCAB_BYTES).replace("\r\n", "\n").split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        where = d / "vocab.txt"
    elif (d / "tokenizer.json").is_file():
        where = d / "tokenizer.json"
        model = read_json_object(where).get("model") or {}
        if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
            raise ModelError(f"{where}: model type {model.get('type')!r}: only a WordPiece vocabulary is supported")
        if model.get("continuing_subword_prefix", "##") != "##":
            raise ModelError(f"{where}: continuing_subword_prefix {model['continuing_subword_prefix']!r} is not "
                             "supported (only '##')")
        by_id = {i: t for t, i in model["vocab"].items() if isinstance(i, int) and i >= 0}
        if len(by_id) != len(model["vocab"]) or sorted(by_id) != list(range(len(by_id))):
            raise ModelError(f"{where}: the WordPiece vocabulary's ids are not 0..{len(model['vocab']) - 1}")
        tokens = [by_id[i] for i in range(len(by_id))]
    else:
        raise ModelError(f"{d}: no tokenizer vocabulary (vocab.txt or tokenizer.json)")
    from pipeline.modeling import REQUIRED_TOKENS

    missing = [t for t in REQUIRED_TOKENS if t not in tokens]
    if missing:
        raise ModelError(f"{where}: vocabulary has no {', '.join(missing)} token ({len(tokens)} tokens)")
    return tokens


def convert(src: Path, dst: Path, allow_pickle: bool = False, keep_head: bool = True,
            labels: Sequence[str] | None = None, label_names: Sequence[str] | None = None) -> Path:
    """Write ``dst`` as a PaddleNLP ERNIE directory (weights, config, tokenizer, labels) from HF checkpoint ``src``;
    written beside and renamed into place, so a half-written ``dst`` never exists.  ``keep_head`` False: the encoder
    alone (the task fine-tunes its own head).  ``labels`` (the task's, ``label_names`` their names): a labelled head
    is mapped to them (``map_head``: rows reordered to the task's order, or refused) and written with them."""
    from pipeline.modeling import label_maps, reorder_head, save_state_dict, write_labels
    from pipeline.tokenizer import write_vocab

    ckpt = inspect(src, allow_pickle)
    if not keep_head:
        ckpt = replace(ckpt, head=None)
    state = paddle_state(_read_weights(ckpt.weights), ckpt)
    words = state["ernie.embeddings.word_embeddings.weight"]
    if len(ckpt.vocab) > words.shape[0]:
        raise ModelError(f"{ckpt.path}: {len(ckpt.vocab)} vocabulary tokens but the weights embed only {words.shape[0]}")
    mapping = None
    if labels is not None and ckpt.head in LABELLED_HEADS:
        mapping = map_head(ckpt, int(state["classifier.weight"].shape[1]), labels, label_names or labels)
        state = reorder_head(state, mapping.order, ckpt.weights)
    tmp = Path(dst).with_name(Path(dst).name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_state_dict(state, tmp / PADDLE_WEIGHTS)
    config = paddle_config(ckpt, state)
    if mapping is not None:
        config.update(label_maps(labels))
    (tmp / CONFIG).write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    write_vocab(list(ckpt.vocab), tmp, ckpt.tokenizer)
    if mapping is not None:
        write_labels(tmp / "labels.json", list(labels), list(label_names or labels))
    elif ckpt.head in LABELLED_HEADS and named_labels(ckpt.config):
        write_labels(tmp / "labels.json", named_labels(ckpt.config), named_labels(ckpt.config))
    record = {"source": str(ckpt.path), "model_type": ckpt.model_type, "architecture": ckpt.architecture,
              "head": ckpt.head, "weights": ckpt.weights.name, "tensors": len(state)}
    if mapping is not None:
        record["head_labels"] = {"by": mapping.by, "order": list(mapping.order), "note": mapping.note}
    (tmp / RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")
    if Path(dst).exists():
        shutil.rmtree(dst)
    tmp.rename(dst)
    return Path(dst)


def _read_weights(path: Path) -> dict:
    if path.name == PICKLED:
        try:
            import torch
        except ImportError:
            raise ModelError(f"{path}: reading a pickled checkpoint needs torch, which is not installed: convert it to "
                             f"{SAFETENSORS} instead") from None
        state = torch.load(str(path), map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read safetensors ({exc})") from None


def paddle_state(hf_state: dict, ckpt: HFCheckpoint) -> dict:
    """HF tensors -> PaddleNLP ERNIE's state dict (float32 numpy), every name accounted for; Linear weights
    transposed.  A missing pooler (HF's token and QA heads have none) is filled for the network's sake: zeros for
    heads that never read it, a seeded draw for an encoder that will be fine-tuned."""
    import numpy as np

    config, head_prefix = ckpt.config, ARCHITECTURES[ckpt.architecture][1]
    out: dict[str, np.ndarray] = {}
    for name, value in hf_state.items():
        body = re.sub(r"^(bert|ernie)\.", "", name)
        if body.startswith(DROPPED):
            continue
        is_head = bool(head_prefix) and body.startswith(head_prefix + ".")
        if is_head and not ckpt.head:
            continue
        value = np.asarray(value, dtype=np.float32)
        if not np.isfinite(value).all():
            bad = int(np.size(value) - np.isfinite(value).sum())
            raise ModelError(f"{ckpt.weights}: tensor {name!r} holds {bad} NaN or infinite value(s) of {np.size(value)}: "
                             "a broken checkpoint, not converted")
        if is_head:  # kept: this project's heads are all named classifier
            _check_head_tensor(ckpt, name, body[len(head_prefix) + 1:], value)
            out["classifier." + body[len(head_prefix) + 1:]] = value.T if value.ndim == 2 else value
            continue
        target = _rename(body)
        if target is None:
            raise ModelError(f"{ckpt.weights}: tensor {name!r} is not part of a BERT/ERNIE encoder or its "
                             f"{ckpt.architecture} head")
        is_linear = value.ndim == 2 and "_embeddings." not in target
        out["ernie." + target] = value.T if is_linear else value
    _check_shapes(out, config, ckpt)  # before anything of the config's sizes is allocated
    _fill_pooler(out, config, ckpt)
    return out


def _check_head_tensor(ckpt: HFCheckpoint, name: str, part: str, value) -> None:
    if part == "weight" and value.ndim != 2:
        raise ModelError(f"{ckpt.weights}: tensor {name!r} has shape {list(value.shape)}, expected [outputs, "
                         "hidden_size]")
    if part == "bias" and value.ndim != 1:
        raise ModelError(f"{ckpt.weights}: tensor {name!r} has shape {list(value.shape)}, expected [outputs]")


def _rename(body: str) -> str | None:
    body = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", body))  # TF-era LayerNorm names
    for pattern, repl in RENAMES:
        m = re.match(pattern, body)
        if m:
            return repl.format(*m.groups()) + body[m.end():]
    return None


def _fill_pooler(out: dict, config: dict, ckpt: HFCheckpoint) -> None:
    import numpy as np

    if "ernie.pooler.dense.weight" in out:
        return
    if ckpt.head == "ErnieForSequenceClassification":
        raise ModelError(f"{ckpt.weights}: no pooler (pooler.dense.weight): a sequence classifier reads it")
    hidden = config["hidden_size"]
    if ckpt.head is None:  # an encoder: its sequence head is fine-tuned on a pooler drawn as PaddleNLP would
        draw = np.random.default_rng(0).normal(0.0, float(config.get("initializer_range", 0.02)), (hidden, hidden))
        out["ernie.pooler.dense.weight"] = draw.astype(np.float32)
    else:
        out["ernie.pooler.dense.weight"] = np.zeros((hidden, hidden), np.float32)
    out["ernie.pooler.dense.bias"] = np.zeros((hidden,), np.float32)


def _check_shapes(state: dict, config: dict, ckpt: HFCheckpoint) -> None:
    """The weights against config.json, naming the first tensor that disagrees."""
    hidden, inner, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    where = ckpt.path / CONFIG
    # The config's sizes against the weights' before any of them sizes a loop or an allocation
    words = state.get("ernie.embeddings.word_embeddings.weight")
    if words is None or words.ndim != 2:
        raise ModelError(f"{ckpt.weights}: no word_embeddings: not a BERT/ERNIE checkpoint")
    if words.shape[1] != hidden:
        raise ModelError(f"{where}: hidden_size {hidden} but the weights' word_embeddings are {words.shape[1]} wide")
    held = {int(m.group(1)) for k in state for m in [re.match(r"ernie\.encoder\.layers\.(\d+)\.", k)] if m}
    if layers > len(held):
        missing = min(set(range(len(held) + 1)) - held)
        raise ModelError(f"{where}: num_hidden_layers {layers} but the weights have no "
                         f"ernie.encoder.layers.{missing}.* ({len(held)} layers held)")
    first = state.get("ernie.encoder.layers.0.linear1.weight")
    if first is not None and first.ndim == 2 and first.shape[1] != inner:
        raise ModelError(f"{where}: hidden_size {hidden} / intermediate_size {inner} do not match the weights: "
                         f"ernie.encoder.layers.0.linear1.weight is {list(first.shape)}")
    expected = {"ernie.embeddings.layer_norm.weight": (hidden,)}
    if "ernie.pooler.dense.weight" in state:
        expected["ernie.pooler.dense.weight"] = (hidden, hidden)
    for i in range(layers):
        p = f"ernie.encoder.layers.{i}."
        expected.update({p + f"self_attn.{n}.weight": (hidden, hidden) for n in ("q_proj", "k_proj", "v_proj", "out_proj")})
        expected.update({p + "linear1.weight": (hidden, inner), p + "linear2.weight": (inner, hidden),
                         p + "norm1.weight": (hidden,), p + "norm2.weight": (hidden,)})
    for name, field in (("word", "vocab_size"), ("position", "max_position_embeddings"), ("token_type", "type_vocab_size")):
        key = f"ernie.embeddings.{name}_embeddings.weight"
        if key not in state:
            raise ModelError(f"{ckpt.weights}: no {name}_embeddings: not a BERT/ERNIE checkpoint")
        rows = state[key].shape[0]
        if field in config and config[field] != rows:
            raise ModelError(f"{where}: {field} {config[field]} but the weights' {name}_embeddings have {rows} rows")
        expected[key] = (rows, hidden)
    for key, shape in expected.items():
        if key not in state:
            raise ModelError(f"{where}: num_hidden_layers {layers} but the weights have no {key}")
        if tuple(state[key].shape) != shape:
            raise ModelError(f"{where}: hidden_size {hidden} / intermediate_size {inner} do not match the weights: "
                             f"{key} is {list(state[key].shape)}")
    extra = {int(m.group(1)) for k in state for m in [re.match(r"ernie\.encoder\.layers\.(\d+)\.", k)] if m} - set(range(layers))
    if extra:
        raise ModelError(f"{where}: num_hidden_layers {layers} but the weights hold layer {max(extra)}")
    if config.get("use_task_id") and "ernie.embeddings.task_type_embeddings.weight" not in state:
        raise ModelError(f"{where}: use_task_id is true but the weights have no task_type_embeddings")
    _check_head(state, hidden, ckpt)


def _check_head(state: dict, hidden: int, ckpt: HFCheckpoint) -> None:
    """A trained head (``ckpt.head``): its weight and bias there, shaped [hidden, outputs] and [outputs]; a
    question-answering head's outputs are start and end."""
    if ckpt.head and "classifier.weight" not in state:
        raise ModelError(f"{ckpt.weights}: {ckpt.architecture} without its head ({ARCHITECTURES[ckpt.architecture][1]}.weight)")
    if ckpt.head:
        outputs = state["classifier.weight"].shape[1]
        if state["classifier.weight"].shape[0] != hidden:
            raise ModelError(f"{ckpt.weights}: the {ckpt.architecture} head "
                             f"({ARCHITECTURES[ckpt.architecture][1]}.weight) is "
                             f"{list(state['classifier.weight'].T.shape)}, expected [outputs, hidden_size {hidden}]")
        bias = state.get("classifier.bias")
        if bias is None or bias.shape != (outputs,):
            raise ModelError(f"{ckpt.weights}: the {ckpt.architecture} head's bias "
                             f"({ARCHITECTURES[ckpt.architecture][1]}.bias) is "
                             f"{'missing' if bias is None else list(bias.shape)}, expected [{outputs}]")
    if ckpt.head == "ErnieForQuestionAnswering" and state["classifier.weight"].shape[1] != 2:
        raise ModelError(f"{ckpt.weights}: a question-answering head of {state['classifier.weight'].shape[1]} outputs, "
                         "expected 2 (start, end)")


def paddle_config(ckpt: HFCheckpoint, state: dict) -> dict:
    """PaddleNLP's ErnieConfig for the converted weights (sizes from the tensors).  ``pad_token_id`` is the
    vocabulary's [PAD]: PaddleNLP masks attention where ``input_ids == pad_token_id``, as HF's tokenizer masks its
    padding."""
    config = ckpt.config
    rows = {n: int(state[f"ernie.embeddings.{n}_embeddings.weight"].shape[0]) for n in ("word", "position", "token_type")}
    out = {
        "model_type": "ernie", "vocab_size": rows["word"], "hidden_size": config["hidden_size"],
        "num_hidden_layers": config["num_hidden_layers"], "num_attention_heads": config["num_attention_heads"],
        "intermediate_size": config["intermediate_size"], "hidden_act": config.get("hidden_act", "gelu"),
        "hidden_dropout_prob": config.get("hidden_dropout_prob", 0.1),
        "attention_probs_dropout_prob": config.get("attention_probs_dropout_prob", 0.1),
        "max_position_embeddings": rows["position"], "type_vocab_size": rows["token_type"],
        "initializer_range": config.get("initializer_range", 0.02), "pad_token_id": ckpt.vocab.index("[PAD]"),
        "pool_act": "tanh",
        "layer_norm_eps": float(config.get("layer_norm_eps", 1e-12)),
        "use_task_id": bool(config.get("use_task_id", False)), "task_id": 0,
        "task_type_vocab_size": int(config.get("task_type_vocab_size", 3)),
    }
    if ckpt.head:
        out["architectures"] = [ckpt.head]
        out["num_labels"] = int(state["classifier.weight"].shape[1])
    if ckpt.head and ckpt.head != "ErnieForQuestionAnswering" and isinstance(config.get("id2label"), dict):
        out["id2label"] = {str(k): str(v) for k, v in config["id2label"].items()}
    return out


def head_mapping(converted_dir: Path) -> dict | None:
    """The head mapping a converted directory was written with (its ``hf_import.json``), None when none."""
    return json.loads((Path(converted_dir) / RECORD).read_text(encoding="utf-8")).get("head_labels")


def converted(src: Path, work_dir: Path, allow_pickle: bool = False, log=print, keep_head: bool = True,
              labels: Sequence[str] | None = None, label_names: Sequence[str] | None = None) -> Path:
    """The PaddleNLP directory for HF checkpoint ``src``, converted once into ``work_dir`` (the finetune stage's
    work/, keyed by the stage key, which holds the checkpoint's content hash and the task's labels; kept across an
    interruption).  ``labels``: its head mapped to them (``convert``), the mapping's line said."""
    dst = Path(work_dir) / ("hf-model" if keep_head else "hf-encoder")
    if not ((dst / RECORD).is_file() and (dst / PADDLE_WEIGHTS).is_file()):
        import time

        t0 = time.perf_counter()
        convert(src, dst, allow_pickle, keep_head, labels, label_names)
        log(f"[finetune] {src} is a Hugging Face {source_architecture(dst)} checkpoint: converted to PaddleNLP ERNIE"
            f"{'' if keep_head else ' (its head replaced: model.head is replace)'} in {time.perf_counter() - t0:.1f}s "
            f"({dst})")
    mapping = head_mapping(dst)
    if mapping:
        log(f"[finetune] {src}: {mapping['note']}")
    return dst


def source_architecture(converted_dir: Path) -> str:
    """The HF class a converted directory came from (its ``hf_import.json``)."""
    return str(json.loads((Path(converted_dir) / RECORD).read_text(encoding="utf-8"))["architecture"])
