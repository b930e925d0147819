"""A target's form in the OpenAPI document: the patterns of the forms the service takes and the
target field's description, which the scans' creations, the watches' and the activity log's filter
share."""
from app.targets.identity import MAX_LENGTH, MIN_LENGTH

# The forms of target the service takes (``identity``), as one pattern: an e-mail address (the
# common ASCII form; e-mail-validator takes more), an E.164 phone number, a username (a leading @
# allowed). Which form goes with which `kind` is said by app.blueprints._shape_schemas.
EMAIL_PATTERN = (r"[A-Za-z0-9_+-]{1,32}(\.[A-Za-z0-9_+-]{1,15}){0,2}@"
                 r"([A-Za-z0-9]{1,16}(-[A-Za-z0-9]{1,16})?\.){1,3}"
                 r"(?!(local|localhost|onion|arpa|invalid)$)[A-Za-z]{2,12}")
PHONE_PATTERN = r"\+[1-9][0-9]{6,14}"
USERNAME_PATTERN = r"@?[A-Za-z0-9._-]{3,64}"
TARGET_PATTERNS = {"email": EMAIL_PATTERN, "phone": PHONE_PATTERN, "username": USERNAME_PATTERN}
TARGET_DOC = {
    "description": "E-mail address, E.164 phone number or username (a leading `@` allowed); "
                   f"{MIN_LENGTH} to {MAX_LENGTH} characters.",
    "minLength": MIN_LENGTH, "maxLength": MAX_LENGTH,
    "pattern": "^(" + "|".join(f"({p})" for p in TARGET_PATTERNS.values()) + ")$",
    "example": "jane.doe@example.com"}
