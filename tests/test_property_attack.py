"""Property inference core (fedleak.attacks.property.classifier): features, f_prop, scoring, logs."""

from __future__ import annotations

import numpy as np
import pytest
from fedleak.attacks.property.classifier import (
    BatchPropertyClassifier,
    ObservationLog,
    PropertyObservations,
    dataset_score,
    gradient_features,
    load_observations,
    score_series,
    single_batch_auc,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import NotFittedError

from fedleak.errors import ConfigError, DataError


def known_update() -> dict[str, np.ndarray]:
    conv = np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)
    conv[1] *= -1.0  # filter 1 holds -12 ... -23: its max is -12
    return {
        "conv.weight": conv,
        "conv.bias": np.array([0.5, -0.25], dtype=np.float32),
        "fc.weight": np.array([[1.0, -3.0, 2.0], [-1.0, -2.0, -0.5]], np.float32),
        "fc.bias": np.array([7.0, 8.0], dtype=np.float32),
    }


def test_max_pooling_keeps_one_feature_per_output_unit_and_biases_as_they_are():
    features = gradient_features(known_update(), "max")
    # conv: 2 filters, bias 2, fc: 2 rows, bias 2
    assert features.shape == (8,)
    np.testing.assert_array_equal(
        features, [11.0, -12.0, 0.5, -0.25, 2.0, -0.5, 7.0, 8.0]
    )
    assert features.dtype == np.float64


def test_raw_features_are_every_entry_in_model_order():
    update = known_update()
    features = gradient_features(update, "raw")
    assert features.shape == (24 + 2 + 6 + 2,)
    np.testing.assert_array_equal(features[:24], update["conv.weight"].reshape(-1))
    np.testing.assert_array_equal(features[-2:], [7.0, 8.0])


def test_layer_selection_and_errors():
    update = known_update()
    only_fc = gradient_features(update, "max", layers=["fc.weight"])
    np.testing.assert_array_equal(only_fc, [2.0, -0.5])
    with pytest.raises(ConfigError, match="pooling"):
        gradient_features(update, "mean")
    with pytest.raises(ConfigError, match=r"emb\.weight"):
        gradient_features(update, layers=["emb.weight"])
    with pytest.raises(DataError):
        gradient_features({}, "max")


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_max_pooling_is_the_row_maximum_of_any_tensor(shape, seed):
    tensor = np.random.default_rng(seed).normal(size=shape)
    features = gradient_features({"t": tensor}, "max")
    if tensor.ndim == 1:
        np.testing.assert_array_equal(features, tensor)
    else:
        assert features.shape == (shape[0],)
        for i in range(shape[0]):
            assert features[i] == tensor[i].max()
            assert np.all(tensor[i] <= features[i])


