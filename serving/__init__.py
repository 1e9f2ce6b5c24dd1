"""Serving: Triton / FastDeploy model repositories, the server launcher and the client.

Kept apart from ``pipeline``: nothing here imports the pipeline, so the serving side can be
installed and used on its own.
"""
