"""Health checks for operators: liveness and readiness. No key, no charge (D2)."""
from __future__ import annotations

from flask import Blueprint, jsonify

from app.extensions import db
from app.plumbing import runtime

blp = Blueprint("health", __name__)


@blp.get("/healthz")
def healthz():
    """The process is alive and serving; says nothing about its dependencies."""
    return jsonify({"ok": True, "status": "alive"})


def _check_database() -> str | None:
    try:
        db.execute_sql("SELECT 1")
        return None
    except Exception as exc:  # any failure means "not ready"; the class name is enough
        return exc.__class__.__name__
    finally:
        if not db.is_closed():
            db.close()


def _check_redis() -> str | None:
    try:
        runtime.redis().ping()
        return None
    except Exception as exc:
        return exc.__class__.__name__


@blp.get("/readyz")
def readyz():
    """Ready when the database and Redis answer; 503 naming the part that does not."""
    checks = {"database": _check_database(), "redis": _check_redis()}
    failed = [name for name, error in checks.items() if error]
    body = {"ok": not failed, "checks": {name: ("ok" if not err else f"failed: {err}") for name, err in checks.items()}}
    if failed:
        from flask import g
        body.update(error="service_unavailable", message=f"not ready: {', '.join(failed)} unavailable",
                    request_id=g.get("request_id"))
        response = jsonify(body)
        response.status_code = 503
        response.headers["Retry-After"] = "5"
        return response
    return jsonify(body)
