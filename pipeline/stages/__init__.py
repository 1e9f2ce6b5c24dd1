"""One module per stage; each exposes ``params(cfg)``, ``inputs(cfg)`` and ``run(ctx) -> StageResult``."""
