"""pytest plugin: every scenario file (``simulator/scenarios/*.yaml``) is one test item.

Loaded by the project's root ``conftest.py`` (and with ``-p simulator.scenarios.plugin`` by
``python -m simulator scenario``), so all of pytest works on scenarios::

    pytest simulator/scenarios                      # every scenario, against a stack it starts
    pytest simulator/scenarios -k bulk -v           # by name; -v adds the table of every expectation
    pytest simulator/scenarios -m webhooks          # by the file's tags (markers)
    pytest simulator/scenarios -n auto              # pytest-xdist: each worker starts its own stack
    pytest simulator/scenarios --junitxml=report.xml

- Collection: each file is validated (``schema.py``, then ``model``) while collecting, so a
  bad file fails the collection with its file, line and key before any stack starts.
- The stack (API, worker and simulator as real processes, ``stack.running_stack``) is one
  per session (per xdist worker), started by the first item that needs it: a scenario or a
  test using the ``scenario_stack`` fixture. Those items are moved to the end of the run and
  the stack is stopped after the last of them. ``--scenario-base-url``/``--scenario-sim-url``
  run against a service that is already up instead.
- Scheduling: without xdist, the first scenario that does not change the engine's mode
  starts every remaining such scenario on a pool (``--scenario-parallel``, default 4: each
  has its own customers); those that change the engine's mode (``Scenario.exclusive``) run
  first, alone. Each item then reports its own scenario's result.
- Output: one line per scenario (met/total, its own time); a failure lists every missed
  expectation in full; ``-v`` adds the table of every expectation at the end.
"""
from __future__ import annotations

import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, nullcontext

import pytest
import requests

from simulator.scenarios import SCENARIO_DIR, model, runner
from simulator.scenarios.files import load_scenario
from simulator.scenarios.operator import Operator
from simulator.scenarios.schema import TAGS

PLUGIN_NAME = "scenario-session"
SCENARIO_MARKER = "scenario"
STACK_FIXTURE = "scenario_stack"


def pytest_addoption(parser):
    group = parser.getgroup("scenarios", "QA scenarios (simulator/scenarios/*.yaml)")
    group.addoption("--scenario-base-url", default=None, metavar="URL",
                    help="run against this running service instead of starting a stack (needs --scenario-sim-url)")
    group.addoption("--scenario-sim-url", default=None, metavar="URL",
                    help="the simulator that running service uses as its engine")
    group.addoption("--scenario-hook-base-url", default=None, metavar="URL",
                    help="the simulator as the service's workers reach it (default: --scenario-sim-url)")
    group.addoption("--scenario-operator", default=None, metavar="CMD",
                    help="operator CLI prefix (default: '<this python> -m flask --app wsgi' in the project root)")
    group.addoption("--scenario-operator-query", default=None, metavar="CMD",
                    help="attempt-log query prefix (default: '<this python> -m simulator.scenarios.operator_query')")
    group.addoption("--scenario-parallel", type=int, default=4, metavar="N",
                    help="scenarios run at once on one stack (default %(default)s; 1: one by one)")
    group.addoption("--scenario-timeout-scale", type=float, default=1.0, metavar="X",
                    help="multiply every wait's timeout (slow machines)")
    group.addoption("--scenario-time-scale", type=float, default=None, metavar="X",
                    help="the started simulator's SIM_TIME_SCALE (default 0.02: scans take 1.2 to 3.6 s)")
    group.addoption("--scenario-api-port", default=None, metavar="PORT",
                    help="the started API's port (default: $SCENARIO_API_PORT, else a free one; with -n, "
                         "worker N adds N)")
    group.addoption("--scenario-sim-port", default=None, metavar="PORT",
                    help="the started simulator's port (default: $SCENARIO_SIM_PORT, else a free one; with -n, "
                         "worker N adds N)")


def pytest_configure(config):
    config.addinivalue_line("markers", f"{SCENARIO_MARKER}: a QA scenario file run against the whole stack")
    for tag, meaning in TAGS.items():
        config.addinivalue_line("markers", f"{tag}: scenario tag: {meaning}")
    if bool(config.getoption("scenario_base_url")) != bool(config.getoption("scenario_sim_url")):
        raise pytest.UsageError("--scenario-base-url and --scenario-sim-url go together")
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(ScenarioSession(config), PLUGIN_NAME)


def pytest_collect_file(file_path, parent):
    if file_path.suffix not in (".yaml", ".yml") or file_path.name.startswith("_"):
        return None
    if file_path.resolve().parent == SCENARIO_DIR or parent.session.isinitpath(file_path):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


@pytest.fixture(scope="session")
def scenario_stack(request):
    """The session's running stack (``stack.Stack``), shared with the scenario items."""
    session = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    try:
        stack = session.start()
    except StackUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    if stack is None:
        pytest.skip("needs a stack of its own; --scenario-base-url points at a running service")
    return stack


class StackUnavailable(RuntimeError):
    """The stack could not be started (or the given service cannot be reached)."""


