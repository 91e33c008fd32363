"""`.ci/recipes` (CI runs it after the suite) finds the README's quick-start recipes: the
marked blocks, in order, each the code the README shows under its marker."""

import os
import subprocess

from test_readme import README, REPOSITORY, shell_blocks

SECTION = "Quick start: three recipes from a clone"


def test_ci_finds_the_readme_recipes():
    listed = subprocess.run(["bash", os.path.join(REPOSITORY, ".ci", "recipes"), "--list"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert listed == ["install", "pretrain", "finetune", "fit"]
    text = open(README, encoding="utf-8").read()
    blocks = [code for heading, _, code in shell_blocks() if heading == SECTION]
    assert len(blocks) == 4
    for name, code in zip(listed, blocks):  # each marker right above its block
        assert f"<!-- recipe: {name} -->\n```bash\n{code}```" in text
    # From a clone, with nothing beside it: no block reads the shared reference data.
    assert not any("shared" in code for code in blocks)
