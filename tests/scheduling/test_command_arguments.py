"""Management commands' numeric arguments that cannot work (not finite, negative, zero where a
pause is meant) are refused as argparse refuses any bad argument: exit 2 naming the option,
before the command touches the database. A NaN interval made run_scheduler run the periodic
tasks back to back without a pause; a NaN or infinite grace a traceback, a negative one false
violations."""

from __future__ import annotations

import pytest

CASES = [
    ("run_scheduler", "--interval", ["nan", "inf", "-1", "0"]),
    ("demo_traffic", "--interval", ["nan", "inf", "-1", "0"]),
    ("check_invariants", "--grace-seconds", ["nan", "inf", "-inf", "-5"]),
]


def _parser(name: str):
    from django.core.management import load_command_class

    command = load_command_class("scheduling", name)
    command._called_from_command_line = True  # argparse's own exit 2, as from a shell
    return command.create_parser("manage.py", name)


@pytest.mark.parametrize(("name", "option", "value"),
                         [(name, option, value) for name, option, values in CASES for value in values])
def test_a_number_that_cannot_work_is_exit_2_naming_the_option(capsys, name, option, value):
    with pytest.raises(SystemExit) as exited:
        _parser(name).parse_args([f"{option}={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert option in err and repr(value) in err, err


@pytest.mark.parametrize(("name", "option", "value", "parsed"), [
    ("run_scheduler", "--interval", "0.5", 0.5),
    ("demo_traffic", "--interval", "3", 3.0),
    ("check_invariants", "--grace-seconds", "0", 0.0),
    ("check_invariants", "--grace-seconds", "30", 30.0),
])
def test_numbers_that_work_are_taken(name, option, value, parsed):
    options = _parser(name).parse_args([f"{option}={value}"])
    assert getattr(options, option.lstrip("-").replace("-", "_")) == parsed
