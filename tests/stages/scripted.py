"""A chat backend with scripted replies, for unit tests of the stages' pure logic."""

from __future__ import annotations

from arenaforge.pipeline.backends.base import Completion


class ScriptedChat:
    """Replies to each conversation with ``self.reply(conversation)``; records what it saw.

    Subclasses say how a reply is chosen (by a key in the request, by round, ...).
    """

    def __init__(self, replies):
        self.replies, self.seen = replies, []

    def reply(self, conversation) -> str:
        raise NotImplementedError

    def chat(self, conversations, params):
        out = []
        for conv in conversations:
            self.seen.append(conv)
            out.append([Completion(text=self.reply(conv), finish_reason="stop")])
        return out
