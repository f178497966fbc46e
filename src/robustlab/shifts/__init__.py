"""Shifts: named families of image changes with discrete levels, held in one registry."""

from robustlab.shifts.registry import Shift, get_shift, list_shifts, register_shift

__all__ = ["Shift", "get_shift", "list_shifts", "register_shift"]
