"""Login: e-mail and password, the second step's code (D21), logout, the one-time set-password link."""
from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for

from app.accounts import portal_users, sso, two_factor
from app.plumbing.errors import AccountError
from app.portal import security
from app.portal.blueprint import bp, form_errors
from app.portal.forms import ActionForm, CodeForm, LoginForm, SetPasswordForm


@bp.route("/login", methods=["GET", "POST"])
@security.public
def login():
    form = LoginForm()
    status, headers = 200, {}
    if form.validate_on_submit():
        # An e-mail of a single sign-on domain goes to its provider, with or without a password;
        # the "Sign in with SSO" button sends the e-mail alone (D32).
        if request.form.get("sso") or sso.for_email(form.email.data):
            return _to_provider(form)
        if not form.password.data:
            flash("Enter your password.", "error")
            return render_template("portal/login.html", form=form), 400
        try:
            # remote_addr is the client's address: ProxyFix has applied X-Forwarded-For
            # through TRUSTED_PROXIES proxies, and only those.
            user = portal_users.authenticate(form.email.data, form.password.data, request.remote_addr)
        except portal_users.SsoRequired:
            flash("Your organisation signs in with single sign-on only.", "error")
            status = 403
        except portal_users.LoginThrottled as exc:
            minutes = -(-exc.retry_after // 60)
            flash(f"Too many failed attempts. Wait {minutes} minute{'s' if minutes > 1 else ''} and try again.",
                  "error")
            status, headers = 429, {"Retry-After": str(exc.retry_after)}
        except portal_users.LoginRefused:
            flash("E-mail or password is wrong.", "error")
            status = 401
        else:
            next_path = security.safe_next(form.next.data)
            if two_factor.enabled(user):
                security.begin_second_step(user, next_path)  # no session yet: the code first
                return redirect(url_for("portal.login_code"))
            security.begin_session(user)
            return redirect(next_path or url_for("portal.keys"))
    elif request.method == "GET":
        form.next.data = security.safe_next(request.args.get("next")) or ""
    return render_template("portal/login.html", form=form), status, headers


def _to_provider(form):
    try:
        redirect_to = sso.begin(form.email.data, url_for("portal.sso_callback", _external=True))
    except sso.NotConfigured:
        flash("No single sign-on is set up for this e-mail: sign in with your password.", "error")
        return render_template("portal/login.html", form=form), 400
    except sso.SsoRefused:
        flash("Your organisation's sign-in service cannot be reached. Try again later.", "error")
        return render_template("portal/login.html", form=form), 502
    security.begin_sso(redirect_to.pending, security.safe_next(form.next.data))
    # Not a redirect: the login page's CSP (form-action 'self') rightly stops a form's redirect to
    # another site, so this page, within it, sends the browser on (a navigation, not the form's).
    return render_template("portal/sso_redirect.html", url=redirect_to.url)


@bp.get("/login/sso/callback")
@security.public
def sso_callback():
    """The provider's answer: the session starts only when every check of ``sso.finish`` holds."""
    pending = security.take_sso()
    try:
        user = sso.finish(pending, request.args.to_dict())
    except sso.SsoRefused:
        flash("Single sign-on did not succeed. Try again, or ask your administrator.", "error")
        return render_template("portal/login.html", form=LoginForm()), 401
    security.begin_session(user)
    next_path = security.safe_next((pending or {}).get("next"))
    return redirect(next_path or url_for("portal.keys"))


@bp.post("/logout")
@security.public
def logout():
    form = ActionForm()
    if form.validate_on_submit():
        security.end_session()
    return redirect(url_for("portal.login"))


@bp.route("/login/code", methods=["GET", "POST"])
@security.public
def login_code():
    """After the password, the code: the session starts only when it is right."""
    pending = security.second_step()
    if pending is None:
        return redirect(url_for("portal.login"))
    user_id, next_path = pending
    form = CodeForm()
    status, headers = 200, {}
    if form.validate_on_submit():
        try:
            user = two_factor.verify_login(user_id, form.code.data, request.remote_addr)
        except portal_users.LoginThrottled as exc:
            minutes = -(-exc.retry_after // 60)
            flash(f"Too many wrong codes. Wait {minutes} minute{'s' if minutes > 1 else ''} and try again.", "error")
            status, headers = 429, {"Retry-After": str(exc.retry_after)}
        except portal_users.LoginRefused:
            flash("The code is wrong or was used already.", "error")
            status = 401
        else:
            security.begin_session(user)
            return redirect(next_path or url_for("portal.keys"))
    return render_template("portal/login_code.html", form=form), status, headers


@bp.route("/set-password/<token>", methods=["GET", "POST"])
@security.public
def set_password(token):
    """The one-time link an owner gave a new user (or a user who needed a new password)."""
    if portal_users.password_link_user(token) is None:
        return render_template("portal/set_password.html", form=None), 404
    form = SetPasswordForm()
    if form.validate_on_submit():
        try:
            portal_users.use_password_link(token, form.password.data)
        except LookupError:
            return render_template("portal/set_password.html", form=None), 404
        except AccountError as exc:
            flash(str(exc), "error")
        else:
            security.end_session()
            flash("Your password is set: log in with it.", "ok")
            return redirect(url_for("portal.login"))
    elif request.method == "POST":
        flash(form_errors(form), "error")
    return render_template("portal/set_password.html", form=form), 400 if request.method == "POST" else 200
