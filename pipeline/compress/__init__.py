"""Compression: DynaBERT width pruning, PTQ, QAT and embedding quantization that work on the pinned Paddle."""
