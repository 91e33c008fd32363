"""Sources and bad input for the shard writer: encodings, empty files, odd documents, gzip,
globs, prose, TFDS, and the command line's exit status; never a half-written shard."""

import gzip
import json
import os

import pytest

import pipeline_helpers as helpers
from bert_jax import cli
from bert_jax.errors import UserError
from input_pipeline import sources
from input_pipeline.create_data import create_pretraining_data

SMALL = dict(num_shards=2, max_seq_len=32, max_predictions=5, dupe_factor=2, seed=1,
             workers=1, show_progress=False)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    return helpers.write_vocabulary(str(tmp_path_factory.mktemp("vocab")))


def cli_create_data(inputs, vocab, output, *extra):
    return cli.main(["create-data", "--input", *inputs, "--vocab", vocab, "--output-dir", output,
                     "--num-shards", "2", "--max-seq-len", "32", "--max-predictions", "5",
                     "--dupe-factor", "2", "--workers", "1", "--quiet", *extra])


def test_bytes_that_are_not_utf8(tmp_path, vocab, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"w1 w2 w3 .\nw4 w5 \xff\xfe w6 .\n\nw7 w8 .\nw9 w10 .\n")
    output = str(tmp_path / "out")
    assert cli_create_data([str(bad)], vocab, output) == 2
    message = capsys.readouterr().err
    assert "bad.txt: line 2: not UTF-8" in message and "byte offset 17" in message
    assert not os.path.exists(output)  # nothing half-written, not even the directory
    assert cli_create_data([str(bad)], vocab, output, "--encoding-errors", "replace") == 0
    manifest = json.load(open(os.path.join(output, "manifest.json")))
    assert manifest["replaced_bytes"] == {str(bad): 2}
    assert sorted(os.listdir(output)) == ["manifest.json", "shard-00000-of-00002.tfrecord",
                                          "shard-00001-of-00002.tfrecord"]


