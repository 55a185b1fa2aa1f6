"""Property inference behaviours the mutation run found unpinned (seed 000 Ch. 7.1.4).

Grouped by behaviour: the in-process two-party simulation of Alg. 7
(:mod:`fedleak.attacks.property.simulation`), the offline scoring of a
finished run (:mod:`fedleak.attacks.property.scoring`), and the details of
the classifier, gradient and text modules that the specification tests left
open. Every test is small (a few records, a 4-dimensional embedding) so the
``attacks-property`` mutation set can run them for every mutant.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fedleak.attacks.membership import EmbeddingMembership
from fedleak.attacks.membership.simulation import MembershipSetup, inputs_and_model
from fedleak.attacks.property import classifier as clf_module
from fedleak.attacks.property import gradients as grads
from fedleak.attacks.property import scoring, text
from fedleak.attacks.property import simulation as sim
from fedleak.attacks.property.classifier import (
    BatchPropertyClassifier,
    ObservationLog,
    load_observations,
    score_series,
    single_batch_auc,
)
from fedleak.attacks.property.scoring import analyse_run, load_truth
from test_property_text import TOPICS, write_fortunes
from torch import nn

from fedleak import models
from fedleak.data import text as text_data
from fedleak.data.text import TextDataset, split_text_dataset
from fedleak.defenses import EMBEDDING_KEY, ClientDefenses
from fedleak.errors import ConfigError, DataError

torch.set_num_threads(1)

MARKER = "marker"


# ---------------------------------------------------------------------------
# the two-party simulation (Alg. 7 in synchronized SGD, Ch. 7.2.3)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def marker_task() -> tuple[TextDataset, np.ndarray]:
    """80 records of 5 of 200 words; every other one carries ``MARKER`` (the property).

    A vocabulary this wide leaves most words of one party's batch untouched by
    the other's, which the adversary needs to estimate its own share of the
    model change (:func:`contribution_scale`).
    """
    rng = np.random.default_rng(0)
    records: list[list[str]] = []
    flags: list[bool] = []
    for i in range(80):
        words = [f"w{int(k)}" for k in rng.integers(0, 200, size=5)]
        if i % 2 == 0:
            words[int(rng.integers(5))] = MARKER
        records.append(words)
        flags.append(i % 2 == 0)
    data = split_text_dataset(
        records,
        rng.integers(0, 2, size=80),
        ["a", "b"],
        vocab_size=None,
        length=6,
        test_fraction=0.0,
        seed=0,
    )
    return data, np.asarray(flags)[data.train_index]


def _setup(**kwargs: Any) -> MembershipSetup:
    base: dict[str, Any] = {"embedding_dim": 4, "cnn_hidden": None, "batch_size": 4}
    base.update(kwargs)
    return MembershipSetup(**base)


def _marker_id(data: TextDataset) -> int:
    ids = data.vocabulary.encode_many([[MARKER]], 1)
    return int(ids[0, 0])


def _rounds(
    data: TextDataset,
    has_property: np.ndarray,
    setup: MembershipSetup,
    *,
    aux_batches: int = 1,
    features: str = "bow",
    emulate_defenses: bool = False,
) -> tuple[sim._PropertyRounds, dict[str, np.ndarray]]:
    pools = sim._property_pools(has_property, np.random.SeedSequence(7))
    x, y, model, params = inputs_and_model(data, setup, np.random.SeedSequence(8))
    run = sim._PropertyRounds(
        (x, y),
        model,
        setup,
        pools,
        (
            np.random.default_rng(9),
            np.random.default_rng(10),
            np.random.default_rng(11),
        ),
        aux_batches=aux_batches,
        features=(features,),
        emulate_defenses=emulate_defenses,
    )
    return run, params


def test_records_are_split_in_halves_then_by_property():
    """Ch. 7.2.3: target and adversary hold disjoint halves of the records.

    Each half is split into its records with and without the property; the
    split is drawn from the given seed (same seed, same split).
    """
    flags = np.array([True, False, False] * 4 + [True])  # 13 records
    pools = sim._property_pools(flags, np.random.SeedSequence(5))
    target = np.concatenate([pools["target", True], pools["target", False]])
    adversary = np.concatenate([pools["adversary", True], pools["adversary", False]])
    assert target.size == 6  # 13 // 2
    assert adversary.size == 7
    np.testing.assert_array_equal(
        np.sort(np.concatenate([target, adversary])), np.arange(13)
    )
    for role in ("target", "adversary"):
        assert flags[pools[role, True]].all()
        assert not flags[pools[role, False]].any()
    again = sim._property_pools(flags, np.random.SeedSequence(5))
    for key, value in pools.items():
        np.testing.assert_array_equal(again[key], value)
    splits = {
        tuple(
            np.sort(
                sim._property_pools(flags, np.random.SeedSequence(s))["target", False]
            )
        )
        for s in range(6)
    }
    assert len(splits) > 1  # the seed draws the split


@pytest.mark.parametrize("own_weight", [1.0, 2.0])
def test_others_update_is_the_change_minus_own_contribution(own_weight):
    """Ch. 7.1.2: ``g_obs = dtheta_t - dtheta_adv_t``, as a gradient.

    The change of the model is ``-lr * (c * own + others)``; the adversary
    estimates ``c`` from the embedding rows only it touched and returns the
    others' summed gradient, for every tensor (the ones it has no gradient
    for are the others' alone).
    """
    lr = 0.5
    own = {
        EMBEDDING_KEY: np.array([[1.0, -2.0], [0.5, 4.0], [0, 0], [0, 0]]),
        "fc.weight": np.array([[3.0, -1.0]]),
    }
    others = {
        EMBEDDING_KEY: np.array([[0, 0], [0, 0], [-1.5, 2.0], [0.25, 1.0]]),
        "fc.weight": np.array([[-0.5, 2.5]]),
        "fc.bias": np.array([0.75]),
    }
    params = {
        EMBEDDING_KEY: np.full((4, 2), 0.125),
        "fc.weight": np.array([[1.0, 2.0]]),
        "fc.bias": np.array([-1.0]),
    }
    new = {
        k: params[k] - lr * (own_weight * own.get(k, 0.0) + others[k]) for k in params
    }
    derived = sim._others_update(params, new, own, lr)
    assert set(derived) == set(params)
    for key, value in others.items():
        np.testing.assert_allclose(derived[key], value, atol=1e-12)


def test_bad_simulation_arguments_are_refused(marker_task):
    data, flags = marker_task
    setup = _setup()
    with pytest.raises(
        ConfigError,
        match=r"^features must be one of \('embedding', 'max', 'bow'\), got 'words'$",
    ):
        sim.simulate_property(data, flags, setup, rounds=2, seed=0, features="words")
    with pytest.raises(ConfigError, match=r"^aux_batches must be >= 1, got 0$"):
        sim.simulate_property(data, flags, setup, rounds=2, seed=0, aux_batches=0)
    with pytest.raises(
        ConfigError, match=r"^has_property needs one flag per training record$"
    ):
        sim.simulate_property(data, flags[1:], setup, rounds=2, seed=0)
    # one aux batch per kind is the least the classifier can learn from
    assert 0.0 <= sim.simulate_property(data, flags, setup, rounds=2, seed=0) <= 1.0


def test_a_batch_larger_than_a_property_pool_is_refused(marker_task, monkeypatch):
    """A batch is drawn without replacement, so every pool must hold one."""
    data, flags = marker_task
    pools = {
        ("target", True): np.arange(0, 5),
        ("target", False): np.arange(5, 11),
        ("adversary", True): np.arange(11, 15),  # the smallest: 4
        ("adversary", False): np.arange(15, 22),
    }
    monkeypatch.setattr(sim, "_property_pools", lambda *_: pools)
    with pytest.raises(
        ConfigError,
        match=r"^batch size 5 exceeds a property pool \(\{\('target', True\): 5, "
        r"\('target', False\): 6, \('adversary', True\): 4, \('adversary', False\): 7\}\)$",
    ):
        sim.simulate_property(data, flags, _setup(batch_size=5), rounds=2, seed=0)
    auc = sim.simulate_property(data, flags, _setup(batch_size=4), rounds=2, seed=0)
    assert 0.0 <= auc <= 1.0  # a pool exactly one batch large is enough


def test_a_pick_is_a_sorted_batch_of_distinct_records_from_its_pool(marker_task):
    data, flags = marker_task
    run, _ = _rounds(data, flags, _setup(batch_size=4))
    for role in ("target", "adversary"):
        for prop in (True, False):
            batch = run._pick(role, prop).numpy()
            assert batch.size == 4
            assert np.unique(batch).size == 4
            np.testing.assert_array_equal(batch, np.sort(batch))
            assert np.isin(batch, run.pools[role, prop]).all()


class _Recorder:
    """Wrap a gradient function; keep the inputs it saw."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.inputs: list[np.ndarray] = []

    def __call__(self, model: Any, x: torch.Tensor, y: torch.Tensor, **kw: Any) -> Any:
        self.inputs.append(x.numpy().copy())
        return self.inner(model, x, y, **kw)


