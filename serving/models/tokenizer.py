"""``<task>_tokenizer``: text in, ``input_ids``/``token_type_ids`` (int64) out.

The same WordPiece as ``pipeline/tokenizer.py`` (HF ``tokenizers`` BertWordPieceTokenizer over the
bundle's vocab.txt, lowercase from tokenizer_config.json, Chinese characters split, truncation to
max_seq_len, longest_first), so served token ids equal the offline ones.  All texts of all
requests in a batch are encoded in one call; each request's output is padded to its own longest item.

Bad input is refused per request (that request gets an error, the others and the instance go on):
non-UTF-8 bytes, empty or whitespace-only text, text over ``max_text_bytes``.  Long texts within
that limit are truncated to max_seq_len tokens, as offline.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent


def _sibling(name):
    spec = importlib.util.spec_from_file_location(f"ernie_bundle_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BadText(ValueError):
    pass


class TritonPythonModel:
    def initialize(self, args):
        _sibling("bundle_integrity").verify_bundle(HERE.parent.parent)
        params = {k: v.get("string_value", "") for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.max_seq_len = int(params["max_seq_len"])
        self.max_text_bytes = int(params["max_text_bytes"])
        lowercase = True
        cfg = HERE / "tokenizer_config.json"
        if cfg.is_file():
            lowercase = bool(json.loads(cfg.read_text(encoding="utf-8")).get("do_lower_case", True))
        from tokenizers import BertWordPieceTokenizer

        self.tok = BertWordPieceTokenizer(str(HERE / "vocab.txt"), lowercase=lowercase, handle_chinese_chars=True)
        self.tok.enable_truncation(max_length=self.max_seq_len, strategy="longest_first")
        self.pad_id = self.tok.token_to_id("[PAD]")

    def _decode(self, item, j):
        if isinstance(item, str):
            item = item.encode("utf-8")
        if not isinstance(item, bytes):
            raise BadText(f"text[{j}]: expected bytes, got {type(item).__name__}")
        if len(item) > self.max_text_bytes:
            raise BadText(f"text[{j}]: {len(item)} bytes, over the limit of {self.max_text_bytes}")
        try:
            text = item.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadText(f"text[{j}]: not valid UTF-8 (byte {exc.start})") from None
        if not text.strip():
            raise BadText(f"text[{j}]: empty text")
        return text

    def execute(self, requests):
        responses = [None] * len(requests)
        texts, spans = [], []
        for i, request in enumerate(requests):
            try:
                arr = pb_utils.get_input_tensor_by_name(request, "text").as_numpy()
                batch = [self._decode(x, j) for j, x in enumerate(arr.reshape(-1))]
            except BadText as exc:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            spans.append((i, len(texts), len(batch)))
            texts.extend(batch)
        try:
            encodings = self.tok.encode_batch(texts) if texts else []
        except Exception as exc:  # never let one batch take the instance down
            for i, _, _ in spans:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tokenization failed: {exc}"))
            return responses
        for i, start, n in spans:
            encs = encodings[start : start + n]
            width = max(len(e.ids) for e in encs)
            ids = np.full((n, width), self.pad_id, dtype=np.int64)
            types = np.zeros((n, width), dtype=np.int64)
            for r, e in enumerate(encs):
                ids[r, : len(e.ids)] = e.ids
                types[r, : len(e.type_ids)] = e.type_ids
            responses[i] = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("token_type_ids", types)]
            )
        return responses
