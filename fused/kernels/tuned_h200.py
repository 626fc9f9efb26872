"""Configs measured on the H200 (filled from `python -m fused bench --tune` output). Keys:
(kernel, M bucket, N, K, gated) -> launch config. Missing keys are tuned on first use."""
TUNED: dict = {}
