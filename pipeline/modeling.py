"""Model loading, creation and saving (PaddleNLP ERNIE sequence classifiers).

A model is given as a PaddleNLP model directory (``config.json`` or ``model_config.json``,
``model_state.pdparams``, ``vocab.txt``), as a PaddleNLP model name (downloaded, so only online), or
not at all, in which case a small ERNIE is created from scratch with a character vocabulary built
from the task's training text.  ``inspect_model`` looks at a directory without building the network,
so bad input fails fast and the fine-tune stage knows whether training is needed.  The networks themselves
(the ERNIE heads, head-prunable) are ``pipeline.ernie_models``'s.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pipeline import safe_weights
from pipeline.config import ModelConfig, ScratchModelConfig
from pipeline.errors import ModelError, shown_json
from pipeline.labels_file import labels_from_id2label, placeholder_id2label, read_label_file

CONFIG_FILES = ("config.json", "model_config.json")
WEIGHTS_FILE = "model_state.pdparams"
VOCAB_FILE = "vocab.txt"
LABELS_FILE = "labels.json"
HEAD_KEYS = ("classifier.weight",)
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
REQUIRED_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]")  # pipeline.wordpiece.build needs them
OPTIONAL_INT_FIELDS = ("num_attention_heads", "intermediate_size", "type_vocab_size")  # positive when present
# Far above any real file (a 250k-token vocab.txt is ~3 MB): a bigger one is a mistake, refused before it is read.
MAX_JSON_BYTES = 16 << 20
MAX_VOCAB_BYTES = 64 << 20


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
    label_names: tuple[str, ...] | None = None  # labels.json's label_desc beside each label, when every one has one


def quiet_paddlenlp() -> None:
    # paddlenlp logs every config/weight load at INFO; the pipeline prints its own summary.
    from paddlenlp.utils.log import logger

    logger.set_level("WARNING")
    logging.getLogger("paddlenlp").setLevel(logging.WARNING)


def _head_classes(weights_file: Path, state: dict) -> int | None:
    """The classes of the head in ``state`` (its [hidden, classes] weight), None when it has none."""
    head_classes = None
    for key, value in state.items():
        if any(key == k or key.endswith("." + k) for k in HEAD_KEYS):
            if value.ndim != 2:
                raise ModelError(f"{weights_file}: {key} has shape {list(value.shape)}, expected [hidden, classes]")
            head_classes = int(value.shape[-1])
    return head_classes


def inspect_model(path: Path, *, weights: bool = True) -> ModelInfo:
    """What ``path`` holds, every file a user hands us checked (config fields, vocabulary, tokenizer config, labels).

    ``weights``: read the weights (through :mod:`pipeline.safe_weights`: a pickle that would run code is refused)
    for the head size and check them against the config and the vocabulary.  ``False`` (``status``, cache keys):
    the weights file is not unpickled (only its first bytes are looked at) and ``head_classes`` is None.
    """
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model dir not found: {path}")
    if not path.is_dir():
        raise ModelError(f"model path is not a directory: {path}")
    config_path = next((path / n for n in CONFIG_FILES if _regular_file(path / n, "the model config")), None)
    if config_path is None:
        raise ModelError(f"model dir {path}: missing config ({' or '.join(CONFIG_FILES)})")
    if not _regular_file(path / WEIGHTS_FILE, "the weights file"):
        raise ModelError(f"model dir {path}: missing weights ({WEIGHTS_FILE})")
    if not _regular_file(path / VOCAB_FILE, "the tokenizer vocabulary"):
        raise ModelError(f"model dir {path}: missing tokenizer vocabulary ({VOCAB_FILE})")
    config = read_json_object(config_path)
    hidden_size = _config_int(config_path, config, "hidden_size")
    num_layers = _config_int(config_path, config, "num_hidden_layers")
    max_positions = _config_int(config_path, config, "max_position_embeddings", 512)
    config_vocab = _config_int(config_path, config, "vocab_size", None)
    for key in OPTIONAL_INT_FIELDS:
        _config_int(config_path, config, key, None)
    architectures = config.get("architectures")
    if architectures is not None and (not isinstance(architectures, list)
                                      or not all(isinstance(a, str) and a for a in architectures)):
        raise ModelError(f"{config_path}: field 'architectures' must be a list of class names, got {shown_json(architectures)}")
    for key in ("id2label", "label2id"):
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise ModelError(f"{config_path}: field {key!r} must be a mapping, got {shown_json(config[key])}")
    vocab_ids = _check_vocab(path / VOCAB_FILE)
    if config_vocab is not None and vocab_ids > config_vocab:
        raise ModelError(f"{path / VOCAB_FILE}: {vocab_ids} token ids but {config_path.name} has vocab_size {config_vocab} "
                         "(ids past the embedding table)")
    _check_tokenizer_config(path / TOKENIZER_CONFIG_FILE)

    head_classes = None
    if weights:
        state = safe_weights.load_state_dict(path / WEIGHTS_FILE)
        _check_weights(path / WEIGHTS_FILE, state, config_path, hidden_size, num_layers, max_positions, vocab_ids)
        head_classes = _head_classes(path / WEIGHTS_FILE, state)
    else:
        _check_pickle_header(path / WEIGHTS_FILE)
    labels = names = None
    if _regular_file(path / LABELS_FILE, "the label file"):
        labels, names = read_label_file(path / LABELS_FILE, ModelError, read_text(path / LABELS_FILE, MAX_JSON_BYTES))
        labels = tuple(labels)
    elif config.get("id2label") and not placeholder_id2label(config["id2label"]):
        labels = tuple(labels_from_id2label(config_path, config["id2label"], ModelError))
    return ModelInfo(
        path=path,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        max_position_embeddings=max_positions,
        head_classes=head_classes,
        labels=labels,
        architecture=(architectures or [None])[0],
        label_names=tuple(names) if names else None,
    )


def _regular_file(p: Path, what: str) -> bool:
    """True for a regular file (or a link to one), False when nothing is there; a directory, a device (a link to
    /dev/zero), a pipe or a broken link where a file should be is refused."""
    if p.is_file():
        return True
    if p.is_dir():
        raise ModelError(f"{p}: {what} is a directory, expected a file")
    if p.is_symlink() and not p.exists():
        raise ModelError(f"{p}: {what} is a broken symbolic link")
    if p.exists():
        raise ModelError(f"{p}: {what} is not a regular file (a device, pipe or socket)")
    return False


def read_text(p: Path, limit: int) -> str:
    try:
        size = p.stat().st_size
        if size > limit:
            raise ModelError(f"{p}: {size} bytes, over the {limit >> 20} MiB limit for this file")
        raw = p.read_bytes()
    except OSError as exc:
        raise ModelError(f"{p}: cannot read ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ModelError(f"{p}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})") from None


def read_json_object(p: Path) -> dict:
    try:
        value = json.loads(read_text(p, MAX_JSON_BYTES))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, a 5000-digit integer, nesting too deep
        raise ModelError(f"{p}: malformed JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ModelError(f"{p}: expected a JSON object, got a {type(value).__name__}")
    return value


def _config_int(config_path: Path, config: dict, key: str, default: int | None = ...) -> int | None:
    """A positive integer field of config.json (a bool, a string, 0 or a negative number is refused)."""
    if key not in config:
        if default is ...:
            raise ModelError(f"{config_path}: field {key!r} missing")
        return default
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelError(f"{config_path}: field {key!r} must be a positive integer, got {shown_json(value)}")
    return value


def _check_vocab(p: Path) -> int:
    """The number of token ids in ``vocab.txt`` (a token a line, its id the line number, as the tokenizer reads it);
    refuse a vocabulary the tokenizer cannot use."""
    lines = read_text(p, MAX_VOCAB_BYTES).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    used = [i for i, t in enumerate(lines) if t]
    if not used:
        raise ModelError(f"{p}: empty vocabulary")
    tokens = {lines[i] for i in used}
    missing = [t for t in REQUIRED_TOKENS if t not in tokens]
    if missing:
        raise ModelError(f"{p}: vocabulary has no {', '.join(missing)} token ({len(used)} tokens)")
    return used[-1] + 1


def _check_tokenizer_config(p: Path) -> None:
    if not _regular_file(p, "the tokenizer config"):
        return
    cfg = read_json_object(p)
    if "do_lower_case" in cfg and not isinstance(cfg["do_lower_case"], bool):
        raise ModelError(f"{p}: field 'do_lower_case' must be true or false, got {shown_json(cfg['do_lower_case'])}")


def _check_pickle_header(p: Path) -> None:
    """Without reading the weights (status): a Paddle weights file is a pickle of protocol 2 or later."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(2)
    except OSError as exc:
        raise ModelError(f"{p}: cannot read weights ({exc.strerror or exc})") from None
    if len(head) < 2 or head[0] != 0x80:
        raise ModelError(f"{p}: cannot read weights (not a pickled Paddle state dict)")