def separable(n: int, d: int, shift: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    x = rng.normal(size=(n, d))
    x[:, :3] += shift * y[:, None]
    return x, y


@pytest.mark.parametrize("kind", ["random-forest", "logistic"])
def test_classifier_separates_a_separable_case(kind):
    x_train, y_train = separable(300, 20, 2.0, seed=1)
    x_test, y_test = separable(200, 20, 2.0, seed=2)
    clf = BatchPropertyClassifier(kind=kind, random_state=0).fit(x_train, y_train)
    auc = single_batch_auc(y_test, clf.property_scores(x_test))
    assert auc > 0.9
    assert set(clf.predict(x_test).tolist()) <= {0, 1}


@pytest.mark.parametrize("kind", ["random-forest", "logistic"])
def test_classifier_is_at_chance_without_signal(kind):
    x_train, y_train = separable(300, 20, 0.0, seed=3)
    x_test, y_test = separable(600, 20, 0.0, seed=4)
    clf = BatchPropertyClassifier(kind=kind, random_state=0).fit(x_train, y_train)
    auc = single_batch_auc(y_test, clf.property_scores(x_test))
    # 600 test rows (about 300 per class) of exchangeable scores: standard
    # error sqrt(601 / (12 * 300^2)) = 0.024, the bounds four of them from 0.5
    assert 0.4 < auc < 0.6


def test_classifier_is_seeded_and_a_sklearn_estimator():
    from sklearn.base import clone

    x, y = separable(200, 10, 1.0, seed=5)
    a = BatchPropertyClassifier(random_state=7).fit(x, y).property_scores(x)
    b = clone(BatchPropertyClassifier(random_state=7)).fit(x, y).property_scores(x)
    np.testing.assert_array_equal(a, b)
    assert BatchPropertyClassifier().get_params()["n_estimators"] == 50


def test_classifier_errors_name_the_problem():
    x, y = separable(50, 5, 1.0, seed=6)
    with pytest.raises(DataError, match="with"):
        BatchPropertyClassifier().fit(x, np.zeros(50))
    with pytest.raises(ConfigError, match="kind"):
        BatchPropertyClassifier(kind="svm").fit(x, y)
    fitted = BatchPropertyClassifier().fit(x, y)
    with pytest.raises(DataError, match="shape"):
        fitted.property_scores(np.zeros((3, 4)))
    with pytest.raises(ConfigError):
        fitted.top_features()


def test_logistic_top_features_are_the_informative_ones():
    x, y = separable(400, 30, 2.0, seed=8)
    clf = BatchPropertyClassifier(kind="logistic").fit(x, y)
    assert set(clf.top_features(3).tolist()) == {0, 1, 2}


def test_auc_dataset_score_and_series():
    assert single_batch_auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.2, 0.8, 0.9])) == 1
    with pytest.raises(DataError, match="one kind"):
        single_batch_auc(np.ones(3), np.ones(3))
    assert dataset_score(np.array([0.2, 0.4])) == pytest.approx(0.3)
    with pytest.raises(DataError):
        dataset_score(np.array([]))
    rounds, scores = score_series(np.array([3, 1, 2]), np.array([0.3, 0.1, 0.2]))
    assert rounds.tolist() == [1, 2, 3]
    np.testing.assert_allclose(scores, [0.1, 0.2, 0.3])
    _, smooth = score_series(np.array([1, 2, 3]), np.array([0.0, 1.0, 1.0]), window=2)
    np.testing.assert_allclose(smooth, [0.0, 0.5, 1.0])


def test_observations_reload_and_rescore_to_the_same_auc(tmp_path):
    rng = np.random.default_rng(11)
    log = ObservationLog(tmp_path / "adversary")
    truth, observed_rows, aux_rows, labels = [], [], [], []
    for server_round in range(1, 41):
        aux, lab = separable(4, 12, 2.0, seed=100 + server_round)
        has = server_round % 2 == 0
        observed = rng.normal(size=12)
        observed[:3] += 2.0 * has
        log.write_round(
            server_round,
            observed=None if server_round == 1 else observed,
            observed_round=server_round - 1,
            aux=aux,
            aux_labels=lab,
            meta={"pooling": "max"},
        )
        aux_rows.append(aux)
        labels.append(lab)
        if server_round > 1:
            observed_rows.append(observed)
            truth.append(int(has))
    in_memory = PropertyObservations(
        observed_rounds=np.arange(1, 40),
        observed=np.stack(observed_rows),
        aux_rounds=np.repeat(np.arange(1, 41), 4),
        aux=np.concatenate(aux_rows),
        aux_labels=np.concatenate(labels),
        meta={"pooling": "max"},
    )
    auc_memory = single_batch_auc(np.array(truth), in_memory.scores(in_memory.fit()))
    reloaded = load_observations(tmp_path / "adversary")
    np.testing.assert_array_equal(reloaded.observed, in_memory.observed)
    np.testing.assert_array_equal(reloaded.aux_labels, in_memory.aux_labels)
    assert reloaded.observed_rounds.tolist() == list(range(1, 40))
    assert reloaded.meta == {"pooling": "max"}
    auc_disk = single_batch_auc(np.array(truth), reloaded.scores(reloaded.fit()))
    assert auc_disk == auc_memory
    assert auc_disk > 0.8
    # no temporary files are left behind
    assert sorted(p.name for p in (tmp_path / "adversary").iterdir())[0].startswith(
        "round-"
    )
    assert not list((tmp_path / "adversary").glob(".*"))


