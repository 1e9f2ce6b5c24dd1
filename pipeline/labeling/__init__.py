"""Token classification (NER): BIO tagging over wordpieces, chunk F1, and CLUENER/MSRA readers."""
