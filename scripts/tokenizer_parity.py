"""Tokenizer parity against PaddleNLP's own tokenizer, on every dev example of tnews, cluener, cmrc2018 and ocnli.

    python scripts/tokenizer_parity.py [--model DIR] [--data-root ../shared/data] [--json-out FILE]

For each task it counts the examples whose model input differs from PaddleNLP's ``AutoTokenizer`` for the
model directory (the oracle: what a PaddleNLP-fine-tuned model was trained on), for two implementations:

* ``hf-bert``: HF ``BertWordPieceTokenizer`` (what ernie-bundle used before ``pipeline.wordpiece``);
* ``ernie-bundle``: ``pipeline.tokenizer.Tokenizer`` (``pipeline.wordpiece``), what the pipeline and the
  served bundle use now.

What is compared: tnews, the padded ids of the title at max_seq_len 64; cluener, ids and char offsets of the
text at max_seq_len 128 (what the BIO tagger sees); cmrc2018, ids and offsets of question and context
(what the windows are cut from) and the ``[CLS] q [SEP] c [SEP]`` pair cut at 64 tokens (pair truncation); ocnli,
the ids and segment ids of every sentence pair at 128 tokens (what a pair classifier is served).

Offsets are counted apart where only ``[UNK]`` tokens differ: PaddleNLP's offset mapping (a heuristic over
the normalized text) starts an ``[UNK]`` that follows whitespace at the whitespace; HF's alignment gives the
character itself, which is what an answer or entity span must be cut at, so that difference is kept.
Then tokens/s of each implementation over the TNEWS dev titles (one batch call per 64 titles; 3 repeats).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pipeline  # noqa: E402,F401  (numpy before paddle)


def _read_lines(path: Path, field: str) -> list[str]:
    return [json.loads(line)[field] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _hf_bert(vocab: Path, lowercase: bool):
    from tokenizers import BertWordPieceTokenizer

    return BertWordPieceTokenizer(str(vocab), lowercase=lowercase, handle_chinese_chars=True)


class Parity:
    """The oracle (PaddleNLP's tokenizer for the model), the two implementations held to it, and the report."""

    def __init__(self, model: Path, show: int):
        from paddlenlp.transformers import AutoTokenizer

        from pipeline.contract import detect_cpu
        from pipeline.tokenizer import Tokenizer

        self.model, self.show = model, show
        self.oracle = AutoTokenizer.from_pretrained(str(model))
        lowercase = bool(getattr(self.oracle.basic_tokenizer, "do_lower_case", True))
        self.ours = {"hf-bert": _hf_bert(model / "vocab.txt", lowercase),
                     "ernie-bundle": Tokenizer.from_model_dir(model, 128).raw}
        self.pair_tokenizer = Tokenizer.from_model_dir(model, 64)  # the cmrc2018 pair cut at 64 tokens
        self.nli_tokenizer = Tokenizer.from_model_dir(model, 128)  # OCNLI's pairs at the task's 128 tokens
        self.report = {"oracle": type(self.oracle).__name__, "model": str(model), "cpu": detect_cpu().as_dict(),
                       "tasks": {}}

    def check(self, task: str, items: list, compare) -> None:
        """``compare(tok, item)`` -> "same", "ids" (token ids differ) or "offsets" (ids equal, char offsets
        differ); "unk-offsets": only the spans of [UNK] tokens differ (see the module doc)."""
        counts = {name: {"ids": 0, "offsets": 0, "unk-offsets": 0} for name in self.ours}
        shown = 0
        for item in items:
            for name, tok in self.ours.items():
                verdict = compare(tok, item)
                if verdict != "same":
                    counts[name][verdict] += 1
                    if name == "hf-bert" and verdict == "ids" and shown < self.show:
                        shown += 1
                        print(f"   e.g. {(item if isinstance(item, str) else item[0])[:60]!r}")
        self.report["tasks"][task] = {"examples": len(items), **counts}
        print(f"{task}: {len(items)} examples; differing from {type(self.oracle).__name__}: " + "; ".join(
            f"{name} ids {c['ids']}, offsets {c['offsets']}, [UNK] spans only {c['unk-offsets']}" for name, c in counts.items()))

    def single(self, max_len: int, offsets: bool):
        """A comparison of one text's ids (and char offsets) without special tokens, cut at ``max_len``."""
        def compare(tok, text: str) -> str:
            want = self.oracle(text, max_length=max_len, truncation=True, return_offsets_mapping=offsets)
            enc = tok.encode(text, add_special_tokens=False)
            keep = max_len - 2
            if list(enc.ids[:keep]) != want["input_ids"][1:-1]:
                return "ids"
            if not offsets:
                return "same"
            got, exp = [tuple(o) for o in enc.offsets[:keep]], [tuple(o) for o in want["offset_mapping"][1:-1]]
            if got == exp:
                return "same"
            unk = self.oracle.unk_token_id
            bad = {i for i, (g, e) in enumerate(zip(got, exp)) if g != e}
            return "unk-offsets" if all(enc.ids[i] == unk for i in bad) else "offsets"
        return compare

    def pair(self, tok, item) -> str:
        """A question and a context cut together at 64 tokens (pair truncation)."""
        q, c = item
        want = self.oracle(q, c, max_length=64, truncation=True)["input_ids"]
        if tok is self.ours["ernie-bundle"]:
            got = self.pair_tokenizer.encode([q], [c]).input_ids[0].tolist()
        else:
            tok.enable_truncation(64, strategy="longest_first")
            got = tok.encode(q, c).ids
            tok.no_truncation()
        return "same" if got == want else "ids"

    def nli_pair(self, tok, item) -> str:
        """Sentence pairs as a pair classifier (OCNLI) serves them: ids and segment ids at the task's 128 tokens,
        from the same wordpiece.encode_pairs the served pre-processing calls."""
        a, b = item
        want = self.oracle(a, b, max_length=128, truncation=True)
        if tok is self.ours["ernie-bundle"]:
            enc = self.nli_tokenizer.encode([a], [b])
            n = int(enc.lengths[0])
            got = (enc.input_ids[0, :n].tolist(), enc.token_type_ids[0, :n].tolist())
        else:
            tok.enable_truncation(128, strategy="longest_first")
            e = tok.encode(a, b)
            got = (e.ids, e.type_ids)
            tok.no_truncation()
        return "same" if got == (want["input_ids"], want["token_type_ids"]) else "ids"

    def speed(self, titles: list[str]) -> dict:
        """Tokens/s of each implementation over ``titles`` (one batch call per 64; best of 3, with the spread)."""
        batches = [titles[i : i + 64] for i in range(0, len(titles), 64)]
        n_tokens = sum(len(e.ids) for b in batches for e in self.ours["ernie-bundle"].encode_batch(b))
        speed = {}
        for name, run in [("hf-bert", lambda b: self.ours["hf-bert"].encode_batch(b)),
                          ("ernie-bundle", lambda b: self.ours["ernie-bundle"].encode_batch(b)),
                          ("paddlenlp", lambda b: self.oracle(b))]:
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                for b in batches:
                    run(b)
                times.append(time.perf_counter() - t0)
            speed[name] = {"tokens_per_s": n_tokens / min(times), "spread": [n_tokens / max(times), n_tokens / min(times)]}
        return speed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "../shared/models/tnews-e5mini6-ft"))
    ap.add_argument("--data-root", default=str(ROOT / "../shared/data"))
    ap.add_argument("--json-out", default=str(ROOT / "runs/tokenizer_parity.json"))
    ap.add_argument("--show", type=int, default=5, help="differing examples to print per task")
    args = ap.parse_args(argv)

    from pipeline.reading.squad import read_squad

    data = Path(args.data_root)
    run = Parity(Path(args.model), args.show)
    run.check("tnews", _read_lines(data / "tnews/dev.json", "sentence"), run.single(64, offsets=False))
    run.check("cluener", _read_lines(data / "cluener/dev.json", "text"), run.single(128, offsets=True))
    squad = read_squad(data / "cmrc2018/dev.json").examples
    run.check("cmrc2018 question", [e.question for e in squad], run.single(10_000, offsets=True))
    run.check("cmrc2018 context", list(dict.fromkeys(e.context for e in squad)), run.single(10_000, offsets=True))
    pairs = [(e.question, e.context[: 40 + 7 * (i % 9)]) for i, e in enumerate(squad)]  # varied lengths
    run.check("cmrc2018 pair@64", pairs, run.pair)
    ocnli = data / "ocnli/dev.json"
    if ocnli.is_file():
        rows = [json.loads(line) for line in ocnli.read_text(encoding="utf-8").splitlines() if line.strip()]
        run.check("ocnli pair@128 (ids and segment ids)", [(r["sentence1"], r["sentence2"]) for r in rows], run.nli_pair)

    speed = run.report["tokens_per_s"] = run.speed(_read_lines(data / "tnews/dev.json", "sentence"))
    print("tokens/s over TNEWS dev (best of 3; [slowest, fastest]): " + "; ".join(
        f"{k} {v['tokens_per_s']:,.0f} [{v['spread'][0]:,.0f}-{v['spread'][1]:,.0f}]" for k, v in speed.items()))
    out = Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(run.report, indent=2), encoding="utf-8")
    print(f"wrote {out}")
    ok = all(v["ernie-bundle"]["ids"] == 0 and v["ernie-bundle"]["offsets"] == 0 for v in run.report["tasks"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
