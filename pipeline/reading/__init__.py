"""Extractive reading comprehension (CMRC2018, SQuAD v1 format).

squad.py reads the data; windows.py cuts question + passage into model-sized windows; spans.py turns the
model's start/end logits back into answer text; metric.py is the official CMRC2018 EM/F1.  windows.py,
spans.py and metric.py import only stdlib, numpy (and tokenizers) so serving can copy them verbatim into
Triton python-backend model folders and run the very code that offline evaluation ran.
"""
