r"""The ServerApp behind ``flwr run .`` (Flower's own tooling).

The repository's ``pyproject.toml`` names this ServerApp (``app``) and the
experiment ClientApp (``client_app``: honest nodes, or the adversary and target
roles the experiment's ``[adversary]`` and ``[target]`` sections assign by
partition id) in ``[tool.flwr.app.components]``; its ``[tool.flwr.app.config]``
holds

``config``
    The experiment file. A relative path is looked up in the app bundle (the
    folder ``flwr run`` shipped, where a user's own experiment file lives),
    then in the current directory, then among the experiment files bundled
    with fedleak (by name).
``overrides``
    Space-separated ``key=value`` overrides, as ``fedleak run --set``.
``out``
    The run directory ("" = ``runs/<name>/<timestamp>`` under the current
    directory of the ServerApp process).

Example::

    export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
    flwr run . local --stream \\
        --run-config "overrides='rounds=20'" \\
        --federation-config "num-supernodes=4"

``num-supernodes`` must equal the experiment's ``federation.num_clients``:
the server waits for that many nodes before round 1.
"""

from __future__ import annotations

import os
import shlex
from contextlib import AbstractContextManager, nullcontext
from importlib import resources
from pathlib import Path

from flwr.app import Context
from flwr.common import log
from flwr.common.config import get_project_dir
from flwr.serverapp import Grid, ServerApp

from fedleak.errors import ConfigError
from fedleak.runtime.engine import (
    RAY_INLINE_BYTES,
    fast_engine_for,
    install_engine,
    keep_freed_memory,
)
from fedleak.runtime.run_dir import make_run_dir, write_config

from .config import load_config
from .runner import make_experiment_client_app, preflight
from .server import RunRecorder, finish_run, run_federation

__all__ = ["app", "app_dir_of", "client_app", "resolve_config_path"]


def resolve_config_path(name: str, app_dir: Path | None = None) -> Path:
    """Find an experiment file: in ``app_dir``, as given, else bundled with fedleak.

    Parameters
    ----------
    name : str
        The ``config`` value of the run config.
    app_dir : pathlib.Path, optional
        The installed app bundle of the run (relative names are looked up
        there first).

    Raises
    ------
    ConfigError
        If the file is in none of the places, naming them.
    """
    path = Path(name)
    if app_dir is not None and not path.is_absolute() and (app_dir / path).is_file():
        return app_dir / path
    if path.is_file():
        return path
    bundled = resources.files("fedleak.sim_configs") / path.name
    if bundled.is_file():
        return Path(str(bundled))
    where = f"the app bundle {app_dir}, " if app_dir is not None else ""
    raise ConfigError(
        f"experiment file {name!r} not found (looked in {where}the current "
        f"directory {Path.cwd()} and among the files bundled with fedleak)"
    )


def app_dir_of(grid: Grid) -> Path | None:
    """Return the folder the run's app bundle (FAB) was installed to, if any."""
    try:
        run = grid.run
        if not run.fab_id or not run.fab_version:
            return None
        folder = get_project_dir(run.fab_id, run.fab_version, run.fab_hash)
    except Exception:  # no FAB (e.g. run_simulation): no bundle
        return None
    return folder if folder.is_dir() else None


app = ServerApp()

#: The ClientApp of ``flwr run .``: the same roles as ``fedleak run``.
client_app = make_experiment_client_app()

# Flower's simulation loads this ClientApp before it starts Ray and its
# message threads (which look their functions up then); the ServerApp's
# main() may start later. So fedleak's engine functions go in now, dormant
# (exactly Flower's behaviour until main() activates them), and Ray's
# processes get the engine's inlining and memory settings through their
# environment.
# The flwr-simulation process runs this one run and exits.
install_engine()
keep_freed_memory()
os.environ.setdefault("RAY_max_direct_call_object_size", str(RAY_INLINE_BYTES))


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the experiment named by the run config on ``grid``."""
    run_config = context.run_config
    name = str(run_config.get("config", "quickstart.toml"))
    overrides = shlex.split(str(run_config.get("overrides", "")))
    config = load_config(resolve_config_path(name, app_dir_of(grid)), overrides)
    preflight(config)
    out = str(run_config.get("out", "")) or None
    run_dir = make_run_dir(config.name, out)
    write_config(run_dir / "config.toml", config)
    recorder = RunRecorder(config, run_dir)
    federation = config.federation
    engine: AbstractContextManager[bool] = (
        fast_engine_for(federation)
        if federation.engine == "fedleak"
        else nullcontext(False)
    )
    with engine:
        result = run_federation(grid, config, recorder)
    results = finish_run(run_dir, config, result, recorder)
    log(20, "fedleak: final %s; results in %s", results["final"], run_dir.resolve())
