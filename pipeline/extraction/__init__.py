"""UIE: schema-prompted information extraction (``[CLS] prompt [SEP] content [SEP]`` -> start/end pointers).

``examples``: UIE JSON lines and the CLUENER converter; ``spans``: pointer decoding (copied verbatim into
the served post-processing model); ``metric``: span precision/recall/F1 as UIE's evaluation counts them.
"""
