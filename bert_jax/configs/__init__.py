"""The shipped run configs: `bert-jax pretrain --config NAME` finds them from any directory.

configs/NAME.py at the repository root are links to these files. Each file's `SUMMARY` is
its one line in `pretrain --help`, read here without importing the file (help stays fast).
"""

import ast
import os

DIRECTORY = os.path.dirname(os.path.abspath(__file__))


def summaries() -> dict[str, str]:
    """{name: SUMMARY} of every shipped config, by name."""
    found = {}
    for file_name in sorted(os.listdir(DIRECTORY)):
        if not file_name.endswith(".py") or file_name.startswith("_"):
            continue
        with open(os.path.join(DIRECTORY, file_name), encoding="utf-8") as file:
            tree = ast.parse(file.read())
        found[file_name[:-3]] = next(
            node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and [getattr(target, "id", None) for target in node.targets] == ["SUMMARY"])
    return found
