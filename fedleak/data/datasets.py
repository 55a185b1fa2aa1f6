"""Loading the image datasets fedleak experiments use.

Three datasets are known (:data:`DATASET_NAMES`):

``digits``
    scikit-learn's bundled 8x8 handwritten digits (1797 images). It has no
    official train/test split, so fedleak makes a fixed stratified 80/20 split
    with the constant seed :data:`DIGITS_SPLIT_SEED`: every call, on every
    machine, returns the same split.
``fashion-mnist`` and ``mnist``
    Read from a folder holding the four standard IDX files
    (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each raw or with a
    ``.gz`` suffix). fedleak never downloads anything; see
    :func:`find_data_dir` for where it looks.

Loaded datasets are cached in-process per (name, resolved folder); their
arrays are read-only, so copy them before modifying.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..validation import check_option
from .idx import read_idx

__all__ = [
    "DATASET_NAMES",
    "DATA_ENV_VAR",
    "DEFAULT_DATA_DIRS",
    "DIGITS_SPLIT_SEED",
    "Dataset",
    "DatasetStatus",
    "dataset_status",
    "find_data_dir",
    "load_dataset",
]

DATASET_NAMES: tuple[str, ...] = ("digits", "fashion-mnist", "mnist")
"""The names :func:`load_dataset` accepts."""

DEFAULT_DATA_DIRS: dict[str, str] = {
    "fashion-mnist": "/usr/share/datasets/fashion-mnist",
}
"""System-wide default folders: where Debian's ``dataset-fashion-mnist`` installs.

There is no Debian package, hence no default, for MNIST.
"""

DATA_ENV_VAR = "FEDLEAK_DATA"
"""Environment variable naming a data folder (searched after ``root``)."""

DIGITS_SPLIT_SEED = 0
"""Constant seed of the fixed stratified 80/20 split of ``digits``."""

_DIGITS_TEST_FRACTION = 0.2
_NUM_CLASSES: dict[str, int] = {"digits": 10, "fashion-mnist": 10, "mnist": 10}
_DEBIAN_PACKAGES: dict[str, str] = {"fashion-mnist": "dataset-fashion-mnist"}
_IDX_STEMS: dict[str, str] = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_BUNDLED = "bundled with scikit-learn"


@dataclass(frozen=True)
class Dataset:
    """An image classification dataset with a train and a test split.

    Parameters
    ----------
    name : str
        The dataset name, one of :data:`DATASET_NAMES` for loaded datasets.
    x_train : numpy.ndarray
        Training images, float32 of shape ``(n, C, H, W)`` with values in
        ``[0, 1]``.
    y_train : numpy.ndarray
        Training labels, int64 of shape ``(n,)`` in ``[0, num_classes)``.
    x_test : numpy.ndarray
        Test images, like ``x_train``.
    y_test : numpy.ndarray
        Test labels, like ``y_train``.
    num_classes : int
        Number of classes.
    source : str
        Human-readable origin, e.g. ``"scikit-learn bundled digits"`` or the
        folder the files were read from.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    source: str

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """The shape ``(C, H, W)`` of one image."""
        c, h, w = self.x_train.shape[1:]
        return int(c), int(h), int(w)

    @property
    def num_train(self) -> int:
        """The number of training records."""
        return int(self.x_train.shape[0])

    @property
    def num_test(self) -> int:
        """The number of test records."""
        return int(self.x_test.shape[0])


@dataclass(frozen=True)
class DatasetStatus:
    """Whether one dataset can be loaded on this machine, and from where.

    Parameters
    ----------
    name : str
        The dataset name.
    available : bool
        Whether :func:`load_dataset` would find the data.
    location : str
        The folder found, ``"bundled with scikit-learn"``, or ``""`` when
        the data is unavailable.
    hint : str
        How to get the data when it is unavailable (``""`` when available).
    """

    name: str
    available: bool
    location: str
    hint: str


