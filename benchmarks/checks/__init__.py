"""Robustness and device checks: a soak against a failing judge and env, the GPU machine's checks."""
