"""Flower's and Ray's output trimmed to what a fedleak user needs."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["quiet_flower"]


class _DropDeprecation(logging.Filter):
    """Drop Flower warnings that say nothing to a fedleak user."""

    noise = (
        "DEPRECATED FEATURE",
        "Federated evaluation will be skipped",
        "No fit_metrics_aggregation_fn provided",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in self.noise)


class _OneLineClientErrors(logging.Filter):
    """Shorten a ClientApp's exception to one line (its full traceback with ``-v``).

    Flower's simulation logs each client exception twice at ERROR level: the
    exception (whose text holds Ray's remote traceback) and the local
    traceback, about 160 lines per crash.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, BaseException):
            lines = [line for line in str(record.msg).splitlines() if line.strip()]
            cause = lines[-1].strip() if lines else type(record.msg).__name__
            record.msg = f"a client failed: {cause}"
            record.args = ()
            return True
        message = record.getMessage()
        return not message.startswith("Traceback (most recent call last)")


@contextmanager
def quiet_flower(verbose: bool) -> Iterator[None]:
    """Silence Flower's INFO chatter and Ray's start-up noise unless ``verbose``."""
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    logger = logging.getLogger("flwr")
    old_level = logger.level
    drop = _DropDeprecation()
    shorten = _OneLineClientErrors()
    if not verbose:
        logger.setLevel(logging.WARNING)
        logger.addFilter(drop)
        logger.addFilter(shorten)
    try:
        with warnings.catch_warnings():
            if not verbose:
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        logger.setLevel(old_level)
        logger.removeFilter(drop)
        logger.removeFilter(shorten)
