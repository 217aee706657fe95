"""Privacy accountants behind one interface (after Opacus's ``opacus.accountants``).

:class:`Accountant` is the interface (``step``, ``spend``, ``get_epsilon``, ``mechanism``);
each back-end is registered by name: ``"pld"`` (Google's dp-accounting PLD, Poisson-subsampled
Gaussian), ``"rdp"`` (Opacus RDP, Gaussian), ``"skellam"`` (RDP of the Skellam mechanism,
Poisson subsampling by Zhu and Wang's general bound). :func:`create_accountant` makes one; :func:`get_noise_multiplier` is the one
calibration search (the least noise for a target epsilon over ``n`` releases) for all.
"""

from flower_topics.privacy.accountants.base import Accountant
from flower_topics.privacy.accountants.budget import Budget
from flower_topics.privacy.accountants.calibration import get_noise_multiplier, smallest_noise
from flower_topics.privacy.accountants.pld import PLDAccountant
from flower_topics.privacy.accountants.rdp import DEFAULT_ORDERS, RDPAccountant
from flower_topics.privacy.accountants.registry import accountant_names, create_accountant, register_accountant
from flower_topics.privacy.accountants.skellam import SkellamAccountant

__all__ = ["Accountant", "Budget", "DEFAULT_ORDERS", "PLDAccountant", "RDPAccountant", "SkellamAccountant",
           "accountant_names", "create_accountant", "get_noise_multiplier", "register_accountant", "smallest_noise"]
