"""Portal forms: WTForms classes, so every one carries and checks a CSRF token."""
from flask_wtf import FlaskForm
from wtforms import DateField, EmailField, HiddenField, PasswordField, StringField, URLField
from wtforms.validators import DataRequired, Email, InputRequired, Length, Optional


class LoginForm(FlaskForm):
    email = EmailField("E-mail", validators=[DataRequired(), Email(check_deliverability=False), Length(max=320)])
    password = PasswordField("Password", validators=[DataRequired(), Length(max=1000)])
    next = HiddenField()


class WebhookForm(FlaskForm):
    url = URLField("Webhook URL", validators=[Optional(), Length(max=2048)],
                   description="Scans finished with this key are POSTed here. Leave empty to stop deliveries.")
    # No length rule here: services.webhooks.set_webhook owns the secret's rules for every entry point.
    secret = StringField("Signing secret", validators=[Optional()],
                         description="Leave empty to keep the current secret.")


class ActionForm(FlaskForm):
    """A button that changes something (logout, generate, reveal, test event, redeliver): CSRF only."""


class LedgerExportForm(FlaskForm):
    """The period of a ledger CSV export: a GET form (it changes nothing), so no CSRF token."""

    class Meta:
        csrf = False

    start = DateField("First day", validators=[InputRequired(message="a date is needed (YYYY-MM-DD)")])
    end = DateField("Last day", validators=[InputRequired(message="a date is needed (YYYY-MM-DD)")])
