"""A Hugging Face copy of a PaddleNLP ERNIE classifier, and Hugging Face's own predictions with it (a measurement tool).

Issue 41's target is measured with it: the HF copy of the shared TNEWS model, given to the pipeline, must give
the PaddleNLP copy's FP32 dev accuracy, and the pipeline's FP32 dev logits of the copy must equal what
``transformers`` computes with its own tokenizer on the same titles.

    .venv/bin/python scripts/hf_copy.py write ../shared/models/tnews-e5mini6-ft /tmp/tnews-hf   # project venv
    /tmp/hfgold/bin/python scripts/hf_copy.py predict /tmp/tnews-hf dev.json out.npy 64      # transformers + torch

``write`` is the inverse of ``pipeline.hf_import`` (names back, Linear weights transposed back) for BERT's layout
(``BertForSequenceClassification``, ``model_type: bert``); ``predict`` runs ``AutoTokenizer`` and
``AutoModelForSequenceClassification`` on the ``sentence`` field of a CLUE JSON-lines file, cut to ``max_seq_len``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TO_HF = (
    ("embeddings.layer_norm.", "embeddings.LayerNorm."),
    ("self_attn.q_proj.", "attention.self.query."), ("self_attn.k_proj.", "attention.self.key."),
    ("self_attn.v_proj.", "attention.self.value."), ("self_attn.out_proj.", "attention.output.dense."),
    ("norm1.", "attention.output.LayerNorm."), ("linear1.", "intermediate.dense."), ("linear2.", "output.dense."),
    ("norm2.", "output.LayerNorm."), ("encoder.layers.", "encoder.layer."),
)


def write(src: Path, dst: Path) -> None:
    import numpy as np
    import pipeline  # noqa: F401  (paddle after numpy)
    from safetensors.numpy import save_file

    from pipeline.labels_file import read_labels
    from pipeline.safe_weights import load_state_dict

    state = load_state_dict(src / "model_state.pdparams")
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    out = {}
    for name, value in state.items():
        value = np.ascontiguousarray(np.asarray(value, dtype=np.float32))
        linear = value.ndim == 2 and "_embeddings." not in name
        hf = name
        for a, b in TO_HF:
            hf = hf.replace(a, b)
        hf = hf.replace("ernie.", "bert.", 1) if hf.startswith("ernie.") else hf
        out[hf] = np.ascontiguousarray(value.T) if linear else value
    dst.mkdir(parents=True, exist_ok=True)
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    labels = read_labels(src / "labels.json", ValueError, (src / "labels.json").read_text(encoding="utf-8")) \
        if (src / "labels.json").is_file() else [f"LABEL_{i}" for i in range(out["classifier.weight"].shape[0])]
    hf_config = {
        "architectures": ["BertForSequenceClassification"], "model_type": "bert",
        **{k: config[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                  "intermediate_size", "hidden_act", "hidden_dropout_prob",
                                  "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                                  "initializer_range", "pad_token_id", "layer_norm_eps")},
        "id2label": {str(i): label for i, label in enumerate(labels)},
        "label2id": {label: i for i, label in enumerate(labels)},
    }
    (dst / "config.json").write_text(json.dumps(hf_config, ensure_ascii=False, indent=2), encoding="utf-8")
    (dst / "vocab.txt").write_bytes((src / "vocab.txt").read_bytes())
    lower = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8")).get("do_lower_case", True)
    (dst / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": lower}),
                                              encoding="utf-8")
    print(f"{dst}: {len(out)} tensors, labels {labels[:3]}...")


def predict(model_dir: Path, data: Path, out: Path, max_seq_len: int) -> None:
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    texts = [json.loads(line)["sentence"] for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    logits = []
    with torch.no_grad():
        for i in range(0, len(texts), 64):
            enc = tok(texts[i:i + 64], truncation=True, max_length=max_seq_len, padding=True, return_tensors="pt")
            logits.append(model(**enc).logits.numpy())
    np.save(out, np.concatenate(logits))
    print(f"{out}: {len(texts)} texts")


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        predict(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))