@pytest.mark.parametrize("prop", [True, False])
def test_a_round_draws_the_target_batch_by_the_schedule_and_both_aux_kinds(
    marker_task, monkeypatch, prop
):
    """Alg. 7, lines 6-9: every round the adversary differentiates
    ``aux_batches`` batches with the property (label 1), then as many without
    (label 0), at the current model; the target's batch has the property iff
    the round's flag says so, and uploads its defended gradient.
    """
    data, flags = marker_task
    marker = _marker_id(data)
    target_inputs = _recording_defenses(monkeypatch)
    plain_calls = _Recorder(sim.batch_gradient)
    monkeypatch.setattr(sim, "batch_gradient", plain_calls)
    run, _ = _rounds(data, flags, _setup(), aux_batches=2, features="bow")
    g_target, g_adv = run.gradients(prop)
    assert len(target_inputs) == 1  # the target's upload only
    with_marker = (target_inputs[0] == marker).any(axis=1)
    assert with_marker.all() if prop else not with_marker.any()
    # the adversary's own batch, then two batches with and two without
    assert len(plain_calls.inputs) == 1 + 4
    has_marker = [(x == marker).any(axis=1) for x in plain_calls.inputs[1:]]
    assert [bool(h.all()) for h in has_marker] == [True, True, False, False]
    assert not any(h.any() for h in has_marker[2:])
    assert run.aux_y == [1, 1, 0, 0]
    assert list(run.aux_x) == ["bow"]
    assert len(run.aux_x["bow"]) == 4
    assert set(g_target) == set(g_adv)
    assert EMBEDDING_KEY in g_target