def _idx_file(folder: Path, stem: str) -> Path | None:
    """Return the raw or gzipped file ``stem`` in ``folder``, if any."""
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _describe_folder(folder: Path) -> str | None:
    """Return ``None`` if ``folder`` holds all four IDX files, else why not."""
    if not folder.exists():
        return "does not exist"
    if not folder.is_dir():
        return "is not a folder"
    missing = [s for s in _IDX_STEMS.values() if _idx_file(folder, s) is None]
    if missing:
        return "lacks " + ", ".join(f"{s}[.gz]" for s in missing)
    return None


def _search(name: str, base: Path, label: str, searched: list[str]) -> Path | None:
    """Look for the data in ``base`` and ``base/name``; log failures."""
    for folder in (base, base / name):
        problem = _describe_folder(folder)
        if problem is None:
            return folder
        searched.append(f"{folder} ({label}): {problem}")
    return None


def _howto(name: str) -> str:
    """Return instructions to obtain dataset ``name``."""
    files = ", ".join(_IDX_STEMS.values())
    manual = (
        f"put the four IDX files ({files}; raw or .gz) in a folder and pass it "
        f"as root= or set {DATA_ENV_VAR}=<folder> (the folder itself or a parent "
        f"holding a {name}/ subfolder)"
    )
    package = _DEBIAN_PACKAGES.get(name)
    if package is None:
        return f"To get {name}: {manual}."
    debian = f"on Debian/Ubuntu run `apt-get install {package}`"
    return f"To get {name}: {debian}, or {manual}."


def find_data_dir(name: str, root: str | Path | None = None) -> Path:
    """Find the folder holding the IDX files of dataset ``name``.

    The search order is

    1. ``root``, if given: the folder itself or its subfolder ``root/name``.
       If neither holds the files, this raises instead of looking further;
    2. the folder named by the environment variable ``FEDLEAK_DATA`` (or its
       subfolder named after the dataset);
    3. the Debian default of :data:`DEFAULT_DATA_DIRS` (fashion-mnist only).

    A folder qualifies when it holds all four standard IDX files, each raw or
    with a ``.gz`` suffix.

    Parameters
    ----------
    name : str
        One of :data:`DATASET_NAMES`.
    root : str or pathlib.Path or None, optional
        A folder to use instead of searching.

    Returns
    -------
    pathlib.Path
        The folder found. For ``digits``, which scikit-learn bundles, the
        scikit-learn data folder.

    Raises
    ------
    ConfigError
        If ``name`` is not a known dataset.
    DataError
        If no folder holds the files; the message lists every place searched
        and says how to get the data.
    """
    check_option("name", name, DATASET_NAMES)
    if name == "digits":
        import sklearn.datasets

        return Path(sklearn.datasets.__file__).parent / "data"
    searched: list[str] = []
    if root is not None:
        found = _search(name, Path(root).expanduser(), "root argument", searched)
        if found is not None:
            return found
        raise DataError(
            f"no {name} data in the given root folder. Searched:\n  - "
            + "\n  - ".join(searched)
            + f"\n{_howto(name)}"
        )
    env = os.environ.get(DATA_ENV_VAR, "")
    if env:
        found = _search(name, Path(env).expanduser(), f"${DATA_ENV_VAR}", searched)
        if found is not None:
            return found
    else:
        searched.append(f"${DATA_ENV_VAR} (not set)")
    default = DEFAULT_DATA_DIRS.get(name)
    if default is not None:
        folder = Path(default)
        problem = _describe_folder(folder)
        if problem is None:
            return folder
        searched.append(f"{folder} (Debian default): {problem}")
    raise DataError(
        f"{name} data not found. Searched:\n  - "
        + "\n  - ".join(searched)
        + f"\n{_howto(name)}"
    )


