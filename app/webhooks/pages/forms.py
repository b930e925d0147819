"""The webhooks' own portal form: an endpoint's (its events and its description's length are the
webhooks' rules, ``app.webhooks.endpoints``); the portal's shared forms are ``app.portal.forms``."""
from flask_wtf import FlaskForm
from wtforms import SelectField, SelectMultipleField, StringField, URLField
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, Length, Optional
from wtforms.widgets import CheckboxInput, ListWidget

from app.webhooks.endpoints import EVENT_NAMES, MAX_DESCRIPTION


class EndpointForm(FlaskForm):
    """A webhook endpoint of the key (added, or changed with a prefix per endpoint); the URL's and
    the events' rules are the service's (``app.webhooks.endpoints``), said as a form error."""

    url = URLField("Endpoint URL", validators=[DataRequired(), Length(max=2048)],
                   description="Events are POSTed here (https, public addresses only).")
    events = SelectMultipleField("Events", choices=[SelectChoice(name, name) for name in EVENT_NAMES],
                                 default=["scan.completed", "scan.failed"], option_widget=CheckboxInput(),
                                 widget=ListWidget(prefix_label=False),
                                 description="The events sent to it. scan.running is sent when the engine starts "
                                             "work on a scan; endpoint.disabled when another endpoint of this key "
                                             "is disabled after failing for days.")
    payload = SelectField("Body of each event", choices=[
        SelectChoice("full", "Full: the scan with its target and result"),
        SelectChoice("thin", "Thin: ids, status, times and purpose only")], default="full")
    description = StringField("Description", validators=[Optional(), Length(max=MAX_DESCRIPTION)])
