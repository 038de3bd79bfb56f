"""Checks against reality: real PyTorch runs, this machine's rates, published runs."""
