"""The names the trace gives work, read as what the work is."""

from __future__ import annotations

import pytest

from mldiag.analysis.profile.trace_names import SAVING, program_base, transfer_direction


@pytest.mark.parametrize(("name", "saves"), [
    ("$train.py:5 save_in_background", True),
    ("$npyio.py:566 savez", True),
    ("$checkpoint_manager.py:12 wait_until_finished", True),
    ("$threading.py:317 _release_save", False),  # every thread waiting on a Condition runs it
    ("$sink.py:7 send_record", False),
])
def test_saving_is_read_from_the_function_or_its_module(name, saves):
    assert bool(SAVING.search(name)) is saves


def test_jax_s_shard_args_places_host_arrays_on_the_devices():
    assert transfer_direction("shard_args") == "host to device"


def test_a_dispatch_names_its_program_as_jax_spells_it():
    assert program_base("PjitFunction(<lambda>)") == "jit__lambda"
    assert program_base("jit__lambda(38)") == "jit__lambda"