def test_loading_an_empty_directory_says_what_is_missing(tmp_path):
    with pytest.raises(DataError, match="round-"):
        load_observations(tmp_path)


def test_normalized_classifier_ignores_the_scale_of_an_update():
    x, y = separable(200, 10, 2.0, seed=9)
    x = np.abs(x) + 0.1
    clf = BatchPropertyClassifier(normalize=True).fit(x, y)
    np.testing.assert_allclose(clf.property_scores(3.0 * x), clf.property_scores(x))
    plain = BatchPropertyClassifier().fit(x, y)
    assert not np.allclose(plain.property_scores(30.0 * x), plain.property_scores(x))


# ------------------------------------------------ domains, defaults, formulas


def test_feature_extraction_refusals_and_bow_threshold():
    update = {
        "w": np.array([[1.0, -3.0], [0.0, 2e-4], [0.0, 0.0]]),
        "b": np.array([1.0, 2.0]),
    }
    with pytest.raises(
        ConfigError,
        match=r"^pooling must be one of 'max', 'raw', 'bow'; got 'mean'\.$",
    ):
        gradient_features(update, "mean")
    with pytest.raises(
        ConfigError, match=r"^the update has no tensor\(s\) \['x'\]; have \['w', 'b'\]$"
    ):
        gradient_features(update, layers=["x"])
    with pytest.raises(
        DataError, match=r"^the update holds no tensor to extract features from$"
    ):
        gradient_features({})
    # bow: a row counts when its largest |entry| exceeds bow_tolerance x the tensor's
    np.testing.assert_array_equal(
        gradient_features(update, "bow", layers=["w"]), [1.0, 0.0, 0.0]
    )
    np.testing.assert_array_equal(
        gradient_features(update, "bow", layers=["w"], bow_tolerance=5e-5),
        [1.0, 1.0, 0.0],
    )
    np.testing.assert_array_equal(
        gradient_features(update, "bow", layers=["b"]), [1.0, 2.0]
    )
    np.testing.assert_array_equal(
        gradient_features(update, layers=["w"]), [1.0, 2e-4, 0.0]
    )
    assert gradient_features(update).dtype == np.float64


