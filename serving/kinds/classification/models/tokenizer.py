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

import numpy as np  # before paddle, always

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.Batched):
    folder, what = HERE, "tokenization"

    def setup(self, params):
        self.text_setup(params, truncate=True, pad=True)  # truncated as offline; a batch comes out padded

    def take(self, request):
        return self.take_texts(request)

    def run(self, parts):
        ids, types = self.encode(parts)
        return ids, types, self._lengths(ids)

    def _lengths(self, ids):
        """Each row's own length: up to its last [SEP], which ends every encoding (a literal "[SEP]" or "[PAD]" in a
        text is a token inside it, before that one)."""
        sep = self.tok.token_to_id("[SEP]")
        last = np.where(ids == sep, np.arange(ids.shape[1])[None, :], -1).max(axis=1)
        return last + 1

    def split(self, batch, parts):
        ids, types, lengths = batch
        for rows in self.rows_of(parts):  # each request cut back to its own longest text
            width = int(lengths[rows].max())
            yield {"input_ids": np.ascontiguousarray(ids[rows, :width]), "token_type_ids": np.ascontiguousarray(types[rows, :width])}
