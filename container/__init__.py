"""The GPU container: vLLM + the SageMaker bridge (see README.md). Not installed with ``agent``."""
