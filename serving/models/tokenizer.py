"""``<task>_tokenizer``: text in, ``input_ids``/``token_type_ids`` (int64) out.

The same WordPiece as ``pipeline/tokenizer.py``: the copy of ``pipeline/wordpiece.py`` next to this file
(PaddleNLP's BERT/ERNIE tokenization rebuilt from HF ``tokenizers`` parts) over the bundle's vocab.txt,
lowercase from tokenizer_config.json, truncation to max_seq_len, so served token ids equal the offline
ones and the ones the model was fine-tuned with.  All texts of all
requests in a batch are encoded in one call; each request's output is padded to its own longest item.

Bad input is refused per request (that request gets an error, the others and the instance go on):
non-UTF-8 bytes, empty or whitespace-only text, text over ``max_text_bytes``.  Long texts within
that limit are truncated to max_seq_len tokens, as offline.
"""

import sys
from pathlib import Path

import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: sibling loading, bundle check, parameters)


class TritonPythonModel:
    def initialize(self, args):
        params = model_support.start(HERE, args)
        self.text_input = model_support.sibling(HERE, "text_input")
        self.max_text_bytes = int(params["max_text_bytes"])
        self.tok = self.text_input.wordpiece(HERE, max_seq_len=int(params["max_seq_len"]))  # truncated as offline
        self.pad_id = self.tok.token_to_id("[PAD]")

    def execute(self, requests):
        responses = [None] * len(requests)
        arrays = [pb_utils.get_input_tensor_by_name(r, "text").as_numpy().reshape(-1) for r in requests]
        texts, spans, errors = self.text_input.gather(arrays, "text", self.max_text_bytes)
        for i, message in errors.items():
            responses[i] = model_support.refused(pb_utils, message)
        try:
            encodings = self.tok.encode_batch(texts) if texts else []
        except Exception as exc:  # never let one batch take the instance down
            for i, _, _ in spans:
                responses[i] = model_support.failed(pb_utils, "tokenization", exc)
            return responses
        for i, start, n in spans:  # each request padded to its own longest text
            ids, types = self.text_input.pad_encodings(encodings[start : start + n], self.pad_id)
            responses[i] = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("token_type_ids", types)]
            )
        return responses
