"""The names of FedLDA's local samplers, importable without numba (the wire's config parse needs them)."""

from __future__ import annotations

#: The local samplers of :class:`flower_topics.models.fixed_phi.FixedPhiSampler`: exact Gibbs and
#: alias Metropolis-Hastings.
SAMPLERS = ("gibbs", "mh")
