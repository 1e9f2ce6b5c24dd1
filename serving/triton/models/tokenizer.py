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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.Batched):
    folder, what = HERE, "tokenization"

    def setup(self, params):
        self.text_setup(params, truncate=True)  # truncated as offline

    def take(self, request):
        return self.texts(self.items(request, "text"), "text")

    def run(self, parts):
        return self.tok.encode_batch([text for texts in parts for text in texts])

    def split(self, encodings, parts):
        for rows in model_support.slices(parts):  # each request padded to its own longest text
            ids, types = self.text_input.pad_encodings(encodings[rows], self.pad_id)
            yield {"input_ids": ids, "token_type_ids": types}
