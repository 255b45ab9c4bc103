"""Checks against independent code: the real engines' cross-checks
(:mod:`~memsim.checks.feather_check`, :mod:`~memsim.checks.langchain_check`,
:mod:`~memsim.checks.framework_check`, sharing
:mod:`~memsim.checks.engine_check`) and the contract checks a new component
must pass (:mod:`~memsim.checks.testing`)."""
