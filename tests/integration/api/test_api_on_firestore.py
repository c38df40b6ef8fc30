"""Every API test of ``tests/unit/api`` that touches the store, run again over the Firestore emulator."""

import pytest

from test_api_auth import *  # noqa: F401, F403
from test_api_hostile_input import *  # noqa: F401, F403
from test_api_runs import *  # noqa: F401, F403
from test_api_sdk_v1alpha import *  # noqa: F401, F403
from test_api_self_hosted import *  # noqa: F401, F403
from test_api_sessions import *  # noqa: F401, F403

pytestmark = pytest.mark.emulator