def test_classifier_settings_reach_the_estimators():
    x, y = separable(120, 6, 1.0, seed=11)
    forest = BatchPropertyClassifier(n_estimators=7, random_state=3).fit(x, y)
    assert forest.get_params() == {
        "kind": "random-forest",
        "n_estimators": 7,
        "C": 1.0,
        "random_state": 3,
        "normalize": False,
    }
    trees = forest.estimator_[-1]
    assert len(trees.estimators_) == 7 and trees.random_state == 3 and trees.n_jobs == 1
    logistic = BatchPropertyClassifier(kind="logistic", C=0.25).fit(x, y)
    assert (
        logistic.estimator_[-1].C == 0.25 and logistic.estimator_[-1].max_iter == 2000
    )
    assert [type(s).__name__ for s in logistic.estimator_] == [
        "StandardScaler",
        "LogisticRegression",
    ]
    normal = BatchPropertyClassifier(kind="logistic", normalize=True).fit(x, y)
    assert type(normal.estimator_[0]).__name__ == "Normalizer"
    assert forest.classes_.tolist() == [0, 1] and forest.n_features_in_ == 6
    scores = forest.property_scores(x)
    np.testing.assert_array_equal(forest.predict(x), (scores > 0.5).astype(np.int64))
    np.testing.assert_allclose(forest.predict_proba(x).sum(axis=1), 1.0)
    with pytest.raises(
        ConfigError, match=r"^n_estimators must be an integer >= 1; got 0\.$"
    ):
        BatchPropertyClassifier(n_estimators=0).fit(x, y)
    with pytest.raises(
        ConfigError, match=r"^C must be a finite number > 0; got 0\.0\.$"
    ):
        BatchPropertyClassifier(kind="logistic", C=0.0).fit(x, y)
    with pytest.raises(
        ConfigError,
        match=r"^kind must be one of 'random-forest', 'logistic'; got 'svm'\.$",
    ):
        BatchPropertyClassifier(kind="svm").fit(x, y)
    with pytest.raises(  # scikit-learn's convention before fit
        NotFittedError,
        match=r"^This BatchPropertyClassifier instance is not fitted yet\. Call "
        r"'fit' with appropriate arguments before using this estimator\.$",
    ):
        BatchPropertyClassifier().predict_proba(x)
    with pytest.raises(
        DataError,
        match=r"^expected features of shape \(n, 6\), got \(3, 4\): extract them with the same pooling and model$",
    ):
        forest.predict_proba(np.zeros((3, 4)))
    with pytest.raises(
        DataError,
        match=r"^the batch property classifier needs gradients of batches with \(label 1\) and without \(label 0\) the property; got labels \[1\]$",
    ):
        BatchPropertyClassifier().fit(x, np.ones(120))
    with pytest.raises(
        DataError, match=r"^features must be 2-D \(n, d\), got shape \(120,\)$"
    ):
        BatchPropertyClassifier().fit(x[:, 0], y)
    with pytest.raises(
        DataError, match=r"^120 feature rows but labels of shape \(119,\)$"
    ):
        BatchPropertyClassifier().fit(x, y[:-1])
    with pytest.raises(
        ConfigError,
        match=r"^top_features needs kind='logistic'; the fitted kind is "
        r"'random-forest'\.$",
    ):
        forest.top_features()
    with pytest.raises(
        NotFittedError,
        match=r"^This BatchPropertyClassifier instance is not fitted yet\. Call "
        r"'fit' with appropriate arguments before using this estimator\.$",
    ):
        BatchPropertyClassifier(kind="logistic").top_features()
    coef = logistic.estimator_[-1].coef_[0]
    np.testing.assert_array_equal(
        logistic.top_features(2), np.argsort(-coef, kind="stable")[:2]
    )
    assert logistic.top_features().size == 5


def test_scoring_helpers_refusals_and_windows():
    with pytest.raises(DataError, match=r"^truth \(2,\) and scores \(3,\) differ$"):
        single_batch_auc(np.array([0, 1]), np.array([0.1, 0.2, 0.3]))
    with pytest.raises(
        DataError,
        match=r"^the AUC needs observed updates with and without the property",
    ):
        single_batch_auc(np.zeros(3), np.ones(3))
    with pytest.raises(DataError, match=r"^no observed round to score$"):
        dataset_score(np.array([]))
    with pytest.raises(ConfigError, match=r"^window must be an integer >= 1; got 0\.$"):
        score_series(np.array([1]), np.array([0.5]), window=0)
    with pytest.raises(DataError, match=r"^rounds \(2,\) and scores \(1,\) differ$"):
        score_series(np.array([1, 2]), np.array([0.5]))
    rounds, smooth = score_series(
        np.array([4, 1, 3, 2]), np.array([4.0, 1.0, 3.0, 2.0]), window=3
    )
    assert rounds.tolist() == [1, 2, 3, 4]
    np.testing.assert_allclose(smooth, [1.0, 1.5, 2.0, 3.0])
    assert score_series(np.array([]), np.array([]), window=2)[1].size == 0
    assert single_batch_auc(np.array([1, 0]), np.array([0.2, 0.8])) == 0.0


# ------------------------------------------- emulated updates (Alg. 2, Ch. 7.2.7)


def _pools(seed: int = 0):
    import torch
    from fedleak.attacks.property.gradients import AuxiliaryPools

    gen = torch.Generator().manual_seed(seed)
    return AuxiliaryPools(
        torch.rand(12, 6, generator=gen),
        torch.randint(0, 3, (12,), generator=gen),
        torch.rand(9, 6, generator=gen),
        torch.randint(0, 3, (9,), generator=gen),
    )


