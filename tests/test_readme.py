"""README.md's and docs/*.md's commands run as written, each ```bash block in a new shell.

"Using a model" and "From Python" run here on every suite run, in a directory where
`runs/demo` is a tiny model (what `make pretrain` leaves, made small): the bash block in a
new shell, the Python block in this process.

A reader pastes one block into a new terminal, so a block may use only what it defines: a
block that reads `$M` from an earlier block fails. Two checks:

  - fast, always: every variable a block uses is defined in that block (or is one every
    shell has), and every block has a plan below (a new block must say how it is tested);
  - run: each block in a new `bash -euo pipefail` (an undefined variable is an error), in an
    empty directory with nothing beside it (as a clone: no ../shared; a block reads what
    `bert-jax examples` writes or what it makes itself), with the plan's substitutions making
    it small. "ci" blocks take seconds and run on every suite run ("Using a model" and "From
    Python" below, and the others marked "ci"); "slow" blocks take a minute or more on a CPU,
    so they run only with BERT_JAX_README_BLOCKS=all (or a comma-separated list of section
    names): `bash .ci/docs` runs them all from a fresh clone (by hand: about 40 minutes on 2
    cores, more than CI's budget leaves), e.g.
        BERT_JAX_README_BLOCKS=all python -m pytest -q tests/test_readme.py -k new_shell
    "skip" blocks need what CI cannot have (gcloud and a Google Cloud project, a gs://
    bucket, a TPU slice, an NVIDIA GPU, docker, the Hugging Face Hub), or are the README's
    quick-start recipes that `.ci/recipes` runs, named in the plan.

Plans are keyed by (file, section heading): README.md and each page of docs/ (the manual).
No block may be lost when text moves between them (a planned block for every bash block found,
at least as many as the README held before the split), and no relative link or #anchor in
them may be dead (GitHub's heading slugs).

A substitution is (text in the block, what runs instead); each must occur in its block, so
a README edit that removes it fails here rather than silently running the full size.
A `prologue` runs first, in the same shell: it makes the small copies that substitutions
point at, never a variable the block uses.
"""

import dataclasses
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from interop_helpers import random_pretraining_params, write_vocab

from bert_jax.interop import model_source, model_writers
from bert_jax.models.presets import preset
from input_pipeline.tokenization import load_tokenizer

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPOSITORY, "README.md")
# The README and the manual beside it (issue 44 moved all but the README's first pages there).
DOCUMENTS = ["README.md"] + sorted(os.path.join("docs", name) for name in
                                   os.listdir(os.path.join(REPOSITORY, "docs"))
                                   if name.endswith(".md"))
# Sections whose blocks are cheap enough to run here; the others need data, a pod or a server.
RUN_SECTIONS = (("docs/using-a-model.md", "Using a model"), ("README.md", "From Python"))


def read_document(document: str) -> str:
    return open(os.path.join(REPOSITORY, document), encoding="utf-8").read()


def fenced_blocks(document: str) -> list[tuple[str, int, str, str]]:
    """(section heading, index within the section, language, code) of each fenced block.

    A heading is a `#` line outside a block; a section's index counts its blocks of the same
    language (so a plan's n-th bash block stays the n-th whatever Python sits beside it)."""
    blocks, heading, counts = [], None, {}
    inside, code = None, []
    for line in read_document(document).split("\n"):
        if inside is None and line.startswith("#") and " " in line:
            heading, counts = line.split(" ", 1)[1].strip(), {}
        elif inside is None and line.startswith("```"):
            inside, code = line[3:].strip(), []
        elif inside is not None and line.startswith("```"):
            blocks.append((heading, counts.get(inside, 0), inside, "\n".join(code) + "\n"))
            counts[inside] = counts.get(inside, 0) + 1
            inside = None
        elif inside is not None:
            code.append(line)
    return blocks


