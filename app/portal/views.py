"""Portal pages (D12). Views are thin: the rules live in ``app.services``."""
from __future__ import annotations

from datetime import datetime

from flask import Blueprint, abort, flash, g, redirect, render_template, request, session, url_for
from werkzeug.security import check_password_hash, generate_password_hash

from app.models import ApiKey, PortalUser, utcnow
from app.portal import security
from app.portal.forms import ActionForm, LoginForm, WebhookForm
from app.services import quotas, webhooks
from app.services.accounts import AccountError
from app.services.crypto import decrypt_secret
from app.services.limits import limits_for
from app.services.scans import ledger_rows

bp = Blueprint("portal", __name__, url_prefix="/app", template_folder="templates", static_folder="static")
bp.after_request(security.add_security_headers)


@bp.context_processor
def inject_logout_form():
    return {"logout_form": ActionForm()}

# Spent on unknown e-mails too, so a failed login takes as long whether or not the user exists.
_DUMMY_HASH = generate_password_hash("not-a-real-password", method="scrypt")
STATUSES = ("pending", "succeeded", "failed")
EVENTS = ("scan.completed", "scan.failed")


def _moment(value) -> datetime | None:
    """A datetime from a model field or a D6 ISO string (the services' dicts carry those)."""
    if isinstance(value, str):
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    return value


@bp.app_template_filter("utc")
def utc(value) -> str:
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


@bp.get("/")
def home():
    return redirect(url_for("portal.keys"))


@bp.route("/login", methods=["GET", "POST"])
def login():
    form = LoginForm()
    status = 200
    if form.validate_on_submit():
        email = form.email.data.strip().lower()
        if security.login_blocked(email):
            flash("Too many failed attempts. Wait 15 minutes and try again.", "error")
            status = 429
        else:
            user = PortalUser.get_or_none(PortalUser.email == email)
            valid = check_password_hash(user.password_hash if user else _DUMMY_HASH, form.password.data)
            if user and valid:
                security.clear_failures(email)
                session.clear()  # a fresh session: no fixation across the login
                session.permanent = True
                session.update(user_id=user.id, customer_id=user.customer_id)
                PortalUser.update(last_login_at=utcnow()).where(PortalUser.id == user.id).execute()
                return redirect(security.safe_next(form.next.data) or url_for("portal.keys"))
            security.record_failure(email)
            flash("E-mail or password is wrong.", "error")
            status = 401
    elif request.method == "GET":
        form.next.data = request.args.get("next", "")
    return render_template("portal/login.html", form=form), status


@bp.post("/logout")
def logout():
    form = ActionForm()
    if form.validate_on_submit():
        session.clear()
    return redirect(url_for("portal.login"))


@bp.get("/api-keys")
@security.login_required
def keys():
    rows = list(ApiKey.select().where(ApiKey.customer == g.portal_customer.id).order_by(ApiKey.created_at.desc()))
    return render_template("portal/keys.html", keys=rows, action=ActionForm())


def _owned_key_or_404(key_id: str) -> ApiKey:
    key = ApiKey.get_or_none((ApiKey.id == key_id) & (ApiKey.customer == g.portal_customer.id))
    if key is None:
        abort(404)
    return key


@bp.get("/api-keys/<key_id>")
@security.login_required
def key_page(key_id):
    key = _owned_key_or_404(key_id)
    status = request.args.get("status") if request.args.get("status") in STATUSES else None
    event = request.args.get("event") if request.args.get("event") in EVENTS else None
    page = request.args.get("page", "1")
    page = int(page) if page.isdigit() and 0 < int(page) < 100000 else 1
    deliveries = webhooks.list_deliveries(key.id, g.portal_customer.id, status=status, event=event, page=page)
    form = WebhookForm(url=key.webhook_url or "")
    return render_template("portal/key.html", key=key, form=form, action=ActionForm(), deliveries=deliveries,
                           status=status, event=event, statuses=STATUSES, events=EVENTS,
                           revealed=session.pop("revealed_secret", None) if session.get("revealed_for") == key.id
                           else None)


def _back(key_id, **args):
    return redirect(url_for("portal.key_page", key_id=key_id, **args))


def _run(key_id, action, success: str):
    """Run a service action for the key's owner and flash its outcome."""
    try:
        result = action()
    except LookupError:
        abort(404)
    except AccountError as exc:
        flash(str(exc), "error")
        return None
    flash(success, "ok")
    return result


@bp.post("/api-keys/<key_id>/webhook")
@security.login_required
def save_webhook(key_id):
    key = _owned_key_or_404(key_id)
    form = WebhookForm()
    if not form.validate_on_submit():
        flash("; ".join(f"{form[name].label.text}: {', '.join(errs)}" for name, errs in form.errors.items()), "error")
        return _back(key.id)
    _run(key.id, lambda: webhooks.set_webhook(key.id, g.portal_customer.id, form.url.data, form.secret.data or None),
         "Webhook settings saved.")
    return _back(key.id)


def _reveal(key_id: str, secret: str | None) -> None:
    # Handed to the next page view through the (signed, HttpOnly) session, shown once.
    session["revealed_for"], session["revealed_secret"] = key_id, secret


@bp.post("/api-keys/<key_id>/secret")
@security.login_required
def new_secret(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        secret = _run(key.id, lambda: webhooks.generate_secret(key.id, g.portal_customer.id),
                      "A new signing secret is in force. Update your receiver.")
        if secret:
            _reveal(key.id, secret)
    return _back(key.id)


@bp.post("/api-keys/<key_id>/secret/reveal")
@security.login_required
def reveal_secret(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _reveal(key.id, decrypt_secret(key.webhook_secret_enc) or "")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/test-event")
@security.login_required
def test_event(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: webhooks.send_test_event(key.id, g.portal_customer.id),
             "Test event queued: its attempts appear below.")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/deliveries/<delivery_id>/redeliver")
@security.login_required
def redeliver(key_id, delivery_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: webhooks.redeliver(delivery_id, g.portal_customer.id),
             f"Delivery {delivery_id} queued again.")
    return _back(key.id)


@bp.get("/usage")
@security.login_required
def usage():
    customer = g.portal_customer
    now = utcnow()
    limits = limits_for(customer)
    window = quotas.window_usage(customer.id, now)
    quota = [("In flight now", quotas.inflight_count(customer.id), limits.inflight),
             ("Created in the last hour", window.hour, limits.hour),
             ("Created in the last 24 hours", window.day, limits.day)]
    return render_template("portal/usage.html", customer=customer, quota=quota, ledger=ledger_rows(customer.id, 25))