def _check_weights(p: Path, state: dict, config_path: Path, hidden_size: int, num_layers: int, max_positions: int,
                   vocab_ids: int) -> None:
    """The weights against config.json and vocab.txt, before a network of the config's size is built."""
    def find(suffix: str):
        return next((v for k, v in state.items() if k == suffix or k.endswith("." + suffix)), None)

    words = find("embeddings.word_embeddings.weight")
    if words is None or words.ndim != 2:
        raise ModelError(f"{p}: no ERNIE word embeddings (embeddings.word_embeddings.weight): not an ERNIE checkpoint")
    if words.shape[1] != hidden_size:
        raise ModelError(f"{config_path}: hidden_size {hidden_size} but the weights' embeddings are {words.shape[1]} wide")
    if vocab_ids > words.shape[0]:
        raise ModelError(f"{config_path.parent / VOCAB_FILE}: {vocab_ids} token ids but the weights embed only "
                         f"{words.shape[0]} (ids past the embedding table)")
    positions = find("embeddings.position_embeddings.weight")
    if positions is not None and positions.ndim == 2 and positions.shape[0] < max_positions:
        raise ModelError(f"{config_path}: max_position_embeddings {max_positions} but the weights embed only "
                         f"{positions.shape[0]} positions")
    layers = {int(m.group(1)) for k in state for m in [re.search(r"(?:^|\.)encoder\.layers\.(\d+)\.", k)] if m}
    if len(layers) != num_layers or (layers and max(layers) != num_layers - 1):
        raise ModelError(f"{config_path}: num_hidden_layers {num_layers} but the weights hold {len(layers)} encoder layers")