def _recording_defenses(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    seen: list[np.ndarray] = []
    inner = ClientDefenses.gradient

    def gradient(self: ClientDefenses, model: Any, x: Any, y: Any, **kw: Any) -> Any:
        seen.append(x.numpy().copy())
        return inner(self, model, x, y, **kw)

    monkeypatch.setattr(ClientDefenses, "gradient", gradient)
    return seen


def test_aux_features_are_the_chosen_features_of_the_aux_gradients(marker_task):
    """The training set of ``f_prop`` holds the same features as the observations."""
    data, flags = marker_task
    for features in sim.FEATURES:
        run, _ = _rounds(data, flags, _setup(), aux_batches=1, features=features)
        run.gradients(True)
        width = sim.property_features(
            sim.batch_gradient(run.model, run.x[:4], run.y[:4])[0], features
        ).size
        assert [a.shape for a in run.aux_x[features]] == [(width,), (width,)]
    bow, _ = _rounds(data, flags, _setup(), features="bow")
    bow.gradients(False)
    assert set(np.unique(np.stack(bow.aux_x["bow"]))) <= {0.0, 1.0}
    # a batch of 4 records of 6 tokens leaves most of the vocabulary untouched
    assert (np.stack(bow.aux_x["bow"]) == 0.0).any(axis=1).all()


def test_emulated_defenses_noise_the_aux_gradients_too(marker_task, monkeypatch):
    """Ch. 7.2.7: the adversary emulating the target computes its auxiliary
    gradients with the target's defenses; here DP noise moves every embedding
    row, so the bag of words of every aux gradient is all ones.
    """
    data, flags = marker_task
    setup = _setup(defenses=ClientDefenses(dp_noise_multiplier=1.0))
    seen = _recording_defenses(monkeypatch)
    run, _ = _rounds(data, flags, setup, aux_batches=1, emulate_defenses=True)
    run.gradients(True)
    assert len(seen) == 1 + 2  # the target's upload and both aux batches
    np.testing.assert_array_equal(np.stack(run.aux_x["bow"]), 1.0)
    seen.clear()
    plain, _ = _rounds(data, flags, setup, aux_batches=1, emulate_defenses=False)
    plain.gradients(True)
    assert len(seen) == 1
    assert (np.stack(plain.aux_x["bow"]) == 0.0).any()


def test_a_diverged_joint_model_is_refused_with_its_round(marker_task):
    data, flags = marker_task
    setup = _setup(learning_rate=0.5)
    run, params = _rounds(data, flags, setup)
    bad = {k: np.full_like(v, np.nan) for k, v in params.items()}
    with pytest.raises(
        DataError,
        match=r"^the joint model diverged in round 3 \(non-finite parameters\): "
        r"there is no update left to score$",
    ):
        run.step(params, [bad], 3)
    ones = {k: np.ones_like(v) for k, v in params.items()}
    stepped = run.step(params, [ones, ones], 1)
    for key, value in params.items():
        np.testing.assert_allclose(stepped[key], value - 0.5 * 2.0, rtol=1e-6)


def test_the_simulation_scores_alternating_rounds_with_the_seed_classifier(
    marker_task, monkeypatch
):
    """Ch. 7.2.3 (``m = 2``): even rounds (0, 2, ...) hold property batches.

    One observed update is scored per round against that truth; ``f_prop``
    is trained on ``2 * aux_batches * rounds`` labelled aux gradients, a
    random forest on ``"max"`` features and a logistic regression on the
    embedding features (Ch. 7.1.4), seeded with ``seed``.
    """
    data, flags = marker_task
    fitted: list[dict[str, Any]] = []
    scored: list[tuple[np.ndarray, np.ndarray]] = []

    class Spy(BatchPropertyClassifier):
        def fit(self, X: np.ndarray, y: np.ndarray) -> BatchPropertyClassifier:
            fitted.append(
                {"kind": self.kind, "seed": self.random_state, "X": X, "y": y}
            )
            return super().fit(X, y)

    def auc(truth: np.ndarray, scores: np.ndarray) -> float:
        scored.append((np.asarray(truth), np.asarray(scores)))
        return single_batch_auc(truth, scores)

    monkeypatch.setattr(sim, "BatchPropertyClassifier", Spy)
    monkeypatch.setattr(sim, "single_batch_auc", auc)
    for features, kind in (("max", "random-forest"), ("embedding", "logistic")):
        fitted.clear()
        scored.clear()
        result = sim.simulate_property(
            data, flags, _setup(), rounds=5, seed=3, aux_batches=2, features=features
        )
        assert [f["kind"] for f in fitted] == [kind]
        assert fitted[0]["seed"] == 3
        np.testing.assert_array_equal(fitted[0]["y"], [1, 1, 0, 0] * 5)
        assert fitted[0]["X"].shape[0] == 20
        truth, scores = scored[0]
        np.testing.assert_array_equal(truth, [1, 0, 1, 0, 1])
        assert scores.shape == (5,)
        assert result == single_batch_auc(truth, scores)
        again = sim.simulate_property(
            data, flags, _setup(), rounds=5, seed=3, aux_batches=2, features=features
        )
        assert again == result  # seeded


def test_the_observed_update_is_the_target_upload(marker_task, monkeypatch):
    """Two parties: what the adversary derives from the model change is the
    target's uploaded gradient (up to float32 rounding of the model).
    """
    data, flags = marker_task
    uploads: list[dict[str, np.ndarray]] = []
    derived: list[dict[str, np.ndarray]] = []
    gradients = sim._PropertyRounds.gradients
    others_update = sim._others_update

    def spy_gradients(self: Any, prop: bool) -> Any:
        g_target, g_adv = gradients(self, prop)
        uploads.append(g_target)
        return g_target, g_adv

    def spy_others(*args: Any) -> dict[str, np.ndarray]:
        out = others_update(*args)
        derived.append(out)
        return out

    monkeypatch.setattr(sim._PropertyRounds, "gradients", spy_gradients)
    monkeypatch.setattr(sim, "_others_update", spy_others)
    sim.simulate_property(data, flags, _setup(learning_rate=0.05), rounds=3, seed=1)
    assert len(uploads) == len(derived) == 3
    for upload, seen in zip(uploads, derived, strict=True):
        assert set(seen) == set(upload)
        for key, value in upload.items():
            scale = float(np.abs(value).max())
            np.testing.assert_allclose(seen[key], value, atol=1e-4 * scale + 1e-6)


# ---------------------------------------------------------------------------
# offline scoring of a finished run (scoring.py)
# ---------------------------------------------------------------------------


def test_truth_is_read_per_round_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "truth.jsonl"
    path.write_text(
        '{"round": 2, "fraction": 0.5, "batch": 7}\n\n  \n{"round": "3", "fraction": 1}\n',
        encoding="utf-8",
    )
    truth = load_truth(path)
    assert truth == {2: 0.5, 3: 1.0}
    assert all(type(k) is int and type(v) is float for k, v in truth.items())
    missing = tmp_path / "nothing.jsonl"
    with pytest.raises(
        DataError,
        match=rf"^{missing}: no target truth \(was a \[target\] client in the run\?\)$",
    ):
        load_truth(missing)
    with pytest.raises(DataError, match="no target truth"):
        load_truth(tmp_path)  # a folder is no truth file


def _write_run(
    folder: Path, truth: dict[int, float] | None, *, rounds: int = 7, width: int = 3
) -> dict[int, np.ndarray]:
    """A run whose observed rounds 1..rounds-1 alternate with/without the property.

    Feature 0 carries the property (+1 with, -1 without) on top of noise; the
    aux gradients are labelled alike. Returns the observed row of each round.
    """
    rng = np.random.default_rng(11)
    log = ObservationLog(folder / "adversary")
    observed: dict[int, np.ndarray] = {}
    for server_round in range(1, rounds + 1):
        labels = np.array([1, 0, 1, 0])
        aux = rng.normal(scale=0.3, size=(4, width))
        aux[:, 0] += np.where(labels == 1, 1.0, -1.0)
        row = None
        if server_round > 1:
            row = rng.normal(scale=0.3, size=width)
            row[0] += 1.0 if (server_round - 1) % 2 else -1.0
            observed[server_round - 1] = row
        log.write_round(
            server_round,
            observed=row,
            observed_round=server_round - 1 if row is not None else -1,
            aux=aux,
            aux_labels=labels,
            meta={"pooling": "max"},
        )
    if truth is not None:
        (folder / "target").mkdir()
        lines = [json.dumps({"round": r, "fraction": f}) for r, f in truth.items()]
        (folder / "target" / "truth.jsonl").write_text("\n".join(lines) + "\n")
    return observed


def test_analyse_run_trains_f_prop_on_the_aux_and_scores_every_observation(tmp_path):
    """Alg. 7 offline: ``f_prop`` fit on the logged aux gradients scores the
    logged observations; the AUC uses the target's truth (a batch with any
    share of property records is positive), the dataset score is their mean.
    """
    truth = {1: 0.25, 2: 0.0, 3: 1.0, 4: 0.0, 5: 0.5, 6: 0.0}
    observed = _write_run(tmp_path, truth)
    result = analyse_run(tmp_path, classifier="logistic", seed=4)
    expected = BatchPropertyClassifier(kind="logistic", random_state=4).fit(
        *_aux(tmp_path)
    )
    scores = expected.property_scores(np.stack([observed[r] for r in range(1, 7)]))
    assert result["rounds"] == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose(result["scores"], scores)
    assert result["truth"] == [0.25, 0.0, 1.0, 0.0, 0.5, 0.0]
    assert result["auc"] == 1.0  # feature 0 separates the rounds
    assert result["auc"] == single_batch_auc(np.array([1, 0, 1, 0, 1, 0]), scores)
    assert result["dataset_score"] == pytest.approx(float(np.mean(scores)))
    assert result["aux_gradients"] == 7 * 4
    assert result["features"] == 3
    assert all(type(s) is float for s in result["scores"])
    assert all(type(r) is int for r in result["rounds"])


def test_analyse_run_passes_the_classifier_settings_and_smooths(tmp_path):
    truth = {r: float(r % 2) for r in range(1, 7)}
    observed = _write_run(tmp_path, truth)
    rows = np.stack([observed[r] for r in range(1, 7)])
    aux, labels = _aux(tmp_path)
    forest = BatchPropertyClassifier(random_state=9, normalize=True).fit(aux, labels)
    result = analyse_run(tmp_path, seed=9, normalize=True, smooth=2)
    raw = forest.property_scores(rows)
    smoothed = [raw[0], *((raw[1:] + raw[:-1]) / 2)]
    np.testing.assert_allclose(result["scores"], smoothed)
    assert result["dataset_score"] == pytest.approx(float(raw.mean()))
    default = analyse_run(tmp_path)
    plain = BatchPropertyClassifier(random_state=0).fit(aux, labels)
    np.testing.assert_allclose(default["scores"], plain.property_scores(rows))


def test_analyse_run_without_usable_truth_has_no_auc(tmp_path):
    """No truth file, or a target that never (or always) had the property:
    the single-batch AUC is undefined and reported as None; rounds without a
    truth line are None in ``truth``.
    """
    no_truth = tmp_path / "none"
    _write_run(no_truth, None)
    result = analyse_run(no_truth)
    assert result["auc"] is None
    assert result["truth"] == [None] * 6
    assert len(result["scores"]) == 6
    never = tmp_path / "never"
    _write_run(never, {r: 0.0 for r in range(1, 7)})
    assert analyse_run(never)["auc"] is None
    partial = tmp_path / "partial"
    _write_run(partial, {1: 1.0, 2: 0.0, 4: 0.0, 5: 1.0})
    outcome = analyse_run(partial, classifier="logistic")
    assert outcome["truth"] == [1.0, 0.0, None, 0.0, 1.0, None]
    scores = np.asarray(outcome["scores"])
    assert outcome["auc"] == single_batch_auc(
        np.array([1, 0, 0, 1]), scores[[0, 1, 3, 4]]
    )


def test_analyse_run_of_a_run_without_observations(tmp_path):
    """A one-round run logs aux gradients but observes nothing yet."""
    _write_run(tmp_path, {1: 1.0}, rounds=1)
    result = analyse_run(tmp_path)
    assert result["scores"] == []
    assert result["rounds"] == []
    assert result["dataset_score"] is None
    assert result["auc"] is None
    assert result["aux_gradients"] == 4


def _aux(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    obs = load_observations(folder / "adversary")
    return obs.aux, obs.aux_labels


# ---------------------------------------------------------------------------
# documented defaults
# ---------------------------------------------------------------------------

_DEFAULT = re.compile(r"^(\w+) : [^\n]*default=([^\n]+)$", re.MULTILINE)


@pytest.mark.parametrize(
    "function",
    [
        text.run_text_property_attack,
        sim.simulate_property,
        sim.simulate_property_attacks,
        scoring.analyse_run,
        clf_module.score_series,
        clf_module.gradient_features,
    ],
    ids=lambda f: f.__name__,
)
def test_documented_defaults_are_the_defaults(function: Callable[..., Any]):
    """The numpydoc ``default=`` of every parameter is the signature's default
    (e.g. Ch. 7.2.3's ``m = 2`` as ``property_every=2``).
    """
    documented = {
        name: ast.literal_eval(value.strip())
        for name, value in _DEFAULT.findall(inspect.getdoc(function) or "")
    }
    assert documented
    parameters = inspect.signature(function).parameters
    for name, value in documented.items():
        assert parameters[name].default == value, name


# ---------------------------------------------------------------------------
# the classifier module: ties, files, series, empty inputs
# ---------------------------------------------------------------------------


def test_predict_gives_the_property_only_when_more_likely_than_not():
    """A tie (score exactly 0.5) is "no property", as the fitted scikit-learn
    pipeline itself predicts (``argmax`` takes the first class).
    """
    tie = BatchPropertyClassifier(kind="logistic").fit(
        np.ones((4, 1)), np.array([0, 1, 0, 1])
    )
    np.testing.assert_array_equal(tie.property_scores(np.ones((2, 1))), [0.5, 0.5])
    np.testing.assert_array_equal(tie.predict(np.ones((2, 1))), [0, 0])
    np.testing.assert_array_equal(
        tie.predict(np.ones((2, 1))), tie.estimator_.predict(np.ones((2, 1)))
    )


def test_top_features_break_ties_by_index_and_work_after_a_normalizer():
    """Table 7.4's word list is deterministic: equal coefficients (here 30
    identical copies of the informative feature) are listed in index order;
    the coefficients are the logistic regression's even behind a Normalizer.
    """
    rng = np.random.default_rng(0)
    y = np.array([0, 1] * 20)
    signal = np.where(y == 1, 1.0, -1.0) + rng.normal(scale=0.1, size=40)
    x = np.column_stack([rng.normal(size=(40, 3)), np.tile(signal[:, None], 30)])
    fitted = BatchPropertyClassifier(kind="logistic").fit(x, y)
    coef = fitted.estimator_[-1].coef_[0]
    assert np.unique(coef[3:]).size == 1  # the copies tie exactly
    np.testing.assert_array_equal(fitted.top_features(5), [3, 4, 5, 6, 7])
    normal = BatchPropertyClassifier(kind="logistic", normalize=True).fit(x, y)
    top = normal.top_features(3)
    assert set(top.tolist()) <= set(range(3, 33))


def test_a_window_of_one_returns_the_scores_exactly():
    """``window=1`` is the raw series (no cumulative-sum rounding)."""
    scores = np.array([0.1, 0.2, 0.7, 0.3])
    rounds, series = score_series(np.array([4, 1, 3, 2]), scores)
    np.testing.assert_array_equal(rounds, [1, 2, 3, 4])
    np.testing.assert_array_equal(series, [0.2, 0.3, 0.7, 0.1])
    rounds, series = score_series(
        np.array([1, 2, 3]), np.array([0.1, 0.2, 0.3]), window=2
    )
    np.testing.assert_allclose(series, [0.1, 0.15, 0.25])
    empty = score_series(np.zeros(0, np.int64), np.zeros(0), window=3)
    assert empty[0].size == empty[1].size == 0


def test_round_files_hold_a_fixed_format(tmp_path):
    """One ``round-NNNNNN.npz`` per round: the observed row as ``(1, d)`` or
    ``(0, d)`` (``d`` the aux width, 0 without aux), aux as float64, labels
    as int64 and the meta as JSON with sorted keys, so the same observations
    give the same bytes.
    """
    log = ObservationLog(tmp_path)
    first = log.write_round(
        1,
        observed=None,
        observed_round=-1,
        aux=np.ones((2, 5), np.float32),
        aux_labels=np.array([True, False]),
        meta={"b": 1, "a": 2},
    )
    assert first.name == "round-000001.npz"
    with np.load(first) as data:
        assert data["observed"].shape == (0, 5)
        assert data["aux"].dtype == np.float64
        assert data["aux_labels"].dtype == np.int64
        np.testing.assert_array_equal(data["aux_labels"], [1, 0])
        stored = str(data["meta"])
    assert stored == json.dumps({"a": 2, "b": 1})
    other = ObservationLog(tmp_path / "other").write_round(
        1,
        observed=None,
        observed_round=-1,
        aux=np.ones((2, 5)),
        aux_labels=np.array([1, 0]),
        meta={"a": 2, "b": 1},
    )
    with np.load(other) as data:
        assert str(data["meta"]) == stored
    bare = ObservationLog(tmp_path / "bare")
    path = bare.write_round(
        1,
        observed=None,
        observed_round=-1,
        aux=np.zeros(0),
        aux_labels=np.zeros(0),
        meta={},
    )
    with np.load(path) as data:
        assert data["observed"].shape == (0, 0)
    loaded = load_observations(tmp_path / "bare")
    assert loaded.observed.shape == (0, 0)
    assert loaded.aux.size == 0
    assert loaded.meta == {}


def test_a_round_file_is_written_beside_its_target_then_renamed(tmp_path, monkeypatch):
    """Atomic write: the temporary file lives in the log's folder (a rename
    across file systems is no longer atomic) and a failed write leaves no
    file behind and raises the original error.
    """
    written: list[Path] = []
    replace = clf_module.os.replace

    def spy(source: Any, target: Any) -> None:
        written.append(Path(source))
        replace(source, target)

    monkeypatch.setattr(clf_module.os, "replace", spy)
    log = ObservationLog(tmp_path)
    path = log.write_round(
        3,
        observed=None,
        observed_round=-1,
        aux=np.ones((1, 2)),
        aux_labels=[1],
        meta={},
    )
    assert written[0].parent == tmp_path
    assert not written[0].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]

    def broken(handle: Any, **arrays: Any) -> None:
        handle.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError, match=r"^disk full$"):
        log.write_round(
            4,
            observed=None,
            observed_round=-1,
            aux=np.ones((1, 2)),
            aux_labels=[1],
            meta={},
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


# ---------------------------------------------------------------------------
# the gradients module: pools, emulated aggregates, the active head
# ---------------------------------------------------------------------------


def _signed_pools(
    n_prop: int = 4, n_nonprop: int = 4, width: int = 3
) -> grads.AuxiliaryPools:
    """Records with the property are all +1 (label 0), without all -1 (label 1).

    Each record also carries its own index in its last entry so draws can be
    told apart.
    """

    def rows(n: int, sign: float) -> torch.Tensor:
        x = np.full((n, width), sign, dtype=np.float32)
        x[:, -1] = np.arange(n)
        return torch.from_numpy(x)

    return grads.AuxiliaryPools(
        x_prop=rows(n_prop, 1.0),
        y_prop=torch.zeros(n_prop, dtype=torch.int64),
        x_nonprop=rows(n_nonprop, -1.0),
        y_nonprop=torch.ones(n_nonprop, dtype=torch.int64),
    )


def test_pool_batches_mix_the_two_pools_in_the_asked_fraction():
    pools = _signed_pools(n_prop=4, n_nonprop=5)
    x, y, p = pools.batch(6, 0.5, np.random.default_rng(0))
    assert x.shape == (6, 3)
    np.testing.assert_array_equal(p.numpy(), [1, 1, 1, 0, 0, 0])
    assert p.dtype == torch.int64
    np.testing.assert_array_equal(x[:, 0].numpy(), [1, 1, 1, -1, -1, -1])
    np.testing.assert_array_equal(y.numpy(), [0, 0, 0, 1, 1, 1])
    one, _, flag = pools.batch(1, 1.0, np.random.default_rng(0))
    assert one.shape == (1, 3) and flag.tolist() == [1]
    for seed in range(5):  # a pool as large as the draw: every record once
        x, _, _ = pools.batch(8, 0.5, np.random.default_rng(seed))
        assert sorted(x[:4, -1].tolist()) == [0, 1, 2, 3]
    big, _, _ = pools.batch(
        10, 0.9, np.random.default_rng(0)
    )  # 9 of 4: with replacement
    assert big.shape == (10, 3) and set(big[:9, -1].tolist()) <= {0, 1, 2, 3}
    for bad in (1.5, -0.25):
        with pytest.raises(
            ConfigError, match=rf"^prop_fraction must lie in \[0, 1\], got {bad}$"
        ):
            pools.batch(4, bad, np.random.default_rng(0))


def _zero_linear() -> nn.Module:
    model = nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    return model


def test_summed_batch_gradient_takes_batches_of_one_and_names_a_bad_split():
    model = _zero_linear()
    pools = _signed_pools()
    x, y = pools.x_prop[:3], pools.y_prop[:3]
    summed = grads.summed_batch_gradient(model, x, y, 1)
    # at zero weights softmax is (1/2, 1/2): d/dW of CE for label 0 is (-x/2, x/2)
    np.testing.assert_allclose(summed["weight"][0], -0.5 * x.numpy().sum(axis=0))
    with pytest.raises(
        DataError, match=r"^20 records do not make whole batches of 16$"
    ):
        grads.summed_batch_gradient(
            model, torch.zeros(20, 3), torch.zeros(20).long(), 16
        )
    with pytest.raises(DataError, match=r"^3 records do not make whole batches of 0$"):
        grads.summed_batch_gradient(model, x, y, 0)


@pytest.mark.parametrize("participants", [1, 2, 3])
def test_emulated_sgd_pair_is_one_property_batch_plus_shared_free_ones(participants):
    """Ch. 7.2.6: the positive aggregate sums one batch with the property and
    ``participants - 1`` without; the negative sums ``participants`` without.

    At zero weights the weight gradient of a batch's mean loss is
    ``(p - e_y) x`` averaged: with the property (+1, label 0) row 0 is
    ``-1/2``, without (-1, label 1) also ``-1/2`` but row 1 ``-1/2`` and the
    bias tells them apart: ``(-1/2, 1/2)`` against ``(1/2, -1/2)``.
    """
    pools = _signed_pools()
    positive, negative = grads.emulated_sgd_pair(
        _zero_linear(),
        pools,
        batch_size=2,
        participants=participants,
        prop_fraction=1.0,
        rng=np.random.default_rng(0),
    )
    with_bias = np.array([-0.5, 0.5])
    without_bias = np.array([0.5, -0.5])
    shared = (participants - 1) * without_bias
    np.testing.assert_allclose(positive["bias"], with_bias + shared)
    np.testing.assert_allclose(negative["bias"], without_bias + shared)
    with pytest.raises(ConfigError, match=r"^participants must be >= 1, got 0$"):
        grads.emulated_sgd_pair(
            _zero_linear(),
            pools,
            batch_size=2,
            participants=0,
            prop_fraction=1.0,
            rng=np.random.default_rng(0),
        )


def test_emulated_averaging_pair_with_one_other_participant():
    pools = _signed_pools()
    model = _zero_linear()
    positive, negative = grads.emulated_averaging_pair(
        model,
        pools,
        participants=1,
        total_participants=2,
        records=2,
        prop_fraction=1.0,
        epochs=1,
        batch_size=2,
        learning_rate=1.0,
        rng=np.random.default_rng(0),
    )
    # one SGD step of lr 1 on a batch: theta_k - theta = -gradient, weighted 1/2
    np.testing.assert_allclose(positive["bias"], -0.5 * np.array([-0.5, 0.5]))
    np.testing.assert_allclose(negative["bias"], -0.5 * np.array([0.5, -0.5]))


def test_derived_averaging_aggregate_keeps_float32_models_after_integer_buffers():
    before = {"steps": np.array(4), "w": np.zeros(3, np.float32)}
    own = np.array([3.0, 0.0, 0.0], np.float32)
    after = {"w": np.array([1.0, 1.0, 1.0], np.float32)}
    derived = grads.derive_averaging_aggregate(
        before, after, {"steps": np.array(5), "w": own}, 0.5
    )
    assert list(derived) == ["w"]
    np.testing.assert_allclose(derived["w"], [-0.5, 1.0, 1.0])


def test_the_head_sits_on_the_last_of_several_linear_layers():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 5), nn.Linear(5, 2))
    assert grads.last_linear(model) is model[3]
    head = grads.PropertyHead(5, seed=0)
    assert head(torch.zeros(7, 5)).shape == (7, 2)  # property / no property


