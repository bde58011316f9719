"""The paper's head analyses (Correia et al. 2019, Section 5 and Appendix A): α, density, diversity, head roles,
and ASEntmax's learned query scaling."""

from .collect import AttentionExample, AttentionTypeStatistics, ModelAnalysis, QueryScaling, analyze_model
from .inputs import load_analysable_model, read_sample


__all__ = [
    "AttentionExample",
    "AttentionTypeStatistics",
    "ModelAnalysis",
    "QueryScaling",
    "analyze_model",
    "load_analysable_model",
    "read_sample",
]
