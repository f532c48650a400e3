"""The harness's model client: the one OpenAI-compatible client, :class:`engine.llm.client.ChatClient`.

``ChatProvider`` is that class under the name the harness has always used; every failure leaves
:meth:`~engine.llm.client.ChatClient.complete` as a classified
:class:`~engine.llm.errors.ProviderError`, and by default (``NO_RETRY``) a call makes one attempt:
the agent loop decides what a failure means. Import from :mod:`engine.llm` in new code.
"""

from engine.llm.client import ChatClient as ChatProvider
from engine.llm.parse import Completion

__all__ = ["ChatProvider", "Completion"]
