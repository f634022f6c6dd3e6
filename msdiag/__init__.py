"""msdiag: profiling and bottleneck diagnosis for MindSpore training and inference."""

__version__ = "0.1.0"
