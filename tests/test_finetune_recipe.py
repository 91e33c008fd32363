"""bench/finetune_recipe.py's PyTorch reference run: stopped and continued from its
checkpoint, it ends with the weights of a run never stopped, bit for bit (same operations on
the same threads, so equal floats: any drift in data order, schedule, optimizer state or
dropout draws would change them)."""

import argparse

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bench.finetune_recipe import torch_train  # noqa: E402

ROWS, BATCH, EPOCHS = 12, 4, 2  # 3 steps an epoch, 6 in all


class Stop(Exception):
    pass


def tiny_model():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32,
                                     max_position_embeddings=32, num_labels=2)
    return transformers.BertForSequenceClassification(config)  # dropout 0.1: draws to match


def rows():
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(3, 10, (ROWS,), generator=generator).tolist()
    return [dict(input_ids=torch.randint(5, 50, (n,), generator=generator).tolist(),
                 labels=index % 2) for index, n in enumerate(lengths)]


def collate(batch, calls=None, stop_at=None):
    """Pads a batch; raises Stop on call `stop_at` (a run killed between steps)."""
    if calls is not None:
        calls.append(1)
        if len(calls) == stop_at:
            raise Stop
    longest = max(len(row["input_ids"]) for row in batch)
    ids = torch.tensor([row["input_ids"] + [0] * (longest - len(row["input_ids"]))
                        for row in batch])
    return dict(input_ids=ids, attention_mask=(ids > 0).long(),
                labels=torch.tensor([row["labels"] for row in batch]))


def recipe():
    return argparse.Namespace(batch_size=BATCH, seed=3, epochs=EPOCHS, learning_rate=1e-3)


@pytest.mark.parametrize("stop_at", [2, 4, 6])  # within epoch 1, at epoch 2's start, within it
def test_continued_run_ends_as_an_unbroken_one(tmp_path, stop_at):
    unbroken = tiny_model()
    torch.manual_seed(7)  # the dropout generator, as a run's script leaves it
    torch_train(unbroken, rows(), collate, recipe())

    checkpoint = str(tmp_path / "run.pt")
    broken, calls = tiny_model(), []
    torch.manual_seed(7)
    with pytest.raises(Stop):  # saved after every step; killed as batch `stop_at` is made
        torch_train(broken, rows(), lambda batch: collate(batch, calls, stop_at), recipe(),
                    checkpoint=checkpoint, save_every=0.0)
    continued = tiny_model()  # a new process: fresh weights and generators, then the file
    torch.manual_seed(123)
    torch_train(continued, rows(), collate, recipe(), checkpoint=checkpoint, save_every=0.0)

    for (name, expected), actual in zip(unbroken.state_dict().items(),
                                        continued.state_dict().values()):
        assert torch.equal(expected, actual), name


def test_checkpoint_of_another_recipe_is_refused(tmp_path):
    """A file left by a run of other settings (here 3 epochs, not 2) is not continued from."""
    checkpoint = str(tmp_path / "run.pt")
    longer = argparse.Namespace(**dict(vars(recipe()), epochs=3))
    calls = []
    with pytest.raises(Stop):
        torch_train(tiny_model(), rows(), lambda batch: collate(batch, calls, 2), longer,
                    checkpoint=checkpoint, save_every=0.0)
    with pytest.raises(ValueError, match="run.pt holds a run of"):
        torch_train(tiny_model(), rows(), collate, recipe(), checkpoint=checkpoint)
