"""Command line: ``python -m simulator`` serves the simulator; ``scenario`` runs QA scenarios.

    python -m simulator [--host 127.0.0.1] [--port 8700] [--time-scale X] [--callback-senders N]
    python -m simulator scenario NAME|all [scenario options] [pytest options]

Everything after ``scenario`` is handed to ``simulator.scenarios.runner.main(argv)``, which
runs pytest on the scenario files (``simulator.scenarios.plugin``).
"""
import argparse
import importlib
import logging
import sys

from werkzeug.serving import run_simple

from simulator.app import create_sim_app

log = logging.getLogger("simulator")
RUNNER_MODULE = "simulator.scenarios.runner"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Dispatched by hand rather than with argparse sub-parsers, so that the runner's own
    # options pass through untouched.
    if argv[:1] == ["scenario"]:
        return run_scenarios(argv[1:])
    return serve(_parse_serve_args(argv))


def _parse_serve_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description="Serve the engine simulator and webhook receivers.",
        epilog="Sub-command: 'scenario NAME|all ...' runs QA scenarios with pytest (see docs/scenarios.md).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8700)
    parser.add_argument("--time-scale", type=float, default=None,
                        help="multiply investigation durations (default: SIM_TIME_SCALE or 1)")
    parser.add_argument("--callback-senders", type=int, default=None,
                        help="threads sending callbacks, one connection each (default: SIM_CALLBACK_SENDERS or 8)")
    return parser.parse_args(argv)


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = {} if args.time_scale is None else {"SIM_TIME_SCALE": args.time_scale}
    if args.callback_senders is not None:
        config["SIM_CALLBACK_SENDERS"] = args.callback_senders
    app = create_sim_app(config)
    log.info("simulator listening on http://%s:%d (time scale %s, %d callback senders, engine token %s)",
             args.host, args.port, app.config["SIM_TIME_SCALE"], app.config["SIM_CALLBACK_SENDERS"],
             "required" if app.config["ENGINE_TOKEN"] else "not checked")
    run_simple(args.host, args.port, app, threaded=True)
    return 0


def run_scenarios(argv: list[str]) -> int:
    try:
        runner = importlib.import_module(RUNNER_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name not in (RUNNER_MODULE, RUNNER_MODULE.rpartition(".")[0]):
            raise
        print(f"error: the scenario runner ({RUNNER_MODULE}) is not installed", file=sys.stderr)
        return 2
    return runner.main(argv)


if __name__ == "__main__":
    sys.exit(main())
