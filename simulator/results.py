"""The simulator's results: the generator lives in ``app.tracking.simulated.results``, shared with
the service's sandbox engine so that both answer a target alike; re-exported here for
the simulator's modules and tests."""
from app.tracking.simulated.results import (  # noqa: F401
    EXTRA_FIELD,
    FULL_DATE,
    HIGH_SCORE,
    MESSY_ONE_IN,
    NO_BAND,
    band_for,
    messiness_of,
    phone_profile,
    result_for,
)