def check_head(info: ModelInfo, labels: Sequence[str], max_seq_len: int, architecture: str | None = None) -> bool:
    """True when the model already has the task's head over exactly its labels; raise on a mismatch.

    ``architecture``: the head class the task kind needs; a model saved with another head (say a
    sentence classifier given to a NER task) is refused rather than silently re-headed.
    """
    check_positions(info, max_seq_len)
    if info.head_classes is None:
        return False
    check_head_class(info, architecture)
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


def check_head_class(info: ModelInfo, architecture: str | None) -> None:
    """Refuse a model saved with another kind of head than ``architecture`` (a sentence classifier given to a NER
    task) rather than re-head it silently."""
    if architecture and info.architecture and info.architecture != architecture and info.architecture.startswith("ErnieFor"):
        raise ModelError(f"model {info.path}: has a {info.architecture} head but the task needs {architecture}")


def check_positions(info: ModelInfo, max_seq_len: int) -> None:
    """Refuse a model whose position table is shorter than the task's inputs."""
    if info.max_position_embeddings < max_seq_len:
        raise ModelError(
            f"model {info.path}: max_position_embeddings {info.max_position_embeddings} < task max_seq_len {max_seq_len}"
        )


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
    from pipeline.ernie_models import ARCHITECTURES, ErnieForSequenceClassification

    config_path = next((Path(model_dir) / n for n in CONFIG_FILES if (Path(model_dir) / n).is_file()), None)
    if config_path is not None:
        try:
            arch = (read_json_object(config_path).get("architectures") or [None])[0]
        except (ModelError, KeyError, IndexError, TypeError):  # load_classifier names what is wrong with the file
            arch = None
        if isinstance(arch, str) and arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    return ErnieForSequenceClassification


