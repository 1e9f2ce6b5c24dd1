"""``uie`` of a ``package.api: fastdeploy`` UIE bundle: FastDeploy's UIE serving interface on the pipeline's code.

One python model, as FastDeploy's ``examples/text/uie/serving/triton/models/uie`` (max_batch_size 1): ``INPUT_0`` is a JSON
list of texts, ``INPUT_1`` a JSON schema (prompts; ``{prompt: [child prompts]}`` for relations and event arguments;
empty: the schema sent last, and before any the prompts the bundle was trained with), ``OUTPUT_0`` one row per text,
``fastdeploy_payloads.uie_row``.  The schema is walked by ``fastdeploy_payloads.extract`` (FastDeploy's order: a child
prompt is asked for each span of its parent, "<span>的<child>"), each level's (prompt, text) pairs windowed by
``windows.make_windows`` (a verbatim copy of ``pipeline/reading/windows.py``) in the order the ernie-bundle UIE
tokenizer makes them (text n, prompt p -> pair n * P + p), run by the engine of ``runner.py`` in one call and decoded by
``spans.decode_spans`` (a verbatim copy of ``pipeline/extraction/spans.py``): a flat schema gives exactly the spans
the ernie-bundle UIE serves for the same texts and prompts.

One model and not an ensemble: a relation schema needs one level's spans before it can ask the next.  The schema
sent last is kept per model instance, as FastDeploy's ``UIEModel.set_schema`` keeps it.

Bad input is refused per request: INPUT_0 not a JSON list of texts, a schema that is not prompts, a repeated prompt,
more texts than ``max_items``, a text over ``max_text_bytes``, a prompt (relation prompts included) over
``max_prompt_len`` tokens.
"""

import sys
from pathlib import Path

import numpy as np  # before paddle, always

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.PerRequest):
    folder, siblings, what = HERE, ("windows", "spans", "uie_requests"), "extraction"

    def setup(self, params):
        self.uie_requests.setup(self, params)
        self.payloads = model_support.sibling(HERE, "fastdeploy_payloads")
        self.refusals += (self.payloads.BadPayload,)
        # the schema sent last; before any, the prompts the model was trained and validated with
        self.schema = self.payloads.parse_schema(params.get("schema", "[]").encode("utf-8"), "schema")

    def _run(self, prompts, contents):
        """The spans of each (prompt, content) pair: all windows in one engine call."""
        for prompt in dict.fromkeys(prompts):
            problem = self.uie_requests.prompt_problem(self.tok, prompt, self.max_prompt_len, f"schema prompt {prompt!r}")
            if problem:
                raise self.text_input.BadText(problem)
        return self.uie_requests.extract(self, prompts, contents)

    def one(self, request):
        raw_texts, raw_schema = self.items(request, "INPUT_0"), self.items(request, "INPUT_1")
        bad = self.text_input.BadText
        if len(raw_texts) != 1 or len(raw_schema) != 1:
            raise bad("INPUT_0 and INPUT_1 are one JSON string each ([1, 1]): a list of texts, a schema")
        texts = self.payloads.parse_texts(raw_texts[0], "INPUT_0")
        if self.max_items and len(texts) > self.max_items:
            raise bad(f"INPUT_0: {len(texts)} texts in one request, over the limit of {self.max_items} (max_batch_size)")
        texts = self.texts(texts, "INPUT_0")
        schema = self.payloads.parse_schema(raw_schema[0], "INPUT_1") or self.schema
        if not schema:
            raise bad("INPUT_1: empty schema, and none was sent before: send prompts, e.g. [\"时间\", \"选手\"]")
        self.schema = schema
        rows = [self.payloads.uie_row(r) for r in self.payloads.extract(schema, texts, self._run)]
        return {"OUTPUT_0": np.array(rows, dtype=np.object_)}
