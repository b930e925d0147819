"""The watches' scope (D28): what a key needs to create, read, change, run and end watches.
Declared to the accounts' registry (``app.accounts.scopes``) by ``app.declared``."""
from app.accounts.scopes import Scope

WATCHES = "watches"

SCOPES = (Scope(WATCHES, "create, list, change, run and end watches (targets scanned again on a schedule)"),)
