"""PaddleNLP UIE checkpoints (``UIE``: ``ernie.*`` + ``linear_start``/``linear_end``, each ``Linear(hidden, 1)``)
-> this project's ``ErnieForUIE`` (one ``classifier`` ``Linear(hidden, 2)``: start, end).  Same network, same
numbers: column 0 of the new head is the start head, column 1 the end head."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipeline.errors import ModelError

HEADS = ("linear_start", "linear_end")
ARCHITECTURE = "UIE"  # PaddleNLP's model class, as its config.json names it in "architectures" (not a task kind)
CONFIG_FILES = ("config.json", "model_config.json")
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def _config(model_dir: Path) -> tuple[Path | None, dict]:
    path = next((model_dir / n for n in CONFIG_FILES if (model_dir / n).is_file()), None)
    if path is None:
        return None, {}
    from pipeline.modeling import read_json_object  # size-capped, UTF-8, a JSON object, or one line naming the file

    return path, read_json_object(path)


def is_paddlenlp_uie(model_dir: Path) -> bool:
    """A PaddleNLP UIE directory (config ``architectures: ["UIE"]``)."""
    _, config = _config(Path(model_dir))
    arch = config.get("architectures")
    return isinstance(arch, list) and arch[:1] == [ARCHITECTURE]


def convert_uie_checkpoint(src: Path, dst: Path) -> Path:
    """Write ``dst`` as an ``ErnieForUIE`` directory (weights, config, tokenizer files) from PaddleNLP UIE ``src``."""
    import numpy as np
    import paddle

    from pipeline.safe_weights import load_state_dict

    src, dst = Path(src), Path(dst)
    config_path, config = _config(src)
    weights = src / "model_state.pdparams"
    if config_path is None or not weights.is_file():
        raise ModelError(f"{src}: a PaddleNLP UIE directory needs config.json and model_state.pdparams")
    state = load_state_dict(weights)  # not paddle.load: a pickle that would run code is refused
    missing = [f"{h}.{p}" for h in HEADS for p in ("weight", "bias") if f"{h}.{p}" not in state]
    if missing:
        raise ModelError(f"{weights}: UIE weights without {missing[0]} (expected linear_start and linear_end heads)")
    shapes = {h: state[f"{h}.weight"].shape for h in HEADS}
    bias_shapes = {h: state[f"{h}.bias"].shape for h in HEADS}
    if any(len(s) != 2 or s[1] != 1 for s in shapes.values()) or any(s != (1,) for s in bias_shapes.values()) \
            or shapes["linear_start"] != shapes["linear_end"]:
        raise ModelError(f"{weights}: UIE heads of shapes {shapes} (biases {bias_shapes}), expected [hidden, 1] each "
                         "(biases [1])")
    out = {k: v for k, v in state.items() if not k.startswith(tuple(h + "." for h in HEADS))}
    out["classifier.weight"] = np.concatenate([state["linear_start.weight"], state["linear_end.weight"]], axis=1)
    out["classifier.bias"] = np.concatenate([state["linear_start.bias"], state["linear_end.bias"]], axis=0)
    dst.mkdir(parents=True, exist_ok=True)
    paddle.save({k: paddle.to_tensor(v) for k, v in out.items()}, str(dst / "model_state.pdparams"))
    config = {**config, "architectures": ["ErnieForUIE"]}
    (dst / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
    from pipeline.modeling import write_labels

    write_labels(dst / "labels.json", ["start", "end"], ["start", "end"])
    return dst
