"""``fedleak bench mi-generative``: membership inference against generative models.

One run reproduces the evaluations of seed 000 Ch. 6.2 and seed 004 Ch.
4.4.4 on one dataset (``digits`` for CI, ``fashion-mnist``), at CPU scale
(the default) or at the seed's scale on a GPU (``--scale thesis``):

1. A pool of records is drawn; the targets train on a random 10% of it (the
   members), the other 90% are the non-members (seed 000 Ch. 6.2.1, seed
   004 Ch. 4.4.4). The dataset's test split is the disjoint reference the
   PCA distance is fitted on.
2. ``white_box``: a DCGAN target (and, with ``conditional``, a conditional
   one) is trained; after every ``eval_every`` epochs the white-box attack's
   accuracy (fraction of members among the top ``n`` of the whole pool) is
   recorded: the Fig. 6.7 analogue.
3. ``black_box``: the attacker trains a local DCGAN on samples of the
   final target DCGAN and, separately, of the target VAE; accuracy against
   attacker steps is the Fig. 6.8 analogue.
4. ``auxiliary``: the discriminative attack (scenario 1: 20% of the
   non-members known; scenario 2: 30% of both) and the generative attack
   (scenario 1: 20% of the members; scenario 2: 30% of both), with the
   auxiliary data introduced after a delay; accuracy is measured on the
   records the attacker does not know (seed 000 Fig. 6.9-6.11), and, from
   the same final scores, over every record as the seed's text has it, with
   the mean rank of the known and unknown members and non-members
   (:func:`knowledge_diagnosis`).
5. ``monte_carlo``: a (conditional) VAE target; MC-epsilon and MC-d with
   PCA, HOG and colour-histogram distances, the median heuristic and
   percentiles, in single and set MI, against the VAE and the DCGAN; the
   reconstruction attack on the VAE (Tables 4.5-4.6 analogue).
6. Sample grids of real members, the target DCGAN, the attacker DCGAN and
   the target VAE.

The JSON report (``schema_version`` 1) holds the settings, seeds, versions,
wall times per part and every number; the ratio of each accuracy to its
random-guess baseline is given as ``lift``. Plots are written next to the
JSON as ``<stem>-<plot>.png``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
import typer
from rich.table import Table
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from fedleak.attacks.membership.generative import (
    AttackerConfig,
    AuxiliaryKnowledge,
    BlackBoxAttack,
    DiscriminativeAttack,
    white_box_scores,
)
from fedleak.attacks.membership.metrics import mi_trials, top_n_accuracy
from fedleak.attacks.membership.montecarlo import (
    FEATURE_NAMES,
    MonteCarloAttack,
    make_feature_map,
    pairwise_distances,
    reconstruction_scores,
)
from fedleak.data import load_dataset
from fedleak.errors import ConfigError
from fedleak.files import write_figure
from fedleak.generative import (
    VAE,
    DCGANDiscriminator,
    DCGANGenerator,
    GANTrainer,
    train_gan,
    train_vae,
)

from .console import fmt, say, written
from .console import out as console
from .options import OutOption, SeedOption
from .record import BenchRecord, record_path

__all__ = [
    "CPU",
    "FULL",
    "PARTS",
    "QUICK",
    "SCALES",
    "GenerativeBenchSettings",
    "run_mi_generative_bench",
]

PARTS: tuple[str, ...] = ("black-box", "auxiliary", "monte-carlo")
"""The optional parts of a run (the white-box curve is always measured)."""


@dataclass(frozen=True)
class GenerativeBenchSettings:
    """Sizes of one ``mi-generative`` run (see :data:`QUICK` and :data:`FULL`)."""

    dataset: str
    pool_size: int
    member_fraction: float = 0.1
    gan_latent_dim: int = 16
    gan_generator_channels: int = 16
    gan_discriminator_channels: int = 32
    gan_lr: float = 1e-3
    batch_size: int = 32
    target_epochs: int = 400
    eval_every_epochs: int = 50
    conditional: bool = False
    attacker_channels: int = 32
    attacker_steps: int = 600
    attacker_eval_every: int = 100
    target_samples: int = 2000
    aux_small: float = 0.2
    aux_large: float = 0.3
    aux_delay_steps: int = 200
    aux_delays: tuple[int, ...] = ()
    vae_hidden: tuple[int, ...] = (400,)
    vae_latent_dim: int = 20
    vae_epochs: int = 150
    vae_lr: float = 1e-3
    mc_samples: int = 2000
    mc_distances: tuple[str, ...] = ("pca", "hog", "chist")
    mc_percentiles: tuple[float, ...] = (0.01, 0.1, 1.0)
    mi_set_size: int = 30
    mi_trials: int = 50
    reconstruction_samples: int = 100


QUICK = GenerativeBenchSettings(
    dataset="digits",
    pool_size=400,
    gan_lr=2e-3,
    attacker_steps=200,
    attacker_eval_every=100,
    aux_delay_steps=100,
    mc_samples=1500,
    mi_set_size=30,
)
"""CI-sized: 400 digits, 40 members, small DCGANs and short attacker runs."""

FULL = GenerativeBenchSettings(
    dataset="fashion-mnist",
    pool_size=6000,
    gan_latent_dim=32,
    gan_generator_channels=32,
    gan_discriminator_channels=64,
    gan_lr=1e-3,
    target_epochs=400,
    eval_every_epochs=40,
    conditional=True,
    attacker_channels=32,
    attacker_steps=3000,
    attacker_eval_every=250,
    target_samples=10000,
    aux_delay_steps=1000,
    aux_delays=(0, 1000),
    vae_epochs=300,
    mc_samples=10000,
    mi_set_size=100,
    mi_trials=100,
    reconstruction_samples=300,
)
"""Fashion-MNIST: 6,000-record pool, 600 members, the seed's schedules.