def _net(seed: int = 0):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)
    )


def _local_by_hand(model, x, y, epochs, batch_size, lr, generator):
    import copy

    import torch

    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for begin in range(0, x.shape[0], batch_size):
            idx = order[begin : begin + batch_size]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(trained(x[idx]), y[idx]).backward()
            optimizer.step()
    return {
        n: (p.detach() - q.detach()).numpy().astype(np.float64)
        for (n, p), q in zip(
            trained.named_parameters(), model.parameters(), strict=True
        )
    }


def test_local_update_is_alg_2_local_sgd_and_leaves_the_model():
    import torch
    from fedleak.attacks.property.gradients import local_update

    model = _net()
    before = [p.detach().clone() for p in model.parameters()]
    pools = _pools()
    x, y = pools.x_prop[:7], pools.y_prop[:7]
    got = local_update(
        model,
        x,
        y,
        epochs=2,
        batch_size=3,
        learning_rate=0.3,
        generator=torch.Generator().manual_seed(5),
    )
    expected = _local_by_hand(model, x, y, 2, 3, 0.3, torch.Generator().manual_seed(5))
    assert list(got) == list(expected)
    for name in got:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-7)
        assert got[name].dtype == np.float64
    for b, p in zip(before, model.parameters(), strict=True):
        torch.testing.assert_close(b, p.detach())


def test_emulated_averaging_pair_weights_each_update_by_one_over_k():
    import torch
    from fedleak.attacks.property.gradients import emulated_averaging_pair

    model, pools = _net(1), _pools(1)
    positive, negative = emulated_averaging_pair(
        model,
        pools,
        participants=2,
        total_participants=4,
        records=5,
        prop_fraction=0.6,
        epochs=1,
        batch_size=2,
        learning_rate=0.2,
        rng=np.random.default_rng(7),
    )
    rng = np.random.default_rng(7)
    generator = torch.Generator().manual_seed(int(rng.integers(2**62)))

    def update(fraction):
        x, y, _ = pools.batch(5, fraction, rng)
        return _local_by_hand(model, x, y, 1, 2, 0.2, generator)

    first, second, shared = update(0.6), update(0.0), update(0.0)
    for name in positive:
        np.testing.assert_allclose(
            positive[name], (first[name] + shared[name]) / 4, rtol=1e-5, atol=1e-8
        )
        np.testing.assert_allclose(
            negative[name], (second[name] + shared[name]) / 4, rtol=1e-5, atol=1e-8
        )
    for bad in ((0, 4), (4, 4)):
        with pytest.raises(
            ConfigError,
            match=r"^model-averaging emulation needs 1 <= participants < "
            rf"total_participants, got {bad[0]} and {bad[1]}$",
        ):
            emulated_averaging_pair(
                model,
                pools,
                participants=bad[0],
                total_participants=bad[1],
                records=5,
                prop_fraction=0.5,
                epochs=1,
                batch_size=2,
                learning_rate=0.1,
                rng=np.random.default_rng(0),
            )


def test_derived_averaging_aggregate_skips_integer_buffers_and_removes_the_share():
    from fedleak.attacks.property.gradients import derive_averaging_aggregate

    before = {"w": np.array([1.0, 2.0]), "steps": np.array([3])}
    own = {"w": np.array([2.0, 2.0]), "steps": np.array([4])}
    after = {"w": np.array([1.5, 3.0]), "steps": np.array([4])}
    out = derive_averaging_aggregate(before, after, own, 0.25)
    assert list(out) == ["w"]
    np.testing.assert_allclose(out["w"], [0.5 - 0.25 * 1.0, 1.0 - 0.0])


