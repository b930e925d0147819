"""Portal forms: WTForms classes, so every one carries and checks a CSRF token."""
from flask_wtf import FlaskForm
from wtforms import (
    BooleanField,
    DateField,
    EmailField,
    HiddenField,
    IntegerField,
    PasswordField,
    SelectField,
    SelectMultipleField,
    StringField,
    TextAreaField,
    URLField,
)
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, Email, EqualTo, InputRequired, Length, NumberRange, Optional
from wtforms.widgets import CheckboxInput, ListWidget


class LoginForm(FlaskForm):
    email = EmailField("E-mail", validators=[DataRequired(), Email(check_deliverability=False), Length(max=320)])
    # Optional here: an e-mail of a single sign-on domain needs none (D32); the view asks for it otherwise.
    password = PasswordField("Password", validators=[Optional(), Length(max=1000)])
    next = HiddenField()


class WebhookForm(FlaskForm):
    url = URLField("Webhook URL", validators=[Optional(), Length(max=2048)],
                   description="Scans finished with this key are POSTed here. Leave empty to stop deliveries.")
    # No length rule here: app.webhooks.key_settings.set_webhook owns the secret's rules for every entry point.
    secret = StringField("Signing secret", validators=[Optional()],
                         description="whsec_ followed by base64 of 16 to 128 random bytes. Leave empty to keep the "
                                     "current secret; a secret set here replaces it at once.")
    payload = SelectField("Body of each event", choices=[
        SelectChoice("full", "Full: the scan with its target and result"),
        SelectChoice("thin", "Thin: ids, status, times and purpose only (read the rest through the API)")],
        default="full",
        description="A thin body carries no personal data to your receiver; it reads the scan with its key.")


class AccessForm(FlaskForm):
    """What a key may do (D21): its scopes narrowed, its expiry made earlier, its IP allowlist edited.
    The rules (never wider, never later) are ``app.accounts.access.narrow_access``'s."""

    scopes = SelectMultipleField("Scopes", choices=[], option_widget=CheckboxInput(),
                                 widget=ListWidget(prefix_label=False),
                                 description="Untick a scope to take it away. A scope taken away cannot be given "
                                             "back here: issue a new key instead.")
    expires_on = DateField("Expires on", validators=[Optional()],
                           description="The key stops working at the start of this day (UTC). It can be made "
                                       "earlier, never later. Empty: never expires (only while it has no expiry).")
    allowed_ips = TextAreaField("Allowed IP addresses", validators=[Optional(), Length(max=4000)],
                                description="One address or CIDR block per line (IPv4 or IPv6, at most 50), e.g. "
                                            "203.0.113.0/24; none: the key works from anywhere.")


class ActionForm(FlaskForm):
    """A button that changes something (logout, generate, reveal, test event, redeliver): CSRF only."""


class EraseForm(FlaskForm):
    """Erase a scan's personal data: the box must be ticked (the page has no script to ask)."""

    confirm = BooleanField("I understand that the target and result are deleted for good",
                           validators=[DataRequired(message="tick the box to confirm")])


class RollSecretForm(FlaskForm):
    """Roll the signing secret: first the overlap is asked and the switch time shown, then confirmed."""

    overlap_hours = IntegerField("Overlap (hours)", default=24, validators=[InputRequired(), NumberRange(0, 168)],
                                 description="Both secrets sign for this long (0 to 168 hours), then only the new one.")
    confirm = HiddenField()


class LedgerExportForm(FlaskForm):
    """The period of a ledger CSV export: a GET form (it changes nothing), so no CSRF token."""

    class Meta:
        csrf = False

    start = DateField("First day", validators=[InputRequired(message="a date is needed (YYYY-MM-DD)")])
    end = DateField("Last day", validators=[InputRequired(message="a date is needed (YYYY-MM-DD)")])


class UserStateForm(FlaskForm):
    """Disable or enable a user: ``disabled`` is "1" or "0"."""

    disabled = HiddenField(validators=[DataRequired()])


class SetPasswordForm(FlaskForm):
    password = PasswordField("New password", validators=[DataRequired(), Length(min=10, max=1000)])
    confirm = PasswordField("Repeat it", validators=[DataRequired(), EqualTo("password", "the passwords differ")])


class CodeForm(FlaskForm):
    """A six-digit code from the authenticator app (or, at login, a recovery code)."""

    code = StringField("Code", validators=[DataRequired(), Length(max=64)])


class SettingsForm(FlaskForm):
    require_2fa = BooleanField("Require two-factor login for every user")
    require_purpose = BooleanField("Require a purpose on every scan")
    # No range rule here: app.accounts.admin.set_settings owns it for every entry point.
    result_retention_days = IntegerField("Keep finished scans' targets and results for (days)",
                                         validators=[InputRequired(message="a number of days is needed")])
