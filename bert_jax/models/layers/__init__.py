"""The model's building blocks that are more than a flax layer: its dropout and the
attention core, each with the reasons it is written as it is."""
