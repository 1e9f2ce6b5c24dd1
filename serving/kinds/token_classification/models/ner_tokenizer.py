"""``<task>_tokenizer`` of a token-classification bundle: text -> input_ids, token_type_ids, offsets.

Runs ``bio.encode_token`` + ``bio.pad_batch`` from the ``bio.py`` copied next to this file (a
verbatim copy of ``pipeline/labeling/bio.py``), so served token ids and char offsets are the
offline ones.  ``offsets`` ([B, T, 2], char offsets into the text, (-1, -1) for [CLS]/[SEP]/padding)
go to the post-processing model, which maps the tags back onto the text.

Bad input is refused per request (the other requests of the batch and the instance go on):
non-UTF-8, empty text, text over ``max_text_bytes``.  Long texts are truncated to max_seq_len tokens,
as offline.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.Batched):
    folder, siblings, what = HERE, ("bio",), "tokenization"

    def setup(self, params):
        self.text_setup(params)  # no truncation: encode_tokens cuts to max_seq_len itself and keeps the offsets straight
        self.truncates = True

    def take(self, request):
        return self.texts(self.items(request, "text"), "text")

    def run(self, parts):  # the whole batch in one encode_batch call
        items = self.bio.encode_tokens(self.tok, [text for texts in parts for text in texts], self.max_seq_len)
        self.metrics.count("truncated", sum(item.truncated for item in items))
        return items

    def split(self, items, parts):
        for rows in model_support.slices(parts):  # each request padded to its own longest text
            ids, types, offsets = self.bio.pad_batch(items[rows], self.pad_id)
            yield {"input_ids": ids, "token_type_ids": types, "offsets": offsets}
