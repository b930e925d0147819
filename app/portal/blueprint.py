"""The portal's blueprint (D12) and what its pages share: the after-request hooks (security
headers, the activity log's entry of every action), the template filters, and the helpers that
read a list's page and filters (a filter that can hold a target is taken only from a posted form).
The pages are each domain's (``app/<domain>/pages``), listed in ``app.blueprints.PAGES``; views are
thin: the rules live in the domains' packages. It imports no domain: what the portal asks of the
accounts and the activity log is handed to ``security`` and ``audit`` at start."""
from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from urllib.parse import urlsplit

from flask import Blueprint, Response, g, make_response, render_template, request, stream_with_context
from werkzeug.exceptions import NotFound

from app.errors import handle_http_exception
from app.plumbing.models import utcnow
from app.portal import audit, security
from app.portal.forms import ActionForm

bp = Blueprint("portal", __name__, url_prefix="/app", template_folder="templates", static_folder="static")
bp.after_request(security.add_security_headers)
bp.after_request(audit.record_action)  # every portal action is an activity log entry (D20)


@bp.app_errorhandler(NotFound)
def not_found(exc: NotFound):
    """A 404 under the portal's address (an unknown or another customer's id, an unknown page) is a
    page in the portal's layout; anywhere else, the API's JSON error, as before."""
    if request.blueprint != bp.name and not request.path.startswith(f"{bp.url_prefix}/"):
        return handle_http_exception(exc)
    if g.get("user") is None:  # no view ran (an unknown page): the navigation of whoever is logged in
        user = security.current_user()
        if user is not None:
            g.user, g.portal_customer = user, user.customer
    page = make_response(render_template("portal/not_found.html", **inject_logout_form()), 404)
    return page if request.blueprint == bp.name else security.add_security_headers(page)  # else done by bp


@bp.context_processor
def inject_logout_form():
    return {"logout_form": ActionForm(), "can": security.can, "may": security.may, "perm": security.accounts().roles}


def _moment(value) -> datetime | None:
    """A naive UTC datetime from a model field or an ISO string (the services' dicts and the
    engine's results carry those); text that is no time is None."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


@bp.app_template_filter("utc")
def utc(value) -> str:
    """Every time the portal shows, in one format."""
    moment = _moment(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "never"


@bp.app_template_filter("ago")
def ago(value) -> str:
    moment = _moment(value)
    if not moment:
        return ""
    seconds = int((utcnow() - moment).total_seconds())
    if seconds < 0:
        return "in the future"
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if unit == 'day' and count > 1 else ''} ago"
    return "just now"


@bp.app_template_filter("safe_href")
def safe_href(value) -> str | None:
    """A link target only when it is an absolute http(s) URL: a result comes from the
    engine, and a ``javascript:`` or ``data:`` URL must never become a link."""
    if not isinstance(value, str):
        return None
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    return value.strip() if parts.scheme in ("http", "https") and parts.netloc else None


def page_arg(source=None) -> int:
    page = (source or request.args).get("page", "1")
    return int(page) if page.isdigit() and 0 < int(page) < 100000 else 1


def choice(name: str, allowed, source=None) -> str | None:
    value = (source or request.args).get(name)
    return value if value in allowed else None


def filter_source():
    """Where a list's filters come from: a search posts them, so that a target never travels in
    an address (kept by server logs, browser history and Referer headers); links without one use the
    query string."""
    return request.form if request.method == "POST" else request.args


def target_filter(name: str, label: str, limit: int, errors: list[str]) -> str:
    """A filter that holds a target (or part of one), taken only from a posted form: one in the
    address is refused with a page that says to use the form (it is not applied)."""
    value = (filter_source().get(name) or "").strip()[:limit]
    if value and request.method != "POST":
        errors.append(f"{label}: search with the form (a target is not taken from the address)")
        return ""
    return value


def form_errors(form) -> str:
    return "; ".join(f"{form[name].label.text}: {', '.join(errs)}" for name, errs in form.errors.items())


def csv_cell(value) -> str:
    """Text a spreadsheet would run as a formula (= + - @, tab, CR) is quoted with a leading '."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text



def csv_download(filename: str, header: Sequence[str], rows: Iterable[list]) -> Response:
    """A CSV file streamed as it is read (``rows`` lazily, within the request), in chunks of about
    16 KB, so a long export never sits in memory at once."""
    def chunks():
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(header)
        for row in rows:
            writer.writerow(row)
            if buffer.tell() > 16384:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
        yield buffer.getvalue()

    return Response(stream_with_context(chunks()), mimetype="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})
