"""Compiling the real train step for a target on this host, and explaining the program:
memory fit, FLOPs, bytes by purpose, collectives, the roofline bound (`bert-jax aot`)."""
