"""Execution of work: a plan (:mod:`.plan`) becomes work units (:mod:`.tasks`) run on local
process pools (:mod:`.runner`, :mod:`.executors`, :mod:`.lanes`, :mod:`.lifeline`) or on a
Ray cluster (:mod:`.ray`), with predictions written as they come (:mod:`.writer`).

What a run *was* (its id, its stored record, a folder's manifest) is :mod:`robustlab.records`';
the jobs a user starts are :mod:`robustlab.workflows`'. This package re-exports nothing, so
that importing one module never loads torch or Ray for another.
"""
