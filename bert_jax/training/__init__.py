"""The task-agnostic training system: the jitted step, the loop, optimizer, checkpoints, data position."""
