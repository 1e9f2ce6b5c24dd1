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

import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: sibling loading, bundle check, parameters)


class TritonPythonModel:
    def initialize(self, args):
        params = model_support.start(HERE, args)
        self.bio = model_support.sibling(HERE, "bio")
        self.text_input = model_support.sibling(HERE, "text_input")
        self.max_seq_len = int(params["max_seq_len"])
        self.max_text_bytes = int(params["max_text_bytes"])
        # No truncation: encode_token cuts to max_seq_len itself and keeps the offsets straight.
        self.tok = self.text_input.wordpiece(HERE)
        self.pad_id = self.tok.token_to_id("[PAD]")

    def _one(self, request):
        arr = pb_utils.get_input_tensor_by_name(request, "text").as_numpy().reshape(-1)
        texts = [self.text_input.decode_item(x, "text", j, self.max_text_bytes) for j, x in enumerate(arr)]
        items = [self.bio.encode_token(self.tok, t, self.max_seq_len) for t in texts]
        ids, types, offsets = self.bio.pad_batch(items, self.pad_id)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("token_type_ids", types), pb_utils.Tensor("offsets", offsets)])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except self.text_input.BadText as exc:
                responses.append(model_support.refused(pb_utils, str(exc)))
            except Exception as exc:  # never let one request take the batch or the instance down
                responses.append(model_support.failed(pb_utils, "tokenization", exc))
        return responses
