"""The simulator's Flask application: the engine (E1/E3) and the webhook receivers (E4).

Settings, from the ``config`` argument or else the environment:

- ``ENGINE_TOKEN``: when non-empty, every ``/v1`` call must carry ``Authorization: Bearer <it>``.
- ``SIM_TIME_SCALE``: factor applied to the 60 to 180 s investigation durations (default 1).
- ``ENGINE_CALLBACK_SECRET``: the ``whsec_`` secret callbacks are signed with (E7); unset, the
  simulator offers no callbacks (``simulator.callbacks``).
- ``SIM_CALLBACK_SENDERS``: how many threads send those callbacks, each with its own kept-alive
  connection (default 8, at least 1): a receiver slow to answer holds up only the one sending to it.
- ``SIM_OIDC_CLIENTS``: clients of the stand-in OpenID provider under ``/_sim/oidc``
  (``simulator.oidc``, development and QA only), as JSON.
"""
import json
import os

from flask import Flask
from werkzeug.exceptions import HTTPException

from simulator import oidc
from simulator.callbacks import DEFAULT_SENDERS
from simulator.engine import engine_bp
from simulator.receiver import receiver_bp


def create_sim_app(config: dict | None = None) -> Flask:
    """Build a simulator app; each app has its own engine mode, stats and receivers."""
    app = Flask("simulator")
    app.config.update(
        ENGINE_TOKEN=os.environ.get("ENGINE_TOKEN", ""),
        SIM_TIME_SCALE=os.environ.get("SIM_TIME_SCALE") or 1.0,
        ENGINE_CALLBACK_SECRET=os.environ.get("ENGINE_CALLBACK_SECRET", ""),
        SIM_CALLBACK_SENDERS=os.environ.get("SIM_CALLBACK_SENDERS") or DEFAULT_SENDERS,
    )
    app.config.update(config or {})
    app.config["SIM_TIME_SCALE"] = _time_scale(app.config["SIM_TIME_SCALE"])
    app.config["SIM_CALLBACK_SENDERS"] = _senders(app.config["SIM_CALLBACK_SENDERS"])
    # Keep bodies in the order the code builds them: easier to read in QA logs.
    app.json.sort_keys = False
    app.register_blueprint(engine_bp)
    app.register_blueprint(receiver_bp)
    app.register_blueprint(oidc.oidc_bp)
    oidc.init_app(app)
    app.register_error_handler(HTTPException, _json_http_error)
    return app


def _time_scale(value) -> float:
    scale = float(value)
    if scale < 0:
        raise ValueError(f"SIM_TIME_SCALE must not be negative, got {value!r}")
    return scale


def _senders(value) -> int:
    senders = int(value)
    if senders < 1:
        raise ValueError(f"SIM_CALLBACK_SENDERS must be at least 1, got {value!r}")
    return senders


def _json_http_error(exc: HTTPException):
    """Routing and framework errors (404, 405, 500...) as JSON, keeping their headers."""
    response = exc.get_response()
    code = (exc.name or "error").lower().replace(" ", "_")
    response.set_data(json.dumps({"error": {"code": code, "message": exc.description}}))
    response.content_type = "application/json"
    return response
