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
    StringField,
    URLField,
)
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, Email, InputRequired, Length, NumberRange, Optional


class LoginForm(FlaskForm):
    email = EmailField("E-mail", validators=[DataRequired(), Email(check_deliverability=False), Length(max=320)])
    password = PasswordField("Password", validators=[DataRequired(), Length(max=1000)])
    next = HiddenField()


class WebhookForm(FlaskForm):
    url = URLField("Webhook URL", validators=[Optional(), Length(max=2048)],
                   description="Scans finished with this key are POSTed here. Leave empty to stop deliveries.")
    # No length rule here: services.webhooks.set_webhook owns the secret's rules for every entry point.
    secret = StringField("Signing secret", validators=[Optional()],
                         description="whsec_ followed by base64 of 16 to 128 random bytes. Leave empty to keep the "
                                     "current secret; a secret set here replaces it at once.")
    payload = SelectField("Body of each event", choices=[
        SelectChoice("full", "Full: the scan with its target and result"),
        SelectChoice("thin", "Thin: ids, status, times and purpose only (read the rest through the API)")],
        default="full",
        description="A thin body carries no personal data to your receiver; it reads the scan with its key.")


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
