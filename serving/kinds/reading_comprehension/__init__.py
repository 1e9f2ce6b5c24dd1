"""The reading_comprehension kind's serving side: bundle.py (its bundle), tools.py (its tools), models/ (its python models)."""
