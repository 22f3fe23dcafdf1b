"""The pipeline: a batch of users from their histories to ranked feeds in Redis, each ranked by their arm.

It glues the stages: histories from ``data``, candidates, columns and the model from ``ranking``, the running
experiments' arms from ``experiments``, the guarded write through ``feeds``. It sits above ``ranking`` and
``experiments`` so that both point one way: experiments name bundles and methods of ``ranking``, ``ranking`` knows
nothing of experiments.
"""
