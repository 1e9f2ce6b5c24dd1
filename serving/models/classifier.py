"""``<task>`` with package.layout fused: text in, label/confidence/probs/top-k out, in one python model.

The three steps of the ensemble layout in one process, with the same code: the copies of ``text_input.py``
(per-item checks) and ``wordpiece.py`` (PaddleNLP's tokenization), the engine of ``runner.py`` (the
ensemble's model runner) and ``class_outputs.py`` (the post-processing).  What it saves is the two
python-backend hops per request (serialization to the tokenizer and post-processing stubs and back).
All texts of all requests in a batch are tokenized in one call and run in one engine call, padded to the
longest; ERNIE masks [PAD], so a text's logits do not depend on its batch beyond float rounding.

Bad input is refused per request (that request gets an error, the others and the instance go on).
With the parameter ``api`` fastdeploy it is FastDeploy's ernie_seqcls: input ``INPUT`` (parameter ``text_input``),
outputs ``label`` (class index) and ``confidence`` (class_outputs.index_outputs).
"""

import sys
from pathlib import Path

import numpy as np  # before paddle, always
import triton_python_backend_utils as pb_utils

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: sibling loading, bundle check, parameters)


class TritonPythonModel:
    def initialize(self, args):
        params = model_support.start(HERE, args)
        self.text_input = model_support.sibling(HERE, "text_input")
        self.max_text_bytes = int(params["max_text_bytes"])
        self.top_k = int(params["top_k"])
        self.tok = self.text_input.wordpiece(HERE, max_seq_len=int(params["max_seq_len"]))  # truncated as offline
        self.pad_id = self.tok.token_to_id("[PAD]")
        self.engine = model_support.sibling(HERE, "runner").make_engine(HERE, params, args.get("model_instance_kind") == "GPU")
        self.class_outputs = model_support.sibling(HERE, "class_outputs")
        self.labels = self.class_outputs.Labels(HERE / "labels.json")
        self.fastdeploy = params.get("api") == "fastdeploy"
        self.input_name = params.get("text_input", "text")

    def execute(self, requests):
        responses = [None] * len(requests)
        arrays = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy().reshape(-1) for r in requests]
        texts, spans, errors = self.text_input.gather(arrays, self.input_name, self.max_text_bytes)
        for i, message in errors.items():
            responses[i] = model_support.refused(pb_utils, message)
        if not texts:
            return responses
        try:
            ids, types = self.text_input.pad_encodings(self.tok.encode_batch(texts), self.pad_id)
            logits = np.asarray(self.engine({"input_ids": ids, "token_type_ids": types}), dtype=np.float32)
            out = self.class_outputs.index_outputs(logits) if self.fastdeploy else self.labels.outputs(logits, self.top_k)
        except Exception as exc:  # the texts were checked one by one: what fails here is the server's
            for i, _, _ in spans:
                responses[i] = model_support.failed(pb_utils, "inference", exc)
            return responses
        for i, start, n in spans:
            responses[i] = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(k, np.ascontiguousarray(v[start : start + n])) for k, v in out.items()])
        return responses