class ScenarioMissed(AssertionError):
    def __init__(self, result: runner.ScenarioResult):
        super().__init__(f"{result.name}: {len(result.missed)} of {len(result.rows)} expectations missed")
        self.result = result


class ScenarioFile(pytest.File):
    def collect(self):
        scenario = load_scenario(self.path)
        yield ScenarioItem.from_parent(self, name=scenario.name, scenario=scenario)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, model.ScenarioError):
            return f"invalid scenario file:\n{excinfo.value}"
        return super().repr_failure(excinfo, style)


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario: model.Scenario, **kwargs):
        super().__init__(**kwargs)
        self.scenario = scenario
        self.result: runner.ScenarioResult | None = None
        self.add_marker(SCENARIO_MARKER)
        # Under pytest-xdist's --dist loadgroup (make test) every scenario goes to one worker, which
        # runs them on one stack and its pool, as a run without xdist does: one stack, not one a worker.
        if self.config.pluginmanager.hasplugin("xdist"):
            self.add_marker(pytest.mark.xdist_group("scenarios"))
        self.add_marker("processes")  # runs against the stack's real processes: not in make test-fast
        for tag in scenario.tags:
            self.add_marker(tag)

    def runtest(self):
        session: ScenarioSession = self.config.pluginmanager.get_plugin(PLUGIN_NAME)
        self.result = result = session.run(self)
        met = len(result.rows) - len(result.missed)
        self.user_properties += [("expectations_met", met), ("expectations_total", len(result.rows)),
                                 ("scenario_seconds", round(result.duration, 2))]
        if not result.ok:
            raise ScenarioMissed(result)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ScenarioMissed):
            return excinfo.value.result.missed_text()
        if isinstance(excinfo.value, StackUnavailable):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"scenario {self.name}"


def _uses_stack(item) -> bool:
    return isinstance(item, ScenarioItem) or STACK_FIXTURE in getattr(item, "fixturenames", ())


