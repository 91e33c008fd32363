"""A small made-up dependency treebank for `bert-jax probe`, written by `bert-jax examples DIR`.

A clone holds no Universal Dependencies release, so the attention page's probe reads this:
sentences drawn from templates written for this project, each word's head and relation
annotated by hand in the Universal Dependencies scheme (nsubj, obj, obl, det, amod, case,
nmod, nmod:poss with its 's clitic, aux, mark, ccomp, punct, ...), the name slots filled
with example_files.py's made-up names; a name of several words is one `flat` chain from its
first word, as UD annotates names. Written in CoNLL-U (input_pipeline/tasks/conllu.py reads it).
"""

import random

from bert_jax.storage import files
from input_pipeline.example_files import NAMES

FILES = {"treebank.conllu": "200 made-up sentences in CoNLL-U with hand-made Universal "
                            "Dependencies trees (probe)"}

# Each template word: form (or a {PER}/{LOC}/{ORG} slot), UPOS, head (1-based template
# position, 0 = root) and relation.
TEMPLATES = [
    [("{PER}", "PROPN", 2, "nsubj"), ("opened", "VERB", 0, "root"), ("a", "DET", 5, "det"),
     ("new", "ADJ", 5, "amod"), ("office", "NOUN", 2, "obj"), ("in", "ADP", 7, "case"),
     ("{LOC}", "PROPN", 2, "obl"), (".", "PUNCT", 2, "punct")],
    [("{PER}", "PROPN", 2, "nsubj"), ("met", "VERB", 0, "root"), ("{PER}", "PROPN", 2, "obj"),
     ("in", "ADP", 5, "case"), ("{LOC}", "PROPN", 2, "obl"), ("last", "ADJ", 7, "amod"),
     ("week", "NOUN", 2, "obl:tmod"), (".", "PUNCT", 2, "punct")],
    [("The", "DET", 2, "det"), ("mayor", "NOUN", 5, "nsubj"), ("of", "ADP", 4, "case"),
     ("{LOC}", "PROPN", 2, "nmod"), ("thanked", "VERB", 0, "root"), ("{ORG}", "PROPN", 5, "obj"),
     ("for", "ADP", 9, "case"), ("the", "DET", 9, "det"), ("donation", "NOUN", 5, "obl"),
     (".", "PUNCT", 5, "punct")],
    [("{PER}", "PROPN", 3, "nmod:poss"), ("'s", "PART", 1, "case"), ("sister", "NOUN", 4, "nsubj"),
     ("lives", "VERB", 0, "root"), ("in", "ADP", 6, "case"), ("{LOC}", "PROPN", 4, "obl"),
     (".", "PUNCT", 4, "punct")],
    [("The", "DET", 3, "det"), ("old", "ADJ", 3, "amod"), ("bridge", "NOUN", 7, "nsubj:pass"),
     ("near", "ADP", 5, "case"), ("{LOC}", "PROPN", 3, "nmod"), ("was", "AUX", 7, "aux:pass"),
     ("closed", "VERB", 0, "root"), ("on", "ADP", 9, "case"), ("Monday", "PROPN", 7, "obl"),
     (".", "PUNCT", 7, "punct")],
    [("{PER}", "PROPN", 2, "nsubj"), ("said", "VERB", 0, "root"), ("that", "SCONJ", 6, "mark"),
     ("{ORG}", "PROPN", 6, "nsubj"), ("will", "AUX", 6, "aux"), ("build", "VERB", 2, "ccomp"),
     ("a", "DET", 8, "det"), ("school", "NOUN", 6, "obj"), (".", "PUNCT", 2, "punct")],
    [("{ORG}", "PROPN", 2, "nsubj"), ("hired", "VERB", 0, "root"), ("{PER}", "PROPN", 2, "obj"),
     ("as", "ADP", 6, "case"), ("its", "PRON", 6, "nmod:poss"), ("director", "NOUN", 2, "obl"),
     (".", "PUNCT", 2, "punct")],
    [("A", "DET", 2, "det"), ("storm", "NOUN", 3, "nsubj"), ("closed", "VERB", 0, "root"),
     ("the", "DET", 5, "det"), ("airport", "NOUN", 3, "obj"), ("in", "ADP", 7, "case"),
     ("{LOC}", "PROPN", 5, "nmod"), ("yesterday", "NOUN", 3, "obl:tmod"),
     (".", "PUNCT", 3, "punct")],
]


def sentence_lines(template, rng: random.Random) -> list[str]:
    """One sentence's CoNLL-U word lines: each slot's name fills it, its later words `flat`."""
    names = [rng.choice(NAMES[form[1:-1]]).split() if form.startswith("{") else [form]
             for form, _, _, _ in template]
    first_id, next_id = {}, 1
    for position, words in enumerate(names, start=1):
        first_id[position], next_id = next_id, next_id + len(words)
    first_id[0] = 0
    lines = []
    for position, (words, (_, tag, head, relation)) in enumerate(zip(names, template), start=1):
        for offset, word in enumerate(words):
            word_head, word_relation = ((first_id[head], relation) if offset == 0
                                        else (first_id[position], "flat"))
            lines.append(f"{first_id[position] + offset}\t{word}\t_\t{tag}\t_\t_\t{word_head}\t"
                         f"{word_relation}\t_\t_")
    return lines


def write_treebank(directory: str, seed: int = 0, count: int = 200) -> dict[str, str]:
    """Writes FILES into `directory`; returns {path: description}."""
    rng = random.Random(seed)
    sentences = []
    for number in range(count):
        lines = sentence_lines(rng.choice(TEMPLATES), rng)
        text = " ".join(line.split("\t")[1] for line in lines)
        sentences.append(f"# sent_id = example-{number + 1}\n# text = {text}\n"
                         + "\n".join(lines) + "\n")
    path = files.join(directory, "treebank.conllu")
    files.write_text(path, "\n".join(sentences))
    return {path: FILES["treebank.conllu"]}
