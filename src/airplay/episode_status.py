"""How an episode ended: the one set of episode statuses, and the strings results files hold.

:class:`EpisodeStatus` is a ``str`` enum: a member equals its value (``EpisodeStatus.SUCCESS ==
"success"``), ``json.dumps`` writes the value, and ``str()`` / f-strings give the value too, so
``episodes.jsonl``, bags and datasets hold the plain strings below.

==================  ===========================================================================
status              meaning
==================  ===========================================================================
``running``         the episode has not ended (the environment's status while flying)
``success``         the vehicle came within the success radius of the goal
``collision``       the vehicle's sphere touched the collision mesh
``out_of_bounds``   the vehicle left the navigable polygon or the flight height band
``timeout``         the task's time limit passed
``no_command``      the policy sent no command within the bounded wait, or left the ROS graph
``stopped``         the policy ended the episode itself away from the goal (VLN: STOP outside the
                    radius)
``policy_error``    the policy raised on an observation (or on ``reset``); the result's ``error``
                    holds ``"<ExceptionType>: <message>"``
``over_budget``     one step of the policy took more than the per-step compute budget (its own CPU
                    time); the result's ``error`` says how long it took
``interrupted``     a recording cut short (the recorder stopped mid-episode); never an evaluation
                    result
``policy_stop``     the ROS sim's end of an episode the policy ended itself without a failure
                    (AirVLN-R1's STOP or spent step budget, on ``episode/status``); the evaluator
                    turns it into ``success``, ``stopped`` or ``timeout``
                    (:func:`airplay.vln.evaluate.vln_status`); never an evaluation result
==================  ===========================================================================

:data:`RESULT_STATUSES` are the statuses an evaluated episode ends with, and
:data:`STATUS_COLOURS` the one colour of each in the plots and on the results page.
"""

from __future__ import annotations

from enum import Enum


class EpisodeStatus(str, Enum):
    """How an episode ended (``RUNNING`` while it has not); values are the results strings."""

    RUNNING = "running"
    SUCCESS = "success"
    COLLISION = "collision"
    OUT_OF_BOUNDS = "out_of_bounds"
    TIMEOUT = "timeout"
    NO_COMMAND = "no_command"
    STOPPED = "stopped"
    POLICY_ERROR = "policy_error"
    OVER_BUDGET = "over_budget"
    INTERRUPTED = "interrupted"
    POLICY_STOP = "policy_stop"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


RESULT_STATUSES: tuple[str, ...] = tuple(
    s.value for s in EpisodeStatus
    if s not in (EpisodeStatus.RUNNING, EpisodeStatus.INTERRUPTED, EpisodeStatus.POLICY_STOP))
"""The statuses an evaluated episode ends with (``episodes.jsonl``), in this order."""

STATUS_COLOURS: dict[str, str] = {  # matplotlib's tab colours, as hex
    EpisodeStatus.SUCCESS.value: "#2ca02c",  # tab:green
    EpisodeStatus.COLLISION.value: "#d62728",  # tab:red
    EpisodeStatus.OUT_OF_BOUNDS.value: "#ff7f0e",  # tab:orange
    EpisodeStatus.TIMEOUT.value: "#1f77b4",  # tab:blue
    EpisodeStatus.NO_COMMAND.value: "#9467bd",  # tab:purple
    EpisodeStatus.STOPPED.value: "#8c564b",  # tab:brown
    EpisodeStatus.POLICY_ERROR.value: "#e377c2",  # tab:pink
    EpisodeStatus.OVER_BUDGET.value: "#7f7f7f",  # tab:gray
}
"""Each result status's colour, in :data:`RESULT_STATUSES` order, in the trajectory plots
(:mod:`airplay.eval.plots`) and on the results page (:mod:`airplay.report.sections`): hex,
which matplotlib and HTML both read."""
