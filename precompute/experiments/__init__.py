"""Experiments: arms that rank a share of the users each, placed by a hash of the user id (nothing stored per user).

``experiment.py`` holds the values and the placement rule, ``hashing.py`` the two hashes, ``specs.py`` what an arm's
spec means, ``registry.py`` the experiments table (create, list, stop). docs/experiments.md says how to run one.
"""

from .experiment import Arm, Experiment, assign, assign_one
from .specs import method_of

__all__ = ["Arm", "Experiment", "assign", "assign_one", "method_of"]