def section_blocks(document: str, section: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block under the last heading named `section`."""
    blocks = [(language, code) for heading, _, language, code in fenced_blocks(document)
              if heading == section]
    assert blocks, f"no blocks under {section!r} in {document}"
    return blocks


def test_readme_using_a_model_runs_as_written(tmp_path, monkeypatch, capsys):
    """The bash block in a new shell (four `bert-jax` processes), the Python one here."""
    monkeypatch.chdir(tmp_path)
    tokenizer = load_tokenizer(write_vocab(tmp_path))
    config = preset("tiny", vocab_size=tokenizer.vocab_size)  # as configs/demo.py
    model_writers.save_model(config, random_pretraining_params(config, seed=1), tokenizer,
                             "runs/demo")
    blocks = [block for document, section in RUN_SECTIONS
              for block in section_blocks(document, section)]
    assert [language for language, _ in blocks] == ["bash", "python"]
    result = run_block(blocks[0][1], str(tmp_path), PLANS[RUN_SECTIONS[0]][0])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    features = np.load("features.npz")["features"]
    assert features.shape == (2, 2 * config.hidden_dim)  # two sentences, two layers joined
    assert np.load("layers.npz")["attention_layer_-1"].shape[:2] == (2, config.num_heads)
    assert "[MASK] 1:" in result.stdout
    assert os.path.exists("runs/demo_hf/model.safetensors")
    exec(compile(blocks[1][1], "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith(f"(2, {config.hidden_dim}) (2, {config.hidden_dim}) [(")
    assert model_source.resolve("runs/demo_model").load().config == config


# Variables every shell has; anything else a block uses, it must define.
ENVIRONMENT = {"PWD", "HOME", "PATH", "USER"}


@dataclasses.dataclass(frozen=True)
class Plan:
    mode: str  # "ci", "slow" or "skip"
    reason: str = ""  # why a block is slow or skipped
    substitutions: tuple[tuple[str, str], ...] = ()
    prologue: str = ""


def _skip(reason: str) -> Plan:
    return Plan("skip", reason)


_MINILM = "$M"  # the real all-MiniLM-L6-v2 the blocks fine-tune; small data keeps it quick
# Both pre-training blocks (unpacked and packed) at two shards, one duplicate and two steps;
# the masked-LM-only one (no duplicates) at two shards and two steps.
_TWO_SHARDS = ("--num-shards 16", "--num-shards 2")
_TWO_STEPS = ("--config configs/bert_base.py", "--config laptop --config.num_train_steps=2 "
              "--config.batch_size=8 --config.optimizer.warmup_steps=1 "
              "--config.checkpoint.every_steps=2")
SMALL_PRETRAINING = (_TWO_SHARDS, ("--dupe-factor 10", "--dupe-factor 1"), _TWO_STEPS)

# File -> section heading -> the plan of each of its bash blocks, in order.
PLANS_BY_FILE = {
    "README.md": {
        "Install": [_skip("`make test` is what CI runs (.ci/run); `make pretrain` trains the "
                           "demo config's 1,000 steps (minutes), which .ci/recipes's pretrain "
                           "recipe and the pretraining blocks here do at a few steps")],
        # The recipe blocks' text is branch issue-44's (.ci/recipes runs them as written).
        "Quick start: three recipes from a clone": [_skip(
            "`.ci/recipes` runs these four in a fresh virtualenv, as written, after `make test` "
            "(tests/test_recipes.py checks it finds them)")] * 4,
    },
    "docs/attention.md": {
        "What does BERT look at? Attention maps and the syntactic probe": [Plan(
            "slow", "all-MiniLM-L6-v2's attention maps, and the probe on the example treebank")],
    },
    "docs/continued-pretraining.md": {
        "Continue a model on your text": [
            Plan("slow", "a tiny random ModernBERT made here, continued 6 steps (the page: 60) on "
                         "the example corpus, exported and read by transformers' pipeline",
                 substitutions=(("--steps 60", "--steps 6"),)),
            _skip("Hub models (ModernBERT-base, bert-base-uncased: the Hub is off on CI) "
                  "continued for hours; the block above runs the same command on a tiny model, "
                  "tests/test_continued_pretraining.py both families")],
    },
    "docs/data-at-scale.md": {
        "Creating shards at Wikipedia scale": [_skip(
            "Dataflow needs a Google Cloud project; tests/test_create_data_beam.py runs the "
            "DirectRunner")],
    },
    "docs/embeddings.md": {
        "Sentence embeddings and semantic search": [
            Plan("slow", "all-MiniLM-L6-v2 embeds and searches six sentences (a minute: three "
                         "model loads and compiles)"),
            Plan("slow", "fine-tunes all-MiniLM-L6-v2 twice on the example pairs")],
        "Retrieval evaluation: `bert-jax retrieval` on BEIR data and MTEB": [
            Plan("slow", "all-MiniLM-L6-v2 embeds and scores a four-document BEIR set it writes "
                         "(half a minute: a model load and compiles)")],
    },
    "docs/fine-tuning.md": {
        "Special tokens in text": [Plan("ci", "reads the MiniLM vocabulary with "
                                              "split_special_tokens (seconds)")],
        "Fine-tuning": [Plan(
            "slow", "fine-tunes all-MiniLM-L6-v2 three times on the example files"), Plan(
            "slow", "fine-tunes all-MiniLM-L6-v2 once on 15 rows after the label errors")],
        "Named entities: `finetune ner`": [Plan(
            "slow", "fine-tunes all-MiniLM-L6-v2 twice on the example CoNLL files, 1 epoch (the "
                    "page: 2)", substitutions=(("--epochs 2", "--epochs 1"),))],
        "Domain-adaptive masked-LM training": [Plan(
            "slow", "a masked-LM epoch of all-MiniLM-L6-v2 on 60 lines of the example corpus",
            substitutions=(("head -n 8000", "head -n 60"), ("tail -n +8001", "sed -n 8001,8040p"),
                           ("--workdir runs/domain", "--workdir runs/domain --max-seq-len 64")))],
    },
    "docs/gpus.md": {
        "On a GPU": [_skip("needs an NVIDIA GPU and its driver (bench/gpu/gpu_session.sh --smoke "
                           "runs the scripts on a CPU)")],
        "A GPU's step, compiled on a CPU: `bert-jax aot --topology h100`": [Plan(
            "slow", "compiles BERT-Base and BERT-Large for an H100 (minutes; needs "
                    "requirements-gpu-compile.txt, which `make test` installs)",
            substitutions=(("pip install -r requirements-gpu-compile.txt",
                            "python -c 'import jax_cuda13_plugin'"),))],
    },
    "docs/modernbert.md": {
        "Your own language: a byte-level BPE `tokenizer.json`": [Plan(
            "slow", "a byte-level BPE and whole-word-masked shards of the example corpus, then two "
                    "pre-training steps", substitutions=SMALL_PRETRAINING)],
        "Pre-training ModernBERT": [
            Plan("slow", "builds the demo's BPE and MLM-only shards, pre-trains 8 steps, exports",
                 substitutions=(("--workdir runs/modernbert_demo",
                                 "--workdir runs/modernbert_demo --config.num_train_steps=8 "
                                 "--config.optimizer.warmup_steps=2 "
                                 "--config.optimizer.decay_steps=2 "
                                 "--config.checkpoint.every_steps=8 "
                                 "--config.eval.every_steps=8"),)),
            _skip("three phases of a pod run on gs:// (the configs load in "
                  "tests/test_configs.py)")],
        "ModernBERT before renting: `aot --recipe modernbert`": [_skip(
            "six compiles of ModernBERT-base for TPU pods on libtpu (about 17 minutes on 2 "
            "cores, beyond the few minutes CI gives the docs), then two or more on v5e:2x4; "
            "tests/test_aot_modernbert.py compiles a tiny ModernBERT for v5e:2x2 and checks "
            "the recipe's phases, tests/test_aot_modernbert_topology.py compiles a tiny one "
            "in the recipe's phases on v5e:2x2 and checks the search and the projection")],
        "ModernBERT": [Plan(
            "slow", "a random tiny ModernBERT (the Hub is out of reach) fine-tuned for 3 "
                    "epochs on four rows, predicted, exported and read by transformers' pipeline",
            substitutions=(("M=answerdotai/ModernBERT-base", "M=small/modernbert"),),
            prologue=f"mkdir -p small && python -c \"import sys; sys.path.insert(0, "
                     f"'{REPOSITORY}/tests'); "
                     f"from modernbert_helpers import modernbert_directory; "
                     f"modernbert_directory('small/modernbert', max_position_embeddings=512)\"")],
    },
    "docs/eurobert.md": {
        "EuroBERT": [Plan(
            "slow", "a random tiny EuroBERT (the Hub is out of reach) fine-tuned for 3 epochs "
                    "on four rows, predicted, exported and read by transformers' pipeline",
            substitutions=(("M=EuroBERT/EuroBERT-210m", "M=small/eurobert"),),
            prologue=f"mkdir -p small && python -c \"import sys; sys.path.insert(0, "
                     f"'{REPOSITORY}/tests'); "
                     f"from eurobert_helpers import eurobert_directory; "
                     f"eurobert_directory('small/eurobert', max_position_embeddings=512)\"")],
        "Pre-training EuroBERT": [
            Plan("slow", "builds the demo's BPE and MLM-only shards, pre-trains 8 steps, exports",
                 substitutions=(("--workdir runs/eurobert_demo",
                                 "--workdir runs/eurobert_demo --config.num_train_steps=8 "
                                 "--config.optimizer.warmup_steps=2 "
                                 "--config.optimizer.decay_steps=2 "
                                 "--config.checkpoint.every_steps=8 "
                                 "--config.eval.every_steps=8"),))],
        "EuroBERT's step on a CPU": [_skip(
            "the bench itself: about 8 minutes of both cores and 17 GB of memory at "
            "EuroBERT-210m's widths; tests/test_bench_host.py holds its host header")],
    },
    "docs/moving-weights.md": {
        "Serving with TensorFlow Serving": [_skip("docker and a tensorflow/serving image; "
                                                  "tests/test_tf_export.py loads the SavedModel")],
    },
    "docs/pretraining.md": {
        "From raw text to a pre-trained model": [Plan(
            "slow", "a vocabulary and shards of the example corpus, then two pre-training steps",
            substitutions=SMALL_PRETRAINING)],
        "Packed rows: no compute on padding": [Plan(
            "slow", "a vocabulary and packed shards of the example corpus, then two "
                    "pre-training steps",
            substitutions=SMALL_PRETRAINING)],
        "Masked-LM-only pre-training (ModernBERT's objective)": [Plan(
            "slow", "a vocabulary and masked-LM-only shards of the example corpus, then two "
            "pre-training steps", substitutions=(_TWO_SHARDS, _TWO_STEPS))],
        "ModernBERT's optimizer recipe": [Plan(
            "slow", "builds the demo's data, pre-trains 8 steps and averages two checkpoints",
            substitutions=(("--config.optimizer.decay_steps=300",
                            "--config.optimizer.decay_steps=4 --config.num_train_steps=8 "
                            "--config.optimizer.warmup_steps=2 --config.checkpoint.every_steps=4"),
                           ("--config.batch_warmup.steps=200", "--config.batch_warmup.steps=4")))],
        "Data mixtures and phases": [Plan(
            "slow", "two sources of the demo corpus and three phases of a tiny ModernBERT, "
            "30 steps (about two minutes: three compiled steps)")],
        "mmBERT's and Ettin's published phases": [Plan(
            "slow", "three tiers of sources from the demo corpus and mmbert_demo's three "
            "phases, 80 steps (about two minutes)")],
    },
    "docs/question-answering.md": {
        "Question answering (SQuAD v1.1 / v2.0)": [Plan(
            "slow", "fine-tunes all-MiniLM-L6-v2 on the example SQuAD v1.1 and v2.0 files, "
                    "1 epoch each", substitutions=(("--max-seq-len 128", "--max-seq-len 128 "
                                                                        "--epochs 1"),))],
    },
    "docs/glue.md": {
        "GLUE: the table from one command": [Plan(
            "slow", "fine-tunes all-MiniLM-L6-v2 on two made-up GLUE tasks",
            substitutions=(("--tasks cola,sst2,mrpc,stsb,rte,wnli", "--tasks mrpc,wnli"),
                           ("--seeds 0,1", "--seeds 0"), ("--epochs 2", "--epochs 1")))],
        "A suite at a pre-training run's checkpoints": [Plan(
            "slow", "pre-trains the ModernBERT demo 8 steps with a suite on SST-2 and STS-B "
                    "(made-up) at its two checkpoints",
            substitutions=(("--workdir runs/modernbert_suite",
                            "--workdir runs/modernbert_suite --config.num_train_steps=8 "
                            "--config.optimizer.warmup_steps=2 "
                            "--config.optimizer.decay_steps=2 "
                            "--config.checkpoint.every_steps=4 "
                            "--config.checkpoint.keep=1 --config.eval.every_steps=8"),))],
    },
    "docs/tests-and-benchmarks.md": {
        "Tests and benchmarks": [_skip("the benchmarks themselves: hours of CPU, and bench/gpu "
                                       "needs an NVIDIA GPU; CI runs the suite (`make test`)")],
    },
    "docs/tpu-pods.md": {
        "1. The project (once)": [_skip("gcloud and a Google Cloud project")] * 2,
        "2. Data": [_skip("a gs:// bucket; tests/test_gcs_paths.py runs create-data on an "
                          "emulator")] * 2,
        "3. Before renting: does it fit, how long will it take?": [_skip(
            "five compiles of BERT-Large for v3/v4/v5e slices (and the recipe's six), minutes "
            "each on 2 cores, beyond the few minutes CI gives the docs; the README's fit recipe "
            "compiles one (.ci/recipes), tests/test_aot.py a tiny config")],
        "4. Rehearse the multi-host run locally": [_skip(
            "two 2-process runs of the demo config's 1,000 steps (many minutes, over the few "
            "CI gives the docs); tests/test_launch_local.py runs the same command at 2 steps, "
            "then resumed to 4")],
        "5. The job file": [_skip("gs:// data; tests/test_launch_check.py runs it against a GCS "
                                  "emulator")],
        "6. Create, install, run, watch": [_skip("rents a TPU slice")],
        "7. Preemption": [_skip("a TPU slice")],
        "8. Phase 2, cost control, clean-up": [_skip("a TPU slice")],
        "9. Export the weights": [_skip("a gs:// bucket")],
    },
    "docs/using-a-model.md": {
        "Using a model": [Plan("ci", "test_readme_using_a_model_runs_as_written, on a tiny "
                                     "runs/demo")],
    },
}
PLANS = {(file, heading): plans for file, sections in PLANS_BY_FILE.items()
         for heading, plans in sections.items()}


def shell_blocks(document: str = "README.md") -> list[tuple[str, int, str]]:
    """(section heading, index within the section, code) of each ```bash block of a document."""
    return [(heading, index, code) for heading, index, language, code in fenced_blocks(document)
            if language == "bash"]


def all_shell_blocks() -> list[tuple[str, str, int, str]]:
    """(document, section heading, index, code) of each ```bash block of README.md and docs/."""
    return [(document, *block) for document in DOCUMENTS for block in shell_blocks(document)]


def used_and_defined(code: str) -> tuple[set[str], set[str]]:
    """Shell variables a block expands, and those it assigns."""
    joined = code.replace("\\\n", " ")
    unquoted = re.sub(r"'[^']*'", "''", joined)  # nothing expands inside single quotes
    uncommented = re.sub(r"(^|\s)#.*$", "", unquoted, flags=re.MULTILINE)
    used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", uncommented))
    defined = set(re.findall(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", uncommented,
                             flags=re.MULTILINE))
    defined |= set(re.findall(r"(?:^|;)\s*for\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b", uncommented,
                              flags=re.MULTILINE))  # a loop's variable
    return used, defined


def test_every_block_defines_the_variables_it_uses():
    blocks = all_shell_blocks()
    assert len(blocks) > 20
    undefined = {f"{document}: {heading} #{index + 1}": sorted(used - defined - ENVIRONMENT)
                 for document, heading, index, code in blocks
                 for used, defined in [used_and_defined(code)] if used - defined - ENVIRONMENT}
    assert not undefined, f"blocks using variables from another block: {undefined}"


def test_the_check_finds_a_variable_from_an_earlier_block():
    used, defined = used_and_defined("D=x\nbert-jax finetune mlm --model $M --train $D/a \\\n"
                                     "    --workdir '$NOT' # $COMMENT\n")
    assert used - defined == {"M"}


def test_every_block_has_a_plan():
    found = {}
    for document, heading, index, _ in all_shell_blocks():
        found[document, heading] = index + 1
    assert found == {key: len(plans) for key, plans in PLANS.items()}


# Before issue 44 split it, README.md alone held 35 bash and 3 Python blocks (the README
# test ran or checked every bash block); the split may add blocks, never lose one.
BLOCKS_BEFORE_THE_SPLIT = {"bash": 35, "python": 3}


def test_no_block_was_lost_in_the_split():
    found = {}
    for document in DOCUMENTS:
        for _, _, language, _ in fenced_blocks(document):
            found[language] = found.get(language, 0) + 1
    planned = sum(len(plans) for plans in PLANS.values())
    assert planned == found["bash"] >= BLOCKS_BEFORE_THE_SPLIT["bash"]
    assert found["python"] >= BLOCKS_BEFORE_THE_SPLIT["python"]


def fresh_shell_environment() -> dict[str, str]:
    """A new login's environment, plus the venv on PATH and the suite's offline settings."""
    # PYTHONPATH: where the suite runs a checkout's code over an installed copy, so do blocks.
    keep = ("HOME", "USER", "LANG", "TMPDIR", "BERT_JAX_COMPILATION_CACHE", "JAX_PLATFORMS",
            "PYTHONPATH",
            "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TF_CPP_MIN_LOG_LEVEL",
            "TPU_SKIP_MDS_QUERY")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    return env


def run_block(code: str, directory: str, plan: Plan, timeout: float = 1800):
    """The block (after the plan's substitutions) in a new `bash -euo pipefail`."""
    for old, new in plan.substitutions:
        assert old in code, f"substitution {old!r} no longer in the block"
        code = code.replace(old, new)
    script = (plan.prologue + "\n" if plan.prologue else "") + code
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=directory,
                          env=fresh_shell_environment(), capture_output=True, text=True,
                          timeout=timeout)


def _selected(heading: str) -> bool:
    chosen = os.environ.get("BERT_JAX_README_BLOCKS", "")
    # a heading with a comma in it is chosen alone, whole
    return chosen in ("all", heading) or heading in {name.strip() for name in chosen.split(",")}


# Every block that runs in a new shell here: the slow ones, and the "ci" ones but the one
# test_readme_using_a_model_runs_as_written runs with its tiny runs/demo.
SLOW = [(document, heading, index, code) for document, heading, index, code in all_shell_blocks()
        if PLANS.get((document, heading), [Plan("skip")] * (index + 1))[index].mode
        in ("slow", "ci") and (document, heading) != RUN_SECTIONS[0]]


@pytest.mark.parametrize("document, heading, index, code", SLOW,
                         ids=[f"{heading}#{index + 1}" for _, heading, index, _ in SLOW])
def test_slow_block_runs_in_a_new_shell(document, heading, index, code, tmp_path):
    plan = PLANS[document, heading][index]
    if plan.mode == "slow" and not _selected(heading):
        pytest.skip(f"{plan.reason}: minutes on a CPU; BERT_JAX_README_BLOCKS=all runs it")
    directory = tmp_path / "bert-jax"  # nothing beside it: no ../shared
    directory.mkdir()
    result = run_block(code, str(directory), plan)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def github_anchors(document: str) -> set[str]:
    """The #anchors GitHub gives the document's headings: lower case, punctuation dropped
    (letters, digits, spaces, '-' and '_' kept), spaces to '-', a repeat suffixed -1, -2..."""
    anchors, seen = set(), {}
    inside = False
    for line in read_document(document).split("\n"):
        if line.startswith("```"):
            inside = not inside
        elif not inside and re.match(r"#+ ", line):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def relative_links(document: str) -> list[str]:
    """Targets of the document's [text](target) links outside fenced blocks, but web ones."""
    prose = re.sub(r"^```.*?^```", "", read_document(document), flags=re.MULTILINE | re.DOTALL)
    targets = re.findall(r"\]\(([^)\s]+)\)", prose)
    return [target for target in targets if not re.match(r"[a-z]+:", target)]


def test_github_anchors_follow_githubs_rules():
    assert github_anchors("docs/gpus.md") >= {
        "gpus", "on-a-gpu", "a-gpus-step-compiled-on-a-cpu-bert-jax-aot---topology-h100"}
    assert {"fine-tuning", "fine-tuning-1"} <= github_anchors("docs/fine-tuning.md")


def test_no_dead_link_or_anchor_in_the_readme_and_the_manual():
    dead = []
    for document in DOCUMENTS:
        for target in relative_links(document):
            path, _, anchor = target.partition("#")
            linked = os.path.normpath(os.path.join(os.path.dirname(document), path)) if path \
                else document
            if not os.path.exists(os.path.join(REPOSITORY, linked)):
                dead.append(f"{document}: {target} (no file {linked})")
            elif anchor and linked.endswith(".md") and anchor not in github_anchors(linked):
                dead.append(f"{document}: {target} (no heading #{anchor} in {linked})")
    assert len(DOCUMENTS) >= 9 and not dead, dead
