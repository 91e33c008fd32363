"""`bert-jax examples DIR`: the inputs the README's recipes read, in the formats the commands
read, deterministic for a seed, with evaluation rows that training never shows."""

import os

from bert_jax import cli
from bert_jax.tasks.sentence_embedding import read_pair_records, scores_of
from input_pipeline import demo_corpus, example_files, example_pairs, example_treebank
from input_pipeline.tasks import columns, conll, conllu, glue as glue_data, squad


def test_examples_are_what_the_commands_read(tmp_path, capsys):
    directory = str(tmp_path / "examples")
    assert cli.main(["examples", directory]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in printed] == [
        os.path.join(directory, name) for name in [*example_files.FILES, *example_pairs.FILES,
                                                   *example_treebank.FILES, "glue"]]
    assert sorted(os.listdir(os.path.join(directory, "glue"))) == sorted(
        glue_data.TASKS[name].directory for name in glue_data.TASKS)  # read in test_glue.py
    path = lambda name: os.path.join(directory, name)  # noqa: E731
    # The demo corpus, as make pretrain trains on it.
    assert open(path("corpus.txt")).read() == demo_corpus.corpus_text(
        demo_corpus.stdlib_documents())
    # Sentiment: the classify reader's rows; evaluation verdicts never seen in training.
    spec = columns.ColumnSpec()
    train, dev = (columns.read_rows(path(name), spec)
                  for name in ("sentiment_train.tsv", "sentiment_dev.tsv"))
    assert (len(train), len(dev)) == (400, 100)
    assert {row.label for row in train} == {row.label for row in dev} == {"pos", "neg"}
    held_out = [verdict for verdicts in (example_files.POSITIVE, example_files.NEGATIVE)
                for verdict in verdicts[-example_files.HELD_OUT_VERDICTS:]]
    assert not any(verdict in row.texts[0] for row in train for verdict in held_out)
    assert all(any(verdict in row.texts[0] for verdict in held_out) for row in dev)
    # Ratings: the same sentences, a number from 1 to 5 above 3 exactly where the label is pos.
    for split, labelled in (("train", train), ("dev", dev)):
        rated = columns.read_rows(path(f"ratings_{split}.tsv"), spec, numeric_labels=True)
        assert [row.texts for row in rated] == [row.texts for row in labelled]
        assert all(1 <= float(row.label) <= 5 for row in rated)
        assert [float(row.label) > 3 for row in rated] == [row.label == "pos" for row in labelled]
    # Named entities: CoNLL in IOB2; evaluation sentences each name someone training never does.
    ner_train, ner_dev = (conll.read_conll(path(name)) for name in ("ner_train.txt",
                                                                     "ner_dev.txt"))
    assert (len(ner_train.sentences), len(ner_dev.sentences)) == (300, 80)
    assert sorted(conll.label_names(ner_train.sentences)) == sorted(conll.label_names(
        ner_dev.sentences)) == [f"{prefix}-{kind}" for prefix in "BI"
                                for kind in ("LOC", "ORG", "PER")] + ["O"]
    train_words = {word for sentence in ner_train.sentences for word, tag in
                   zip(sentence.words, sentence.tags) if tag != "O"}
    assert all(set(sentence.words) & ({word for names in example_files.NAMES.values()
                                       for name in names for word in name.split()}
                                      - train_words) for sentence in ner_dev.sentences)
    # Reading comprehension: every answer a checked span of its paragraph.
    qa_train, qa_dev = (squad.read_squad(path(name)) for name in ("squad_train.json",
                                                                  "squad_dev.json"))
    assert (len(qa_train.questions), len(qa_dev.questions)) == (360, 90)
    assert all(len(question.answer_spans) == 1 for question in qa_train.questions)
    # SQuAD v2.0: the same kinds of question, and two a town the paragraph cannot answer.
    v2_train, v2_dev = (squad.read_squad(path(name)) for name in ("squad2_train.json",
                                                                  "squad2_dev.json"))
    assert v2_train.version_2 and v2_dev.version_2
    for data, towns in ((v2_train, 30), (v2_dev, 10)):
        assert sum(question.is_impossible for question in data.questions) == 2 * towns
        assert all(bool(question.answer_spans) != question.is_impossible
                   for question in data.questions)
    # Sentence pairs as `finetune sentence-embedding` reads them: STS scores 0..5, NLI labels,
    # each NLI premise with an entailment and a contradiction (--loss mnrl --hard-negatives).
    for name, count in (("pairs_train.jsonl", 200), ("pairs_dev.jsonl", 50)):
        scores = scores_of(read_pair_records(path(name)))
        assert len(scores) == count and 0 <= scores.min() < scores.max() <= 5
    for name in ("nli_train.jsonl", "nli_dev.jsonl"):
        records = read_pair_records(path(name))
        assert scores_of(records) is None and len(records) % 3 == 0
        by_premise = {}
        for _, premise, _, label in records:
            by_premise.setdefault(premise, []).append(label)
        assert all(labels == ["entailment", "neutral", "contradiction"]
                   for labels in by_premise.values())
    # The treebank: CoNLL-U the probe reads, one root a sentence, every head a word of it.
    sentences = list(conllu.read_conllu(path("treebank.conllu")))
    assert len(sentences) == 200
    assert all(sentence.heads.count(0) == 1 and sentence.relations[sentence.heads.index(0)]
               == "root" for sentence in sentences)
    relations = {relation for sentence in sentences for relation in sentence.relations}
    assert {"nsubj", "obj", "obl", "det", "case", "nmod:poss", "flat", "punct"} <= relations
    # The same seed writes the same files; another seed others.
    again = str(tmp_path / "again")
    example_files.write_examples(again, seed=0)
    other = example_files.write_examples(str(tmp_path / "other"), seed=1)
    example_pairs.write_pairs(again, seed=0)
    example_treebank.write_treebank(again, seed=0)
    for name in [*example_files.FILES, *example_pairs.FILES, *example_treebank.FILES]:
        assert open(path(name)).read() == open(os.path.join(again, name)).read()
    assert open(path("sentiment_train.tsv")).read() != open(
        os.path.join(str(tmp_path / "other"), "sentiment_train.tsv")).read()
    assert len(other) == len(example_files.FILES)
