"""``<task>_tokenizer`` of a token-classification bundle: text -> input_ids, token_type_ids, offsets.

Runs ``bio.encode_token`` + ``bio.pad_batch`` from the ``bio.py`` copied next to this file (a
verbatim copy of ``pipeline/labeling/bio.py``), so served token ids and char offsets are the
offline ones.  ``offsets`` ([B, T, 2], char offsets into the text, (-1, -1) for [CLS]/[SEP]/padding)
go to the post-processing model, which maps the tags back onto the text.

Bad input is refused per request (the other requests of the batch and the instance go on):
non-UTF-8, empty text, text over ``max_text_bytes``.  Long texts are truncated to max_seq_len tokens,
as offline.
"""

import importlib.util
import sys
from pathlib import Path

import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent


def _sibling(name):
    spec = importlib.util.spec_from_file_location(f"ernie_bundle_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    # Registered before running it: dataclasses (bio.Entity, windows.Window, spans.Span) look their
    # module up in sys.modules while the class is being made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class TritonPythonModel:
    def initialize(self, args):
        _sibling("bundle_integrity").verify_bundle(HERE.parent.parent)
        self.bio = _sibling("bio")
        self.text_input = _sibling("text_input")
        params = self.text_input.model_params(args)
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
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
            except Exception as exc:  # never let one request take the batch or the instance down
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tokenization failed: {exc}")))
        return responses