class ScenarioSession:
    """The session's stack, its scenario pool and the results, for the hooks below."""

    def __init__(self, config):
        self.config = config
        self.xdist_worker = hasattr(config, "workerinput")
        # loadgroup sends every scenario to one worker: it may run them at once, as without xdist.
        self.grouped = self.xdist_worker and getattr(config.option, "dist", None) == "loadgroup"
        self.parallel = max(1, config.getoption("scenario_parallel"))
        self.lock = threading.Lock()
        self.exit: ExitStack | None = None
        self.stack = None
        self.run_config: runner.RunConfig | None = None
        self.error: str | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.futures: dict[str, Future] = {}
        self.failed = False
        self.last_user: str | None = None
        self.reports: list = []

    # --- the stack -----------------------------------------------------------------------

    def _no_capture(self):
        capman = self.config.pluginmanager.getplugin("capturemanager")
        return capman.global_and_fixture_disabled() if capman else nullcontext()

    def start(self):
        """The running stack (``None`` against a given service); starts it on first use."""
        with self.lock:
            if self.error:
                raise StackUnavailable(f"{self.error.splitlines()[0]} (see the first failure)")
            if self.run_config is not None:
                return self.stack
            option = self.config.getoption
            if option("scenario_base_url"):
                self._external(option)
                return None
            from simulator.scenarios.stack import DEFAULT_TIME_SCALE, StackError, running_stack
            self.exit = ExitStack()
            try:
                api_port, sim_port = self._ports(option)
                self.stack = self.exit.enter_context(running_stack(
                    quiet=True, time_scale=option("scenario_time_scale") or DEFAULT_TIME_SCALE,
                    # xdist workers each start a stack: shared test services would collide.
                    use_test_services=not self.xdist_worker, api_port=api_port, sim_port=sim_port))
            except StackError as exc:
                self.error = f"the scenario stack did not start: {exc}"
                with self._no_capture():
                    self.exit.close()
                raise StackUnavailable(self.error) from None
            self.run_config = self.stack.run_config(timeout_scale=option("scenario_timeout_scale"))
            return self.stack

    def _ports(self, option) -> tuple[int | None, int | None]:
        """The ports chosen for the stack (None: a free one); each xdist worker's stack adds its
        number (gw2: PORT + 2), so that the workers' stacks do not collide."""
        from simulator.scenarios.stack import PORT_SETTINGS, chosen_port
        ports = (chosen_port(option("scenario_api_port"), PORT_SETTINGS["api"]),
                 chosen_port(option("scenario_sim_port"), PORT_SETTINGS["simulator"]))
        offset = int(self.config.workerinput["workerid"].removeprefix("gw")) if self.xdist_worker else 0
        return tuple(None if port is None else port + offset for port in ports)  # type: ignore[return-value]

    def _external(self, option) -> None:
        config = runner.RunConfig(
            base_url=option("scenario_base_url"), sim_url=option("scenario_sim_url"),
            hook_base_url=option("scenario_hook_base_url"),
            operator=Operator(option("scenario_operator"), option("scenario_operator_query")),
            timeout_scale=option("scenario_timeout_scale"))
        try:
            requests.get(config.base_url + "/healthz", timeout=5)
            requests.get(config.sim_url + "/_sim/engine/mode", timeout=5)
        except requests.RequestException as exc:
            self.error = "cannot reach the service or the simulator"
            # Nothing can run: stop the session with a usage error, in one line.
            pytest.exit(f"{self.error} ({config.base_url}, {config.sim_url}): {exc.__class__.__name__}",
                        returncode=pytest.ExitCode.USAGE_ERROR)
        self.run_config = config

    def stop(self) -> None:
        with self.lock:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
                self.pool = None
            if self.exit is not None:
                if self.failed and self.stack is not None:
                    self.stack.mark_failed()  # keeps the processes' logs in artifacts/scenarios/
                    self._end_results_line()  # the stack says where on a line of its own
                try:
                    with self._no_capture():
                        self.exit.close()
                except Exception as exc:
                    print(f"stack: tearing down failed: {exc.__class__.__name__}: {exc}", file=sys.stderr)
                self.exit = None
            self.stack = None
            self.run_config = None

    def _end_results_line(self) -> None:
        """End the line pytest is writing results on (``x.yaml F``), so what the stack prints
        while stopping (where the logs are kept) starts a line of its own."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.flush()

    # --- running -------------------------------------------------------------------------

    def run(self, item: ScenarioItem) -> runner.ScenarioResult:
        self.start()
        future = self.futures.get(item.nodeid)
        if future is None:
            if item.scenario.exclusive or (self.xdist_worker and not self.grouped) or self.parallel == 1:
                self._drain()  # whatever changes the engine's mode runs alone
                result = runner.run_scenario(item.scenario, self.run_config)
            else:
                future = self._submit_from(item)
        if future is not None:
            result = future.result()
        if not result.ok:
            self.failed = True
        return result

    def _submit_from(self, item: ScenarioItem) -> Future:
        """Start ``item`` and every later selected scenario that can share the stack."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="scenario")
        items = item.session.items
        start = items.index(item) if item in items else len(items)
        for other in [item, *items[start + 1:]]:
            if isinstance(other, ScenarioItem) and not other.scenario.exclusive and other.nodeid not in self.futures:
                self.futures[other.nodeid] = self.pool.submit(runner.run_scenario, other.scenario, self.run_config)
        return self.futures[item.nodeid]

    def _drain(self) -> None:
        for future in list(self.futures.values()):
            try:
                future.result()
            except Exception:
                pass

    # --- hooks ------------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        """Stack users last (so the stack lives as briefly as possible); among scenarios,
        those that change the engine's mode first, so they never overlap the pool."""
        users = [i for i in items if _uses_stack(i)]
        if not users:
            return
        scenarios = [i for i in users if isinstance(i, ScenarioItem)]
        ordered = ([i for i in scenarios if i.scenario.exclusive] + [i for i in scenarios if not i.scenario.exclusive]
                   + [i for i in users if not isinstance(i, ScenarioItem)])
        items[:] = [i for i in items if not _uses_stack(i)] + ordered

    def pytest_collection_finish(self, session):
        users = [i for i in session.items if _uses_stack(i)]
        self.last_user = users[-1].nodeid if users and not self.xdist_worker else None

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item, nextitem):
        # After the session's last item, the session's end stops the stack: pytest has then
        # finished the results line ("[100%]"), and the stack's notices follow it.
        if self.last_user is not None and item.nodeid == self.last_user and nextitem is not None:
            self.stop()

    def pytest_sessionfinish(self, session):
        self.stop()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if isinstance(item, ScenarioItem) and call.when == "call" and item.result is not None:
            result = item.result
            report.scenario = {
                "name": result.name, "met": len(result.rows) - len(result.missed), "total": len(result.rows),
                "seconds": round(result.duration, 1),
                "rows": [[r.step, r.expectation, r.met, r.observed] for r in result.rows],
            }
        return report

    def pytest_runtest_logreport(self, report):
        if getattr(report, "scenario", None):
            self.reports.append(report)

    def pytest_report_teststatus(self, report, config):
        info = getattr(report, "scenario", None)
        if not info or report.when != "call" or config.get_verbosity() < 0:
            return None
        if hasattr(report, "node") and config.get_verbosity() == 0:
            return None  # xdist writes results on one line: the usual '.' and 'F' (-v gives lines)
        met, total, seconds = info["met"], info["total"], info["seconds"]
        if report.passed:
            return "passed", f" {met}/{total} met ({seconds}s)", (f"PASSED {met}/{total} met ({seconds}s)",
                                                                 {"green": True})
        missed = total - met
        return ("failed", f" {missed} MISSED, {met}/{total} met ({seconds}s)",
                (f"FAILED {missed} MISSED, {met}/{total} met ({seconds}s)", {"red": True}))

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if config.get_verbosity() < 1 or not self.reports:
            return
        results = [runner.ScenarioResult(r.scenario["name"], "", [
            runner.Row(r.scenario["name"], *row) for row in r.scenario["rows"]]) for r in self.reports]
        terminalreporter.write_sep("=", "scenario expectations")
        terminalreporter.write_line(runner.format_table(results))
