"""Model loading, creation and saving (PaddleNLP ERNIE sequence classifiers).

A model is given as a PaddleNLP model directory (``config.json`` or ``model_config.json``,
``model_state.pdparams``, ``vocab.txt``), as a PaddleNLP model name (downloaded, so only online), or
not at all, in which case a small ERNIE is created from scratch with a character vocabulary built
from the task's training text.  ``inspect_model`` looks at a directory without building the network,
so bad input fails fast and the fine-tune stage knows whether training is needed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pipeline.config import ModelConfig, ScratchModelConfig
from pipeline.errors import ModelError
from pipeline.labels_file import labels_from_id2label, placeholder_id2label, read_labels

CONFIG_FILES = ("config.json", "model_config.json")
WEIGHTS_FILE = "model_state.pdparams"
VOCAB_FILE = "vocab.txt"
LABELS_FILE = "labels.json"
HEAD_KEYS = ("classifier.weight",)


@dataclass(frozen=True)
class ModelInfo:
    """What a model directory holds, read without building the network."""

    path: Path
    hidden_size: int
    num_hidden_layers: int
    max_position_embeddings: int
    head_classes: int | None  # classes of the classification head, None when there is no head
    labels: tuple[str, ...] | None  # from labels.json saved beside a fine-tuned model
    architecture: str | None = None  # config.json "architectures"[0], e.g. ErnieForTokenClassification


def quiet_paddlenlp() -> None:
    # paddlenlp logs every config/weight load at INFO; the pipeline prints its own summary.
    from paddlenlp.utils.log import logger

    logger.set_level("WARNING")
    logging.getLogger("paddlenlp").setLevel(logging.WARNING)


def inspect_model(path: Path) -> ModelInfo:
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model dir not found: {path}")
    if not path.is_dir():
        raise ModelError(f"model path is not a directory: {path}")
    config_path = next((path / n for n in CONFIG_FILES if (path / n).is_file()), None)
    if config_path is None:
        raise ModelError(f"model dir {path}: missing config ({' or '.join(CONFIG_FILES)})")
    if not (path / WEIGHTS_FILE).is_file():
        raise ModelError(f"model dir {path}: missing weights ({WEIGHTS_FILE})")
    if not (path / VOCAB_FILE).is_file():
        raise ModelError(f"model dir {path}: missing tokenizer vocabulary ({VOCAB_FILE})")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{config_path}: malformed JSON ({exc})") from None
    for key in ("hidden_size", "num_hidden_layers"):
        if key not in config:
            raise ModelError(f"{config_path}: field {key!r} missing")

    import paddle

    try:
        state = paddle.load(str(path / WEIGHTS_FILE), return_numpy=True)
    except Exception as exc:  # paddle raises several types for truncated/corrupt pickles
        raise ModelError(f"{path / WEIGHTS_FILE}: cannot read weights ({type(exc).__name__}: {exc})") from None
    head_classes = None
    for key, value in state.items():
        if any(key == k or key.endswith("." + k) for k in HEAD_KEYS):
            head_classes = int(value.shape[-1])
    labels = None
    if (path / LABELS_FILE).is_file():
        labels = tuple(read_labels(path / LABELS_FILE, ModelError))
    elif config.get("id2label") and not placeholder_id2label(config["id2label"]):
        labels = tuple(labels_from_id2label(config_path, config["id2label"], ModelError))
    return ModelInfo(
        path=path,
        hidden_size=int(config["hidden_size"]),
        num_hidden_layers=int(config["num_hidden_layers"]),
        max_position_embeddings=int(config.get("max_position_embeddings", 512)),
        head_classes=head_classes,
        labels=labels,
        architecture=(config.get("architectures") or [None])[0],
    )


def check_head(info: ModelInfo, labels: Sequence[str], max_seq_len: int, architecture: str | None = None) -> bool:
    """True when the model already has the task's head over exactly its labels; raise on a mismatch.

    ``architecture``: the head class the task kind needs; a model saved with another head (say a
    sentence classifier given to a NER task) is refused rather than silently re-headed.
    """
    if info.max_position_embeddings < max_seq_len:
        raise ModelError(
            f"model {info.path}: max_position_embeddings {info.max_position_embeddings} < task max_seq_len {max_seq_len}"
        )
    if info.head_classes is None:
        return False
    if architecture and info.architecture and info.architecture != architecture and info.architecture.startswith("ErnieFor"):
        raise ModelError(f"model {info.path}: has a {info.architecture} head but the task needs {architecture}")
    if info.head_classes != len(labels):
        raise ModelError(
            f"model {info.path}: num_classes mismatch: its classification head has {info.head_classes} "
            f"classes but the task has {len(labels)} labels"
        )
    if info.labels is not None and tuple(info.labels) != tuple(labels):
        raise ModelError(
            f"model {info.path}/{LABELS_FILE}: label set/order {list(info.labels)[:5]}... does not match the task's "
            f"{list(labels)[:5]}..."
        )
    return True


def resolve_model_dir(cfg: ModelConfig) -> Path | None:
    """The local directory for ``model.name_or_path``; None for the scratch model.

    A PaddleNLP model name is downloaded into paddlenlp's cache (online only) and that directory
    is returned, so later stages always see a directory.
    """
    ref = cfg.name_or_path
    if not ref:
        return None
    path = Path(ref).expanduser()
    if path.exists() or "/" in ref or ref.startswith("."):
        return path.resolve() if path.exists() else path
    from pipeline.env import is_online

    if not is_online():
        raise ModelError(
            f"model {ref!r} is not a local directory and the machine is offline: pass MODEL=<dir> "
            "with config.json, model_state.pdparams and vocab.txt"
        )
    quiet_paddlenlp()
    from paddlenlp.transformers import AutoTokenizer, ErnieModel

    model = ErnieModel.from_pretrained(ref)
    tokenizer = AutoTokenizer.from_pretrained(ref)
    from paddlenlp.utils.env import MODEL_HOME

    target = Path(MODEL_HOME) / ref / "ernie-bundle"
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    return target


def model_class_of(model_dir: Path):
    """The head class a fine-tuned directory was saved with (config.json ``architectures``)."""
    from pipeline.compress.pruned_ernie import ARCHITECTURES, ErnieForSequenceClassification

    config_path = next((Path(model_dir) / n for n in CONFIG_FILES if (Path(model_dir) / n).is_file()), None)
    if config_path is not None:
        try:
            arch = (json.loads(config_path.read_text(encoding="utf-8")).get("architectures") or [None])[0]
        except (json.JSONDecodeError, UnicodeDecodeError):
            arch = None
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    return ErnieForSequenceClassification


def load_classifier(model_dir: Path, num_labels: int, model_class=None):
    """Load an ERNIE with a head: sequence classifier, token classifier or span extractor.

    ``model_class`` None: the head the directory was saved with (a pretrained encoder without a head
    gets the sequence classifier unless the caller names the task kind's class).
    """
    quiet_paddlenlp()
    # The subclasses load stock ERNIE directories unchanged and also DynaBERT-pruned ones (fewer heads
    # than hidden_size / head_dim), which paddlenlp's own classes cannot express.
    cls = model_class or model_class_of(model_dir)
    kwargs = {} if cls.__name__ in ("ErnieForQuestionAnswering", "ErnieForUIE") else {"num_labels": num_labels}
    try:
        model = cls.from_pretrained(str(model_dir), **kwargs)
    except Exception as exc:
        raise ModelError(f"model dir {model_dir}: cannot be loaded as {cls.__name__} ({type(exc).__name__}: {exc})") from None
    model.eval()
    return model


def create_scratch_classifier(cfg: ScratchModelConfig, vocab_size: int, num_labels: int, seed: int, model_class=None):
    quiet_paddlenlp()
    import paddle
    from paddlenlp.transformers import ErnieConfig

    from pipeline.compress.pruned_ernie import ErnieForSequenceClassification

    paddle.seed(seed)
    config = ErnieConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_act=cfg.hidden_act,
        max_position_embeddings=512,
        type_vocab_size=2,
        num_labels=num_labels,
        pad_token_id=0,
    )
    return (model_class or ErnieForSequenceClassification)(config)


def save_classifier(model, out_dir: Path, vocab_dir: Path, labels: Sequence[str], label_names: Sequence[str]) -> None:
    """Save weights+config (PaddleNLP layout), the tokenizer files and the label map into ``out_dir``."""
    import shutil

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    for name in (VOCAB_FILE, "tokenizer_config.json", "special_tokens_map.json"):
        src = Path(vocab_dir) / name
        if src.is_file() and src.resolve() != (out_dir / name).resolve():
            shutil.copyfile(src, out_dir / name)
    write_labels(out_dir / LABELS_FILE, labels, label_names)


def write_labels(path: Path, labels: Sequence[str], label_names: Sequence[str]) -> None:
    lines = [json.dumps({"label": v, "label_desc": n}, ensure_ascii=False) for v, n in zip(labels, label_names)]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
