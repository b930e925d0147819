"""Users and settings (owners): invite, change a role, disable, a new set-password link; the account's
settings."""
from __future__ import annotations

from flask import abort, flash, g, redirect, render_template, request, url_for
from flask_wtf import FlaskForm
from wtforms import EmailField, SelectField
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, Email, Length

from app.accounts import admin, portal_users, scim, two_factor
from app.accounts import portal_roles as roles
from app.plumbing.errors import AccountError
from app.portal import security
from app.portal.blueprint import bp, form_errors
from app.portal.forms import ActionForm, SettingsForm, UserStateForm


def _role_field(label: str = "Role"):
    return SelectField(label, choices=[SelectChoice(role, roles.ROLE_WORDS[role]) for role in roles.ROLES],
                       default="developer")


class InviteForm(FlaskForm):
    """An owner adds a user: e-mail and role; the answer shows a one-time set-password link."""

    email = EmailField("E-mail", validators=[DataRequired(), Email(check_deliverability=False), Length(max=320)])
    role = _role_field()


class RoleForm(FlaskForm):
    role = _role_field()


def _users_page(invite: InviteForm | None = None, link: str | None = None, link_user=None, code: int = 200):
    listed = portal_users.customer_users(g.portal_customer.id)
    return render_template("portal/users.html", users=listed, invite=invite or InviteForm(formdata=None),
                           role_forms={u.id: RoleForm(formdata=None, role=u.role, prefix=u.id) for u in listed},
                           action=ActionForm(), state=UserStateForm(formdata=None), link=link, link_user=link_user,
                           role_words=roles.ROLE_WORDS, no_password=portal_users.NO_PASSWORD,
                           scim=scim.token_status(g.portal_customer),
                           provisioned_words=portal_users.PROVISIONED_WORDS, link_hours=int(
                               portal_users.SET_PASSWORD_LINK_LIFETIME.total_seconds() // 3600)), code


def _link_url(token: str) -> str:
    return url_for("portal.set_password", token=token, _external=True)


@bp.get("/users")
@security.requires(roles.USERS)
def users():
    return _users_page()


@bp.post("/users")
@security.requires(roles.USERS)
def invite_user():
    form = InviteForm()
    if not form.validate_on_submit():
        flash(form_errors(form) or "The form expired: try again.", "error")
        return _users_page(invite=form, code=400)
    try:
        user, token = portal_users.invite_user(g.portal_customer.id, email=form.email.data, role=form.role.data,
                                               by_user_id=g.user.id)
    except AccountError as exc:
        flash(str(exc), "error")
        return _users_page(invite=form, code=400)
    flash(f"{user.email} is invited. Send them the link below: it is shown only now.", "ok")
    return _users_page(link=_link_url(token), link_user=user)


def _customer_user_or_404(user_id: str):
    try:
        return portal_users.customer_user(g.portal_customer.id, user_id)
    except LookupError:
        abort(404)


@bp.post("/users/<user_id>/role")
@security.requires(roles.USERS)
def user_role(user_id):
    user = _customer_user_or_404(user_id)
    form = RoleForm(prefix=user.id)
    if form.validate_on_submit():
        try:
            portal_users.change_role(g.portal_customer.id, user.id, form.role.data, by_user_id=g.user.id)
        except AccountError as exc:
            flash(str(exc), "error")
            return _users_page(code=400)
        flash(f"{user.email} is now {form.role.data}.", "ok")
    else:
        flash(form_errors(form) or "The form expired: try again.", "error")
        return _users_page(code=400)
    return redirect(url_for("portal.users"))


@bp.post("/users/<user_id>/state")
@security.requires(roles.USERS)
def user_state(user_id):
    user = _customer_user_or_404(user_id)
    form = UserStateForm()
    if form.validate_on_submit() and form.disabled.data in ("0", "1"):
        disabled = form.disabled.data == "1"
        try:
            portal_users.set_user_disabled(g.portal_customer.id, user.id, disabled, by_user_id=g.user.id)
        except AccountError as exc:
            flash(str(exc), "error")
            return _users_page(code=400)
        flash(f"{user.email} is {'disabled: their sessions have ended' if disabled else 'enabled'}.", "ok")
        return redirect(url_for("portal.users"))
    flash("The form expired: try again.", "error")
    return _users_page(code=400)


@bp.post("/users/<user_id>/link")
@security.requires(roles.USERS)
def user_link(user_id):
    """A new one-time set-password link (a user who lost theirs, or their password)."""
    user = _customer_user_or_404(user_id)
    if not ActionForm().validate_on_submit():
        flash("The form expired: try again.", "error")
        return _users_page(code=400)
    token = portal_users.new_password_link(g.portal_customer.id, user.id, by_user_id=g.user.id)
    flash("A new link is ready. Give it to the user: it is shown only now.", "ok")
    return _users_page(link=_link_url(token), link_user=user)


@bp.route("/settings", methods=["GET", "POST"])
@security.requires(roles.SETTINGS)
def settings():
    customer = g.portal_customer
    form = SettingsForm(formdata=None if request.method == "GET" else request.form,
                        require_2fa=customer.require_2fa, require_purpose=customer.require_purpose,
                        result_retention_days=customer.result_retention_days)
    if request.method == "POST":
        if not form.validate():
            flash(form_errors(form) or "The form expired: try again.", "error")
            return render_template("portal/settings.html", form=form), 400
        try:
            admin.set_settings(customer.id, require_purpose=bool(form.require_purpose.data),
                                  result_retention_days=form.result_retention_days.data)
        except AccountError as exc:
            flash(str(exc), "error")
            return render_template("portal/settings.html", form=form), 400
        if bool(form.require_2fa.data) != customer.require_2fa:
            two_factor.set_required(customer.id, bool(form.require_2fa.data), by=g.user.id)
        flash("Settings saved.", "ok")
        return redirect(url_for("portal.settings"))
    return render_template("portal/settings.html", form=form)
