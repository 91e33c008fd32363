"""The shipped run configs: `bert-jax pretrain --config NAME` finds them from any directory.

configs/NAME.py at the repository root are links to these files.
"""
