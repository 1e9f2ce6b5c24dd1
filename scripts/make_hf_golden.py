"""Make the Hugging Face golden fixtures under ``tests/golden/hf/`` (run ONCE, by hand, outside the project's venv).

The tests of ``pipeline.hf_import`` hold our conversion of a Hugging Face checkpoint against Hugging Face's own forward
pass and its own tokenizer.  CI cannot install torch (PyPI's wheel pulls the CUDA stack), so this script writes, with
``transformers`` + ``torch``, small random models of each head and architecture the importer takes, the inputs HF's
tokenizer made for a set of texts and pairs, and HF's logits on them; the tests only read those files.

    python3.11 -m venv /tmp/hfgold && /tmp/hfgold/bin/pip install torch==2.13.0 transformers safetensors 'numpy<2'
    /tmp/hfgold/bin/python scripts/make_hf_golden.py tests/golden/hf

Every parameter (LayerNorm scales and biases too) is drawn at random and large enough that a swapped, untransposed
or dropped tensor, or a LayerNorm epsilon of 1e-12 for 1e-5, changes the logits well past the tests' tolerance.
The versions used are written to ``versions.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# A vocabulary in bert-base-chinese's shape: specials, CJK characters alone, Latin and digit pieces with "##" forms.
CHARS = "今天北京上海广州深圳的天气很好我们去看体育比赛财经新闻科技手机发布会中国队赢了股票市场下跌电影票房是谁在哪里吗"
LATIN = "abcdefghijklmnopqrstuvwxyz0123456789"
EXTRA = ["｜", "×", "℃", ".", ",", "!", "?", "-", "(", ")", "é", "iphone", "##phone", "nba", "5g", "##g"]
TEXTS = [
    "今天北京天气很好",
    "iPhone 15 发布会在深圳",
    "广州｜D2 7×9 17.4℃",
    "NBA 中国队赢了!",
    "Café 股票市场下跌 (5G)",
    "谁是今天的电影票房冠军吗",
    "",
]
PAIRS = [
    ("今天北京天气很好", "北京今天天气怎么样"),
    ("中国队赢了比赛", "比赛的结果是什么" * 6),
    ("股票市场下跌" * 8, "财经新闻"),
    ("手机发布会" * 7, "科技新闻" * 7),
]
MAX_LEN = 24  # pairs are cut to this (HF's longest_first), single texts padded to the longest
LABELS = ["体育", "财经", "科技"]
TAGS = ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]


def vocab() -> list[str]:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += list(dict.fromkeys(CHARS))
    tokens += list(LATIN) + ["##" + c for c in LATIN] + EXTRA
    return list(dict.fromkeys(tokens))


def tiny_config(cls_config, model_type: str, **extra):
    common = dict(vocab_size=len(vocab()) + 3, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=48, max_position_embeddings=64, hidden_act="gelu", pad_token_id=0,
                  hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    if model_type == "ernie":
        common.update(type_vocab_size=4, use_task_id=True, task_type_vocab_size=3, layer_norm_eps=1e-5)
    else:
        common.update(type_vocab_size=2, layer_norm_eps=1e-12)
    common.update(extra)
    return cls_config(**common)


def randomize(model, torch, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Small embeddings: the first LayerNorm's input variance is then near its epsilon, so 1e-12 for 1e-5 shows.
            scale = 0.5 if "LayerNorm" in name else 0.03 if "embeddings" in name else 0.3
            base = 1.0 if name.endswith("LayerNorm.weight") else 0.0
            p.copy_(base + scale * torch.randn(p.shape, generator=g))


def write_tokenizer(folder: Path, lowercase: bool = True, strip_accents=None):
    """vocab.txt and tokenizer_config.json as a user's checkpoint has them, loaded the way users load them
    (``AutoTokenizer``: the fast tokenizer), then saved back (which adds tokenizer.json)."""
    from transformers import AutoTokenizer

    (folder / "vocab.txt").write_text("\n".join(vocab()) + "\n", encoding="utf-8")
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "strip_accents": strip_accents,
              "tokenize_chinese_chars": True}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return tok


def encode(tok, pairs: bool):
    if pairs:
        enc = tok([a for a, _ in PAIRS], [b for _, b in PAIRS], truncation="longest_first", max_length=MAX_LEN,
                  padding=True, return_tensors="np")
    else:
        enc = tok(TEXTS, padding=True, return_tensors="np")
    return {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}


def make(out: Path, name: str, model_cls, config, head: str, seed: int, lowercase: bool = True, pairs: bool = False,
         strip_accents=None) -> None:
    import numpy as np
    import torch

    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    tok = write_tokenizer(folder, lowercase, strip_accents)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    randomize(model, torch, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    inputs = encode(tok, pairs)
    with torch.no_grad():
        res = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    if head == "qa":
        logits = torch.stack([res.start_logits, res.end_logits], dim=-1).numpy()
    elif head == "encoder":
        logits = res.last_hidden_state.numpy()
    else:
        logits = res.logits.numpy()
    np.savez(folder / "golden.npz", logits=logits.astype(np.float32), **inputs)
    print(f"{name}: {type(model).__name__} logits {logits.shape}")


def main(out: Path) -> None:
    import tokenizers
    import torch
    import transformers
    from transformers import (BertConfig, BertForQuestionAnswering, BertForSequenceClassification,
                              BertForTokenClassification, BertModel, ErnieConfig, ErnieForQuestionAnswering,
                              ErnieForSequenceClassification, ErnieForTokenClassification)

    out.mkdir(parents=True, exist_ok=True)
    seq = dict(id2label=dict(enumerate(LABELS)), label2id={n: i for i, n in enumerate(LABELS)})
    tags = dict(id2label=dict(enumerate(TAGS)), label2id={n: i for i, n in enumerate(TAGS)})
    make(out, "bert-sequence", BertForSequenceClassification, tiny_config(BertConfig, "bert", **seq), "sequence", 1)
    make(out, "bert-pairs", BertForSequenceClassification, tiny_config(BertConfig, "bert", **seq), "sequence", 2,
         pairs=True)
    make(out, "bert-token", BertForTokenClassification, tiny_config(BertConfig, "bert", **tags), "token", 3)
    make(out, "bert-qa", BertForQuestionAnswering, tiny_config(BertConfig, "bert"), "qa", 4, pairs=True)
    make(out, "bert-encoder-cased", BertModel, tiny_config(BertConfig, "bert"), "encoder", 5, lowercase=False)
    make(out, "ernie-sequence", ErnieForSequenceClassification, tiny_config(ErnieConfig, "ernie", **seq), "sequence", 6)
    make(out, "ernie-token", ErnieForTokenClassification, tiny_config(ErnieConfig, "ernie", **tags), "token", 7)
    make(out, "ernie-qa", ErnieForQuestionAnswering, tiny_config(ErnieConfig, "ernie"), "qa", 8, pairs=True)
    inputs = {"texts": TEXTS, "pairs": PAIRS, "max_seq_len": MAX_LEN}
    (out / "inputs.json").write_text(json.dumps(inputs, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]}
    (out / "versions.json").write_text(json.dumps(versions, indent=2) + "\n", encoding="utf-8")
    print(versions)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/golden/hf"))
