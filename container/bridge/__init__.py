"""The container's bridge between SageMaker's bidirectional stream and vLLM's realtime socket.

Self-contained on purpose: the image carries this package and its pinned requirements
(``container/requirements.txt``), not the ``agent`` package.
"""
