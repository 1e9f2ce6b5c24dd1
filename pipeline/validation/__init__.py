"""Parity checks, benchmarks, regression gates and reports for exported models."""