The targets are fixed at epoch 400, as in seed 000 Ch. 6.2.4 ("DCGAN and
DCGAN+VAE (fixed at epoch 400)"). Hours of CPU time (the target DCGANs alone
train 2 x 400 epochs on 600 images with 64-channel discriminators); meant for
a GPU (``--device cuda``).
"""

FULL_WIDE = replace(
    FULL,
    gan_generator_channels=64,
    gan_discriminator_channels=128,
    conditional=False,
)
""":data:`FULL` with the DCGAN's usual widths for 28 x 28 images (64/128).

The seed's targets are DCGANs of that width or wider; :data:`FULL`'s 32/64
channels overfit more slowly (white-box 0.63 at epoch 400 against 0.85 here,
both on an H200). The conditional target is left out: its white-box row is
in :data:`FULL`'s record. Meant for ``--part black-box`` on a GPU (2 minutes).
"""

CPU = GenerativeBenchSettings(
    dataset="fashion-mnist",
    pool_size=1000,
    gan_lr=2e-3,
    target_epochs=1000,
    eval_every_epochs=100,
    conditional=True,
    attacker_steps=3000,
    attacker_eval_every=500,
    target_samples=2000,
    aux_delay_steps=1000,
    aux_delays=(0, 1000),
    vae_epochs=150,
    mc_samples=2000,
    mi_set_size=30,
    mi_trials=50,
    reconstruction_samples=100,
)
"""The default: Fashion-MNIST, 1,000-record pool, 100 members, every part.

