"""The CLI start-up measurement of ``fedleak bench engine``."""

from __future__ import annotations

from fedleak.bench.startup import measure_cli_startup


def test_each_command_is_timed_in_fresh_processes_with_its_exit_status() -> None:
    found = measure_cli_startup(repeats=2)
    assert found["repeats"] == 2
    for name in ("fedleak_help", "fedleak_run_help", "fedleak_config_error"):
        entry = found[name]
        assert len(entry["times_s"]) == 2
        assert min(entry["times_s"]) <= entry["median_s"] <= max(entry["times_s"])
    assert found["fedleak_help"]["exit"] == 0
    assert found["fedleak_run_help"]["exit"] == 0
    # the configuration error is reported as a usage error, not a crash
    assert found["fedleak_config_error"]["exit"] == 2


def test_help_and_config_errors_load_neither_torch_nor_flower_nor_ray(tmp_path) -> None:
    """``fedleak --help``, ``run --help`` and a config error import no heavy package."""
    import subprocess
    import sys

    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\nrounds = 2\n[federation]\nbogus = 1\n', encoding="utf-8"
    )
    probe = (
        "import sys\n"
        "from fedleak.cli import app\n"
        "try:\n"
        "    app(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        "except Exception as err:\n"
        "    print('raised', type(err).__name__, file=sys.stderr)\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'flwr', 'ray'})\n"
        "print('heavy:', ','.join(heavy))\n"
    )
    for args in (
        ["--help"],
        ["run", "--help"],
        ["run", str(bad), "--out", str(tmp_path / "r")],
    ):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args],
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.strip().endswith("heavy:"), (args, done.stdout[-300:])