def _mlp_with_unused_parameter() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    model.register_parameter("unused", nn.Parameter(torch.ones(2)))
    return model


@pytest.mark.parametrize("alpha", [0.0, 0.25, 1.0])
def test_multitask_gradient_weights_the_two_losses(alpha):
    """Ch. 7.1.5: ``(1 - alpha) L(x, y) + alpha L(x', p)``; the property term
    reaches the model through every layer but the last, and the head.
    Parameters no loss reaches get zero gradients of their own shape.
    """
    model = _mlp_with_unused_parameter()
    head = grads.PropertyHead(4, seed=1)
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.normal(size=(5, 3)).astype(np.float32))
    y = torch.tensor([0, 1, 1, 0, 1])
    xp = torch.from_numpy(rng.normal(size=(4, 3)).astype(np.float32))
    p = torch.tensor([1, 0, 1, 1])
    shared, head_grads, prop_loss = grads.multitask_gradient(
        model, head, (x, y), (xp, p), alpha
    )
    params = dict(model.named_parameters())
    main = torch.autograd.grad(
        nn.functional.cross_entropy(model(x), y),
        list(params.values()),
        allow_unused=True,
    )
    hidden = model[1](model[0](xp))
    prop_term = nn.functional.cross_entropy(head(hidden), p)
    prop = torch.autograd.grad(
        prop_term, [*params.values(), *head.parameters()], allow_unused=True
    )
    for (name, param), g_main, g_prop in zip(params.items(), main, prop, strict=False):
        want = np.zeros(tuple(param.shape), np.float32)
        if g_main is not None:
            want = want + (1 - alpha) * g_main.numpy()
        if g_prop is not None:
            want = want + alpha * g_prop.numpy()
        np.testing.assert_allclose(shared[name], want, rtol=1e-5, atol=1e-7)
        assert shared[name].shape == tuple(param.shape)
    np.testing.assert_array_equal(shared["unused"], np.zeros(2, np.float32))
    assert shared["unused"].dtype == np.float32
    for (name, param), g in zip(
        head.named_parameters(), prop[len(params) :], strict=True
    ):
        np.testing.assert_allclose(
            head_grads[name], alpha * g.numpy(), rtol=1e-5, atol=1e-7
        )
        assert head_grads[name].dtype == np.float32
        assert head_grads[name].shape == tuple(param.shape)
    if alpha == 0.0:
        assert prop_loss == 0.0
    else:
        assert prop_loss == pytest.approx(prop_term.item())
    assert prop_loss == 0.0 or alpha > 0.0
    with pytest.raises(ConfigError, match=r"^alpha must lie in \[0, 1\], got 1\.5$"):
        grads.multitask_gradient(model, head, (x, y), (xp, p), 1.5)


