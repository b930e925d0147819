"""The activity domain's portal pages: the activity log (``activity_log``) and the security settings
(``single_sign_on``: the sign-in and provisioning settings, with the audit sinks that push the log).
The latter reads the accounts' settings too, so it stands here, above the accounts, not in them."""