def test_empty_file_and_missing_inputs(tmp_path, vocab, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    output = str(tmp_path / "out")
    assert cli_create_data([str(empty)], vocab, output) == 2
    assert "empty.txt: input file has no text" in capsys.readouterr().err
    assert not os.path.exists(output)  # a failed run does not even leave the directory
    assert cli_create_data([str(tmp_path / "nothing-*.txt")], vocab, output) == 2
    assert "nothing-*.txt: no input files match" in capsys.readouterr().err
    assert cli_create_data([str(empty)], str(tmp_path / "no-vocab.txt"), output) == 2
    assert "no-vocab.txt: vocabulary file not found" in capsys.readouterr().err
    assert cli_create_data([str(empty)], vocab, output, "--max-seq-len", "4") == 2
    assert "--max-seq-len 4" in capsys.readouterr().err


def test_one_sentence_documents_always_take_a_random_next(tmp_path, vocab):
    corpus = tmp_path / "single.txt"
    corpus.write_text("\n\n".join(f"w{i} w{i + 1} w{i + 2} ." for i in range(50)),
                      encoding="utf-8")
    manifest = create_pretraining_data([str(corpus)], vocab, str(tmp_path / "out"), **SMALL)
    features = helpers.read_shards(
        [str(tmp_path / "out" / shard["file"]) for shard in manifest["shards"]], 32, 5)
    assert manifest["num_instances"] == 100  # one per document and dupe
    assert features["next_sentence_labels"].all()
    assert (features["input_mask"].sum(1) == 11).all()  # [CLS] 4 [SEP] 4 [SEP]


def test_a_sentence_longer_than_the_sequence_is_truncated(tmp_path, vocab):
    corpus = tmp_path / "long.txt"
    long_sentence = " ".join(f"w{i}" for i in range(100))
    corpus.write_text(f"{long_sentence}\nw1 w2 .\n\nw3 w4 .\n{long_sentence}\n", encoding="utf-8")
    manifest = create_pretraining_data([str(corpus)], vocab, str(tmp_path / "out"), **SMALL)
    features = helpers.read_shards(
        [str(tmp_path / "out" / shard["file"]) for shard in manifest["shards"]], 32, 5)
    lengths = features["input_mask"].sum(1)
    assert manifest["num_instances"] >= 4 and lengths.max() == 32
    for row in range(len(lengths)):
        ids = helpers.unmasked_ids(features, row)
        assert ids[0] == helpers.CLS and ids[lengths[row] - 1] == helpers.SEP


def test_gzip_glob_and_prose_inputs(tmp_path, vocab):
    documents = helpers.make_corpus(str(tmp_path / "plain.txt"), 6, seed=1, max_sentences=6)
    with gzip.open(tmp_path / "part-1.txt.gz", "wt", encoding="utf-8") as file:
        file.write(open(tmp_path / "plain.txt", encoding="utf-8").read())
    os.replace(tmp_path / "plain.txt", tmp_path / "part-0.txt")
    read = list(sources.read_documents([str(tmp_path / "part-*")]))
    assert read == documents + documents
    assert list(sources.read_documents([str(tmp_path)])) == read  # a directory: every file
    # Prose: hard-wrapped paragraphs, sentences split at terminal punctuation, a document
    # ending at two blank lines.
    prose = tmp_path / "book.txt"
    prose.write_text("First sentence here. Second one\nwraps the line! Third?\n\n"
                     "New paragraph \u201cquoted.\u201d Done.\n\n\nChapter two starts. Ok.\n",
                     encoding="utf-8")
    assert list(sources.read_documents([str(prose)], input_format="prose")) == [
        ["First sentence here.", "Second one wraps the line!", "Third?",
         "New paragraph \u201cquoted.\u201d", "Done."], ["Chapter two starts.", "Ok."]]


def test_tfds_dataset_prepared_locally(tmp_path, vocab):
    tfds = pytest.importorskip("tensorflow_datasets")

    class PipelineTinyText(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
                {"text": tfds.features.Text(), "title": tfds.features.Text()}))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            for index in range(6):
                yield index, {"title": f"t{index}", "text": (
                    f"W{index} w1 w2. W3 w4 w{index}!\nw5 w6 w7. W8 w9?")}

    data_dir = str(tmp_path / "tfds")
    PipelineTinyText(data_dir=data_dir).download_and_prepare()
    documents = list(sources.read_documents(["tfds:pipeline_tiny_text"], tfds_data_dir=data_dir))
    assert len(documents) == 6 and all(len(document) == 4 for document in documents)
    assert sorted(document[0] for document in documents) == [f"W{i} w1 w2." for i in range(6)]
    manifest = create_pretraining_data(["tfds:pipeline_tiny_text:train"], vocab,
                                       str(tmp_path / "out"), tfds_data_dir=data_dir, **SMALL)
    assert manifest["num_documents"] == 6 and manifest["num_sentences"] == 24
    with pytest.raises(UserError, match="tfds:not_there: cannot open this TFDS dataset"):
        list(sources.read_documents(["tfds:not_there"], tfds_data_dir=data_dir))


def test_output_is_the_same_for_any_worker_count(tmp_path, vocab):
    corpus = str(tmp_path / "corpus.txt")
    helpers.make_corpus(corpus, 60, seed=2)
    contents = []
    for workers, seed in ((1, 1), (2, 1), (1, 2)):
        output = tmp_path / f"out-{workers}-{seed}"
        create_pretraining_data([corpus], vocab, str(output), unit_bytes=3000,
                                **dict(SMALL, workers=workers, seed=seed, num_shards=3))
        contents.append([(output / f"shard-{i:05d}-of-00003.tfrecord").read_bytes()
                         for i in range(3)])
    assert contents[0] == contents[1]  # workers 1 vs 2: byte-identical
    assert contents[0] != contents[2]  # another seed: other instances
    assert all(len(shard) > 1000 for shard in contents[0])
    # Rewriting a directory with fewer shards leaves none of the old ones behind.
    output = tmp_path / "out-1-1"
    manifest = create_pretraining_data([corpus], vocab, str(output), **SMALL)
    assert sorted(os.listdir(output)) == ["manifest.json", "shard-00000-of-00002.tfrecord",
                                          "shard-00001-of-00002.tfrecord"]
    assert len(helpers.read_shards([str(output / s["file"]) for s in manifest["shards"]],
                                   32, 5)["input_ids"]) == manifest["num_instances"]