def load_classifier(model_dir: Path, num_labels: int, model_class=None, drop_head: bool = False):
    """Load an ERNIE with a head: sequence classifier, token classifier or span extractor.

    ``model_class`` None: the head the directory was saved with (a pretrained encoder without a head
    gets the sequence classifier unless the caller names the task kind's class).  ``drop_head``: the saved head is
    not loaded (``model.head: replace``): a new one is initialized, as for an encoder.
    """
    quiet_paddlenlp()
    # The subclasses load stock ERNIE directories unchanged and also DynaBERT-pruned ones (fewer heads
    # than hidden_size / head_dim), which paddlenlp's own classes cannot express.
    cls = model_class or model_class_of(model_dir)
    kwargs = {} if cls.__name__ in ("ErnieForQuestionAnswering", "ErnieForUIE") else {"num_labels": num_labels}
    # paddlenlp would unpickle the weights with paddle.load (and follow a *.index.json to more pickles): the state dict
    # is read here through the allow-list instead and handed over, with the weights file (not the directory) as the
    # model's path, so paddlenlp resolves no other weights file.
    state = safe_weights.load_state_dict(Path(model_dir) / WEIGHTS_FILE)
    if drop_head:
        state = {k: v for k, v in state.items() if not re.match(r"^(\w+\.)?classifier\.", k)}
    try:
        config, model_kwargs = cls.config_class.from_pretrained(str(model_dir), return_unused_kwargs=True, **kwargs)
        model = cls.from_pretrained(str(Path(model_dir) / WEIGHTS_FILE), config=config, state_dict=state,
                                    convert_from_torch=False, **model_kwargs)
    except Exception as exc:
        raise ModelError(f"model dir {model_dir}: cannot be loaded as {cls.__name__} ({type(exc).__name__}: {exc})") from None
    model.eval()
    return model


def create_scratch_classifier(cfg: ScratchModelConfig, vocab_size: int, num_labels: int, seed: int, model_class=None):
    quiet_paddlenlp()
    import paddle
    from paddlenlp.transformers import ErnieConfig

    from pipeline.ernie_models import ErnieForSequenceClassification

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


def write_reordered_head(src: Path, dst: Path, order: Sequence[int], labels: Sequence[str],
                         label_names: Sequence[str]) -> Path:
    """``src``'s model with its head's outputs in the task's order (``order[i]``: ``src``'s output for label ``i``),
    the task's labels written beside it (labels.json, and config.json's id2label where it names them): its other
    files copied as they are.  Written beside ``dst`` and renamed into place, so a half-written one never exists."""
    import shutil

    src, dst = Path(src), Path(dst)
    state = reorder_head(safe_weights.load_state_dict(src / WEIGHTS_FILE), order, src / WEIGHTS_FILE)
    tmp = dst.with_name(dst.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in (WEIGHTS_FILE, LABELS_FILE):
            shutil.copyfile(f, tmp / f.name)
    save_state_dict(state, tmp / WEIGHTS_FILE)
    for config_path in (tmp / n for n in CONFIG_FILES if (tmp / n).is_file()):
        config = json.loads(config_path.read_text(encoding="utf-8"))
        if config.get("id2label") and not placeholder_id2label(config["id2label"]):
            config.update(label_maps(labels))
            config_path.write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    write_labels(tmp / LABELS_FILE, labels, label_names)
    if dst.exists():
        shutil.rmtree(dst)
    tmp.rename(dst)
    return dst


def reorder_head(state: dict, order: Sequence[int], where: Path) -> dict:
    """``state`` with its classifier's outputs in ``order`` (``order[i]``: the output that becomes ``i``): the
    [hidden, outputs] weight's columns and the bias."""
    head = [k for k in state if any(k == h or k.endswith("." + h) for h in HEAD_KEYS)]
    if len(head) != 1 or head[0].removesuffix("weight") + "bias" not in state:
        raise ModelError(f"{where}: no single classifier weight and bias to reorder (found {head})")
    weight, bias = head[0], head[0].removesuffix("weight") + "bias"
    state[weight], state[bias] = state[weight][:, list(order)], state[bias][list(order)]
    return state


def save_state_dict(state: dict, path: Path) -> None:
    """A state dict of numpy arrays saved as Paddle's weights file."""
    import paddle

    paddle.save({k: paddle.to_tensor(v) for k, v in state.items()}, str(path))


def label_maps(labels: Sequence[str]) -> dict:
    """config.json's ``id2label`` and ``label2id`` for a head whose outputs are ``labels`` in order."""
    return {"id2label": {str(i): str(v) for i, v in enumerate(labels)},
            "label2id": {str(v): i for i, v in enumerate(labels)}}


def write_labels(path: Path, labels: Sequence[str], label_names: Sequence[str]) -> None:
    lines = [json.dumps({"label": v, "label_desc": n}, ensure_ascii=False) for v, n in zip(labels, label_names)]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
