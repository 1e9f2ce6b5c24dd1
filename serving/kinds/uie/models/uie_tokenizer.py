"""``<task>_tokenizer`` of a UIE bundle: texts x schema prompts -> model windows.

One request carries N texts and a schema of P prompts (e.g. 姓名, 公司); every text is asked every prompt,
pair ``n * P + p``, and each pair is windowed ``[CLS] prompt [SEP] text_slice [SEP]`` by
``windows.make_windows`` (a verbatim copy of ``pipeline/reading/windows.py``, the code the pipeline
evaluated with).  Outputs, W windows (W >= N * P): ``input_ids``/``token_type_ids`` [W, T], ``offsets``
[W, T, 2] (char offsets into the text, (-1, -1) outside it and on padding), ``window_example`` [W] (the
pair each window belongs to).  Hence max_batch_size 0, as for reading comprehension.

Bad input is refused per request (``uie_requests.texts_and_schema``): no text or no prompt, more than ``max_items``
texts, non-UTF-8, an empty text or prompt, a text over ``max_text_bytes``, a prompt over ``max_prompt_len`` tokens
(cutting it would ask another question), a repeated prompt.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import model_support  # noqa: E402  (copied next to this file: set-up and the per-request loop of every model)


class TritonPythonModel(model_support.PerRequest):
    folder, siblings, what = HERE, ("windows", "uie_requests"), "windowing"

    def setup(self, params):
        self.uie_requests.windowing_setup(self, params)

    def one(self, request):
        texts, schema = self.uie_requests.texts_and_schema(self, self.items(request, "text"), self.items(request, "schema"))
        prompts, contents = self.uie_requests.pairs(texts, schema)
        wins = self.windows.make_windows(self.tok, prompts, contents, max_seq_len=self.max_seq_len,
                                         doc_stride=self.doc_stride, max_query_len=self.max_prompt_len)
        ids, types, offsets, example = self.windows.window_arrays(wins, self.pad_id)
        return {"input_ids": ids, "token_type_ids": types, "offsets": offsets, "window_example": example}
