"""Text property inference from embedding-gradient bags of words (Table 7.4 analogue)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fedleak.attacks.property.classifier import gradient_features
from fedleak.attacks.property.text import (
    fortunes_property_task,
    recorded_rows,
    run_text_property_attack,
)

from fedleak.errors import ConfigError

TOPICS = {
    "space": "ship star captain orbit warp planet galaxy rocket",
    "kitchen": "bread soup knife oven butter spoon salad onion",
    "office": "memo boss meeting desk report email deadline stapler",
}
COMMON = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "is",
    "it",
    "in",
    "that",
    "you",
    "was",
    "for",
    "on",
    "are",
    "with",
]


def write_fortunes(folder: Path, per_category: int = 120, seed: int = 0) -> Path:
    """Fortune files of three topics; half the entries carry a ``-- Author`` line."""
    rng = np.random.default_rng(seed)
    folder.mkdir()
    for name, words in TOPICS.items():
        topic = words.split()
        entries = []
        for i in range(per_category):
            body = (
                rng.choice(COMMON, size=6).tolist() + rng.choice(topic, size=3).tolist()
            )
            rng.shuffle(body)
            text = " ".join(body)
            if i % 2:
                text += f"\n\t\t-- Author{int(rng.integers(5))}"
            entries.append(text)
        (folder / name).write_text("\n%\n".join(entries) + "\n%\n", encoding="utf-8")
    return folder


def test_bow_pooling_marks_the_rows_a_batch_touched():
    grad = np.zeros((6, 4))
    grad[2] = [0.0, 1e-3, 0.0, -2e-3]
    grad[4] = [5e-4, 0.0, 0.0, 0.0]
    grad[5] = [1e-12, 0.0, 0.0, 0.0]  # float32 rounding residue, not a word
    features = gradient_features({"embedding.weight": grad}, "bow")
    np.testing.assert_array_equal(features, [0, 0, 1, 0, 1, 0])
    exact = gradient_features({"e": grad}, "bow", bow_tolerance=0.0)
    np.testing.assert_array_equal(exact, [0, 0, 1, 0, 1, 1])


def test_task_labels_attribution_and_keeps_categories(tmp_path):
    folder = write_fortunes(tmp_path / "fortunes")
    task = fortunes_property_task(tuple(TOPICS), directory=str(folder), length=12)
    assert task.categories == tuple(TOPICS)
    assert task.x_train.shape[1] == 12
    assert set(np.unique(task.y_train).tolist()) == {0, 1}
    assert abs(task.y_train.mean() - 0.5) < 0.1
    assert task.words[:2] == ("<pad>", "<unk>")
    assert task.x_train.max() < len(task.words)
    with pytest.raises(ConfigError, match="unknown category"):
        task.category("sports")


def test_the_attack_finds_the_category_and_its_words(tmp_path):
    folder = write_fortunes(tmp_path / "fortunes")
    task = fortunes_property_task(tuple(TOPICS), directory=str(folder), length=12)
    result = run_text_property_attack(
        task, "space", rounds=16, batch_size=8, embedding_dim=8, seed=1
    )
    assert result.auc > 0.9
    assert set(result.top_words) <= set(TOPICS["space"].split()) | {"<unk>"}
    assert len(result.top_words) == 5
    assert result.truth.tolist() == [0, 1] * 8
    # fewer rounds than CURVE_POINTS: the accuracy after every one of them
    assert result.accuracy_curve["rounds"] == list(range(1, 17))
    assert result.auxiliary_cv_auc is None  # not asked for
    again = run_text_property_attack(
        task,
        "space",
        rounds=16,
        batch_size=8,
        embedding_dim=8,
        seed=1,
        cross_validate=True,
    )
    np.testing.assert_array_equal(again.scores, result.scores)
    # the adversary's own bags of this distinct category separate under CV
    assert again.auxiliary_cv_auc is not None and again.auxiliary_cv_auc > 0.9
    with pytest.raises(ConfigError):
        run_text_property_attack(task, "space", participants=1)


def test_the_attack_records_its_test_accuracy_curve_without_changing_the_run(
    tmp_path, monkeypatch
):
    from fedleak.attacks.property import text

    folder = write_fortunes(tmp_path / "fortunes")
    task = fortunes_property_task(tuple(TOPICS), directory=str(folder), length=12)
    kwargs = {"rounds": 85, "batch_size": 8, "embedding_dim": 8, "seed": 2}
    result = run_text_property_attack(task, "space", **kwargs)
    curve = result.accuracy_curve
    # 85 rounds, CURVE_POINTS = 40: every 2nd round and the last one
    assert curve["rounds"] == [*range(2, 85, 2), 85]
    assert curve["test_accuracy"][-1] == result.test_accuracy
    assert len(set(curve["test_accuracy"])) > 1  # measured, not repeated
    assert isinstance(curve["plateau"], bool)
    # measuring between rounds draws from no stream: the same run without it
    monkeypatch.setattr(
        text, "_accuracy_recorder", lambda *a, **k: (lambda t: None, [])
    )
    plain = run_text_property_attack(task, "space", **kwargs)
    assert plain.accuracy_curve["plateau"] is None
    np.testing.assert_array_equal(plain.scores, result.scores)
    assert plain.test_accuracy == result.test_accuracy


def test_the_result_serialises_its_summary():
    from fedleak.attacks.property.text import TextAttackResult

    result = TextAttackResult(
        property_category="space",
        auc=0.75,
        top_words=("moon", "star"),
        correlation=0.5,
        test_accuracy=0.9,
        rounds=12,
        participants=3,
        batch_fraction=0.25,
        scores=np.array([0.1, 0.9]),
        truth=np.array([0, 1]),
        auxiliary_cv_auc=0.97,
    )
    assert result.to_json() == {
        "property": "space",
        "auc": 0.75,
        "top_words": ["moon", "star"],
        "correlation": 0.5,
        "test_accuracy": 0.9,
        "rounds": 12,
        "participants": 3,
        "batch_fraction": 0.25,
        "accuracy_curve": {},
        "auxiliary_cv_auc": 0.97,
    }


def test_recorded_rows_are_those_a_float32_step_moves():
    embedding = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]], np.float32)
    gradient = np.array(
        [
            [1e-9, 0.0],  # 0.3 * 1e-9 is below half an ulp of 1.0: not recorded
            [0.0, 1e-3],  # one entry moves
            [0.0, 0.0],  # untouched
            [1e-9, 0.0],  # the same step moves a zero parameter
        ]
    )
    np.testing.assert_array_equal(
        recorded_rows(embedding, gradient, 0.3), [0.0, 1.0, 0.0, 1.0]
    )
    # the server's learning rate decides: 1e-9 at lr 1e2 moves 1.0
    assert recorded_rows(embedding[:1], gradient[:1], 1e2).tolist() == [1.0]
    # float32 whatever the input's type (float64 would record 1 - 3e-10)
    assert recorded_rows(
        embedding[:1].astype(np.float64), gradient[:1], 0.3
    ).tolist() == [0.0]
    # the step is subtracted: float32's ulp below 1.0 is half the one above,
    # so a step of 4e-8 moves 1.0 down (1 - 2**-24) but would not move it up
    down = recorded_rows(np.ones((1, 1)), np.array([[4e-8]]), 1.0)
    up = recorded_rows(np.ones((1, 1)), np.array([[-4e-8]]), 1.0)
    assert (down.tolist(), up.tolist()) == ([1.0], [0.0])


def test_the_observed_bag_is_the_target_batch_s_words(tmp_path, monkeypatch):
    """Two parties: the others' bag is exactly the target's batch (round 1)."""
    from fedleak.attacks.membership import EmbeddingMembership
    from fedleak.attacks.property import text

    from fedleak.models import build_text_model

    folder = write_fortunes(tmp_path / "fortunes")
    task = fortunes_property_task(tuple(TOPICS), directory=str(folder), length=12)
    rng = np.random.default_rng(0)
    parties = text._split_parties(task, task.category("space"), 2, rng)
    model = build_text_model("text-cnn", len(task.words), 2, seed=0, embedding_dim=8)
    drawn: list[np.ndarray] = []
    draw = text._draw
    monkeypatch.setattr(text, "_draw", lambda *a: drawn.append(draw(*a)) or drawn[-1])
    _, seen = text._play_round(
        model,
        task,
        parties,
        rng,
        batch_size=8,
        target_fraction=1.0,
        aux_fraction=1.0,
        learning_rate=0.3,
        reader=EmbeddingMembership(len(task.words)),
    )
    words = np.unique(task.x_train[drawn[0]])  # the first draw is the target's
    expected = np.zeros(len(task.words))
    expected[words[words != 0]] = 1.0  # padding is never a word
    np.testing.assert_array_equal(seen, expected)
