"""The token_classification kind's python models and helpers: copied into bundles (a model becomes ``<model>/1/model.py``, a
helper goes beside it by name), run by Triton's python backend; they import only what serving/triton's models do."""
