"""Short real texts with categories, and their tokenisation for embedding models.

The text models of seed 000 Ch. 7.2.1 map every word of a record to a row of
an embedding matrix; their leakage (Ch. 7.1.2, "Leakage from the embedding
layer") and the vocabulary-restriction defense (Ch. 7.3.2) depend on how
words become token ids. This module fixes that mapping once:

- :data:`PAD_ID` ``= 0`` pads a record to a fixed length. The models give
  it a zero embedding row that never receives a gradient
  (``padding_idx=0``), so padding never leaks.
- :data:`UNK_ID` ``= 1`` stands for every word outside the vocabulary.
- Vocabulary words get ids ``2, 3, ...`` in order of decreasing training
  frequency (ties broken alphabetically), so "the top-``N`` words" of Ch. 7.3.2
  are exactly the ids below ``N + 2`` (:meth:`Vocabulary.restrict`).

The real corpus available offline is the Debian ``fortunes`` collection
(:func:`load_fortunes`): one file per category (``computers``, ``food``,
``love``, ...), entries separated by lines holding a single ``%``. It stands
in for the thesis' review corpora (Yelp, CSI), which cannot be fetched here;
the Yelp JSON-lines format itself is read by :mod:`fedleak.data.yelp`.
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ConfigError, DataError
from ..validation import check_int, check_probability

__all__ = [
    "DEFAULT_FORTUNES_DIR",
    "FIRST_WORD_ID",
    "FORTUNES_ENV_VAR",
    "PAD_ID",
    "TEXT_TASK_DATASETS",
    "UNK_ID",
    "TextCorpus",
    "TextDataset",
    "Vocabulary",
    "build_vocabulary",
    "find_fortunes_dir",
    "fortunes_dataset",
    "load_fortunes",
    "load_text_task",
    "read_fortune_file",
    "split_text_dataset",
    "tokenize",
]

PAD_ID = 0
"""Token id of the padding token (a zero, never-updated embedding row)."""

UNK_ID = 1
"""Token id of every word outside the vocabulary."""

FIRST_WORD_ID = 2
"""Token id of the most frequent vocabulary word."""

DEFAULT_FORTUNES_DIR = "/usr/share/games/fortunes"
"""Where Debian's ``fortunes`` packages install their files."""

FORTUNES_ENV_VAR = "FEDLEAK_FORTUNES"
"""Environment variable naming a fortunes folder (searched after ``directory``)."""

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_OVERSTRIKE = re.compile(r".\x08")
_SKIPPED_SUFFIXES = (".dat", ".u8")