def test_a_head_step_is_sgd_in_float32():
    head = grads.PropertyHead(6, seed=0)
    start = {n: p.detach().clone() for n, p in head.named_parameters()}
    rng = np.random.default_rng(3)
    step = {n: rng.normal(size=tuple(p.shape)) for n, p in head.named_parameters()}
    grads.apply_head_step(head, step, 0.1)
    for name, param in head.named_parameters():
        want = start[name] - 0.1 * torch.from_numpy(step[name].astype(np.float32))
        torch.testing.assert_close(param.detach(), want, rtol=0, atol=0)


# ---------------------------------------------------------------------------
# the text experiment (Yelp analogue, Ch. 7.2.3 and 7.2.6)
# ---------------------------------------------------------------------------

CATEGORIES = ("space", "kitchen", "office")


def _text_task(records_per_category: int = 8, seed: int = 0) -> text.TextPropertyTask:
    """Records of 6 tokens: two topic words, three common, one record id."""
    rng = np.random.default_rng(seed)
    common = [f"c{i}" for i in range(5)]
    topics = {c: [f"{c}{j}" for j in range(4)] for c in CATEGORIES}
    n = records_per_category * len(CATEGORIES)
    record_words = [f"r{i}" for i in range(2 * n)]
    words = (
        "<pad>",
        "<unk>",
        *common,
        *(w for t in topics.values() for w in t),
        *record_words,
    )
    index = {w: i for i, w in enumerate(words)}

    def encode(count: int, offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x, y, c = [], [], []
        for i in range(count):
            category = i % len(CATEGORIES)
            tokens = [
                *rng.choice(topics[CATEGORIES[category]], 2),
                *rng.choice(common, 3),
                record_words[offset + i],
            ]
            x.append([index[t] for t in tokens])
            y.append(int(rng.random() < (0.8 if category == 1 else 0.3)))
            c.append(category)
        return np.array(x, np.int64), np.array(y, np.int64), np.array(c, np.int64)

    x_train, y_train, c_train = encode(n, 0)
    x_test, y_test, c_test = encode(n // 2, n)
    return text.TextPropertyTask(
        x_train=x_train,
        y_train=y_train,
        c_train=c_train,
        x_test=x_test,
        y_test=y_test,
        c_test=c_test,
        categories=CATEGORIES,
        words=words,
    )


class _InOrder:
    """A generator stand-in whose permutation is the identity."""

    def permutation(self, n: int) -> np.ndarray:
        return np.arange(n)


def test_draw_takes_the_fraction_from_the_property_pool():
    with_prop, without = np.arange(100, 104), np.arange(10)
    ids = text._draw(np.random.default_rng(0), with_prop, without, 5, 0.4)
    assert ids.size == 5
    assert np.isin(ids[:2], with_prop).all() and np.isin(ids[2:], without).all()
    for seed in range(5):  # as many as the pool holds: each record once
        ids = text._draw(np.random.default_rng(seed), with_prop, np.arange(4), 8, 0.5)
        assert sorted(ids.tolist()) == [0, 1, 2, 3, 100, 101, 102, 103]
    many = text._draw(np.random.default_rng(0), np.arange(2), without, 3, 1.0)
    assert many.size == 3 and set(many.tolist()) <= {0, 1}


def test_parties_split_evenly_and_only_target_and_adversary_keep_the_category():
    """Ch. 7.2.6: the honest participants hold no record with the property."""
    task = _text_task(records_per_category=5)  # 15 records, categories 0,1,2,0,...
    parties = text._split_parties(task, 0, 3, _InOrder())  # type: ignore[arg-type]
    np.testing.assert_array_equal(parties.parts[0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(parties.parts[1], [5, 6, 7, 8, 9])
    np.testing.assert_array_equal(parties.parts[2], [10, 11, 13, 14])  # not 12
    np.testing.assert_array_equal(parties.target_with, [0, 3])
    np.testing.assert_array_equal(parties.target_without, [1, 2, 4])
    np.testing.assert_array_equal(parties.adv_with, [6, 9])
    np.testing.assert_array_equal(parties.adv_without, [5, 7, 8])


def test_a_category_too_small_to_split_is_refused():
    task = _text_task(records_per_category=4)
    # two parties: target 0..5 holds 0, 3; the adversary 6..11 holds 6, 9
    two = text._split_parties(task, 0, 2, _InOrder())  # type: ignore[arg-type]
    assert two.target_with.size == two.adv_with.size == 2
    # three: the adversary's 4..7 holds only 6
    with pytest.raises(
        DataError,
        match=r"^category 'space' has too few records to split between the target "
        r"and the adversary$",
    ):
        text._split_parties(task, 0, 3, _InOrder())  # type: ignore[arg-type]


class _GradientSpy:
    """Wrap ``text._gradient``: keep every batch and its gradient."""

    def __init__(self) -> None:
        self.inner = text._gradient
        self.calls: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []

    def __call__(
        self, model: Any, x: np.ndarray, y: np.ndarray
    ) -> dict[str, np.ndarray]:
        out = self.inner(model, x, y)
        self.calls.append((np.array(x), out))
        return out


def _text_model(task: text.TextPropertyTask) -> nn.Module:
    return models.build_text_model(
        "text-cnn", len(task.words), 2, seed=0, embedding_dim=4
    )


def _category_of(task: text.TextPropertyTask, rows: np.ndarray) -> list[int]:
    out = []
    for row in rows:
        names = {task.words[i] for i in row}
        out.append(
            next(
                k
                for k, c in enumerate(CATEGORIES)
                if any(n.startswith(c) for n in names)
            )
        )
    return out


def test_aux_pair_emulates_the_others_aggregate(monkeypatch):
    """Alg. 7 lines 6-9 with two other participants: each labelled example is
    the bag of words of the sum of the adversary's batch (with the property
    for label 1, without for label 0) and one shared property-free batch.
    """
    task = _text_task(records_per_category=8)  # 24 records, 8 per party
    parties = text._split_parties(task, 0, 3, np.random.default_rng(1))
    model = _text_model(task)
    spy = _GradientSpy()
    monkeypatch.setattr(text, "_gradient", spy)
    embedding = model.embedding.weight.detach().numpy().copy()
    pair = text._auxiliary_pair(
        model, task, parties, np.random.default_rng(2), 2, 1.0, embedding, 0.3
    )
    assert [label for label, _ in pair] == [1, 0]
    assert len(spy.calls) == 4 and all(x.shape == (2, 6) for x, _ in spy.calls)
    batches = [x for x, _ in spy.calls]
    assert _category_of(task, batches[0]) == [0, 0]
    assert 0 not in _category_of(task, batches[2])
    np.testing.assert_array_equal(batches[1], batches[3])  # the shared batch
    assert 0 not in _category_of(task, batches[1])
    for (_label, features), first in zip(pair, (0, 2), strict=True):
        total = (
            spy.calls[first][1]["embedding.weight"]
            + spy.calls[first + 1][1]["embedding.weight"]
        )
        np.testing.assert_array_equal(
            features, text.recorded_rows(embedding, total, 0.3)
        )
        assert set(np.unique(features)) == {0.0, 1.0}


def test_a_round_steps_by_every_upload_and_observes_a_bag_of_words(monkeypatch):
    """Alg. 1 with three parties: every one uploads one batch gradient (the
    adversary's and the honest one's of distinct records), the server steps
    by their float32-rounded sum, the adversary observes a bag of words.
    """
    task = _text_task(records_per_category=8)
    parties = text._split_parties(task, 0, 3, np.random.default_rng(1))
    model = _text_model(task)
    spy = _GradientSpy()
    monkeypatch.setattr(text, "_gradient", spy)
    before = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    size = min(parties.parts[1].size, parties.parts[2].size)
    pair, seen = text._play_round(
        model,
        task,
        parties,
        np.random.default_rng(4),
        batch_size=size,
        target_fraction=1.0,
        aux_fraction=1.0,
        learning_rate=0.5,
        reader=EmbeddingMembership(len(task.words)),
    )
    assert len(spy.calls) == 3 + 2 * 2  # three uploads, then the aux pair
    target, own, honest = (spy.calls[i][0] for i in range(3))
    assert _category_of(task, target) == [0] * size
    for batch in (own, honest):
        assert np.unique(batch, axis=0).shape[0] == size  # no record twice
    assert 0 not in _category_of(task, honest)
    for name, start in before.items():
        total = sum(spy.calls[i][1][name] for i in range(3))
        want = torch.from_numpy(start) - torch.from_numpy(
            np.asarray(0.5 * total, dtype=np.float32)
        )
        torch.testing.assert_close(
            dict(model.named_parameters())[name].detach(), want, rtol=0, atol=0
        )
    # the others' bag: every word of the target's and the honest batch (a
    # fresh model records every step), no other, and never the padding
    others = np.unique(np.concatenate([target, honest]))
    want = np.zeros(len(task.words))
    want[others[others != 0]] = 1.0
    np.testing.assert_array_equal(seen, want)
    assert len(pair) == 2


def test_the_server_step_subtracts_the_float32_rounded_step():
    """The recorded figures' arithmetic: the float64 sum times the learning
    rate is rounded to float32 first, then subtracted.
    """
    torch.manual_seed(0)
    model = nn.Linear(40, 25)
    rng = np.random.default_rng(5)
    uploads = [
        {n: rng.normal(size=tuple(p.shape)) for n, p in model.named_parameters()}
        for _ in range(2)
    ]
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    text._server_step(model, uploads, 0.3)
    for name, param in model.named_parameters():
        step = np.asarray(0.3 * (uploads[0][name] + uploads[1][name]), np.float32)
        torch.testing.assert_close(
            param.detach(), start[name] - torch.from_numpy(step), rtol=0, atol=0
        )


def test_the_text_attack_reports_its_run(monkeypatch):
    """``run_text_property_attack`` on a small task: the model is the seeded
    two-output embedding model; the result holds the settings, ``m = 2``
    truth, the scores and their AUC, the test accuracy of the trained model
    and the correlation of main label and property.
    """
    task = _text_task(records_per_category=8)
    built: list[tuple[tuple[Any, ...], dict[str, Any], nn.Module]] = []
    build = models.build_text_model

    def spy(*args: Any, **kwargs: Any) -> nn.Module:
        model = build(*args, **kwargs)
        built.append((args, kwargs, model))
        return model

    monkeypatch.setattr(models, "build_text_model", spy)
    result = text.run_text_property_attack(
        task,
        "kitchen",
        rounds=4,
        participants=3,
        batch_size=2,
        batch_fraction=0.5,
        embedding_dim=4,
        top_k=3,
        seed=7,
    )
    ((args, kwargs, model),) = built
    assert args == ("text-cnn", len(task.words), 2)
    assert kwargs == {"seed": 7, "embedding_dim": 4}
    assert result.property_category == "kitchen"
    assert (result.rounds, result.participants, result.batch_fraction) == (4, 3, 0.5)
    np.testing.assert_array_equal(result.truth, [0, 1, 0, 1])
    assert result.scores.shape == (4,)
    assert result.auc == single_batch_auc(result.truth, result.scores)
    assert len(result.top_words) == 3 and set(result.top_words) <= set(task.words)
    with torch.no_grad():
        predicted = model(torch.from_numpy(task.x_test)).argmax(1).numpy()
    assert result.test_accuracy == float((predicted == task.y_test).mean())
    expected = np.corrcoef(task.y_train, (task.c_train == 1).astype(float))[0, 1]
    assert abs(expected) > 0.2  # main label and property are correlated here
    assert result.correlation == pytest.approx(float(expected))


def test_the_text_attack_refuses_too_few_parties_or_rounds():
    task = _text_task(records_per_category=8)
    with pytest.raises(ConfigError, match=r"^participants must be >= 2, got 1$"):
        text.run_text_property_attack(task, "space", participants=1)
    with pytest.raises(
        ConfigError, match=r"^rounds must be >= 4 to see both kinds of batch, got 3$"
    ):
        text.run_text_property_attack(task, "space", rounds=3)
    four = text.run_text_property_attack(
        task, "space", rounds=4, batch_size=2, embedding_dim=4
    )
    np.testing.assert_array_equal(four.truth, [0, 1, 0, 1])


def test_fortunes_task_labels_category_and_attribution(tmp_path):
    """The property is the category, the main label the ``-- Author`` line."""
    folder = write_fortunes(tmp_path / "fortunes", per_category=30)
    task = text.fortunes_property_task(tuple(TOPICS), directory=str(folder), length=14)
    topic_of = {w: k for k, c in enumerate(TOPICS) for w in TOPICS[c].split()}
    for x, y, c in (
        (task.x_train, task.y_train, task.c_train),
        (task.x_test, task.y_test, task.c_test),
    ):
        assert x.shape[0] == y.size == c.size > 0
        assert c.dtype.kind == "i" and y.dtype.kind == "i"
        for row, label, category in zip(x, y, c, strict=True):
            tokens = [task.words[i] for i in row if i > 0]
            assert {topic_of[t] for t in tokens if t in topic_of} == {category}
            assert any(t.startswith("author") for t in tokens) == bool(label)
    small = text.fortunes_property_task(
        tuple(TOPICS), directory=str(folder), vocab_size=10
    )
    assert len(small.words) == 12  # PAD, UNK and the ten most frequent words
    again = text.fortunes_property_task(tuple(TOPICS), directory=str(folder), length=14)
    np.testing.assert_array_equal(again.x_train, task.x_train)


def test_fortunes_task_defaults(tmp_path):
    """Defaults: 3,000 words (Yelp-author's vocabulary), 40 tokens, entries
    of at most 400 characters, split seed 0.
    """
    folder = tmp_path / "fortunes"
    folder.mkdir()
    entries = [" ".join(f"u{i}x{j}" for j in range(50)) for i in range(80)]
    assert max(len(e) for e in entries) <= 400
    entries.append("a" * 401)  # one character too long: left out
    entries.append("b" * 400)  # as long as allowed: kept
    (folder / "many").write_text("\n%\n".join(entries) + "\n%\n", encoding="utf-8")
    (folder / "few").write_text("tiny words\n%\nsmall words\n%\n", encoding="utf-8")
    task = text.fortunes_property_task(("many", "few"), directory=str(folder))
    assert len(task.words) == 3000 + 2
    assert task.x_train.shape[1] == 40
    assert task.x_train.shape[0] + task.x_test.shape[0] == 80 + 1 + 2
    seeded = text.fortunes_property_task(("many", "few"), directory=str(folder), seed=0)
    np.testing.assert_array_equal(seeded.c_train, task.c_train)
    np.testing.assert_array_equal(seeded.x_train, task.x_train)
    other = text.fortunes_property_task(("many", "few"), directory=str(folder), seed=1)
    assert not np.array_equal(other.x_train, task.x_train)


def test_fortunes_task_guards_the_special_ids(tmp_path, monkeypatch):
    folder = write_fortunes(tmp_path / "fortunes", per_category=4)
    monkeypatch.setattr(
        text_data.Vocabulary, "size", property(lambda self: len(self.words))
    )
    with pytest.raises(
        DataError, match=r"^the vocabulary's special ids changed; update this module$"
    ):
        text.fortunes_property_task(tuple(TOPICS), directory=str(folder))


def test_the_text_attack_defaults(monkeypatch):
    """Two parties, batches of 32, a 32-dimensional CNN, seed 0 (the
    documented defaults; only ``rounds`` is shortened here).
    """
    task = _text_task(records_per_category=22)  # 66 records: 33 per party
    built: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    build = models.build_text_model

    def spy_build(*args: Any, **kwargs: Any) -> nn.Module:
        built.append((args, kwargs))
        return build(*args, **kwargs)

    spy = _GradientSpy()
    monkeypatch.setattr(models, "build_text_model", spy_build)
    monkeypatch.setattr(text, "_gradient", spy)
    result = text.run_text_property_attack(task, "space", rounds=4)
    assert built == [
        (("text-cnn", len(task.words), 2), {"seed": 0, "embedding_dim": 32})
    ]
    assert result.participants == 2
    assert {x.shape[0] for x, _ in spy.calls} == {32}
    seeded = text.run_text_property_attack(task, "space", rounds=4, seed=0)
    np.testing.assert_array_equal(seeded.scores, result.scores)


def test_the_text_attack_default_rounds_and_step(monkeypatch):
    """300 rounds at ``lr = 0.3`` unless told; the cross-validation gets the seed."""
    task = _text_task(records_per_category=22)
    rates: list[float] = []
    step = text._server_step

    def spy_step(model: Any, uploads: Any, learning_rate: float) -> None:
        rates.append(learning_rate)
        step(model, uploads, learning_rate)

    seeds: list[int] = []

    def spy_cv(features: np.ndarray, labels: np.ndarray, **kwargs: Any) -> float:
        seeds.append(kwargs["seed"])
        return 0.5

    monkeypatch.setattr(text, "_server_step", spy_step)
    monkeypatch.setattr(text, "auxiliary_cv_auc", spy_cv)
    result = text.run_text_property_attack(task, "space", seed=3, cross_validate=True)
    assert result.rounds == 300 and len(rates) == 300
    assert set(rates) == {0.3}
    assert (seeds, result.auxiliary_cv_auc) == ([3], 0.5)


def test_single_class_truth_names_the_schedule_to_check():
    with pytest.raises(
        DataError,
        match=r"^the AUC needs observed updates with and without the property; the "
        r"target's schedule gave only one kind \(check target\.property_every and "
        r"target\.property_rounds\)$",
    ):
        single_batch_auc(np.ones(4), np.linspace(0, 1, 4))


def test_classifier_defaults_are_the_seed_settings():
    """Ch. 7.1.4: a random forest of 50 trees; ``C = 1``, seed 0, raw features."""
    assert BatchPropertyClassifier().get_params() == {
        "kind": "random-forest",
        "n_estimators": 50,
        "C": 1.0,
        "random_state": 0,
        "normalize": False,
    }


def test_auxiliary_pools_need_records_of_both_kinds():
    one = _signed_pools(n_prop=1, n_nonprop=1)  # one record of each is enough
    assert one.x_prop.shape[0] == one.x_nonprop.shape[0] == 1
    full = _signed_pools(n_prop=2, n_nonprop=3)
    for x_prop, x_nonprop, counts in (
        (full.x_prop[:0], full.x_nonprop, "0 with and 3 without"),
        (full.x_prop, full.x_nonprop[:0], "2 with and 0 without"),
    ):
        with pytest.raises(
            DataError,
            match=r"^the property adversary needs auxiliary records with and without "
            rf"the property; has {counts}$",
        ):
            grads.AuxiliaryPools(
                x_prop=x_prop,
                y_prop=torch.zeros(x_prop.shape[0], dtype=torch.int64),
                x_nonprop=x_nonprop,
                y_nonprop=torch.zeros(x_nonprop.shape[0], dtype=torch.int64),
            )


def _spy_fits(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """Record the auxiliary training set ``f_prop`` is fit on."""
    fitted: list[np.ndarray] = []

    class Spy(BatchPropertyClassifier):
        def fit(self, X: np.ndarray, y: np.ndarray) -> BatchPropertyClassifier:
            fitted.append(np.asarray(X))
            return super().fit(X, y)

    monkeypatch.setattr(sim, "BatchPropertyClassifier", Spy)
    return fitted


def test_simulation_defaults_one_aux_batch_each_without_emulation(
    marker_task, monkeypatch
):
    """By default the adversary differentiates one batch of each kind per round
    with plain gradients; ``emulate_defenses=True`` sends them through the
    target's defenses too.
    """
    data, flags = marker_task
    fitted = _spy_fits(monkeypatch)
    seen = _recording_defenses(monkeypatch)
    sim.simulate_property(data, flags, _setup(), rounds=3, seed=0)
    assert fitted[0].shape[0] == 2 * 3
    assert len(seen) == 3  # the target's uploads only
    seen.clear()
    sim.simulate_property(
        data, flags, _setup(), rounds=3, seed=0, emulate_defenses=True
    )
    assert len(seen) == 3 * (1 + 2)


def test_noisy_simulations_replay_from_the_seed(marker_task, monkeypatch):
    """Every random draw -- the target's DP noise, the emulated aux noise, the
    server's participant-level noise -- follows ``seed``: a run replays.
    """
    data, flags = marker_task
    setup = _setup(
        defenses=ClientDefenses(dp_noise_multiplier=0.5),
        participant_noise=0.01,
        participant_clip=10.0,
    )
    runs: list[tuple[list[np.ndarray], list[np.ndarray]]] = []
    auc = sim._property_auc

    def spy(
        rounds: Any, kind: str, observed: list[np.ndarray], truth: Any, seed: int
    ) -> float:
        runs.append(
            ([np.copy(a) for a in rounds.aux_x[kind]], [np.copy(o) for o in observed])
        )
        return auc(rounds, kind, observed, truth, seed)

    monkeypatch.setattr(sim, "_property_auc", spy)
    for _ in range(2):
        sim.simulate_property(
            data,
            flags,
            setup,
            rounds=3,
            seed=5,
            features="embedding",
            emulate_defenses=True,
        )
    (aux_a, seen_a), (aux_b, seen_b) = runs
    for a, b in zip(aux_a + seen_a, aux_b + seen_b, strict=True):
        np.testing.assert_array_equal(a, b)


def test_every_noise_draw_gets_its_own_seed(marker_task):
    data, flags = marker_task
    run, _ = _rounds(data, flags, _setup())
    seeds = [run._noise_seed() for _ in range(50)]
    assert len(set(seeds)) == 50


def test_the_adversary_own_batch_is_a_fair_coin(marker_task, monkeypatch):
    """Its own batch has the property in about half of the rounds: 300 rounds
    at p = 1/2 give 0.5 +- 0.029 (one standard error); the bounds are 3.4 SE.
    """
    data, flags = marker_task
    run, _ = _rounds(data, flags, _setup(), aux_batches=1)
    coins: list[bool] = []
    pick = sim._PropertyRounds._pick

    def spy(self: Any, role: str, prop: bool) -> torch.Tensor:
        if role == "adversary":
            coins.append(prop)
        return pick(self, role, prop)

    monkeypatch.setattr(sim._PropertyRounds, "_pick", spy)
    monkeypatch.setattr(sim._PropertyRounds, "_auxiliary_examples", lambda self: None)
    for _ in range(300):
        run.gradients(True)
    assert len(coins) == 300
    assert 0.4 < np.mean(coins) < 0.6


def test_a_diverging_simulation_names_the_round(marker_task, monkeypatch):
    data, flags = marker_task
    steps = sim.server_step
    calls: list[int] = []

    def diverge_third(*args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        new = steps(*args, **kwargs)
        calls.append(1)
        if len(calls) == 3:
            return {k: np.full_like(v, np.inf) for k, v in new.items()}
        return new

    monkeypatch.setattr(sim, "server_step", diverge_third)
    with pytest.raises(DataError, match=r"^the joint model diverged in round 3 "):
        sim.simulate_property(data, flags, _setup(), rounds=5, seed=0)


def test_a_random_share_selection_changes_no_other_draw(marker_task, monkeypatch):
    """The random choice has its own stream: the batches, the adversary's coins
    and the noise seeds of a run are those of the largest-magnitude choice."""
    data, flags = marker_task
    picks: dict[str, list[list[int]]] = {"largest": [], "random": []}
    pick = sim._PropertyRounds._pick
    current: list[str] = []

    def spy(self: Any, role: str, prop: bool) -> torch.Tensor:
        chosen = pick(self, role, prop)
        picks[current[0]].append([role == "target", prop, *chosen.tolist()])
        return chosen

    monkeypatch.setattr(sim._PropertyRounds, "_pick", spy)
    seeds = sim._PropertyRounds._noise_seed
    noise: dict[str, list[int]] = {"largest": [], "random": []}

    def spy_noise(self: Any) -> int:
        drawn = seeds(self)
        noise[current[0]].append(drawn)
        return drawn

    monkeypatch.setattr(sim._PropertyRounds, "_noise_seed", spy_noise)
    for selection in ("largest", "random"):
        current[:] = [selection]
        defenses = ClientDefenses(share_fraction=0.3, share_selection=selection)
        sim.simulate_property(
            data,
            flags,
            _setup(defenses=defenses),
            rounds=6,
            seed=3,
            aux_batches=1,
            emulate_defenses=True,
        )
    assert picks["largest"] == picks["random"]
    assert noise["largest"] == noise["random"]
    assert len(picks["largest"]) > 6


def test_a_random_share_replays_from_the_seed(marker_task, monkeypatch):
    """The random choice of shared coordinates follows ``seed`` too: the
    observed updates of two runs with one seed are equal."""
    data, flags = marker_task
    setup = _setup(
        defenses=ClientDefenses(share_fraction=0.3, share_selection="random")
    )
    seen: list[list[np.ndarray]] = []
    auc = sim._property_auc

    def spy(
        rounds: Any, kind: str, observed: list[np.ndarray], truth: Any, seed: int
    ) -> float:
        seen.append([np.copy(o) for o in observed])
        return auc(rounds, kind, observed, truth, seed)

    monkeypatch.setattr(sim, "_property_auc", spy)
    for seed in (2, 2):
        sim.simulate_property_attacks(
            data, flags, setup, rounds=6, seed=seed, features=("max",)
        )
    for a, b in zip(*seen, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_adversary_does_not_emulate_the_defenses_by_default(marker_task):
    data, flags = marker_task
    setup = _setup(defenses=ClientDefenses(dp_noise_multiplier=1.0))

    def auc(**kw: Any) -> dict[str, float]:
        return sim.simulate_property_attacks(
            data, flags, setup, rounds=6, seed=4, features=("embedding",), **kw
        )

    default = auc()
    assert default == auc(emulate_defenses=False)
    # emulated DP noise moves the aux rows: another classifier, other scores
    assert default != auc(emulate_defenses=True)


def test_every_non_finite_observation_is_counted_in_the_refusal():
    from types import SimpleNamespace

    from fedleak.errors import DataError

    rounds = SimpleNamespace(
        features=("max",),
        aux_x={"max": [np.zeros(3), np.ones(3)] * 4},
        aux_y=[0, 1] * 4,
    )
    observed = [np.ones(3), np.array([np.nan, 1.0, 0.0]), np.full(3, np.inf)]
    message = (
        "2 of 3 observed updates have non-finite features (the others' "
        "gradient could not be read from the model change)"
    )
    with pytest.raises(DataError, match=re.escape(message)):
        sim._property_auc(rounds, "max", observed, [1, 0, 1], 0)  # type: ignore[arg-type]