def _freeze(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _stratified_split(
    labels: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Split indices per class; return sorted (train, test) index arrays."""
    rng = np.random.default_rng(seed)
    train: list[np.ndarray] = []
    test: list[np.ndarray] = []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_test = round(test_fraction * members.size)
        test.append(members[:n_test])
        train.append(members[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


@functools.cache
def _load_digits() -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float32) / np.float32(16.0)
    x = images.reshape(-1, 1, *images.shape[1:])
    y = np.asarray(bunch.target, dtype=np.int64)
    train, test = _stratified_split(y, _DIGITS_TEST_FRACTION, DIGITS_SPLIT_SEED)
    return Dataset(
        name="digits",
        x_train=_freeze(x[train]),
        y_train=_freeze(y[train]),
        x_test=_freeze(x[test]),
        y_test=_freeze(y[test]),
        num_classes=_NUM_CLASSES["digits"],
        source="scikit-learn bundled digits",
    )


def _read_split(
    name: str, folder: Path, split: str, num_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Read and validate one split (``"train"`` or ``"test"``)."""
    x_path = _idx_file(folder, _IDX_STEMS[f"x_{split}"])
    y_path = _idx_file(folder, _IDX_STEMS[f"y_{split}"])
    if x_path is None or y_path is None:
        raise DataError(f"{name} {split} files vanished from {folder}.")
    images = read_idx(x_path)
    labels = read_idx(y_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise DataError(
            f"{x_path} should hold uint8 images of shape (n, H, W), found "
            f"{images.dtype} of shape {images.shape}."
        )
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise DataError(
            f"{y_path} should hold integer labels of shape (n,), found "
            f"{labels.dtype} of shape {labels.shape}."
        )
    if labels.shape[0] != images.shape[0]:
        raise DataError(
            f"{name} {split} split in {folder} has {images.shape[0]} images but "
            f"{labels.shape[0]} labels; the files do not belong together."
        )
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(
            f"{y_path} has labels in [{labels.min()}, {labels.max()}], outside "
            f"[0, {num_classes}) for {name}."
        )
    x = (images.astype(np.float32) / np.float32(255.0))[:, None, :, :]
    return x, labels.astype(np.int64)


@functools.lru_cache(maxsize=8)
def _load_idx_folder(name: str, folder: Path) -> Dataset:
    num_classes = _NUM_CLASSES[name]
    x_train, y_train = _read_split(name, folder, "train", num_classes)
    x_test, y_test = _read_split(name, folder, "test", num_classes)
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DataError(
            f"{name} in {folder}: train images are {x_train.shape[2:]} but test "
            f"images are {x_test.shape[2:]}; the files do not belong together."
        )
    return Dataset(
        name=name,
        x_train=_freeze(x_train),
        y_train=_freeze(y_train),
        x_test=_freeze(x_test),
        y_test=_freeze(y_test),
        num_classes=num_classes,
        source=str(folder),
    )


def load_dataset(name: str, root: str | Path | None = None) -> Dataset:
    """Load a dataset by name.

    Parameters
    ----------
    name : str
        One of :data:`DATASET_NAMES`.
    root : str or pathlib.Path or None, optional
        Folder holding the IDX files (or a parent with a subfolder named after
        the dataset). Ignored for ``digits``. See :func:`find_data_dir` for
        the search when it is ``None``.

    Returns
    -------
    Dataset
        The dataset. Results are cached in-process per (name, folder), and its
        arrays are read-only: copy them before modifying.

    Raises
    ------
    ConfigError
        If ``name`` is not a known dataset.
    DataError
        If the data cannot be found or is malformed (truncated files, label
        and image counts that differ, labels out of range).
    """
    check_option("name", name, DATASET_NAMES)
    if name == "digits":
        return _load_digits()
    folder = find_data_dir(name, root).resolve()
    return _load_idx_folder(name, folder)


def dataset_status() -> list[DatasetStatus]:
    """Report, for every known dataset, whether and where it is available.

    Returns
    -------
    list of DatasetStatus
        One entry per name of :data:`DATASET_NAMES`, in that order.
    """
    statuses: list[DatasetStatus] = []
    for name in DATASET_NAMES:
        if name == "digits":
            statuses.append(DatasetStatus(name, True, _BUNDLED, ""))
            continue
        try:
            folder = find_data_dir(name)
        except DataError:
            statuses.append(DatasetStatus(name, False, "", _howto(name)))
        else:
            statuses.append(DatasetStatus(name, True, str(folder), ""))
    return statuses