:data:`FULL`'s schedules on a smaller pool and smaller DCGANs (16/32
channels), so that a 2-core CPU finishes in well under an hour: the targets
train 1,000 epochs on their 100 members (4,000 steps, long enough for the
white-box attack to approach 100% as in Fig. 6.7), the attacker 3,000
steps on 2,000 target samples.
"""

SCALES: dict[str, GenerativeBenchSettings] = {
    "quick": QUICK,
    "cpu": CPU,
    "thesis": FULL,
    "thesis-wide": FULL_WIDE,
}
"""Named settings of ``fedleak bench mi-generative --scale``."""


@dataclass
class _Data:
    pool: np.ndarray
    labels: np.ndarray
    is_member: np.ndarray
    reference: np.ndarray
    image_shape: tuple[int, int, int]
    num_classes: int

    @property
    def members(self) -> np.ndarray:
        out: np.ndarray = self.pool[self.is_member]
        return out

    @property
    def member_labels(self) -> np.ndarray:
        out: np.ndarray = self.labels[self.is_member]
        return out

    @property
    def num_members(self) -> int:
        return int(self.is_member.sum())


def _child_seeds(seed: int, names: tuple[str, ...]) -> dict[str, int]:
    children = np.random.SeedSequence(seed).spawn(len(names))
    return {
        n: int(c.generate_state(1)[0] % 2**31)
        for n, c in zip(names, children, strict=True)
    }


def _load(s: GenerativeBenchSettings, seed: int) -> _Data:
    ds = load_dataset(s.dataset)
    x = np.concatenate([ds.x_train, ds.x_test]) if s.dataset == "digits" else ds.x_train
    y = np.concatenate([ds.y_train, ds.y_test]) if s.dataset == "digits" else ds.y_train
    rng = np.random.default_rng(seed)
    if s.pool_size < 20 or s.pool_size > x.shape[0]:
        raise ConfigError(
            f"pool_size must lie in [20, {x.shape[0]}], got {s.pool_size}"
        )
    chosen = rng.permutation(x.shape[0])
    pool_idx, rest = chosen[: s.pool_size], chosen[s.pool_size :]
    n_members = max(2, round(s.member_fraction * s.pool_size))
    is_member = np.zeros(s.pool_size, dtype=bool)
    is_member[rng.permutation(s.pool_size)[:n_members]] = True
    # The PCA reference must be disjoint from the candidates (seed 004 Ch. 4.4.4).
    reference = ds.x_test if s.dataset != "digits" else x[rest]
    return _Data(
        pool=np.ascontiguousarray(x[pool_idx]),
        labels=y[pool_idx].astype(np.int64),
        is_member=is_member,
        reference=reference[:5000],
        image_shape=ds.input_shape,
        num_classes=ds.num_classes,
    )


def _accuracy(scores: np.ndarray, is_member: np.ndarray, seed: int) -> float:
    return float(top_n_accuracy(scores, is_member, np.random.default_rng(seed)))


def _white_box(
    s: GenerativeBenchSettings,
    data: _Data,
    seeds: dict[str, int],
    device: str,
    conditional: bool,
    say: Callable[[str], None],
) -> tuple[dict[str, Any], DCGANGenerator]:
    k = data.num_classes if conditional else 0
    gen = DCGANGenerator(
        data.image_shape,
        latent_dim=s.gan_latent_dim,
        num_classes=k,
        base_channels=s.gan_generator_channels,
        seed=seeds["gan_g"],
    )
    disc = DCGANDiscriminator(
        data.image_shape,
        num_classes=k,
        base_channels=s.gan_discriminator_channels,
        seed=seeds["gan_d"],
    )
    labels = data.labels if conditional else None
    curve: list[dict[str, float]] = []
    started = time.perf_counter()

    def evaluate(epoch: int, trainer: GANTrainer) -> None:
        if epoch % s.eval_every_epochs and epoch != s.target_epochs:
            return
        scores = white_box_scores(disc, data.pool, labels)
        acc = _accuracy(scores, data.is_member, seeds["eval"])
        curve.append(
            {"epoch": epoch, "accuracy": acc, "wall_s": time.perf_counter() - started}
        )
        say(
            f"white-box{' (conditional)' if conditional else ''}: epoch {epoch} "
            f"accuracy {acc:.3f}"
        )

    train_gan(
        gen,
        disc,
        data.members,
        data.member_labels if conditional else None,
        epochs=s.target_epochs,
        batch_size=s.batch_size,
        lr=s.gan_lr,
        seed=seeds["gan_train"],
        device=device,
        on_epoch_end=evaluate,
    )
    gen.cpu()
    baseline = data.num_members / data.pool.shape[0]
    final = curve[-1]["accuracy"]
    final_scores = white_box_scores(disc, data.pool, labels)
    return {
        "conditional": conditional,
        **_single_and_set_mi(final_scores, data, s, seeds),
        "curve": curve,
        "final_accuracy": final,
        "baseline": baseline,
        "lift": final / baseline,
        "wall_s": time.perf_counter() - started,
    }, gen


def _target_samples(
    model: DCGANGenerator | VAE, n: int, shape: tuple[int, ...], seed: int
) -> np.ndarray:
    gen = torch.Generator().manual_seed(seed)
    out: np.ndarray = model.sample(n, generator=gen).cpu().numpy().reshape(n, *shape)
    return out


def _attacker_config(s: GenerativeBenchSettings) -> AttackerConfig:
    return AttackerConfig(
        latent_dim=s.gan_latent_dim,
        base_channels=s.attacker_channels,
        batch_size=s.batch_size,
    )


def _black_box(
    s: GenerativeBenchSettings,
    data: _Data,
    samples: np.ndarray,
    seeds: dict[str, int],
    device: str,
    label: str,
    say: Callable[[str], None],
) -> tuple[dict[str, Any], BlackBoxAttack]:
    curve: list[dict[str, float]] = []
    started = time.perf_counter()

    def evaluate(step: int, attack: BlackBoxAttack) -> None:
        acc = _accuracy(attack.scores(data.pool), data.is_member, seeds["eval"])
        curve.append({"step": step, "accuracy": acc})
        say(f"black-box vs {label}: step {step} accuracy {acc:.3f}")

    attack = BlackBoxAttack(
        data.image_shape,
        config=_attacker_config(s),
        seed=seeds["attacker"],
        device=device,
    ).fit(
        samples,
        steps=s.attacker_steps,
        eval_every=s.attacker_eval_every,
        on_eval=evaluate,
    )
    baseline = data.num_members / data.pool.shape[0]
    final = curve[-1]["accuracy"] if curve else float("nan")
    return {
        "target": label,
        **_single_and_set_mi(attack.scores(data.pool), data, s, seeds),
        "curve": curve,
        "final_accuracy": final,
        "baseline": baseline,
        "lift": final / baseline,
        "wall_s": time.perf_counter() - started,
    }, attack


def _auxiliary_curve(
    s: GenerativeBenchSettings,
    data: _Data,
    samples: np.ndarray,
    seeds: dict[str, int],
    device: str,
    setting: str,
    aux: AuxiliaryKnowledge,
    unknown: np.ndarray,
) -> tuple[list[dict[str, float]], np.ndarray]:
    """Train one auxiliary-knowledge attacker.

    Returns its accuracy on the unknown records at every evaluation, and its
    final scores of the whole pool.
    """
    candidates, truth = data.pool[unknown], data.is_member[unknown]
    curve: list[dict[str, float]] = []

    def evaluate(step: int, attack: BlackBoxAttack | DiscriminativeAttack) -> None:
        acc = _accuracy(attack.scores(candidates), truth, seeds["eval"])
        curve.append({"step": step, "accuracy": acc})

    config = _attacker_config(s)
    attack: BlackBoxAttack | DiscriminativeAttack
    if setting == "discriminative":
        attack = DiscriminativeAttack(
            data.image_shape, config=config, seed=seeds["attacker"], device=device
        ).fit(
            samples,
            aux,
            steps=s.attacker_steps,
            eval_every=s.attacker_eval_every,
            on_eval=evaluate,
        )
    else:
        attack = BlackBoxAttack(
            data.image_shape, config=config, seed=seeds["attacker"], device=device
        ).fit(
            samples,
            steps=s.attacker_steps,
            auxiliary=aux,
            eval_every=s.attacker_eval_every,
            on_eval=evaluate,
        )
    return curve, attack.scores(data.pool)


def knowledge_diagnosis(
    scores: np.ndarray, is_member: np.ndarray, known: np.ndarray, seed: int
) -> dict[str, float | None]:
    """Where an auxiliary-knowledge attacker ranks the records it knew.

    Seed 000 Ch. 6.1.4 feeds "data-points from X" to the attacker's
    discriminator after training, the records it was shown included. The
    bench's ``final_accuracy`` scores only the records the attacker did not
    know; this gives both views of the same final scores over the whole pool:

    - ``accuracy_all_records``: the top-``n`` accuracy over every record,
      ``n`` the number of members (the seed's evaluation as written);
    - ``unknown_auc``: the ROC AUC of members against non-members among the
      unknown records (a threshold-free view of what the knowledge teaches
      about records the attacker never saw);
    - ``rank_<group>``: the mean percentile rank (in ``(0, 1]``, 1 the
      highest score, ties averaged) of the known members, unknown members,
      unknown non-members and known non-members (``None`` for an empty
      group).

    Parameters
    ----------
    scores : numpy.ndarray
        The attacker's score of every record of the pool.
    is_member : numpy.ndarray
        True for the target's training records.
    known : numpy.ndarray
        True for the records the attacker was given (members or not).
    seed : int
        Seed of the top-``n`` tie breaking.
    """
    arr = np.asarray(scores, dtype=np.float64).reshape(-1)
    member = np.asarray(is_member, dtype=bool).reshape(-1)
    given = np.asarray(known, dtype=bool).reshape(-1)
    if not arr.shape == member.shape == given.shape:
        raise ValueError(
            f"scores, is_member and known differ in length: {arr.shape[0]}, "
            f"{member.shape[0]}, {given.shape[0]}"
        )
    ranks = rankdata(arr) / arr.shape[0]
    groups = {
        "known_members": given & member,
        "unknown_members": ~given & member,
        "unknown_non_members": ~given & ~member,
        "known_non_members": given & ~member,
    }
    out: dict[str, float | None] = {
        f"rank_{name}": float(ranks[mask].mean()) if mask.any() else None
        for name, mask in groups.items()
    }
    unseen = member[~given]
    out["unknown_auc"] = (
        float(roc_auc_score(unseen, arr[~given]))
        if 0 < unseen.sum() < unseen.size
        else None
    )
    out["accuracy_all_records"] = _accuracy(arr, member, seed)
    return out


def _auxiliary(
    s: GenerativeBenchSettings,
    data: _Data,
    samples: np.ndarray,
    seeds: dict[str, int],
    device: str,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seeds["aux"])
    members = np.flatnonzero(data.is_member)
    others = np.flatnonzero(~data.is_member)
    rng.shuffle(members)
    rng.shuffle(others)

    def knowledge(
        train_frac: float, test_frac: float, delay: int
    ) -> tuple[AuxiliaryKnowledge, np.ndarray]:
        known_in = members[: round(train_frac * members.shape[0])]
        known_out = others[: round(test_frac * others.shape[0])]
        aux = AuxiliaryKnowledge(
            train=data.pool[known_in] if known_in.size else None,
            test=data.pool[known_out] if known_out.size else None,
            delay_steps=delay,
        )
        unknown = np.ones(data.pool.shape[0], dtype=bool)
        unknown[known_in] = False
        unknown[known_out] = False
        return aux, unknown

    runs: list[tuple[str, str, float, float, int]] = [
        ("discriminative", "test", 0.0, s.aux_small, s.aux_delay_steps),
        ("discriminative", "train+test", s.aux_large, s.aux_large, s.aux_delay_steps),
        ("generative", "train", s.aux_small, 0.0, s.aux_delay_steps),
        ("generative", "train+test", s.aux_large, s.aux_large, s.aux_delay_steps),
    ]
    runs += [
        ("generative", "train", s.aux_small, 0.0, d)
        for d in s.aux_delays
        if d != s.aux_delay_steps
    ]
    results = []
    for setting, scenario, train_frac, test_frac, delay in runs:
        started = time.perf_counter()
        aux, unknown = knowledge(train_frac, test_frac, delay)
        truth = data.is_member[unknown]
        curve, scores = _auxiliary_curve(
            s, data, samples, seeds, device, setting, aux, unknown
        )
        baseline = float(truth.mean())
        final = curve[-1]["accuracy"] if curve else float("nan")
        say(
            f"auxiliary {setting}/{scenario} (delay {delay}): accuracy {final:.3f} "
            f"(chance {baseline:.3f})"
        )
        results.append(
            {
                "setting": setting,
                "scenario": scenario,
                "known_train_fraction": train_frac,
                "known_test_fraction": test_frac,
                "delay_steps": delay,
                "curve": curve,
                "final_accuracy": final,
                "baseline": baseline,
                "lift": final / baseline,
                **knowledge_diagnosis(scores, data.is_member, ~unknown, seeds["eval"]),
                "wall_s": time.perf_counter() - started,
            }
        )
    return results


def _train_vae(
    s: GenerativeBenchSettings, data: _Data, seeds: dict[str, int], device: str
) -> VAE:
    vae = VAE(
        int(np.prod(data.image_shape)),
        hidden=s.vae_hidden,
        latent_dim=s.vae_latent_dim,
        num_classes=data.num_classes,
        seed=seeds["vae"],
    )
    train_vae(
        vae,
        data.members,
        data.member_labels,
        epochs=s.vae_epochs,
        batch_size=s.batch_size,
        lr=s.vae_lr,
        seed=seeds["vae_train"],
        device=device,
    )
    return vae.cpu()


def _mi_pools(
    data: _Data, s: GenerativeBenchSettings, seed: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Member indices, a non-member pool twice as large, and the set size M."""
    rng = np.random.default_rng(seed)
    members = np.flatnonzero(data.is_member)
    others = rng.permutation(np.flatnonzero(~data.is_member))[: 2 * members.shape[0]]
    return members, others, min(s.mi_set_size, members.shape[0])


def _monte_carlo_targets(
    s: GenerativeBenchSettings,
    data: _Data,
    vae: VAE,
    gan: DCGANGenerator,
    seed: int,
) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Draw the samples the Monte Carlo attacks compare with: VAE and GAN."""
    gen = torch.Generator().manual_seed(seed)
    # Conditional VAE: sample labels like the members', compare within a class.
    sample_labels = np.random.default_rng(seed).choice(data.member_labels, s.mc_samples)
    vae_samples = (
        vae.sample(s.mc_samples, y=sample_labels, generator=gen)
        .numpy()
        .reshape(-1, *data.image_shape)
    )
    gan_samples = _target_samples(gan, s.mc_samples, data.image_shape, seed)
    return {
        "vae": (vae_samples, sample_labels),
        "gan": (gan_samples, None),
    }


def _monte_carlo_rows(
    s: GenerativeBenchSettings,
    d_in: np.ndarray,
    d_out: np.ndarray,
    features: Any,
    pools: tuple[np.ndarray, np.ndarray, int],
    seed: int,
) -> list[dict[str, Any]]:
    """Single and set MI of every heuristic and variant on one distance matrix."""
    members, others, m = pools
    rows = []
    heuristics: list[str | float] = ["median", *s.mc_percentiles]
    for heuristic in heuristics:
        for variant in ("epsilon", "distance"):
            attack = MonteCarloAttack(
                features,
                variant="epsilon" if variant == "epsilon" else "distance",
                heuristic="median" if heuristic == "median" else float(heuristic),
            )
            single, set_acc = mi_trials(
                attack.trial_scorer(d_in, d_out),
                members.shape[0],
                others.shape[0],
                set_size=m,
                trials=s.mi_trials,
                rng=np.random.default_rng(seed),
            )
            rows.append(
                {
                    "heuristic": heuristic
                    if heuristic == "median"
                    else f"{heuristic}%",
                    "variant": "MC-eps" if variant == "epsilon" else "MC-d",
                    "single_accuracy": single,
                    "set_accuracy": set_acc,
                }
            )
    return rows


def _reconstruction(
    s: GenerativeBenchSettings,
    data: _Data,
    vae: VAE,
    pools: tuple[np.ndarray, np.ndarray, int],
    seeds: dict[str, int],
) -> dict[str, Any]:
    """Run the reconstruction attack (seed 004 Ch. 4.4) in single and set MI."""
    members, others, m = pools
    started = time.perf_counter()
    candidates = np.concatenate([members, others])
    rec = reconstruction_scores(
        vae,
        data.pool[candidates],
        data.labels[candidates],
        num_samples=s.reconstruction_samples,
        seed=seeds["reconstruction"],
    )
    rec_in, rec_out = rec[: members.shape[0]], rec[members.shape[0] :]
    single, set_acc = mi_trials(
        lambda i, j: (rec_in[i], rec_out[j]),
        rec_in.shape[0],
        rec_out.shape[0],
        set_size=m,
        trials=s.mi_trials,
        rng=np.random.default_rng(seeds["mi_trials"]),
    )
    return {
        "single_accuracy": single,
        "set_accuracy": set_acc,
        "num_samples": s.reconstruction_samples,
        "wall_s": time.perf_counter() - started,
    }


def _monte_carlo(
    s: GenerativeBenchSettings,
    data: _Data,
    vae: VAE,
    gan: DCGANGenerator,
    seeds: dict[str, int],
    say: Callable[[str], None],
) -> dict[str, Any]:
    members, others, m = pools = _mi_pools(data, s, seeds["mi_pool"])
    targets = _monte_carlo_targets(s, data, vae, gan, seeds["mc_samples"])
    rows: list[dict[str, Any]] = []
    for distance in s.mc_distances:
        started = time.perf_counter()
        features = make_feature_map(distance, data.reference, seed=seeds["pca"])
        f_members = features.transform(data.pool[members])
        f_others = features.transform(data.pool[others])
        for model_name, (samples, labels) in targets.items():
            f_samples = features.transform(samples)
            with_labels = labels is not None
            d_in = pairwise_distances(
                f_members,
                f_samples,
                data.labels[members] if with_labels else None,
                labels,
            )
            d_out = pairwise_distances(
                f_others,
                f_samples,
                data.labels[others] if with_labels else None,
                labels,
            )
            rows += [
                {"model": model_name, "distance": distance, **row}
                for row in _monte_carlo_rows(
                    s, d_in, d_out, features, pools, seeds["mi_trials"]
                )
            ]
        say(f"monte carlo {distance}: {time.perf_counter() - started:.1f}s")
        rows[-1]["wall_s_distance"] = time.perf_counter() - started
    reconstruction = _reconstruction(s, data, vae, pools, seeds)
    say(
        f"reconstruction: single {reconstruction['single_accuracy']:.3f} "
        f"set {reconstruction['set_accuracy']:.3f}"
    )
    return {
        "set_size": m,
        "trials": s.mi_trials,
        "samples": s.mc_samples,
        "members": int(members.shape[0]),
        "nonmember_pool": int(others.shape[0]),
        "baseline": 0.5,
        "rows": rows,
        "reconstruction": reconstruction,
    }


def _single_and_set_mi(
    scores: np.ndarray, data: _Data, s: GenerativeBenchSettings, seeds: dict[str, int]
) -> dict[str, float]:
    """Single and set MI (seed 004 Attack Types 1-2) from fixed per-record scores."""
    members, others, m = _mi_pools(data, s, seeds["mi_pool"])
    single, set_acc = mi_trials(
        lambda i, j: (scores[members[i]], scores[others[j]]),
        members.shape[0],
        others.shape[0],
        set_size=m,
        trials=s.mi_trials,
        rng=np.random.default_rng(seeds["mi_trials"]),
    )
    return {"single_accuracy": single, "set_accuracy": set_acc, "set_size": m}


# ---------------------------------------------------------------- plots


def _plot_curves(
    path: Path,
    title: str,
    xlabel: str,
    series: list[tuple[str, list[dict[str, float]], str, float]],
) -> str:
    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for name, curve, key, baseline in series:
            (line,) = ax.plot(
                [p[key] for p in curve],
                [p["accuracy"] for p in curve],
                marker="o",
                label=name,
            )
            ax.axhline(baseline, color=line.get_color(), linestyle=":", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("attack accuracy (dotted: random guess)")
        ax.set_ylim(0, 1)
        ax.set_title(title)
        ax.legend(fontsize=8)

    return write_figure(path, draw, (6.0, 4.0))


def _plot_samples(path: Path, grids: dict[str, np.ndarray]) -> str:
    def draw(fig: Any) -> None:
        for row, (name, images) in enumerate(grids.items()):
            ax = fig.add_subplot(len(grids), 1, row + 1)
            tiles = images[:, 0]
            ax.imshow(np.concatenate(list(tiles), axis=1), cmap="gray", vmin=0, vmax=1)
            ax.set_title(name, fontsize=9)
            ax.axis("off")

    return write_figure(path, draw, (8.0, 1.3 * len(grids) + 0.5))


def _plots(
    out: Path,
    s: GenerativeBenchSettings,
    data: _Data,
    white_runs: list[dict[str, Any]],
    black_box: list[dict[str, Any]],
    auxiliary: list[dict[str, Any]],
    gan_samples: np.ndarray,
    vae_samples: np.ndarray,
    attacker_samples: np.ndarray | None,
) -> list[str]:
    def path(name: str) -> Path:
        return out.with_name(f"{out.stem}-{name}.png")

    plots = [
        _plot_curves(
            path("white-box"),
            f"White-box attack vs target training epochs ({s.dataset})",
            "target epochs",
            [
                (
                    "conditional DCGAN" if r["conditional"] else "DCGAN",
                    r["curve"],
                    "epoch",
                    r["baseline"],
                )
                for r in white_runs
            ],
        )
    ]
    if black_box:
        plots.append(
            _plot_curves(
                path("black-box"),
                f"Black-box attack vs attacker steps ({s.dataset})",
                "attacker steps",
                [
                    (f"target {r['target']}", r["curve"], "step", r["baseline"])
                    for r in black_box
                ],
            )
        )
    if auxiliary:
        plots.append(
            _plot_curves(
                path("auxiliary"),
                f"Auxiliary knowledge ({s.dataset})",
                "attacker steps",
                [
                    (
                        f"{r['setting']} {r['scenario']} d={r['delay_steps']}",
                        r["curve"],
                        "step",
                        r["baseline"],
                    )
                    for r in auxiliary
                ],
            )
        )
    grid_n = 12
    grids = {
        "real members": data.pool[np.flatnonzero(data.is_member)[:grid_n]],
        "target DCGAN": gan_samples[:grid_n],
        "target VAE": vae_samples[:grid_n],
    }
    if attacker_samples is not None:
        grids["attacker DCGAN (black-box)"] = attacker_samples
    plots.append(_plot_samples(path("samples"), grids))
    return plots


#: The parts of a run with their own child seed (:func:`_child_seeds`), in
#: spawn order.
_SEED_NAMES: tuple[str, ...] = (
    "gan_g", "gan_d", "gan_train", "eval", "attacker", "aux", "vae",
    "vae_train", "mi_pool", "mc_samples", "pca", "mi_trials",
    "reconstruction", "samples",
)  # fmt: skip


def run_mi_generative_bench(
    out: Path,
    *,
    quick: bool = False,
    dataset: str | None = None,
    seed: int = 0,
    device: str = "cpu",
    settings: GenerativeBenchSettings | None = None,
    parts: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    scale: str | None = None,
) -> dict[str, Any]:
    """Run the ``mi-generative`` parts, write the JSON report and plots.

    Parameters
    ----------
    out : Path
        The JSON file; plots go next to it as ``<stem>-<plot>.png``.
    quick : bool, default=False
        Use :data:`QUICK` (digits, CI-sized); the same as ``scale="quick"``.
    dataset : str, optional
        Override the dataset of the chosen settings.
    seed : int, default=0
        Run seed; every part's seed derives from it.
    device : str, default="cpu"
        Torch device of the training (``"cuda"`` on a GPU).
    settings : GenerativeBenchSettings, optional
        Full control over sizes (overrides ``quick``, ``scale`` and
        ``dataset``).
    parts : sequence of str, optional
        Attacks to run besides the white-box one (which is measured while the
        target trains): any of :data:`PARTS`; all by default.
    progress : callable, optional
        Receives one line of text per finished step.
    scale : str, optional
        A key of :data:`SCALES`: ``"quick"``, ``"cpu"`` (the default,
        :data:`CPU`), ``"thesis"`` (:data:`FULL`) or ``"thesis-wide"``
        (:data:`FULL_WIDE`).

    Returns
    -------
    dict
        The report written to ``out``.
    """
    s, scale_name = _resolve_settings(quick, scale, settings, dataset)
    chosen = list(PARTS if parts is None else dict.fromkeys(parts))
    unknown = [p for p in chosen if p not in PARTS]
    if unknown:
        raise ConfigError(f"unknown part(s) {unknown}; choose from {list(PARTS)}")
    bad = [d for d in s.mc_distances if d not in FEATURE_NAMES]
    if bad or not s.mc_distances:
        raise ConfigError(
            f"Monte Carlo distance(s) {bad or 'none'}: "
            f"choose from {list(FEATURE_NAMES)}"
        )
    say = progress or (lambda _: None)
    out = record_path(out)
    seeds = _child_seeds(seed, _SEED_NAMES)
    started = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        data = _load(s, seed)
        say(f"{s.dataset}: pool {data.pool.shape[0]}, members {data.num_members}")
        runs = _attack_all(s, data, seeds, device, chosen, say)
    plots = _plots(
        out,
        s,
        data,
        runs.white_box,
        runs.black_box,
        runs.auxiliary,
        runs.gan_samples,
        runs.vae_samples,
        runs.attacker_samples,
    )
    report: dict[str, Any] = {
        "quick": quick,
        "scale": scale_name,
        "seed": seed,
        "seeds": seeds,
        "device": device,
        "settings": asdict(s),
        "data": {
            "dataset": s.dataset,
            "pool": int(data.pool.shape[0]),
            "members": data.num_members,
            "random_guess": data.num_members / data.pool.shape[0],
        },
        "torch_threads": torch.get_num_threads(),
        "white_box": runs.white_box,
        "parts": ["white-box", *chosen],
        "black_box": runs.black_box,
        "white_vs_black_box": _white_vs_black_box(runs),
        "auxiliary": runs.auxiliary,
        "monte_carlo": runs.monte_carlo,
        "plots": [Path(p).name for p in plots],  # next to the JSON
    }
    return BenchRecord("mi-generative", out).finish(started, report)


def _resolve_settings(
    quick: bool,
    scale: str | None,
    settings: GenerativeBenchSettings | None,
    dataset: str | None,
) -> tuple[GenerativeBenchSettings, str | None]:
    """Return the settings to run and the scale's name (None: custom settings)."""
    if scale is not None and scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; choose from {list(SCALES)}")
    if quick and scale not in (None, "quick"):
        raise ConfigError(f"--quick contradicts --scale {scale}")
    name = scale or ("quick" if quick else "cpu")
    s = settings or SCALES[name]
    if dataset is not None and settings is None:
        s = replace(s, dataset=dataset)
    return s, None if settings is not None else name


@dataclass
class _AttackRuns:
    """What the attacks of one bench run measured and sampled."""

    white_box: list[dict[str, Any]]
    black_box: list[dict[str, Any]]
    auxiliary: list[dict[str, Any]]
    monte_carlo: dict[str, Any] | None
    gan_samples: np.ndarray
    vae_samples: np.ndarray
    attacker_samples: np.ndarray | None


def _vae_samples(
    s: GenerativeBenchSettings, data: _Data, vae: Any, seed: int
) -> np.ndarray:
    """Draw the target VAE's samples, labels from the members' (seeded)."""
    vae_labels = np.random.default_rng(seed).choice(
        data.member_labels, s.target_samples
    )
    out: np.ndarray = (
        vae.sample(
            s.target_samples,
            y=vae_labels,
            generator=torch.Generator().manual_seed(seed),
        )
        .numpy()
        .reshape(-1, *data.image_shape)
    )
    return out


def _attack_all(
    s: GenerativeBenchSettings,
    data: _Data,
    seeds: dict[str, int],
    device: str,
    chosen: list[str],
    say: Callable[[str], None],
) -> _AttackRuns:
    """Train the targets and run the white-box attack, then the chosen others."""
    white, gan = _white_box(s, data, seeds, device, False, say)
    white_runs = [white]
    if s.conditional:
        white_runs.append(_white_box(s, data, seeds, device, True, say)[0])
    gan_samples = _target_samples(
        gan, s.target_samples, data.image_shape, seeds["samples"]
    )
    vae = _train_vae(s, data, seeds, device)
    vae_samples = _vae_samples(s, data, vae, seeds["samples"])
    black_box: list[dict[str, Any]] = []
    attacker_samples: np.ndarray | None = None
    if "black-box" in chosen:
        bb_gan, attacker = _black_box(s, data, gan_samples, seeds, device, "dcgan", say)
        black_box = [
            bb_gan,
            _black_box(s, data, vae_samples, seeds, device, "vae", say)[0],
        ]
        attacker_samples = attacker.sample(12, seed=seeds["samples"])
    auxiliary = (
        _auxiliary(s, data, gan_samples, seeds, device, say)
        if "auxiliary" in chosen
        else []
    )
    monte_carlo = (
        _monte_carlo(s, data, vae, gan, seeds, say) if "monte-carlo" in chosen else None
    )
    return _AttackRuns(
        white_runs,
        black_box,
        auxiliary,
        monte_carlo,
        gan_samples,
        vae_samples,
        attacker_samples,
    )


def _white_vs_black_box(runs: _AttackRuns) -> dict[str, float] | None:
    if not runs.black_box:
        return None
    white = runs.white_box[0]["final_accuracy"]
    black = runs.black_box[0]["final_accuracy"]
    return {
        "white_box_accuracy": white,
        "black_box_accuracy": black,
        "ratio": black / white if white else float("nan"),
    }


def _knowledge_table(runs: Sequence[dict[str, Any]]) -> Table:
    """Tabulate the auxiliary attacks' final scores both ways.

    See :func:`knowledge_diagnosis`.
    """
    table = Table(
        "attack", "acc. unknown", "acc. all of X", "AUC unknown",
        "rank known in", "rank unknown in", "rank unknown out", "rank known out",
        title="Auxiliary knowledge: unknown records only, or every record as in "
        "Ch. 6.1.4; mean percentile ranks (1 = highest score)",
    )  # fmt: skip
    for run in runs:
        table.add_row(
            f"{run['setting'][:4]}. {run['scenario']} d={run['delay_steps']}",
            fmt(run["final_accuracy"]),
            fmt(run["accuracy_all_records"]),
            fmt(run["unknown_auc"]),
            *(
                fmt(run[f"rank_{group}"])
                for group in (
                    "known_members",
                    "unknown_members",
                    "unknown_non_members",
                    "known_non_members",
                )
            ),
        )
    return table


def _generative_tables(report: dict[str, Any]) -> list[Table]:
    attacks = Table(
        "attack", "target", "top-n acc", "chance", "lift", "single MI", "set MI",
        title="Top-n accuracy over the pool; single/set MI on M vs M records",
    )  # fmt: skip
    for run in report["white_box"]:
        kind = "conditional DCGAN" if run["conditional"] else "DCGAN"
        attacks.add_row(
            "white-box",
            kind,
            fmt(run["final_accuracy"]),
            fmt(run["baseline"]),
            fmt(run["lift"]),
            fmt(run["single_accuracy"]),
            fmt(run["set_accuracy"]),
        )
    for run in report["black_box"] or []:
        attacks.add_row(
            "black-box",
            run["target"],
            fmt(run["final_accuracy"]),
            fmt(run["baseline"]),
            fmt(run["lift"]),
            fmt(run["single_accuracy"]),
            fmt(run["set_accuracy"]),
        )
    for run in report["auxiliary"]:
        attacks.add_row(
            f"{run['setting'][:4]}. {run['scenario']} d={run['delay_steps']}",
            "DCGAN",
            fmt(run["final_accuracy"]),
            fmt(run["baseline"]),
            fmt(run["lift"]),
            "",
            "",
        )
    tables = [attacks]
    if report["auxiliary"]:
        tables.append(_knowledge_table(report["auxiliary"]))
    if report["monte_carlo"] is None:
        return tables
    rec = report["monte_carlo"]["reconstruction"]
    attacks.add_row(
        "reconstruction",
        "VAE",
        "",
        "",
        "",
        fmt(rec["single_accuracy"]),
        fmt(rec["set_accuracy"]),
    )
    mc = Table(
        "model", "distance", "heuristic", "variant", "single MI", "set MI",
        title="Monte Carlo attack (chance 0.5)",
    )  # fmt: skip
    for row in report["monte_carlo"]["rows"]:
        mc.add_row(
            row["model"],
            row["distance"],
            row["heuristic"],
            row["variant"],
            fmt(row["single_accuracy"]),
            fmt(row["set_accuracy"]),
        )
    return [attacks, mc]


def command(
    out: OutOption = Path("bench-mi-generative.json"),
    quick: Annotated[
        bool,
        typer.Option("--quick", help="CI-sized: digits, 400-record pool."),
    ] = False,
    scale: Annotated[
        str | None,
        typer.Option(
            help="quick (= --quick), cpu (default: Fashion-MNIST, 1,000-record "
            "pool, about half an hour on 2 cores), thesis (6,000-record pool, "
            "the seed's schedules; use a GPU: 6.5 minutes on an H200) or "
            "thesis-wide (thesis with 64/128-channel DCGANs).",
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(help="digits or fashion-mnist (default: by --quick)."),
    ] = None,
    seed: SeedOption = 0,
    device: Annotated[
        str, typer.Option(help="Torch device of the training, e.g. cuda.")
    ] = "cpu",
    part: Annotated[
        list[str] | None,
        typer.Option(
            "--part",
            help="Attack to run besides white-box (repeatable): black-box, "
            "auxiliary, monte-carlo. Default: all.",
        ),
    ] = None,
    target_epochs: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Epochs of the target DCGANs instead of the scale's (seed 004 "
            "Ch. 4.4: 500; seed 000 Ch. 6.2.4 fixes them at 400).",
        ),
    ] = None,
    mi_trials: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Random member / non-member draws per MI figure instead of the "
            "scale's (more trials, smaller standard errors).",
        ),
    ] = None,
    mc_distance: Annotated[
        list[str] | None,
        typer.Option(
            "--mc-distance",
            help="Distance of the Monte Carlo attack (repeatable): pca, hog, "
            "chist. Default: the scale's (all three).",
        ),
    ] = None,
) -> None:
    """MI on generative models: white/black-box, auxiliary, Monte Carlo."""
    s, _ = _resolve_settings(quick, scale, None, dataset)
    custom = s
    if target_epochs is not None:
        custom = replace(custom, target_epochs=target_epochs)
    if mi_trials is not None:
        custom = replace(custom, mi_trials=mi_trials)
    if mc_distance:
        custom = replace(custom, mc_distances=tuple(mc_distance))
    report = run_mi_generative_bench(
        out,
        quick=quick,
        dataset=dataset,
        seed=seed,
        device=device,
        settings=None if custom == s else custom,
        parts=part,
        progress=say,
        scale=scale,
    )
    for table in _generative_tables(report):
        console.print(table)
    console.print(f"wall time: {report['wall_s']:.1f} s", highlight=False)
    written(out, report["plots"])
