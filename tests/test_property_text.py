"""Text property inference from embedding-gradient bags of words (Table 7.4 analogue)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fedleak.attacks.property.classifier import gradient_features
from fedleak.attacks.property.text import (
    fortunes_property_task,
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
    again = run_text_property_attack(
        task, "space", rounds=16, batch_size=8, embedding_dim=8, seed=1
    )
    np.testing.assert_array_equal(again.scores, result.scores)
    with pytest.raises(ConfigError):
        run_text_property_attack(task, "space", participants=1)


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
    }
