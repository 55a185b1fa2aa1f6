from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedleak.data import (
    DATASET_NAMES,
    DEFAULT_DATA_DIRS,
    dataset_status,
    find_data_dir,
    load_dataset,
    write_idx,
)
from fedleak.data import datasets as datasets_module
from fedleak.errors import ConfigError, DataError

H, W = 5, 6  # deliberately not 28x28: the loader must read H, W from the file


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDLEAK_DATA", raising=False)


def make_fake(
    folder: Path,
    *,
    n_train: int = 20,
    n_test: int = 10,
    gz: bool = True,
    n_train_labels: int | None = None,
    max_label: int = 9,
) -> Path:
    """Write four tiny IDX files in MNIST layout into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    ext = ".gz" if gz else ""
    n_labels = n_train if n_train_labels is None else n_train_labels
    y_train = (np.arange(n_labels) % (max_label + 1)).astype(np.uint8)
    write_idx(
        folder / f"train-images-idx3-ubyte{ext}",
        rng.integers(0, 256, (n_train, H, W), dtype=np.uint8),
    )
    write_idx(folder / f"train-labels-idx1-ubyte{ext}", y_train)
    write_idx(
        folder / "t10k-images-idx3-ubyte",  # always raw: mixing must work
        rng.integers(0, 256, (n_test, H, W), dtype=np.uint8),
    )
    write_idx(
        folder / f"t10k-labels-idx1-ubyte{ext}",
        (np.arange(n_test) % 10).astype(np.uint8),
    )
    return folder


def check_fake(
    ds: datasets_module.Dataset, n_train: int = 20, n_test: int = 10
) -> None:
    assert ds.x_train.shape == (n_train, 1, H, W)
    assert ds.x_test.shape == (n_test, 1, H, W)
    assert ds.input_shape == (1, H, W)
    assert (ds.num_train, ds.num_test, ds.num_classes) == (n_train, n_test, 10)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.x_train.min() >= 0.0 and ds.x_train.max() <= 1.0
    assert ds.x_train.max() > 0.9  # scaled by 1/255, not left at 0..255 or binarised


# --------------------------------------------------------------------- digits


def test_digits_shapes_and_range() -> None:
    ds = load_dataset("digits")
    assert ds.name == "digits"
    assert ds.num_train + ds.num_test == 1797
    assert ds.x_train.shape == (ds.num_train, 1, 8, 8)
    assert ds.input_shape == (1, 8, 8)
    assert ds.x_train.dtype == np.float32 and ds.x_test.dtype == np.float32
    assert ds.y_train.dtype == np.int64 and ds.y_test.dtype == np.int64
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    assert ds.num_classes == 10
    assert "scikit-learn" in ds.source
    assert abs(ds.num_test / 1797 - 0.2) < 0.01


def test_digits_split_covers_the_data() -> None:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    ds = load_dataset("digits")
    full = np.concatenate([ds.x_train, ds.x_test]).reshape(1797, 64) * 16
    got = sorted(map(tuple, np.column_stack([full, np.r_[ds.y_train, ds.y_test]])))
    want = sorted(map(tuple, np.column_stack([bunch.data, bunch.target])))
    np.testing.assert_allclose(np.array(got), np.array(want))


def test_digits_split_is_deterministic() -> None:
    first = load_dataset("digits")
    datasets_module._load_digits.cache_clear()
    second = load_dataset("digits")
    assert first is not second
    np.testing.assert_array_equal(first.x_train, second.x_train)
    np.testing.assert_array_equal(first.y_test, second.y_test)


def test_digits_split_is_stratified() -> None:
    ds = load_dataset("digits")
    for label in range(10):
        n_train = int(np.sum(ds.y_train == label))
        n_test = int(np.sum(ds.y_test == label))
        assert n_test == round(0.2 * (n_train + n_test))


def test_cached_arrays_are_read_only() -> None:
    ds = load_dataset("digits")
    assert load_dataset("digits") is ds
    with pytest.raises(ValueError, match="read-only"):
        ds.x_train[0, 0, 0, 0] = 0.5
    with pytest.raises(ValueError, match="read-only"):
        ds.y_test[0] = 3


# ---------------------------------------------------------------- IDX folders


def test_mnist_from_root(tmp_path: Path) -> None:
    make_fake(tmp_path / "data")
    ds = load_dataset("mnist", root=tmp_path / "data")
    check_fake(ds)
    assert ds.name == "mnist"
    assert ds.source == str((tmp_path / "data").resolve())
    assert not ds.x_train.flags.writeable
    np.testing.assert_array_equal(ds.y_train, np.arange(20) % 10)


def test_mnist_raw_files(tmp_path: Path) -> None:
    make_fake(tmp_path, gz=False, n_train=7)
    check_fake(load_dataset("mnist", root=str(tmp_path)), n_train=7)


def test_root_subfolder_layout(tmp_path: Path) -> None:
    make_fake(tmp_path / "mnist")
    assert find_data_dir("mnist", root=tmp_path) == tmp_path / "mnist"
    check_fake(load_dataset("mnist", root=tmp_path))


def test_mnist_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_fake(tmp_path)
    monkeypatch.setenv("FEDLEAK_DATA", str(tmp_path))
    assert find_data_dir("mnist") == tmp_path
    check_fake(load_dataset("mnist"))


def test_env_subfolder_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_fake(tmp_path / "mnist", n_train=12)
    monkeypatch.setenv("FEDLEAK_DATA", str(tmp_path))
    assert find_data_dir("mnist") == tmp_path / "mnist"
    check_fake(load_dataset("mnist"), n_train=12)


def test_root_wins_over_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_fake(tmp_path / "env", n_train=11)
    make_fake(tmp_path / "root", n_train=13)
    monkeypatch.setenv("FEDLEAK_DATA", str(tmp_path / "env"))
    assert load_dataset("mnist", root=tmp_path / "root").num_train == 13


def test_empty_root_does_not_fall_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_fake(tmp_path / "env")
    monkeypatch.setenv("FEDLEAK_DATA", str(tmp_path / "env"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="root") as info:
        load_dataset("mnist", root=tmp_path / "empty")
    assert str(tmp_path / "empty") in str(info.value)
    assert "train-images-idx3-ubyte" in str(info.value)


def test_env_without_data_falls_back_to_debian_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "env").mkdir()
    make_fake(tmp_path / "debian")
    monkeypatch.setenv("FEDLEAK_DATA", str(tmp_path / "env"))
    monkeypatch.setitem(DEFAULT_DATA_DIRS, "fashion-mnist", str(tmp_path / "debian"))
    assert find_data_dir("fashion-mnist") == tmp_path / "debian"
    ds = load_dataset("fashion-mnist")
    assert ds.name == "fashion-mnist"
    check_fake(ds)


def test_missing_mnist_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLEAK_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DataError) as info:
        load_dataset("mnist")
    message = str(info.value)
    assert "FEDLEAK_DATA" in message
    assert str(tmp_path / "nowhere") in message
    assert str(tmp_path / "nowhere" / "mnist") in message
    assert "train-images-idx3-ubyte" in message
    assert "apt-get" not in message  # Debian has no MNIST package


def test_missing_fashion_mnist_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nowhere = tmp_path / "no-such-folder"
    monkeypatch.setitem(DEFAULT_DATA_DIRS, "fashion-mnist", str(nowhere))
    with pytest.raises(DataError) as info:
        find_data_dir("fashion-mnist")
    message = str(info.value)
    assert "FEDLEAK_DATA" in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert str(nowhere) in message


def test_label_count_mismatch(tmp_path: Path) -> None:
    make_fake(tmp_path, n_train=20, n_train_labels=19)
    with pytest.raises(DataError, match=r"20 images but 19 labels"):
        load_dataset("mnist", root=tmp_path)


def test_labels_out_of_range(tmp_path: Path) -> None:
    make_fake(tmp_path, max_label=10)
    with pytest.raises(DataError, match=r"outside \[0, 10\)"):
        load_dataset("mnist", root=tmp_path)


def test_truncated_file_in_folder(tmp_path: Path) -> None:
    make_fake(tmp_path, gz=False)
    path = tmp_path / "train-labels-idx1-ubyte"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(DataError, match="truncated"):
        load_dataset("mnist", root=tmp_path)


def test_unknown_name() -> None:
    with pytest.raises(ConfigError) as info:
        load_dataset("cifar10")
    for name in DATASET_NAMES:
        assert name in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ConfigError):
        find_data_dir("MNIST")


def test_find_data_dir_digits_is_bundled() -> None:
    assert find_data_dir("digits").is_dir()


# -------------------------------------------------------------------- status


def test_dataset_status_lists_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_fake(tmp_path / "mnist")
    monkeypatch.setenv("FEDLEAK_DATA", str(tmp_path))
    monkeypatch.setitem(DEFAULT_DATA_DIRS, "fashion-mnist", str(tmp_path / "nope"))
    statuses = {s.name: s for s in dataset_status()}
    assert [s.name for s in dataset_status()] == list(DATASET_NAMES)
    assert statuses["digits"].available
    assert statuses["digits"].location == "bundled with scikit-learn"
    assert statuses["mnist"].available
    assert statuses["mnist"].location == str(tmp_path / "mnist")
    assert statuses["mnist"].hint == ""
    fashion = statuses["fashion-mnist"]
    assert not fashion.available
    assert "apt-get install dataset-fashion-mnist" in fashion.hint
    assert "FEDLEAK_DATA" in fashion.hint


# ------------------------------------------------------------ real data


@pytest.mark.needs_fashion_mnist
def test_real_fashion_mnist() -> None:
    try:
        find_data_dir("fashion-mnist")
    except DataError:
        pytest.skip(
            "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
        )
    ds = load_dataset("fashion-mnist")
    assert (ds.num_train, ds.num_test) == (60000, 10000)
    assert ds.input_shape == (1, 28, 28)
    assert ds.num_classes == 10
    assert ds.x_train.dtype == np.float32
    assert float(ds.x_train.min()) >= 0.0 and float(ds.x_train.max()) <= 1.0
    assert set(np.unique(ds.y_train)) == set(range(10))
    assert np.bincount(ds.y_test).tolist() == [1000] * 10
    assert load_dataset("fashion-mnist") is ds