def tokenize(text: str) -> list[str]:
    """Split ``text`` into lower-case words.

    A word is a run of ASCII letters and digits, optionally followed by an
    apostrophe suffix (``don't``, ``user's``); everything else separates
    words. Deliberately simple and dependency-free: the attacks only need a
    stable, reproducible mapping from text to tokens.

    Examples
    --------
    >>> tokenize("Don't PANIC -- it's 4.2 BSD!")
    ["don't", 'panic', "it's", '4', '2', 'bsd']
    """
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Vocabulary:
    """A frequency-ordered word vocabulary with padding and unknown ids.

    Parameters
    ----------
    words : tuple of str
        The vocabulary words, most frequent first; ``words[i]`` has id
        ``i + FIRST_WORD_ID``.
    """

    words: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(set(self.words)) != len(self.words):
            raise ConfigError("vocabulary words must be unique")

    @property
    def size(self) -> int:
        """Number of embedding rows needed: the words plus PAD and UNK."""
        return len(self.words) + FIRST_WORD_ID

    def token_id(self, word: str) -> int:
        """Return the id of ``word`` (:data:`UNK_ID` if it is not a vocabulary word)."""
        return self._index().get(word, UNK_ID)

    def _index(self) -> dict[str, int]:
        cached: dict[str, int] | None = self.__dict__.get("_index_cache")
        if cached is None:
            cached = {w: i + FIRST_WORD_ID for i, w in enumerate(self.words)}
            object.__setattr__(self, "_index_cache", cached)
        return cached

    def restrict(self, top_n: int) -> Vocabulary:
        """Return the vocabulary of the ``top_n`` most frequent words (Ch. 7.3.2).

        Ids are unchanged for the kept words; the dropped words become
        :data:`UNK_ID` when encoded with the restricted vocabulary.
        """
        top_n = check_int("top_n", top_n, low=1)
        return Vocabulary(self.words[:top_n])

    def encode(self, tokens: Sequence[str], length: int) -> np.ndarray:
        """Map one tokenised record to ``length`` ids, truncated or right-padded.

        Parameters
        ----------
        tokens : sequence of str
            The record's words, e.g. from :func:`tokenize`.
        length : int
            The fixed sequence length ``l`` of Ch. 7.2.1.

        Returns
        -------
        numpy.ndarray
            int64 array of shape ``(length,)``; positions past the record's
            end hold :data:`PAD_ID`.
        """
        length = check_int("length", length, low=1)
        index = self._index()
        out = np.full(length, PAD_ID, dtype=np.int64)
        ids = [index.get(t, UNK_ID) for t in tokens[:length]]
        out[: len(ids)] = ids
        return out

    def encode_many(self, records: Iterable[Sequence[str]], length: int) -> np.ndarray:
        """Encode several tokenised records into an ``(n, length)`` id matrix."""
        rows = [self.encode(r, length) for r in records]
        if not rows:
            return np.zeros((0, check_int("length", length, low=1)), dtype=np.int64)
        return np.stack(rows)

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Map ids back to words, dropping padding; unknown ids give ``"<unk>"``."""
        out: list[str] = []
        for i in ids:
            i = int(i)
            if i == PAD_ID:
                continue
            if FIRST_WORD_ID <= i < self.size:
                out.append(self.words[i - FIRST_WORD_ID])
            else:
                out.append("<unk>")
        return out


def build_vocabulary(
    records: Iterable[Sequence[str]], *, max_size: int | None = None, min_count: int = 1
) -> Vocabulary:
    """Build the top-``max_size`` vocabulary of tokenised records.

    Parameters
    ----------
    records : iterable of sequences of str
        Tokenised training records (build the vocabulary on training data only).
    max_size : int, optional
        Keep at most this many words (the thesis' "5,000 most frequent words",
        Ch. 7.2.2); ``None`` keeps every word seen ``min_count`` times.
    min_count : int, default=1
        Minimum number of occurrences of a kept word.

    Returns
    -------
    Vocabulary
        Words ordered by decreasing count, ties alphabetically (deterministic).
    """
    min_count = check_int("min_count", min_count, low=1)
    counts: Counter[str] = Counter()
    for record in records:
        counts.update(record)
    ranked = sorted(
        (w for w, c in counts.items() if c >= min_count),
        key=lambda w: (-counts[w], w),
    )
    if max_size is not None:
        ranked = ranked[: check_int("max_size", max_size, low=1)]
    return Vocabulary(tuple(ranked))


@dataclass(frozen=True)
class TextCorpus:
    """Raw texts with one category label each.

    Parameters
    ----------
    texts : tuple of str
        The records.
    labels : numpy.ndarray
        int64 category index of each text, in ``[0, len(categories))``.
    categories : tuple of str
        Category names (for fortunes: the file names, sorted).
    source : str
        Where the texts were read from.
    """

    texts: tuple[str, ...]
    labels: np.ndarray
    categories: tuple[str, ...]
    source: str

    def __len__(self) -> int:
        return len(self.texts)

    def tokens(self) -> list[list[str]]:
        """Return every text tokenised with :func:`tokenize`."""
        return [tokenize(t) for t in self.texts]


@dataclass(frozen=True)
class TextDataset:
    """Token-id records ready for the embedding models, with a train/test split.

    Parameters
    ----------
    x_train, x_test : numpy.ndarray
        int64 token ids of shape ``(n, length)``, right-padded with
        :data:`PAD_ID`.
    y_train, y_test : numpy.ndarray
        int64 labels.
    vocabulary : Vocabulary
        The vocabulary (built on the training records only).
    categories : tuple of str
        Label names.
    source : str
        Where the texts came from.
    train_index, test_index : numpy.ndarray
        Positions of the train/test records in the input of
        :func:`split_text_dataset` (to join per-record side information such
        as a user's home area); empty when unknown.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    vocabulary: Vocabulary
    categories: tuple[str, ...]
    source: str
    train_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    test_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def num_classes(self) -> int:
        """Number of categories."""
        return len(self.categories)

    @property
    def vocab_size(self) -> int:
        """Number of embedding rows the model needs."""
        return self.vocabulary.size

    @property
    def sequence_length(self) -> int:
        """The fixed record length ``l``."""
        return int(self.x_train.shape[1])


def read_fortune_file(path: str | os.PathLike[str]) -> list[str]:
    r"""Read the entries of one fortune file.

    Entries are separated by lines that hold only ``%``. Terminal overstriking
    (``X\bX``, used for bold and underline in a few files) is removed,
    surrounding blank lines are stripped, and empty entries are skipped.
    Bytes that are not UTF-8 are replaced (the files are ASCII/UTF-8).

    Raises
    ------
    DataError
        If the file cannot be read.
    """
    try:
        raw = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise DataError(f"cannot read fortune file {path}: {err}") from err
    entries: list[str] = []
    current: list[str] = []
    for line in raw.splitlines():
        if line.rstrip() == "%":
            entries.append("\n".join(current))
            current = []
        else:
            current.append(_OVERSTRIKE.sub("", line))
    entries.append("\n".join(current))
    return [e.strip() for e in entries if e.strip()]


def find_fortunes_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """Return the folder holding the fortune files.

    Searched in order: ``directory``, ``$FEDLEAK_FORTUNES``,
    :data:`DEFAULT_FORTUNES_DIR`.

    Raises
    ------
    DataError
        If none of them is a folder; the message says how to install the data.
    """
    candidates: list[str] = []
    if directory is not None:
        candidates.append(os.fspath(directory))
    if os.environ.get(FORTUNES_ENV_VAR):
        candidates.append(os.environ[FORTUNES_ENV_VAR])
    candidates.append(DEFAULT_FORTUNES_DIR)
    for candidate in candidates:
        if Path(candidate).is_dir():
            return Path(candidate)
    raise DataError(
        f"no fortunes folder found (looked in {candidates}); install Debian's "
        f"'fortunes' package (apt-get install fortunes), or set {FORTUNES_ENV_VAR} "
        "to a folder of fortune files"
    )


def _category_files(folder: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if (
            path.name.startswith(".")
            or path.suffix in _SKIPPED_SUFFIXES
            or not path.is_file()
        ):
            continue
        files[path.name] = path
    return files


def load_fortunes(
    directory: str | os.PathLike[str] | None = None,
    *,
    categories: Sequence[str] | None = None,
    max_chars: int | None = None,
    min_words: int = 1,
) -> TextCorpus:
    """Load the ``fortunes`` corpus: one category per file.

    Parameters
    ----------
    directory : path, optional
        Folder of fortune files (see :func:`find_fortunes_dir`).
    categories : sequence of str, optional
        The file names to load, in this label order; default: every file
        except the ``.dat`` indices and ``.u8`` links, sorted by name.
    max_chars : int, optional
        Drop entries longer than this (ASCII art and long stories), keeping
        the short texts.
    min_words : int, default=1
        Drop entries with fewer words.

    Returns
    -------
    TextCorpus
        Texts in file order, labelled by the index of their category.

    Raises
    ------
    DataError
        If the folder or a requested category is missing, or no entry is left.
    """
    folder = find_fortunes_dir(directory)
    files = _category_files(folder)
    min_words = check_int("min_words", min_words, low=0)
    if categories is None:
        names = tuple(files)
    else:
        names = tuple(categories)
        missing = [c for c in names if c not in files]
        if missing:
            raise DataError(
                f"fortune categories {missing} not found in {folder}; "
                f"available: {sorted(files)}"
            )
        if len(set(names)) != len(names):
            raise ConfigError(f"fortune categories repeat a name: {list(names)}")
    texts: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(names):
        for entry in read_fortune_file(files[name]):
            if max_chars is not None and len(entry) > max_chars:
                continue
            if len(tokenize(entry)) < min_words:
                continue
            texts.append(entry)
            labels.append(label)
    if not texts:
        raise DataError(f"no fortune entries left in {folder} for {list(names)}")
    return TextCorpus(
        texts=tuple(texts),
        labels=np.asarray(labels, dtype=np.int64),
        categories=names,
        source=str(folder),
    )


def split_text_dataset(
    records: Sequence[Sequence[str]],
    labels: np.ndarray,
    categories: Sequence[str],
    *,
    vocab_size: int | None,
    length: int,
    test_fraction: float,
    seed: int | np.random.Generator,
    source: str = "",
) -> TextDataset:
    """Split tokenised records, build the vocabulary on the training part, encode.

    Parameters
    ----------
    records : sequence of sequences of str
        Tokenised records (words or location ids as strings).
    labels : numpy.ndarray
        int64 label of each record.
    categories : sequence of str
        Label names.
    vocab_size : int or None
        Top-``N`` vocabulary size (``None``: every training word).
    length : int
        Fixed sequence length ``l``.
    test_fraction : float
        Fraction of records held out (a uniformly random subset).
    seed : int or numpy.random.Generator
        Drives the split.
    source : str
        Recorded in the result.
    """
    labels = np.asarray(labels, dtype=np.int64)
    if len(records) != len(labels):
        raise ConfigError(
            f"{len(records)} records but {len(labels)} labels; give one label each"
        )
    check_probability("test_fraction", test_fraction)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(records))
    n_test = round(test_fraction * len(records))
    test_idx, train_idx = np.sort(order[:n_test]), np.sort(order[n_test:])
    train_records = [records[i] for i in train_idx]
    vocabulary = build_vocabulary(train_records, max_size=vocab_size)
    return TextDataset(
        x_train=vocabulary.encode_many(train_records, length),
        y_train=labels[train_idx],
        x_test=vocabulary.encode_many([records[i] for i in test_idx], length),
        y_test=labels[test_idx],
        vocabulary=vocabulary,
        categories=tuple(categories),
        source=source,
        train_index=train_idx.astype(np.int64),
        test_index=test_idx.astype(np.int64),
    )


def fortunes_dataset(
    categories: Sequence[str] | None = None,
    *,
    directory: str | os.PathLike[str] | None = None,
    vocab_size: int | None = 5000,
    length: int = 50,
    max_chars: int | None = 400,
    test_fraction: float = 0.2,
    seed: int | np.random.Generator = 0,
) -> TextDataset:
    """Load the fortunes corpus as a text classification task (category = file).

    Parameters
    ----------
    categories : sequence of str, optional
        Categories to load (default: all).
    directory : path, optional
        Folder of fortune files.
    vocab_size : int or None, default=5000
        Top-``N`` vocabulary (Ch. 7.2.2 uses the 5,000 most frequent words).
    length : int, default=50
        Fixed record length (short texts; the thesis uses 300 for CSI).
    max_chars : int or None, default=400
        Keep only entries of at most this many characters.
    test_fraction : float, default=0.2
        Held-out fraction.
    seed : int or numpy.random.Generator, default=0
        Drives the train/test split.

    Examples
    --------
    >>> data = fortunes_dataset(["computers", "food"])  # doctest: +SKIP
    >>> data.x_train.shape[1], data.num_classes  # doctest: +SKIP
    (50, 2)
    """
    corpus = load_fortunes(directory, categories=categories, max_chars=max_chars)
    return split_text_dataset(
        corpus.tokens(),
        corpus.labels,
        corpus.categories,
        vocab_size=vocab_size,
        length=length,
        test_fraction=test_fraction,
        seed=seed,
        source=corpus.source,
    )


TEXT_TASK_DATASETS: tuple[str, ...] = (
    "checkins-synthetic",
    "checkins-synthetic-large",
    "fortunes",
)
"""Token-id datasets a federation's task can name (``[data] dataset``)."""


@functools.lru_cache(maxsize=4)
def _text_task(name: str, seed: int) -> TextDataset:
    if name == "checkins-synthetic":
        from .checkins import checkin_dataset, synthetic_checkins

        synthetic = synthetic_checkins(
            num_users=1000, num_venues=1000, num_areas=10, seed=seed
        )
        return checkin_dataset(
            synthetic.table,
            synthetic.attribute_map(),
            vocab_size=30000,
            length=60,
            test_fraction=0.3,
            seed=seed,
        )
    if name == "checkins-synthetic-large":
        from .checkins import synthetic_checkin_task

        return synthetic_checkin_task(
            10000, num_areas=10, test_fraction=0.5, seed=seed
        )[0]
    if name == "fortunes":
        return fortunes_dataset(
            ["computers", "people", "work"], vocab_size=5000, length=30, seed=seed
        )
    raise ConfigError(
        f"unknown text dataset {name!r}; choose one of {list(TEXT_TASK_DATASETS)}"
    )


def load_text_task(name: str, *, seed: int) -> TextDataset:
    """Return a federation's text dataset (cached per process).

    ``checkins-synthetic``
        :func:`fedleak.data.checkins.synthetic_checkins` with 1,000 users and
        venues in 10 areas (the run seed), users with >= 10 distinct venues,
        records of length 60, labels: the binary user attribute; 30% of the
        users held out.
    ``checkins-synthetic-large``
        The check-in data of ``fedleak bench membership`` (Table 7.2):
        :func:`fedleak.data.checkins.synthetic_checkin_task` with 10,000
        users and venues, 20 check-ins per user on average, half of the users
        held out (the non-members).
    ``fortunes``
        The ``computers``, ``people`` and ``work`` fortunes (labels), top-5,000
        words, length 30, 20% held out.

    The arrays are read-only; copy them before modifying.
    """
    data = _text_task(name, int(seed))
    for array in (data.x_train, data.y_train, data.x_test, data.y_test):
        array.setflags(write=False)
    return data
