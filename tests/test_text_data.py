"""Tests of fedleak.data.text: fortune files, tokenisation, top-N vocabulary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedleak.data import text
from fedleak.data.text import (
    DEFAULT_FORTUNES_DIR,
    FIRST_WORD_ID,
    PAD_ID,
    UNK_ID,
    Vocabulary,
    build_vocabulary,
    find_fortunes_dir,
    fortunes_dataset,
    load_fortunes,
    read_fortune_file,
    split_text_dataset,
    tokenize,
)
from fedleak.errors import ConfigError, DataError


def _write_corpus(folder: Path) -> Path:
    folder.mkdir()
    (folder / "food").write_text(
        "Eat your greens.\n%\nA cake is a lie.\n  \n%\n\n%\nSoup of the day.\n"
    )
    (folder / "computers").write_text(
        "The computer is down.\n%\nB\x08Bold computer text\n%\n"
        + "x" * 500
        + " very long entry\n"
    )
    (folder / "food.dat").write_bytes(b"\x00\x01binary index")
    (folder / "food.u8").symlink_to(folder / "food")
    return folder


def test_tokenize_lowercases_and_keeps_apostrophes() -> None:
    assert tokenize("Don't PANIC -- it's 4.2 BSD!") == [
        "don't",
        "panic",
        "it's",
        "4",
        "2",
        "bsd",
    ]
    assert tokenize("") == []


def test_read_fortune_file_splits_on_percent_lines(tmp_path: Path) -> None:
    folder = _write_corpus(tmp_path / "f")
    assert read_fortune_file(folder / "food") == [
        "Eat your greens.",
        "A cake is a lie.",
        "Soup of the day.",
    ]
    entries = read_fortune_file(folder / "computers")
    assert entries[1] == "Bold computer text"  # overstriking removed


def test_load_fortunes_labels_by_file_and_skips_indices(tmp_path: Path) -> None:
    folder = _write_corpus(tmp_path / "f")
    corpus = load_fortunes(folder, max_chars=100)
    assert corpus.categories == ("computers", "food")
    assert list(corpus.labels) == [0, 0, 1, 1, 1]
    assert corpus.texts[0] == "The computer is down."
    chosen = load_fortunes(folder, categories=["food"])
    assert chosen.categories == ("food",) and len(chosen) == 3


def test_load_fortunes_errors_name_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _write_corpus(tmp_path / "f")
    with pytest.raises(DataError, match="'nope'"):
        load_fortunes(folder, categories=["nope"])
    with pytest.raises(DataError, match="no fortune entries"):
        load_fortunes(folder, min_words=50)
    monkeypatch.delenv("FEDLEAK_FORTUNES", raising=False)
    monkeypatch.setattr(text, "DEFAULT_FORTUNES_DIR", str(tmp_path / "none"))
    with pytest.raises(DataError, match="apt-get install fortunes"):
        find_fortunes_dir(tmp_path / "missing")


def test_find_fortunes_dir_prefers_argument_then_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _write_corpus(tmp_path / "a"), _write_corpus(tmp_path / "b")
    monkeypatch.setenv("FEDLEAK_FORTUNES", str(b))
    assert find_fortunes_dir(a) == a
    assert find_fortunes_dir() == b


def test_vocabulary_is_frequency_ordered_with_reserved_ids() -> None:
    vocab = build_vocabulary([["b", "a", "b"], ["c", "b", "a"]], max_size=2)
    assert vocab.words == ("b", "a")
    assert vocab.size == 2 + FIRST_WORD_ID
    ids = vocab.encode(["a", "zzz", "b"], length=5)
    assert list(ids) == [FIRST_WORD_ID + 1, UNK_ID, FIRST_WORD_ID, PAD_ID, PAD_ID]
    assert list(vocab.encode(["a", "b", "a"], length=2)) == [3, 2]
    assert vocab.decode(ids) == ["a", "<unk>", "b"]
    top1 = vocab.restrict(1)
    assert top1.words == ("b",) and top1.token_id("a") == UNK_ID
    assert build_vocabulary([["x", "y", "x"]], min_count=2).words == ("x",)


def test_vocabulary_ties_are_alphabetical_and_words_unique() -> None:
    assert build_vocabulary([["z", "y", "x"]]).words == ("x", "y", "z")
    with pytest.raises(ConfigError, match="unique"):
        Vocabulary(("a", "a"))


def test_split_text_dataset_is_seeded_and_builds_vocab_on_train() -> None:
    records = [[f"w{i}", "common"] for i in range(20)]
    labels = np.arange(20) % 2
    a = split_text_dataset(
        records,
        labels,
        ["even", "odd"],
        vocab_size=None,
        length=4,
        test_fraction=0.25,
        seed=3,
    )
    b = split_text_dataset(
        records,
        labels,
        ["even", "odd"],
        vocab_size=None,
        length=4,
        test_fraction=0.25,
        seed=3,
    )
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert a.x_train.shape == (15, 4) and a.x_test.shape == (5, 4)
    assert a.vocabulary.words[0] == "common"
    # test-only words are unknown to the training vocabulary
    assert (a.x_test[:, 0] == UNK_ID).all()
    with pytest.raises(ConfigError, match="labels"):
        split_text_dataset(
            records,
            labels[:3],
            ["a", "b"],
            vocab_size=None,
            length=4,
            test_fraction=0.2,
            seed=0,
        )


def test_fortunes_dataset_on_a_generated_corpus(tmp_path: Path) -> None:
    folder = _write_corpus(tmp_path / "f")
    data = fortunes_dataset(directory=folder, vocab_size=5, length=6, seed=0)
    assert data.num_classes == 2 and data.sequence_length == 6
    assert data.vocab_size == 5 + FIRST_WORD_ID
    assert data.x_train.dtype == np.int64
    assert int(data.x_train.max()) < data.vocab_size


@pytest.mark.skipif(
    not Path(DEFAULT_FORTUNES_DIR).is_dir(), reason="Debian 'fortunes' not installed"
)
def test_real_fortunes_corpus_loads() -> None:
    data = fortunes_dataset(["computers", "food", "love"], vocab_size=1000, seed=0)
    assert data.num_classes == 3
    assert len(data.y_train) > 500
    assert set(np.unique(data.y_train)) == {0, 1, 2}