def test_observation_files_widths_and_edge_rounds(tmp_path):
    log = ObservationLog(tmp_path / "one")
    log.write_round(
        1,
        observed=None,
        observed_round=-1,
        aux=np.ones((2, 3)),
        aux_labels=np.array([0, 1]),
        meta={"pooling": "raw"},
    )
    only_aux = load_observations(tmp_path / "one")
    assert only_aux.observed.shape == (0, 3)  # nothing observed yet, the width kept
    assert (
        only_aux.observed_rounds.dtype == np.int64
        and only_aux.observed_rounds.size == 0
    )
    assert (
        only_aux.aux_rounds.tolist() == [1, 1] and only_aux.aux_rounds.dtype == np.int64
    )
    assert only_aux.aux_labels.dtype == np.int64 and only_aux.meta == {"pooling": "raw"}
    assert only_aux.scores(BatchPropertyClassifier()).shape == (0,)
    log.write_round(
        2,
        observed=np.zeros(4),
        observed_round=1,
        aux=np.ones((2, 4)),
        aux_labels=np.array([0, 1]),
        meta={},
    )
    with pytest.raises(
        DataError, match=r"observation files of different widths \{3, 4\}$"
    ):
        load_observations(tmp_path / "one")
    with pytest.raises(
        DataError,
        match=r"holds no property-adversary observations \(round-\*\.npz\); was the run "
        r"configured with adversary\.kind passive-/active-property\?$",
    ):
        load_observations(tmp_path / "none")


def test_fitting_uses_the_given_classifier_and_rounds():
    x, y = separable(40, 4, 3.0, seed=21)
    obs = PropertyObservations(
        observed_rounds=np.array([1, 2]),
        observed=x[:2],
        aux_rounds=np.repeat([1, 2, 3, 4], 10),
        aux=x,
        aux_labels=y,
        meta={},
    )
    chosen = BatchPropertyClassifier(kind="logistic")
    fitted = obs.fit(chosen)
    # the given classifier's settings are fitted on a clone: the caller's
    # object stays unfitted (no mutated inputs)
    assert fitted is not chosen and fitted.get_params() == chosen.get_params()
    assert hasattr(fitted, "estimator_") and not hasattr(chosen, "estimator_")
    np.testing.assert_allclose(
        fitted.property_scores(x),
        BatchPropertyClassifier(kind="logistic").fit(x, y).property_scores(x),
    )
    early = obs.fit(BatchPropertyClassifier(kind="logistic"), max_round=2)
    reference = BatchPropertyClassifier(kind="logistic").fit(x[:20], y[:20])
    np.testing.assert_allclose(early.property_scores(x), reference.property_scores(x))
    one = PropertyObservations(
        observed_rounds=np.array([1]),
        observed=x[:1],
        aux_rounds=np.ones(40),
        aux=x,
        aux_labels=y,
        meta={},
    )
    assert one.scores(early).shape == (1,)


def test_series_keep_equal_rounds_in_order_and_predictions_are_integers():
    rounds, scores = score_series(np.array([2, 1, 2]), np.array([5, 3, 4]), window=1)
    assert rounds.tolist() == [1, 2, 2] and scores.tolist() == [3.0, 5.0, 4.0]
    assert scores.dtype == np.float64
    # many repeated rounds (several adversaries, resumed runs): a stable order
    many = np.array([3, 1, 2] * 40)
    _, ordered = score_series(many, np.arange(120), window=1)
    np.testing.assert_array_equal(
        ordered, np.arange(120)[np.argsort(many, kind="stable")]
    )
    _, smooth = score_series(np.array([1, 2]), np.array([2.0, 4.0]), window=2)
    np.testing.assert_allclose(smooth, [2.0, 3.0])
    assert dataset_score([1, 2]) == 1.5
    x, y = separable(60, 4, 3.0, seed=2)
    clf = BatchPropertyClassifier(kind="logistic").fit(x, y)
    assert clf.predict(x).dtype == np.int64


def test_the_head_attaches_to_the_last_linear_layer():
    import torch
    from fedleak.attacks.property.gradients import last_linear

    model = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)
    )
    assert last_linear(model) is model[2]
    with pytest.raises(
        ConfigError,
        match=r"^the active property attack attaches its head to the model's last "
        r"linear layer, and this model has none$",
    ):
        last_linear(torch.nn.Sequential(torch.nn.ReLU()))
