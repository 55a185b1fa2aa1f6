"""A run's folder: created safely, and the resolved experiment written into it.

Flower-free: ``fedleak run``'s argument checks use it before anything heavy
is imported.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import BaseModel

from fedleak.errors import ConfigError
from fedleak.files import write_atomic

__all__ = ["make_run_dir", "write_config"]


def make_run_dir(name: str, out: str | Path | None, base: str | Path = "runs") -> Path:
    """Create the run directory: ``out`` or ``<base>/<name>/<timestamp>``.

    Raises
    ------
    fedleak.errors.ConfigError
        If ``out`` already holds a run (use ``fedleak run --resume``), is a
        file, lies below a file, or cannot be created or written.
    """
    if out is not None:
        path = Path(out)
        if path.exists() and not path.is_dir():
            raise ConfigError(
                f"run folder {path} (--out): a file, not a folder; choose a folder"
            )
        if any((path / name).exists() for name in ("results.json", "rounds.jsonl")):
            raise ConfigError(
                f"{path} already holds a run (results.json or rounds.jsonl); "
                "choose another --out folder so nothing is overwritten, or go on "
                f"with fedleak run --resume {path}"
            )
    else:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        path = Path(base) / name / stamp
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".fedleak-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        if isinstance(err, FileExistsError | NotADirectoryError):
            reason = "a part of the path is a file, not a folder"
        raise ConfigError(
            f"run folder {path} (--out): cannot create it ({reason})"
        ) from None
    return path


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def write_config(path: Path, config: BaseModel) -> None:
    """Write the resolved experiment as TOML, atomically (unset keys left out)."""
    text = tomli_w.dumps(_without_none(config.model_dump(mode="json")))

    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    write_atomic(path, write)
